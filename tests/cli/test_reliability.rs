//! Reliability of the command line against other processes: a slow
//! reader never keeps the database from writers.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::fmt::Write as _;
use std::io::Read;
use std::process::Stdio;

use crate::support::TestEnv;

#[test]
fn a_reader_that_does_not_read_keeps_no_writer_waiting() {
    let env = TestEnv::new();
    env.run(&["gen", "big", "--events", "100000", "--seed", "2"])
        .ok();
    for args in [
        vec!["log", "big"],
        vec!["project", "big", "--format", "openai"],
        vec!["export", "big", "--format", "jp"],
    ] {
        // Nobody reads its stdout (as `| sleep 12` or a paused pager): the
        // output waits in its spool, not in the database.
        let mut reader = env
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // It has the database open and has started writing.
        let mut stdout = reader.stdout.take().unwrap();
        let mut first = [0u8; 100];
        stdout.read_exact(&mut first).unwrap();
        let append = env.run(&["--wait", "30", "append", "big", "--user", "meanwhile"]);
        assert_eq!(append.code, 0, "{args:?}: {}", append.stderr);
        let mut output = String::from_utf8_lossy(&first).into_owned();
        stdout.read_to_string(&mut output).unwrap();
        let status = reader.wait().unwrap();
        assert!(status.success(), "{args:?}");
        // The reader saw the log as it was when it read it, whole.
        assert!(output.len() > 1_000_000, "{args:?}: {} bytes", output.len());
        if args[0] == "log" {
            assert_eq!(output.lines().count(), 100_000);
        }
    }
    assert_eq!(
        env.run(&["head", "big", "--json"]).ok().lines()[0]["events"],
        100_003
    );
}

/// A stderr that cannot be written loses the error line, not the exit
/// code; a stdout that cannot be written is named once.
#[test]
fn unwritable_stderr_and_stdout_keep_the_exit_codes() {
    let env = TestEnv::new();
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let code = |args: &[&str], stdout: bool| {
        let mut command = env.command(args);
        command.stdin(Stdio::null());
        if stdout {
            command.stdout(full()).stderr(Stdio::piped());
        } else {
            command.stdout(Stdio::null()).stderr(full());
        }
        let out = command.output().unwrap();
        (out.status.code(), String::from_utf8(out.stderr).unwrap())
    };
    assert_eq!(code(&["nosuchcommand"], false).0, Some(2));
    assert_eq!(code(&["--db", "/nonexistent/x", "list"], false).0, Some(1));
    env.run(&["append", "c", "--user", "hello"]).ok();
    assert_eq!(code(&["log", "c"], false).0, Some(0));
    let (status, stderr) = code(&["project", "c"], true);
    assert_eq!(status, Some(1));
    assert_eq!(
        stderr,
        "error: cannot write to standard output: No space left on device (os error 28)\n"
    );
}

/// A `--db` that is a symbolic link to nothing is refused and left as it
/// was.
#[test]
fn a_dangling_symlink_database_is_refused_and_kept() {
    let env = TestEnv::new();
    let link = env.path().join("link");
    std::os::unix::fs::symlink(env.path().join("not-yet"), &link).unwrap();
    let run = env
        .run(&[
            "--db",
            link.to_str().unwrap(),
            "append",
            "x",
            "--user",
            "hi",
        ])
        .fails();
    assert!(
        run.stderr.contains("is a symbolic link to"),
        "{}",
        run.stderr
    );
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(!env.path().join("not-yet").exists());
}

/// OpenAI arguments that strict JSON refuses (a key twice, a number out of
/// range) are kept as the text they were, and export gives them back.
#[test]
fn openai_arguments_that_cannot_be_kept_exactly_stay_text() {
    let env = TestEnv::new();
    let messages = r#"[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1e400}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{\"x\":1,\"x\":2}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"},{"role":"tool","tool_call_id":"c2","content":"ok"}]"#;
    let file = env.path().join("oa.json");
    std::fs::write(&file, messages).unwrap();
    let run = env
        .run(&[
            "import",
            "--format",
            "openai",
            file.to_str().unwrap(),
            "--name",
            "oa",
        ])
        .ok();
    assert!(run.stderr.contains("out of range"), "{}", run.stderr);
    assert!(run.stderr.contains("appears twice"), "{}", run.stderr);
    let log = env.run(&["log", "oa"]).ok().lines();
    assert_eq!(log[2]["arguments"], serde_json::json!({}));
    assert_eq!(log[2]["meta"]["openai"]["arguments"], r#"{"x":1e400}"#);
    let exported = env.run(&["export", "oa", "--format", "openai"]).ok().stdout;
    let exported: serde_json::Value = serde_json::from_str(&exported).unwrap();
    let original: serde_json::Value = serde_json::from_str(messages).unwrap();
    assert_eq!(exported, original);
    let ndjson = env.run(&["export", "oa", "--format", "ndjson"]).ok().stdout;
    env.run_with_stdin(&["append", "again"], &ndjson).ok();
}

/// A tmpfs of `mb` MiB mounted on a fresh directory, unmounted when
/// dropped; `None` (and a note) where this process may not mount.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(mb: u32) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("*** SKIPPED: cannot mount a tmpfs here (needs root) ***");
            return None;
        }
        Some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

/// On a full disk, a command whose write fails ends with its error instead
/// of waiting forever in sled's flush when it closes the database (and
/// holding the database from every other process meanwhile).
#[test]
fn commands_on_a_full_disk_end_with_an_error() {
    let Some(fs) = Tmpfs::mount(64) else {
        return;
    };
    let env = TestEnv::new();
    let db = fs.0.path().join("db");
    let db = db.to_str().unwrap();
    env.run(&["--db", db, "gen", "a", "--events", "20000", "--seed", "3"])
        .ok();
    env.run(&["--db", db, "append", "s", "--user", "hi"]).ok();
    let log = env.run(&["--db", db, "log", "s"]).ok().stdout;
    // Fill the disk.
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=1M"])
        .arg(format!("of={}", fs.0.path().join("fill").display()))
        .stderr(Stdio::null())
        .status();
    for args in [
        vec!["view", "a"],
        vec!["view", "a", "--name", "x", "--profile", "light"],
    ] {
        let mut command = env.command(&[&["--db", db][..], &args].concat());
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > std::time::Duration::from_secs(60) {
                child.kill().unwrap();
                panic!("{args:?} still running after 60 s on a full disk");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(
            status.code() == Some(1) || status.code() == Some(0),
            "{args:?}: {status:?} {stderr}"
        );
        if status.code() == Some(1) {
            assert!(
                stderr.starts_with("error: ") && stderr.lines().count() == 1,
                "{stderr}"
            );
        }
    }
    // Reads still work, and what was stored is there.
    assert_eq!(env.run(&["--db", db, "log", "s"]).ok().stdout, log);
    std::fs::remove_file(fs.0.path().join("fill")).unwrap();
    // The view the failed command wrote part of (sled can keep the keys a
    // failed batch inserted before its failure) reads as a fresh one.
    let x = env
        .run(&["--db", db, "view", "a", "--name", "x", "--profile", "light"])
        .ok()
        .stdout;
    let y = env
        .run(&["--db", db, "view", "a", "--name", "y", "--profile", "light"])
        .ok()
        .stdout;
    assert!(x == y, "view x differs from a fresh view");
    env.run(&["--db", db, "verify"]).ok();
}

/// A large append from stdin and a large import that run out of disk
/// part-way (the bulk append's own thread fails while the input is still
/// being read) end with that error on one line and store nothing; the
/// database goes on working.
#[test]
fn a_bulk_append_that_fills_the_disk_stores_nothing() {
    let Some(fs) = Tmpfs::mount(48) else {
        return;
    };
    let env = TestEnv::new();
    let db = fs.0.path().join("db");
    let db = db.to_str().unwrap();
    env.run(&["--db", db, "append", "small", "--user", "hi"])
        .ok();
    // About 64 MB of distinct texts: more than the disk holds.
    let filler = "a text that fills the disk ".repeat(23);
    let mut input = String::new();
    for i in 0..100_000 {
        writeln!(input, "{{\"type\":\"user\",\"text\":\"{i} {filler}\"}}").unwrap();
    }
    let file = env.path().join("big.ndjson");
    std::fs::write(&file, &input).unwrap();
    let run = env
        .run_with_stdin(&["--db", db, "append", "big"], &input)
        .fails();
    assert!(run.stderr.starts_with("error: "), "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    let run = env
        .run(&[
            "--db",
            db,
            "import",
            "--format",
            "ndjson",
            file.to_str().unwrap(),
            "--name",
            "big",
        ])
        .fails();
    assert!(run.stderr.starts_with("error: "), "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    let list = env.run(&["--db", db, "list"]).ok().stdout;
    assert!(!list.contains("big"), "{list}");
    let segments = std::fs::read_dir(fs.0.path().join("db/segments")).unwrap();
    assert!(
        segments
            .flatten()
            .all(|e| e.path().extension().is_none_or(|x| x != "bulk")),
        "a bulk append's file is left"
    );
    env.run(&["--db", db, "append", "small", "--user", "again"])
        .ok();
    env.run(&["--db", db, "verify"]).ok();
}
