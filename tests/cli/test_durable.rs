//! Imports and large appends are all or nothing; an acknowledged append is
//! synced to disk before its head is printed; a large append from stdin
//! does not hold its input in memory.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use convstore_store::json;
use convstore_store::{Event, EventKind, Timestamp};

use crate::support::TestEnv;

/// `n` NDJSON lines of about `size` bytes each (every timestamp given, so
/// that the same lines give the same head), from event `from` on.
fn ndjson(from: u64, n: u64, size: usize) -> String {
    let mut out = Vec::new();
    for i in from..from + n {
        let timestamp = Timestamp::from_micros(1_730_000_000_000_000 + i as i64).unwrap();
        let text = format!("{i} {}", "w".repeat(size.saturating_sub(90)));
        let kind = match i % 4 {
            0 => EventKind::TurnStart,
            1 => EventKind::User { text },
            _ => EventKind::Assistant { text },
        };
        json::write_event(&Event::new(timestamp, kind), &mut out);
        out.push(b'\n');
    }
    String::from_utf8(out).unwrap()
}

/// Runs `convstore ARGS` with a file size limit of `blocks` 512-byte
/// blocks (convstore catches SIGXFSZ, so a write past it fails with
/// EFBIG: an `error:` line, not a silent kill).
fn run_limited(env: &TestEnv, blocks: u64, args: &str, stdin: Option<&Path>) -> (i32, String) {
    let input = stdin.map_or(String::new(), |p| format!(" < '{}'", p.display()));
    let script = format!(
        "ulimit -f {blocks}; exec '{}' {args}{input}",
        env!("CARGO_BIN_EXE_convstore"),
    );
    let output = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(env.path())
        .env("CONVSTORE_DB", env.db())
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn bulk_files(db: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(db.join("segments")).map_or_else(
        |_| Vec::new(),
        |d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "bulk"))
                .collect()
        },
    )
}

/// An import that fails part-way (here: the file size limit, as a full
/// disk) stores no conversation, and the retry succeeds. Before bulk
/// appends it stored the batches before the failure and the retry failed
/// with "already exists".
#[test]
fn an_import_that_fails_part_way_stores_nothing_and_the_retry_succeeds() {
    let env = TestEnv::new();
    env.run(&["append", "other", "--user", "before"]).ok();
    let file = env.path().join("big.ndjson");
    std::fs::write(&file, ndjson(0, 30_000, 700)).unwrap();
    let args = format!("import --format ndjson '{}' --name big", file.display());
    // 8 MiB at most per file: the input is about 21 MB.
    let (code, stderr) = run_limited(&env, 16_384, &args, None);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.starts_with("error: I/O error on the database: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let list = env.run(&["list"]).ok().stdout;
    assert!(!list.contains("big"), "{list}");
    assert!(bulk_files(&env.db()).is_empty());
    env.run(&["verify"]).ok();

    let file = file.to_str().unwrap();
    env.run(&["import", "--format", "ndjson", file, "--name", "big"])
        .ok();
    assert_eq!(env.run(&["log", "big"]).ok().lines().len(), 30_000);
    env.run(&["verify"]).ok();
}

/// An append from stdin larger than what is kept in memory: a bad last
/// line stores nothing (not even the new conversation); a good input is
/// stored whole, after staged records too, with the head an import of
/// the same lines gives.
#[test]
fn a_large_append_from_stdin_is_checked_and_stored_whole() {
    let env = TestEnv::new();
    let good = ndjson(0, 20_000, 600);
    assert!(good.len() > 8 << 20);
    let bad = format!("{good}{{\"type\":\"user\"}}\n");
    let run = env.run_with_stdin(&["append", "big"], &bad).fails();
    assert!(run.stderr.contains("line 20001"), "{}", run.stderr);
    // The database it created is gone again; an empty directory given
    // for one is left empty.
    assert!(!env.db().exists());
    std::fs::create_dir(env.db()).unwrap();
    env.run_with_stdin(&["append", "big"], &bad).fails();
    assert_eq!(std::fs::read_dir(env.db()).unwrap().count(), 0);
    env.run(&["append", "other", "--user", "x", "-q"]).ok();
    env.run_with_stdin(&["append", "big"], &bad).fails();
    assert!(!env.run(&["list"]).ok().stdout.contains("big"));
    assert!(bulk_files(&env.db()).is_empty());

    // Staged records first (a few small appends), then the large one.
    let first = ndjson(0, 3, 600);
    for line in first.lines() {
        env.run_with_stdin(&["append", "big", "-q"], &format!("{line}\n"))
            .ok();
    }
    let rest = ndjson(3, 19_997, 600);
    let head = env.run_with_stdin(&["append", "big"], &rest).ok().stdout;
    assert_eq!(env.run(&["log", "big"]).ok().lines().len(), 20_000);
    env.run(&["verify"]).ok();

    let file = env.path().join("good.ndjson");
    std::fs::write(&file, &good).unwrap();
    let file = file.to_str().unwrap();
    env.run(&["import", "--format", "ndjson", file, "--name", "same"])
        .ok();
    let imported = env.run(&["log", "same"]).ok().lines();
    assert_eq!(imported[19_999]["address"].as_str().unwrap(), head.trim());
    // Appending the same lines again with the head expected.
    let again = env
        .run_with_stdin(&["append", "big", "--expect-head", head.trim()], &good)
        .ok();
    assert_eq!(again.stdout.trim().len(), 64);
    // A stale head fails as soon as the input is too large for memory,
    // without reading the rest (from a file here: a pipe's writer would
    // see it closed).
    let stale = env
        .command(&["append", "big", "--expect-head", head.trim()])
        .stdin(std::fs::File::open(file).unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&stale.stderr);
    assert_eq!(stale.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: conflict"), "{stderr}");
    assert_eq!(env.run(&["log", "big"]).ok().lines().len(), 40_000);
    env.run(&["verify"]).ok();
}

/// The peak resident memory of `convstore append big` fed `input`, as
/// `/proc/PID/status` reports it (VmHWM), sampled while it runs; `None`
/// where there is no `/proc`.
fn peak_memory_kb(env: &TestEnv, input: String) -> Option<u64> {
    if !Path::new("/proc/self/status").exists() {
        return None;
    }
    let mut child = env
        .command(&["append", "big", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status) {
            let hwm = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
            peak = peak.max(hwm.unwrap_or(0));
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    writer.join().unwrap().unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(peak)
}

/// A 60 MB append from stdin stays within a bounded amount of memory
/// (before bulk appends it held every event: about 3.5 times the input).
#[test]
fn a_large_append_from_stdin_keeps_memory_bounded() {
    let env = TestEnv::new();
    let input = ndjson(0, 100_000, 800);
    assert!(input.len() > 55 << 20);
    let Some(peak) = peak_memory_kb(&env, input) else {
        return;
    };
    assert!(peak < 120_000, "peak {peak} kB");
    assert_eq!(env.run(&["log", "big"]).ok().lines().len(), 100_000);
}

/// `strace` of a durable `append`: the thread that prints the head has,
/// before printing it, fsynced or fdatasynced sled's `db` file after
/// sled's last `sync_file_range` of it (which flushes neither the disk's
/// write cache nor the file's metadata). Skipped where strace does not
/// run.
#[test]
fn a_durable_append_is_synced_before_its_head_is_printed() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "first"]).ok();
    let trace = env.path().join("trace");
    let output = Command::new("strace")
        .args(["-f", "-o"])
        .arg(&trace)
        .args([
            "-e",
            "trace=openat,close,fsync,fdatasync,sync_file_range,write",
        ])
        .arg(env!("CARGO_BIN_EXE_convstore"))
        .args(["append", "c", "--user", "second"])
        .env("CONVSTORE_DB", env.db())
        .output();
    let Ok(output) = output else {
        eprintln!("strace is not installed: skipped");
        return;
    };
    if !output.status.success() {
        eprintln!(
            "strace did not run: skipped ({})",
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    let head = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert_eq!(head.len(), 64);
    let trace = std::fs::read_to_string(trace).unwrap();
    let problem = synced_before_printing(&trace, &head);
    assert_eq!(problem, None, "{trace}");
}

/// Checks a `strace -f -o` trace (module test above); the problem found.
fn synced_before_printing(trace: &str, head: &str) -> Option<String> {
    use std::collections::{HashMap, HashSet};
    // Each call as it completes: (pid, call, arguments, result), with the
    // arguments of calls split over "unfinished" and "resumed" lines.
    let mut started: HashMap<(String, String), String> = HashMap::new();
    let mut calls = Vec::new();
    for line in trace.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        if let Some(resumed) = rest.strip_prefix("<... ") {
            let Some((name, tail)) = resumed.split_once(" resumed>") else {
                continue;
            };
            let args = started
                .remove(&(pid.to_owned(), name.to_owned()))
                .unwrap_or_default();
            calls.push((pid.to_owned(), name.to_owned(), args + tail));
        } else if let Some((name, args)) = rest.split_once('(') {
            if let Some(args) = args.strip_suffix(" <unfinished ...>") {
                started.insert((pid.to_owned(), name.to_owned()), args.to_owned());
            } else {
                calls.push((pid.to_owned(), name.to_owned(), args.to_owned()));
            }
        }
    }
    let mut db_fds: HashSet<String> = HashSet::new();
    let mut last_range = None;
    let mut synced_after_range = HashSet::new();
    for (pid, name, args) in &calls {
        let fd = args
            .split([',', ')'])
            .next()
            .unwrap_or("")
            .trim()
            .to_owned();
        let result = args.rsplit("= ").next().unwrap_or("").trim().to_owned();
        match name.as_str() {
            "openat" if args.contains("/db/db\"") && !args.contains("O_DIRECTORY") => {
                db_fds.insert(result);
            }
            "close" => {
                db_fds.remove(&fd);
            }
            "sync_file_range" if db_fds.contains(&fd) => {
                last_range = Some(pid.clone());
                synced_after_range.clear();
            }
            "fsync" | "fdatasync" if db_fds.contains(&fd) && result == "0" => {
                synced_after_range.insert(pid.clone());
            }
            "write" if fd == "1" && args.contains(&head[..16]) => {
                return match last_range {
                    None => Some("no sync_file_range of the db file before the head".to_owned()),
                    Some(_) if synced_after_range.contains(pid) => None,
                    Some(_) => Some(format!(
                        "thread {pid} printed the head without fsyncing the db file after sled's last sync_file_range"
                    )),
                };
            }
            _ => {}
        }
    }
    Some("the head was not printed".to_owned())
}
