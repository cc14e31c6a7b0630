//! Segment files (format 2): large appends keep their chunks and blobs
//! outside sled; damage to them is an error naming the records, never a
//! misread; format-1 databases keep working as they were.

use std::path::{Path, PathBuf};

use convstore_store::json::parse_event;
use convstore_store::{testing, AppendOptions, Event, EventKind, Store, Timestamp};

use crate::support::TestEnv;

fn segment_files(db: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(db.join("segments"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// Generates a log whose batches are large enough for the segment files.
fn generated(env: &TestEnv) {
    env.run(&[
        "gen",
        "big",
        "--events",
        "5000",
        "--compactions",
        "50",
        "--seed",
        "3",
    ])
    .ok();
}

#[test]
fn a_large_append_is_read_back_from_segment_files() {
    let env = TestEnv::new();
    generated(&env);
    let files = segment_files(&env.db());
    assert_eq!(files.len(), 1, "{files:?}");
    let size = std::fs::metadata(&files[0]).unwrap().len();
    assert!(size > 500_000, "{size}");
    // A small append stays in sled, next to the large ones.
    env.run(&["append", "big", "--user", "one more"]).ok();
    assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), size);
    env.run(&["verify"]).ok();
    let exported = env.path().join("big.ndjson");
    let exported = exported.to_str().unwrap();
    env.run(&["export", "big", "--format", "ndjson", "--output", exported])
        .ok();

    // The same log kept in sled alone reads and projects the same.
    let inline = TestEnv::new();
    {
        let store = Store::open(inline.db()).unwrap();
        store.set_segment_min_bytes(u64::MAX);
        let events: Vec<Event> = std::fs::read_to_string(exported)
            .unwrap()
            .lines()
            .map(|l| parse_event(l, Timestamp::now()).unwrap())
            .collect();
        assert_eq!(events.len(), 5001);
        store
            .create_and_append(Some("big"), &events, &AppendOptions::default())
            .unwrap();
    }
    assert!(segment_files(&inline.db()).is_empty());
    for args in [
        &["log", "big"][..],
        &["project", "big"],
        &["project", "big", "--as-of", "2500"],
        &["stats", "big", "--json"],
    ] {
        let ours = env.run(args).ok().stdout;
        let theirs = inline.run(args).ok().stdout;
        if args[0] == "stats" {
            let strip = |s: &str| {
                let mut v: serde_json::Value = serde_json::from_str(s).unwrap();
                v.as_object_mut().unwrap().remove("id");
                v.as_object_mut().unwrap().remove("created");
                v
            };
            assert_eq!(strip(&ours), strip(&theirs));
        } else {
            assert!(ours == theirs, "{args:?} differs");
        }
    }
}

#[test]
fn a_damaged_segment_file_is_an_error_naming_the_chunk() {
    let env = TestEnv::new();
    generated(&env);
    let view = env.run(&["project", "big"]).ok().stdout;
    let file = &segment_files(&env.db())[0];
    let mut bytes = std::fs::read(file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(file, &bytes).unwrap();
    let run = env.run(&["verify"]).fails();
    assert!(
        run.stderr.contains("record ") || run.stdout.contains("record "),
        "{} {}",
        run.stdout,
        run.stderr
    );
    for reader in [
        &["log", "big"][..],
        &["export", "big", "--format", "ndjson"][..],
    ] {
        let run = env.run(reader).fails();
        assert!(
            run.stderr.contains("does not match its checksum"),
            "{reader:?}: {}",
            run.stderr
        );
    }
    // The view reads only the chunks it shows something of: it fails the
    // same way where it needs the damaged chunk, and is whole where it
    // summarizes all of it.
    let run = env.run(&["project", "big"]);
    assert!(
        run.stderr.contains("does not match its checksum") || run.stdout == view,
        "{}",
        run.stderr
    );
    bytes[middle] ^= 0x20;
    let last = bytes.len() - 100;
    bytes[last] ^= 0x20;
    std::fs::write(file, &bytes).unwrap();
    let run = env.run(&["project", "big"]).fails();
    assert!(
        run.stderr.contains("does not match its checksum"),
        "{}",
        run.stderr
    );
    bytes[last] ^= 0x20;
    // Bytes cut off (a lost file tail) are reported the same way.
    std::fs::write(file, &bytes[..middle]).unwrap();
    let run = env.run(&["log", "big"]).fails();
    assert!(
        run.stderr.contains("segment file 00000001"),
        "{}",
        run.stderr
    );
    std::fs::remove_file(file).unwrap();
    let run = env.run(&["log", "big"]).fails();
    assert!(
        run.stderr.contains("segment file 00000001"),
        "{}",
        run.stderr
    );
}

fn user(text: String) -> Event {
    Event {
        timestamp: Timestamp::now(),
        meta: None,
        kind: EventKind::User { text },
    }
}

#[test]
fn a_format_1_database_keeps_everything_in_sled() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    testing::set_format_version(&db, 1).unwrap();
    let events: Vec<Event> = (0..2_000)
        .map(|i| user(format!("message {i} {}", "x".repeat(i % 1_500))))
        .collect();
    {
        let store = Store::open(&db).unwrap();
        assert_eq!(store.format_version(), 1);
        store.set_segment_min_bytes(0);
        let (id, _) = store
            .create_and_append(Some("old"), &events, &AppendOptions::default())
            .unwrap();
        assert!(store.verify(&id).unwrap().is_ok());
    }
    assert!(segment_files(&db).is_empty());
    let store = Store::open(&db).unwrap();
    assert_eq!(store.format_version(), 1);
    let id = store.resolve("old").unwrap();
    let back: Vec<Event> = store
        .scan(&id, 0..u64::MAX)
        .unwrap()
        .map(|r| r.unwrap().event)
        .collect();
    assert_eq!(back, events);
    assert!(store.verify_all().unwrap().is_ok());
}

/// A segment file that is gone is damage; one the system cannot read (here
/// a directory in its place) is an I/O error, not taken for damage.
#[test]
fn a_missing_segment_file_is_damage_and_an_unreadable_one_an_io_error() {
    let env = TestEnv::new();
    generated(&env);
    let file = segment_files(&env.db()).remove(0);
    let kept = env.path().join("kept-segment");
    std::fs::rename(&file, &kept).unwrap();
    let run = env.run(&["log", "big"]).fails();
    assert!(
        run.stderr.starts_with("error: corrupt data:"),
        "{}",
        run.stderr
    );
    std::fs::create_dir(&file).unwrap();
    let run = env.run(&["log", "big"]).fails();
    assert!(
        run.stderr.starts_with("error: I/O error on the database:"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("segment file 00000001"),
        "{}",
        run.stderr
    );
    std::fs::remove_dir(&file).unwrap();
    std::fs::rename(&kept, &file).unwrap();
    env.run(&["verify"]).ok();
}

/// A log appended an event at a time without a sync per append (`gen
/// --batch 1`, 7,000 appends a second) keeps sled's log near its live
/// data: a sync every 256 unsynced appends lets sled reclaim its log
/// segments behind it. Without it sled fell 40 MB behind and reclaimed
/// nothing: 47 MB of log for 4 MB of payload at this length.
#[test]
fn unsynced_small_appends_leave_sled_room_to_reclaim_its_log() {
    let env = TestEnv::new();
    env.run(&[
        "gen",
        "one",
        "--events",
        "20000",
        "--compactions",
        "200",
        "--batch",
        "1",
    ])
    .ok();
    let stats = &env.run(&["stats", "one", "--json"]).ok().lines()[0];
    let payload = stats["bytes"].as_u64().unwrap();
    let sled = std::fs::metadata(env.db().join("db")).unwrap().len();
    assert!(
        sled < 2 * payload,
        "sled's log is {sled} bytes for {payload} bytes of payload"
    );
}
