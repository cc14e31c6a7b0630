#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns
//! `Store::backup` beside running appends, and `salvage` of segment files
//! written before frames existed (found by scanning).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use convstore_store::{json, AppendOptions, Event, Store, Timestamp};

fn events(n: usize, seed: usize, long: bool) -> Vec<Event> {
    let now = Timestamp::now();
    (0..n)
        .map(|i| {
            let text = if long && i % 7 == 0 {
                // Over 1 KiB: stored as a blob.
                format!("{seed}-{i} {}", "long text ".repeat(150 + i % 13))
            } else {
                format!("{seed}-{i} short")
            };
            let line = if i % 10 == 0 {
                r#"{"type":"turn_start"}"#.to_owned()
            } else {
                serde_json::json!({"type": "user", "text": text}).to_string()
            };
            json::parse_event(&line, now).unwrap()
        })
        .collect()
}

fn log(store: &Store, name: &str) -> Vec<(u64, String)> {
    let id = store.resolve(name).unwrap();
    store
        .scan(&id, 0..u64::MAX)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.seq, r.address.hex())
        })
        .collect()
}

/// A backup taken while other threads append holds, for every
/// conversation, a prefix of its final log at least as long as what was
/// acknowledged before the backup began, and verifies.
#[test]
fn a_backup_beside_running_appends_is_a_consistent_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path().join("db")).unwrap());
    let names = ["a", "b", "c"];
    for (i, name) in names.iter().enumerate() {
        store
            .create_and_append(
                Some(name),
                &events(2000, i, true),
                &AppendOptions::default(),
            )
            .unwrap();
    }
    let before: Vec<usize> = names.iter().map(|n| log(&store, n).len()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let store = Arc::clone(&store);
            let stop = Arc::clone(&stop);
            let name = (*name).to_owned();
            std::thread::spawn(move || {
                let id = store.resolve(&name).unwrap();
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    let batch = events(1 + round % 300, i * 1000 + round, round % 3 == 0);
                    store
                        .append(&id, &batch, &AppendOptions::default())
                        .unwrap();
                    round += 1;
                }
                round
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let dest = dir.path().join("backup");
    let report = store.backup(&dest).unwrap();
    stop.store(true, Ordering::Relaxed);
    let rounds: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(rounds > 0);
    assert_eq!(report.conversations, 3);
    let copy = Store::open(&dest).unwrap();
    assert!(copy.verify_all().unwrap().is_ok());
    for (name, before) in names.iter().zip(before) {
        let original = log(&store, name);
        let copied = log(&copy, name);
        assert!(copied.len() >= before, "{name}");
        assert_eq!(copied[..], original[..copied.len()], "{name}");
    }
}

/// A database whose segment files were written without frames (as before
/// frames existed), with sled's `db` file gone: the chunk bodies are found
/// by scanning and chained from the root, and blobs by their hash between
/// bodies; names come from `convstore.catalog`.
#[test]
fn unframed_segment_files_are_salvaged_by_scanning() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    convstore_store::testing::write_unframed(true);
    let mut expected = Vec::new();
    {
        let store = Store::open(&db).unwrap();
        for (i, name) in ["first", "second"].iter().enumerate() {
            // Large appends: chunks and blobs go to the segment files.
            for round in 0..3 {
                let batch = events(1500, i * 10 + round, true);
                match store.resolve(name) {
                    Ok(id) => store.append(&id, &batch, &AppendOptions::default()),
                    Err(_) => store
                        .create_and_append(Some(name), &batch, &AppendOptions::default())
                        .map(|(_, a)| a),
                }
                .unwrap();
            }
            expected.push(log(&store, name));
        }
    }
    convstore_store::testing::write_unframed(false);
    let segments = std::fs::read(db.join("segments/00000001")).unwrap();
    assert!(!contains(&segments, b"CVSFRAME"));
    std::fs::remove_file(db.join("db")).unwrap();
    let dest = dir.path().join("salvaged");
    let report = convstore_store::salvage(&db, &dest).unwrap();
    assert_eq!(report.conversations.len(), 2, "{report:?}");
    assert_eq!(report.records, 9000, "{report:?}");
    let copy = Store::open(&dest).unwrap();
    assert!(copy.verify_all().unwrap().is_ok());
    for (name, expected) in ["first", "second"].iter().zip(&expected) {
        assert_eq!(&log(&copy, name), expected, "{name}");
    }
    assert!(!Path::new(&db.join("db")).exists());
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
