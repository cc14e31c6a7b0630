//! Crash consistency with real processes.
//!
//! A child process appends deterministic batches (compactions among them;
//! every other batch kept in the segment files, the others in sled) to a
//! conversation, forks it after every third batch (`fork-K`, with one
//! event of its own) and brings a materialized view of it up to date, and
//! prints `ack K` once all of that returned for batch K. The parent kills it
//! with SIGKILL at a random moment, reopens the database and checks that the
//! log is exactly a prefix of the batches (no partial batch), that it holds
//! every acknowledged batch, that every record is the event that was sent,
//! that every acknowledged fork exists and every fork is a prefix of the
//! log plus its own event, that the view (whatever state it reached)
//! equals a fresh projection of the head it records, and that `verify`
//! passes. Then it starts the next child on the same
//! database, many times.
//!
//! `CONVSTORE_CRASH_ITERATIONS` sets the number of kills (default 40; the
//! documented full run is 500). `CONVSTORE_CRASH_SEED` fixes the schedule.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use convstore_engine::views;
use convstore_store::event::{Compaction, ReasoningPolicy, ToolCallPolicy};
use convstore_store::{AppendOptions, ConversationId, Event, EventKind, Json, Store, Timestamp};

const CHILD_ENV: &str = "CONVSTORE_CRASH_CHILD";
const CONVERSATION: &str = "crash";

/// The size of batch `k`: 1 to 64 events.
fn batch_size(k: u64) -> usize {
    (splitmix(k) % 64 + 1) as usize
}

/// Event `j` of batch `k`: every kind of record, some with blobs.
fn batch_event(k: u64, j: usize) -> Event {
    let r = splitmix(k * 1000 + j as u64);
    let timestamp = Timestamp::from_micros(1_700_000_000_000_000 + (k * 1000 + j as u64) as i64)
        .expect("timestamp in range");
    let kind = match r % 7 {
        0 => EventKind::TurnStart,
        1 => EventKind::User {
            text: format!("batch {k} event {j}"),
        },
        2 => EventKind::ToolCall {
            id: format!("{k}-{j}"),
            name: "fs_read_file".to_owned(),
            arguments: Json::from_value(&serde_json::json!({"path": format!("src/{k}.rs")})),
        },
        3 => EventKind::ToolResult {
            id: format!("{k}-{j}"),
            // Every 16th result is long enough to be a blob; some repeat.
            content: if r % 16 == 3 {
                format!("{} {}", "file contents ".repeat(200), r % 5)
            } else {
                format!("ok {k}")
            },
            is_error: r % 7 == 0,
        },
        4 => EventKind::Assistant {
            text: "x".repeat((r % 300) as usize),
        },
        5 => {
            let from_turn = k.saturating_sub(r % 8);
            EventKind::Compaction(Compaction {
                from_turn,
                to_turn: from_turn + r % 5,
                summary: (r % 3 == 0).then(|| format!("summary {k}")),
                reasoning: Some(ReasoningPolicy::Strip),
                tool_calls: (r % 2 == 0).then_some(ToolCallPolicy::Strip),
                revert: None,
                info: None,
            })
        }
        _ => EventKind::Reasoning {
            text: format!("thinking about {k}"),
        },
    };
    Event::new(timestamp, kind)
}

fn batch(k: u64) -> Vec<Event> {
    (0..batch_size(k)).map(|j| batch_event(k, j)).collect()
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// How many whole batches a log of `len` records holds, or `None` if it
/// ends inside a batch.
fn whole_batches(len: u64) -> Option<u64> {
    let (mut k, mut total) = (0u64, 0u64);
    while total < len {
        total += batch_size(k) as u64;
        k += 1;
    }
    (total == len).then_some(k)
}

fn child(db: &Path) {
    let store = Store::open(db).expect("child: open");
    let id = match store.find(CONVERSATION).expect("child: find") {
        Some(id) => id,
        None => store
            .create_conversation(Some(CONVERSATION))
            .expect("child: create"),
    };
    let len = store.info(&id).expect("child: info").len;
    let mut k = whole_batches(len).expect("child: the log ends inside a batch");
    loop {
        // Every other batch goes to the segment files (synced before the
        // sled batch that refers to it), the others to sled alone.
        store.set_segment_min_bytes(if k % 2 == 0 { 0 } else { u64::MAX });
        let appended = store
            .append(&id, &batch(k), &AppendOptions::default())
            .expect("child: append");
        if k % 3 == 0 {
            let name = fork_name(k);
            if store.find(&name).expect("child: find fork").is_none() {
                let at = appended.first_seq + appended.count;
                store
                    .fork(&id, at, Some(&name), &[fork_event(k)])
                    .expect("child: fork");
            }
        }
        views::refresh(&store, &id, VIEW, None).expect("child: view");
        println!("ack {k}");
        k += 1;
    }
}

const VIEW: &str = "v";

fn fork_name(k: u64) -> String {
    format!("fork-{k}")
}

/// The one event a fork adds.
fn fork_event(k: u64) -> Event {
    Event::new(
        Timestamp::now(),
        EventKind::User {
            text: format!("fork after batch {k}"),
        },
    )
}

/// Every fork is the log's prefix plus its own event; every acknowledged
/// one exists. The view equals a fresh projection of its head.
fn check_forks_and_view(
    store: &Store,
    id: &ConversationId,
    stored: &[Event],
    acked: &HashSet<u64>,
    iteration: u64,
) {
    for k in (0..=stored.len() as u64).filter(|k| k % 3 == 0) {
        let Some(fork) = store.find(&fork_name(k)).expect("find fork") else {
            // A batch stored but not acknowledged before a kill gets no
            // fork: the next child goes on with the next batch.
            assert!(
                !acked.contains(&k),
                "iteration {iteration}: fork {k} was acknowledged but is missing"
            );
            continue;
        };
        let at = store
            .fork_point(&fork)
            .expect("fork point")
            .expect("a fork")
            .at as usize;
        let events: Vec<Event> = store
            .scan(&fork, 0..u64::MAX)
            .expect("scan fork")
            .map(|r| r.expect("fork record").event)
            .collect();
        assert_eq!(events.len(), at + 1, "iteration {iteration}: fork {k}");
        assert!(
            events[..at] == stored[..at],
            "iteration {iteration}: fork {k} does not share the log's records"
        );
        assert!(
            matches!(&events[at].kind, EventKind::User { text } if *text == format!("fork after batch {k}")),
            "iteration {iteration}: fork {k} lost its own event"
        );
    }
    if let Some(state) = store.view_state(id, VIEW).expect("view state") {
        let problem = views::check(store, id, &state).expect("check view");
        assert_eq!(problem, None, "iteration {iteration}: the view");
    }
}

fn check(db: &Path, acked: Option<u64>, every_ack: &HashSet<u64>, iteration: u64) -> u64 {
    let store = Store::open(db).unwrap_or_else(|e| panic!("iteration {iteration}: reopen: {e}"));
    if !store.discarded_snapshots().is_empty() {
        // sled was killed while writing a snapshot; the open moved the
        // unfinished file away. Everything acknowledged must still be
        // there: the checks below are the same.
        println!("  iteration {iteration}: an unfinished sled snapshot was moved away");
    }
    let Some(id) = store.find(CONVERSATION).expect("find") else {
        assert!(
            acked.is_none(),
            "iteration {iteration}: acknowledged batches vanished"
        );
        return 0;
    };
    let len = store.info(&id).expect("info").len;
    let batches = whole_batches(len).unwrap_or_else(|| {
        panic!("iteration {iteration}: a partial batch is stored ({len} records)")
    });
    if let Some(acked) = acked {
        assert!(
            batches > acked,
            "iteration {iteration}: batch {acked} was acknowledged but only {batches} batches survive"
        );
    }
    let expected: Vec<Event> = (0..batches).flat_map(batch).collect();
    let stored: Vec<Event> = store
        .scan(&id, 0..u64::MAX)
        .expect("scan")
        .map(|r| r.expect("record").event)
        .collect();
    assert!(
        stored == expected,
        "iteration {iteration}: stored events differ from those sent"
    );
    check_forks_and_view(&store, &id, &stored, every_ack, iteration);
    let verified = store.verify_all().expect("verify");
    assert!(
        verified.is_ok(),
        "iteration {iteration}: {:?}",
        verified.err()
    );
    batches
}

fn main() {
    if let Ok(db) = std::env::var(CHILD_ENV) {
        child(Path::new(&db));
        return;
    }
    // `cargo test -- --list` and filters pass arguments; there is one test.
    if std::env::args().any(|a| a == "--list") {
        println!("crash_recovery: test");
        return;
    }
    let iterations: u64 = std::env::var("CONVSTORE_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let mut seed: u64 = std::env::var("CONVSTORE_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| Timestamp::now().as_micros() as u64);
    println!("crash_recovery: {iterations} kills, seed {seed}");
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("db");
    let exe = std::env::current_exe().expect("current exe");
    let mut acked: Option<u64> = None;
    let mut every_ack = HashSet::new();
    let started = Instant::now();
    for iteration in 0..iterations {
        seed = splitmix(seed);
        let mut process = Command::new(&exe)
            .env(CHILD_ENV, &db)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdout = process.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let reader = {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    lines.lock().expect("lines").push(line);
                }
            })
        };
        // Most kills land while appends run; one in five during startup
        // and recovery.
        if seed % 5 != 0 {
            let deadline = Instant::now() + Duration::from_secs(20);
            while lines.lock().expect("lines").is_empty() && Instant::now() < deadline {
                if let Ok(Some(status)) = process.try_wait() {
                    let mut stderr = String::new();
                    if let Some(mut e) = process.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
                    }
                    panic!("iteration {iteration}: child exited early ({status}): {stderr}");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        std::thread::sleep(Duration::from_micros(splitmix(seed) % 40_000));
        process.kill().expect("kill");
        let _ = process.wait();
        reader.join().expect("reader");
        for line in lines.lock().expect("lines").iter() {
            let k: u64 = line
                .strip_prefix("ack ")
                .and_then(|k| k.parse().ok())
                .unwrap_or_else(|| panic!("iteration {iteration}: odd child output {line:?}"));
            acked = Some(acked.map_or(k, |a| a.max(k)));
            every_ack.insert(k);
        }
        let batches = check(&db, acked, &every_ack, iteration);
        if iteration % 10 == 0 {
            println!(
                "  iteration {iteration}: {batches} batches stored, last acknowledged {acked:?}"
            );
        }
    }
    println!(
        "crash_recovery: {iterations} kills survived in {:.1}s; test result: ok. 1 passed; 0 failed",
        started.elapsed().as_secs_f64()
    );
}
