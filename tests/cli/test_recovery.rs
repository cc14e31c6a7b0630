#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns
//! Opening a damaged database, or one on a full disk: sled's lost snapshot,
//! a full disk, what a failed open leaves behind.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::support::TestEnv;

/// A database with conversations in sled and in the segment files, opened
/// again since it was written (so sled has a snapshot and convstore its
/// state file).
fn populated(env: &TestEnv) {
    env.run(&["demo", "-q"]).ok();
    env.run(&["gen", "big", "--events", "3000", "-q"]).ok();
    env.run(&["gen", "small", "--events", "300", "--batch", "1", "-q"])
        .ok();
    env.run(&["verify"]).ok();
}

fn snapshots(db: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(db)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("snap.")
        })
        .collect()
}

/// sled's snapshot gone and the start of its log unreadable: sled alone
/// would open the database empty (or panic) and rewrite its files. The
/// open is refused instead, every command fails the same way, and sled's
/// files are left as they were.
#[test]
fn a_lost_snapshot_never_opens_as_an_empty_database() {
    let env = TestEnv::new();
    populated(&env);
    let whole = env.run(&["verify"]).ok().stdout;
    for damage in ["zero the first log segment", "empty the db file"] {
        let copy = env.path().join("damaged");
        copy_dir(&env.db(), &copy);
        for snapshot in snapshots(&copy) {
            std::fs::remove_file(snapshot).unwrap();
        }
        let db_file = copy.join("db");
        let mut bytes = std::fs::read(&db_file).unwrap();
        if damage.starts_with("zero") {
            // sled's first segment (512 KiB), or the whole file if shorter.
            let segment = bytes.len().min(512 * 1024);
            bytes[..segment].fill(0);
        } else {
            bytes.clear();
        }
        std::fs::write(&db_file, &bytes).unwrap();
        let db = copy.to_str().unwrap();
        // Zeroed, the start of the log may hold nothing live any more
        // (sled reuses its segments): then the database opens whole.
        let verified = env.run(&["--db", db, "verify"]);
        if damage.starts_with("zero") && verified.code == 0 {
            assert_eq!(verified.stdout, whole, "{damage}");
            std::fs::remove_dir_all(&copy).unwrap();
            continue;
        }
        for args in [&["verify"][..], &["list"][..], &["log", "demo"][..]] {
            let mut all = vec!["--db", db];
            all.extend_from_slice(args);
            let run = env.run(&all).fails();
            assert!(
                run.stderr.contains("snapshot file is missing") && run.stderr.contains("salvage"),
                "{damage}: {}",
                run.stderr
            );
        }
        assert_eq!(std::fs::read(&db_file).unwrap(), bytes, "{damage}");
        assert!(snapshots(&copy).is_empty(), "{damage}");
        std::fs::remove_dir_all(&copy).unwrap();
    }
    env.run(&["verify"]).ok();
}

/// A snapshot deleted from a database whose log sled can replay whole: the
/// trial recovery holds everything convstore recorded, so it opens.
#[test]
fn a_deleted_snapshot_alone_still_opens_when_the_log_holds_everything() {
    let env = TestEnv::new();
    populated(&env);
    let before = env.run(&["verify"]).ok().stdout;
    for snapshot in snapshots(&env.db()) {
        std::fs::remove_file(snapshot).unwrap();
    }
    assert_eq!(env.run(&["verify"]).ok().stdout, before);
    assert_eq!(env.run(&["log", "small"]).ok().lines().len(), 300);
}

/// Without convstore's state file (a database from before it), sled
/// recovering nothing while segment files hold records is refused before
/// anything is written: the database is not initialised as a new one.
#[test]
fn segment_files_without_sled_data_are_refused() {
    let env = TestEnv::new();
    populated(&env);
    std::fs::remove_file(env.db().join("convstore.state")).unwrap();
    for snapshot in snapshots(&env.db()) {
        std::fs::remove_file(snapshot).unwrap();
    }
    std::fs::write(env.db().join("db"), b"").unwrap();
    let run = env.run(&["verify"]).fails();
    assert!(run.stderr.contains("segment files hold"), "{}", run.stderr);
    let run = env.run(&["append", "x", "--user", "y"]).fails();
    assert!(run.stderr.contains("segment files hold"), "{}", run.stderr);
}

/// A tmpfs mounted for a test, unmounted when dropped.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `16m`) at `dir`, or `None` (with a
    /// message) where this is not allowed.
    fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status();
        if status.is_ok_and(|s| s.success()) {
            Some(Tmpfs {
                dir: dir.to_path_buf(),
            })
        } else {
            eprintln!("skipping: cannot mount a tmpfs here (needs root)");
            None
        }
    }

    /// Fills the file system to the brim with a file named `fill`.
    fn fill(&self) {
        let mut file = std::fs::File::create(self.dir.join("fill")).unwrap();
        let block = vec![0u8; 64 * 1024];
        while file.write_all(&block).is_ok() {}
        let mut byte = [0u8; 1];
        while file.write_all(&byte).is_ok() {
            byte[0] = 1;
        }
        let _ = file.sync_all();
    }

    fn empty(&self) {
        std::fs::remove_file(self.dir.join("fill")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}

fn leftovers(db: &Path) -> Vec<String> {
    std::fs::read_dir(db)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".generating") || n == "discarded" || n.starts_with(".convstore"))
        .collect()
}

/// On a full disk every read works (sled must write a snapshot to open a
/// database written since its last open: convstore's reserve makes room
/// for it), and an open that fails for want of space leaves nothing
/// behind, so the next one does not take its leftovers for a crash's.
#[test]
fn reads_work_on_a_full_disk_and_a_failed_open_leaves_nothing() {
    let env = TestEnv::new();
    let Some(fs) = Tmpfs::mount(&env.path().join("mnt"), "16m") else {
        return;
    };
    let db = fs.dir.join("db");
    let db_arg = db.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["--db", db_arg];
        all.extend_from_slice(args);
        env.run(&all)
    };
    run(&["demo", "-q"]).ok();
    run(&["gen", "big", "--events", "2000", "-q"]).ok();
    run(&["verify"]).ok();
    // Written since the last open: the next open writes a snapshot.
    run(&["append", "demo", "--user", "one more", "-q"]).ok();
    fs.fill();
    for _ in 0..3 {
        let verified = run(&["verify"]).ok();
        assert!(
            verified.stdout.starts_with("ok: 2 conversations"),
            "{}",
            verified.stdout
        );
        assert_eq!(run(&["log", "demo"]).ok().lines().len(), 42);
        run(&["list"]).ok();
        assert!(leftovers(&db).is_empty(), "{:?}", leftovers(&db));
    }

    // Without the reserve (a database an older convstore wrote), the open
    // fails with a clear error and leaves nothing behind.
    fs.empty();
    run(&["append", "demo", "--user", "and another", "-q"]).ok();
    std::fs::remove_file(db.join("convstore.reserve")).unwrap();
    fs.fill();
    for _ in 0..3 {
        let failed = run(&["verify"]).fails();
        assert!(
            failed.stderr.contains("no space left on device"),
            "{}",
            failed.stderr
        );
        assert!(leftovers(&db).is_empty(), "{:?}", leftovers(&db));
    }
    fs.empty();
    let verified = run(&["verify"]).ok();
    assert!(verified.stderr.is_empty(), "{}", verified.stderr);
    assert_eq!(run(&["log", "demo"]).ok().lines().len(), 43);
    assert!(db.join("convstore.reserve").exists());
}

fn copy_dir(from: &Path, to: &Path) {
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

/// Under an address space limit (`ulimit -v`) every command either works,
/// or fails with one `error:` line (a limit below what sled's page table
/// needs is refused before the database is opened), or, when an
/// allocation fails later, aborts with Rust's `memory allocation of N
/// bytes failed` (documented in docs/bad-input.md); never a panic or a
/// crash, and the database is intact afterwards.
#[test]
fn memory_limits_give_an_error_line_never_a_crash() {
    use std::os::unix::process::ExitStatusExt;
    let env = TestEnv::new();
    env.run(&["demo", "-q"]).ok();
    env.run(&["gen", "big", "--events", "3000", "-q"]).ok();
    let mut records = 41;
    let commands: [&[&str]; 4] = [
        &["verify"],
        &["log", "demo"],
        &["project", "big"],
        &["append", "demo", "--user", "under a limit", "-q"],
    ];
    let (mut refused, mut worked) = (0, 0);
    let under = |mib: u64, args: &[&str]| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v {}; exec \"$0\" \"$@\"", mib * 1024))
            .arg(env!("CARGO_BIN_EXE_convstore"))
            .args(args)
            .env("CONVSTORE_DB", env.db())
            .env_remove("MALLOC_ARENA_MAX")
            .output()
            .unwrap()
    };
    let mut loaded = 0;
    for mib in [
        40, 48, 64, 80, 88, 96, 104, 112, 128, 192, 256, 384, 512, 768, 1024,
    ] {
        // Below the program's own size (about 75 MiB mapped, most of it
        // the two tokenizers' tables) the kernel cannot even load it
        // (`execve` fails with ENOMEM and the process is killed before
        // `main`): that is not convstore's to answer. (Loaded, `--version`
        // too refuses a limit below 128 MiB, with an error line.)
        if under(mib, &["--version"]).status.signal().is_some() {
            assert!(loaded == 0, "{mib} MiB: killed above a limit that loaded");
            continue;
        }
        loaded += 1;
        for args in commands {
            let output = under(mib, args);
            let stderr = String::from_utf8_lossy(&output.stderr);
            match (output.status.code(), output.status.signal()) {
                (Some(0), _) => {
                    worked += 1;
                    if args[0] == "append" {
                        records += 1;
                    }
                }
                (Some(1), _) => {
                    refused += 1;
                    assert_eq!(stderr.lines().count(), 1, "{mib} MiB {args:?}: {stderr}");
                    assert!(
                        stderr.starts_with("error: "),
                        "{mib} MiB {args:?}: {stderr}"
                    );
                    if mib < 128 {
                        assert!(stderr.contains("address space limit"), "{stderr}");
                    }
                }
                // Rust's runtime aborting on an allocation it cannot make:
                // a buffer, or a new thread's signal stack.
                (None, Some(6)) => assert!(
                    stderr.contains("memory allocation of")
                        || stderr.contains("failed to allocate an alternative stack"),
                    "{mib} MiB {args:?}: {stderr}"
                ),
                other => panic!("{mib} MiB {args:?}: {other:?}: {stderr}"),
            }
            env.run(&["verify"]).ok();
            assert_eq!(env.run(&["log", "demo"]).ok().lines().len(), records);
        }
    }
    assert!(refused > 0 && worked > 0 && loaded >= 8);
}
