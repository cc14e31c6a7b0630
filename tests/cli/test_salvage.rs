#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns
//! `backup` (a verified copy) and `salvage` (what a damaged database still
//! holds) on intact and damaged copies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::{Run, TestEnv, Xorshift};

const CONVERSATIONS: [&str; 5] = ["demo", "big", "small", "branch", "tiny"];

/// A database of every kind of record placement: small appends in sled
/// (`demo`), large ones in the segment files (`big`), a log appended an
/// event at a time (staged, then settled into the segment files:
/// `small`), a fork with its own records, a compaction, a view and pins.
fn populated(env: &TestEnv) {
    env.run(&["demo", "-q"]).ok();
    env.run(&["gen", "big", "--events", "3000", "-q"]).ok();
    let small = [
        "gen", "small", "--events", "600", "--batch", "1", "--seed", "2", "-q",
    ];
    env.run(&small).ok();
    // A few one-event appends, staged in sled only: with the db file gone
    // nothing holds them, and no other conversation's records may stand
    // in for them.
    let tiny = [
        "gen", "tiny", "--events", "30", "--batch", "1", "--seed", "3", "-q",
    ];
    env.run(&tiny).ok();
    env.run(&["fork", "small", "--at-seq", "300", "--name", "branch", "-q"])
        .ok();
    env.run(&["append", "branch", "--user", "the branch's own", "-q"])
        .ok();
    env.run(&["compact", "demo", "--reasoning", "strip", "-q"])
        .ok();
    env.run(&["view", "demo", "-q"]).ok();
    env.run(&["pin", "demo", "--turns", "0..1"]).ok();
    env.run(&["verify"]).ok();
}

fn with_db(env: &TestEnv, db: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--db", db.to_str().unwrap()];
    all.extend_from_slice(args);
    env.run(&all)
}

/// Every file under `dir` and its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    out
}

/// Copies the directory `from` to `to`, recursively.
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".convstore") || n.starts_with("convstore-scratch"))
        .collect()
}

#[test]
fn backup_is_a_verified_copy_of_every_conversation() {
    let env = TestEnv::new();
    populated(&env);
    let dest = env.path().join("copy");
    let run = env.run(&["backup", dest.to_str().unwrap()]).ok();
    assert!(
        run.stdout
            .starts_with("backed up 5 conversations, 3672 records"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("1 view to"), "{}", run.stdout);
    // The search index is derived from the logs and not part of a backup:
    // the copy's is built from its logs.
    with_db(&env, &dest, &["reindex"]).ok();
    assert_eq!(
        with_db(&env, &dest, &["verify"]).ok().stdout,
        env.run(&["verify"]).ok().stdout
    );
    assert_eq!(
        with_db(&env, &dest, &["list", "--json"]).ok().stdout,
        env.run(&["list", "--json"]).ok().stdout
    );
    for name in CONVERSATIONS {
        assert_eq!(
            with_db(&env, &dest, &["log", name]).ok().stdout,
            env.run(&["log", name]).ok().stdout,
            "{name}"
        );
    }
    for args in [
        &["pin", "demo", "--list"][..],
        &["view", "demo", "--list"][..],
    ] {
        assert_eq!(
            with_db(&env, &dest, args).ok().stdout,
            env.run(args).ok().stdout
        );
    }
    assert_eq!(
        with_db(&env, &dest, &["view", "demo"]).ok().stdout,
        env.run(&["view", "demo"]).ok().stdout
    );
    // An existing destination is refused, and nothing is left behind.
    let run = env.run(&["backup", dest.to_str().unwrap()]).fails();
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);
    assert!(
        leftovers(env.path()).is_empty(),
        "{:?}",
        leftovers(env.path())
    );
    let run = env.run(&[
        "backup",
        "--json",
        env.path().join("second").to_str().unwrap(),
    ]);
    let report = &run.ok().lines()[0];
    assert_eq!(report["conversations"], 5);
    assert_eq!(report["records"], 3672);
}

/// The JSON report of a salvage, and the per-conversation lines.
fn salvage(
    env: &TestEnv,
    damaged: &Path,
    dest: &Path,
) -> (Vec<serde_json::Value>, serde_json::Value) {
    let run = env.run(&[
        "salvage",
        damaged.to_str().unwrap(),
        dest.to_str().unwrap(),
        "--json",
    ]);
    let mut lines = run.ok().lines();
    let summary = lines.pop().unwrap();
    (lines, summary)
}

/// The raw log of each conversation of the database at `db`.
fn logs(env: &TestEnv, db: &Path) -> BTreeMap<String, Vec<String>> {
    CONVERSATIONS
        .iter()
        .map(|name| {
            let run = with_db(env, db, &["log", name]);
            let lines = if run.code == 0 {
                run.stdout.lines().map(str::to_owned).collect()
            } else {
                Vec::new()
            };
            ((*name).to_owned(), lines)
        })
        .collect()
}

#[test]
fn salvage_of_an_intact_database_recovers_every_record() {
    let env = TestEnv::new();
    populated(&env);
    let before = files(&env.db());
    let dest = env.path().join("salvaged");
    let (conversations, summary) = salvage(&env, &env.db(), &dest);
    assert_eq!(conversations.len(), 5);
    assert!(
        conversations.iter().all(|c| c["whole"] == true),
        "{conversations:?}"
    );
    assert_eq!(summary["records"], 3672);
    assert_eq!(
        files(&env.db()),
        before,
        "salvage wrote into the damaged database"
    );
    with_db(&env, &dest, &["verify"]).ok();
    assert_eq!(logs(&env, &dest), logs(&env, &env.db()));
    assert_eq!(
        with_db(&env, &dest, &["pin", "demo", "--list"]).ok().stdout,
        "0..1\n"
    );
    // A destination that exists is refused; so is a database in use.
    let run = env
        .run(&[
            "salvage",
            env.db().to_str().unwrap(),
            dest.to_str().unwrap(),
        ])
        .fails();
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);
    let _open = convstore_store::Store::open(env.db()).unwrap();
    let elsewhere = env.path().join("elsewhere");
    let run = env
        .run(&[
            "salvage",
            env.db().to_str().unwrap(),
            elsewhere.to_str().unwrap(),
        ])
        .fails();
    assert!(run.stderr.contains("in use"), "{}", run.stderr);
    assert!(!elsewhere.exists());
    assert!(
        leftovers(env.path()).is_empty(),
        "{:?}",
        leftovers(env.path())
    );
}

/// A small deterministic generator for the damage.
struct Damage(Xorshift);

impl Damage {
    fn next(&mut self) -> u64 {
        self.0.next()
    }

    fn flip(&mut self, file: &Path, flips: usize, bit: bool) {
        let mut bytes = std::fs::read(file).unwrap();
        for _ in 0..flips {
            let i = (self.next() % bytes.len() as u64) as usize;
            bytes[i] ^= if bit {
                1 << (self.next() % 8)
            } else {
                (self.next() % 255 + 1) as u8
            };
        }
        std::fs::write(file, bytes).unwrap();
    }
}

fn remove_snapshots(db: &Path) {
    for entry in std::fs::read_dir(db).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("snap.") {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
}

/// Damaged copies of a database (bytes of sled's `db` file flipped, its
/// snapshot deleted, the start of its log zeroed, the segment file cut
/// short, the `db` file gone): salvage never writes into the damaged copy,
/// its copy verifies, every conversation it writes is a prefix of the
/// original, and its report says exactly what the copy holds. What it
/// recovers is printed (`--nocapture`).
#[test]
fn salvage_recovers_what_damaged_copies_still_hold() {
    let env = TestEnv::new();
    populated(&env);
    let original = logs(&env, &env.db());
    let total: usize = original.values().map(Vec::len).sum();
    let mut damage = Damage(Xorshift(0x9e37_79b9_7f4a_7c15));
    let modes: [(&str, usize); 7] = [
        ("one bit flipped in db", 8),
        ("8 bytes flipped in db", 4),
        ("64 bytes flipped in db", 3),
        ("snapshot deleted, one bit flipped in db", 3),
        ("snapshot deleted, first log segment zeroed", 1),
        ("segment file cut short", 3),
        ("db file deleted", 1),
    ];
    let mut summary = Vec::new();
    for (mode, trials) in modes {
        let (mut opened, mut recovered, mut whole) = (0, 0, 0);
        for trial in 0..trials {
            let damaged = env.path().join(format!("damaged-{trial}"));
            copy_dir(&env.db(), &damaged);
            let db = damaged.join("db");
            match mode {
                "one bit flipped in db" => damage.flip(&db, 1, true),
                "8 bytes flipped in db" => damage.flip(&db, 8, false),
                "64 bytes flipped in db" => damage.flip(&db, 64, false),
                "snapshot deleted, one bit flipped in db" => {
                    remove_snapshots(&damaged);
                    damage.flip(&db, 1, true);
                }
                "snapshot deleted, first log segment zeroed" => {
                    remove_snapshots(&damaged);
                    let mut bytes = std::fs::read(&db).unwrap();
                    let segment = bytes.len().min(512 * 1024);
                    bytes[..segment].fill(0);
                    std::fs::write(&db, bytes).unwrap();
                }
                "segment file cut short" => {
                    let file = damaged.join("segments/00000001");
                    let len = std::fs::metadata(&file).unwrap().len();
                    let cut = damage.next() % len;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&file)
                        .unwrap()
                        .set_len(cut)
                        .unwrap();
                }
                _ => std::fs::remove_file(&db).unwrap(),
            }
            let before = files(&damaged);
            // Whether the damaged copy still opens (on a copy of it: a
            // failed open may not write, but an open that works does).
            let probe = env.path().join("probe");
            copy_dir(&damaged, &probe);
            if with_db(&env, &probe, &["verify"]).code == 0 {
                opened += 1;
            }
            std::fs::remove_dir_all(&probe).unwrap();

            let dest = env.path().join(format!("salvaged-{trial}"));
            let (conversations, report) = salvage(&env, &damaged, &dest);
            assert_eq!(files(&damaged), before, "{mode}: salvage wrote into it");
            with_db(&env, &dest, &["verify"]).ok();
            let copy = logs(&env, &dest);
            for (name, lines) in &copy {
                let expected = &original[name];
                assert!(
                    lines.len() <= expected.len() && lines[..] == expected[..lines.len()],
                    "{mode}: {name} is not a prefix of the original"
                );
            }
            for c in &conversations {
                let name = c["name"].as_str().unwrap_or_default();
                if let Some(lines) = copy.get(name) {
                    assert_eq!(
                        c["recovered"].as_u64().unwrap(),
                        lines.len() as u64,
                        "{mode}: {c}"
                    );
                }
                if c["whole"] == true {
                    let expected = c["expected"].as_u64().unwrap();
                    assert!(c["recovered"].as_u64().unwrap() >= expected, "{mode}: {c}");
                }
            }
            let got: usize = copy.values().map(Vec::len).sum();
            recovered += got;
            whole += copy
                .iter()
                .filter(|(name, lines)| lines.len() == original[*name].len())
                .count();
            assert!(report["ok"] == true);
            std::fs::remove_dir_all(&damaged).unwrap();
            std::fs::remove_dir_all(&dest).unwrap();
        }
        summary.push(format!(
            "{mode}: {trials} cop(ies), {opened} still open; salvage recovered {recovered} of {} \
             records, {whole} of {} conversations complete",
            total * trials,
            CONVERSATIONS.len() * trials
        ));
    }
    eprintln!("{}", summary.join("\n"));
    assert!(
        leftovers(env.path()).is_empty(),
        "{:?}",
        leftovers(env.path())
    );
}

/// Destinations: a missing parent directory and a URL are refused with
/// what is wrong; a copy killed part-way is cleaned up by the next one.
#[test]
fn backup_destinations_are_checked_and_abandoned_copies_removed() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "hello"]).ok();
    let missing = env.run(&["backup", "/nonexistent-dir/copy"]).fails();
    assert!(
        missing
            .stderr
            .contains("the directory /nonexistent-dir does not exist"),
        "{}",
        missing.stderr
    );
    assert!(
        !missing.stderr.contains(".convstore-copy"),
        "{}",
        missing.stderr
    );
    for url in ["postgres:mydb", "s3://bucket/x"] {
        let run = env.run(&["backup", url]).fails();
        assert!(run.stderr.contains("URL"), "{}", run.stderr);
        let db = env.db();
        let run = env.run(&["salvage", db.to_str().unwrap(), url]).fails();
        assert!(run.stderr.contains("URL"), "{}", run.stderr);
    }
    assert!(!env.path().join("postgres:mydb").exists());
    // What a killed backup leaves: a copy directory of a process that is
    // gone (pid 2^22 + 1 is above Linux's limit).
    let abandoned = env.path().join(".convstore-copy-4194305-abc");
    std::fs::create_dir_all(abandoned.join("db")).unwrap();
    let dest = env.path().join("copy");
    env.run(&["backup", dest.to_str().unwrap()]).ok();
    assert!(!abandoned.exists());
}

/// A `copy` into a new directory killed part-way leaves nothing there (it
/// writes beside it and moves the copy in once complete); run again, it
/// copies everything.
#[test]
fn a_copy_killed_part_way_leaves_no_partial_database() {
    let env = TestEnv::new();
    for i in 0..6 {
        env.run(&["gen", &format!("g{i}"), "--events", "4000", "-q"])
            .ok();
    }
    let source = env.db();
    let dest = env.path().join("copied");
    let (source, dest) = (source.to_str().unwrap(), dest.to_str().unwrap());
    for delay in [30, 120, 300] {
        let mut child = env.command(&["copy", source, dest]).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay));
        let _ = child.kill();
        let finished = child.wait().unwrap().success();
        if finished {
            // Done before the kill: whole.
            assert_eq!(
                env.run(&["--db", dest, "list", "--json"]).ok().lines()[0]
                    .as_array()
                    .unwrap()
                    .len(),
                6
            );
            std::fs::remove_dir_all(dest).unwrap();
        } else {
            assert!(
                !std::path::Path::new(dest).exists(),
                "killed after {delay} ms"
            );
        }
    }
    // Interrupted (Ctrl-C), it leaves not even its temporary directory.
    let child = env.command(&["copy", source, dest]).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(150));
    std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let interrupted = child.wait_with_output().unwrap();
    if interrupted.status.success() {
        // Done before the interrupt: whole.
        std::fs::remove_dir_all(dest).unwrap();
    } else {
        assert_eq!(interrupted.status.code(), Some(130));
        assert!(!std::path::Path::new(dest).exists());
        assert_eq!(
            copies_under_way(env.path()),
            0,
            "an interrupted copy's directory is removed"
        );
    }
    env.run(&["copy", source, dest]).ok();
    env.run(&["--db", dest, "verify"]).ok();
    assert_eq!(
        copies_under_way(env.path()),
        0,
        "abandoned copies are removed"
    );
}

/// The temporary directories of copies being written in `dir`.
fn copies_under_way(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".convstore-copy")
        })
        .count()
}
