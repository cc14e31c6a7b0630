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
//! One kill in four lands instead on `convstore import` of a 100,000-event
//! NDJSON file (about 20 MB, long texts among the events) into a new
//! conversation of the same database, at a random moment of it: the
//! conversation must then be absent or hold every event (with the head the
//! uninterrupted import gives), no `.bulk` segment file may survive the
//! reopening, a retry of an import that did not finish must succeed, and
//! `verify` must pass. (An import in pieces failed this: its batches
//! reached the disk with sled's periodic flush.)
//!
//! Then the same holds for `convstore serve`: four clients append batches
//! of three events over HTTP to conversations of their own while the
//! server is killed with SIGKILL at a random moment; after each kill the
//! database must hold every batch acknowledged over HTTP (answered 200 or
//! 201), whole batches only, each record the event that was sent, and
//! verify. `CONVSTORE_CRASH_SERVER_ITERATIONS` sets the number of these
//! kills (default 10).
//!
//! `CONVSTORE_CRASH_ITERATIONS` sets the number of kills (default 40; the
//! documented full run is 500). `CONVSTORE_CRASH_SEED` fixes the schedule.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use convstore_engine::views;
use convstore_store::event::{Compaction, ReasoningPolicy, ToolCallPolicy};
use convstore_store::{
    json, Address, AppendOptions, ConversationId, Event, EventKind, Json, Store, Timestamp,
};

mod support;

const CHILD_ENV: &str = "CONVSTORE_CRASH_CHILD";

/// The database at `db`: a directory, or a PostgreSQL URL.
fn open(db: &str) -> convstore_store::StoreResult<Store> {
    if db.starts_with("postgres") {
        use convstore_store::backend::postgres::{PgBackend, Setup};
        Store::with_backend(Arc::new(PgBackend::connect(db, Setup::Create)?))
    } else {
        Store::open(db)
    }
}
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
            is_error: r.is_multiple_of(7),
        },
        4 => EventKind::Assistant {
            text: "x".repeat((r % 300) as usize),
        },
        5 => {
            let from_turn = k.saturating_sub(r % 8);
            EventKind::Compaction(Compaction {
                from_turn,
                to_turn: from_turn + r % 5,
                summary: r.is_multiple_of(3).then(|| format!("summary {k}")),
                reasoning: Some(ReasoningPolicy::Strip),
                tool_calls: r.is_multiple_of(2).then_some(ToolCallPolicy::Strip),
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

fn child(db: &str) {
    let store = open(db).expect("child: open");
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
        store.set_segment_min_bytes(if k.is_multiple_of(2) { 0 } else { u64::MAX });
        let appended = store
            .append(&id, &batch(k), &AppendOptions::default())
            .expect("child: append");
        if k.is_multiple_of(3) {
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

fn check(db: &str, acked: Option<u64>, every_ack: &HashSet<u64>, iteration: u64) -> u64 {
    let store = open(db).unwrap_or_else(|e| panic!("iteration {iteration}: reopen: {e}"));
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
    // Every conversation but the imports (each verified once complete, and
    // never written again).
    for conversation in store.conversations().expect("conversations") {
        if conversation
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("import"))
        {
            continue;
        }
        let verified = store.verify(&conversation.id).expect("verify");
        assert!(
            verified.is_ok(),
            "iteration {iteration}: {:?}",
            verified.err()
        );
    }
    batches
}

/// Events in the imported file.
const IMPORT_EVENTS: u64 = 100_000;

/// Writes the NDJSON file the import kills import: every timestamp given, so
/// that every complete import has the same head.
fn write_import_file(path: &Path) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("import file"));
    for i in 0..IMPORT_EVENTS {
        let timestamp = Timestamp::from_micros(1_710_000_000_000_000 + i as i64).expect("time");
        let r = splitmix(i ^ 0x5eed);
        let text = if r.is_multiple_of(50) {
            // A blob; one in four repeats an earlier one.
            format!(
                "{} {}",
                "long tool output ".repeat(150 + (r % 100) as usize),
                r % 4
            )
        } else {
            format!("event {i} {}", "y".repeat((r % 200) as usize))
        };
        let kind = match i % 6 {
            0 => EventKind::TurnStart,
            1 => EventKind::User { text },
            2 => EventKind::ToolCall {
                id: format!("call-{i}"),
                name: "read".to_owned(),
                arguments: Json::from_value(&serde_json::json!({"path": format!("{i}.rs")})),
            },
            3 => EventKind::ToolResult {
                id: format!("call-{}", i - 1),
                content: text,
                is_error: false,
            },
            _ => EventKind::Assistant { text },
        };
        let mut line = Vec::new();
        json::write_event(&Event::new(timestamp, kind), &mut line);
        out.write_all(&line).expect("write");
        out.write_all(b"\n").expect("write");
    }
    out.flush().expect("flush");
}

/// Runs `convstore import` of `file` into conversation `name`, killed after
/// `kill_after` if given; whether it exited on its own with success.
fn import(db: &Path, file: &Path, name: &str, kill_after: Option<Duration>) -> bool {
    let mut process = Command::new(env!("CARGO_BIN_EXE_convstore"))
        .args(["import", "--format", "ndjson", "--name", name, "-q"])
        .arg(file)
        .env("CONVSTORE_DB", db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn import");
    if let Some(after) = kill_after {
        let deadline = Instant::now() + after;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = process.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = process.kill();
    }
    let output = process.wait_with_output().expect("wait import");
    if kill_after.is_none() {
        assert!(
            output.status.success(),
            "import failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output.status.success()
}

/// The `.bulk` segment files in the database.
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

/// Checks import `name` after a kill: absent or complete (head `head`),
/// no `.bulk` file left once the database is reopened, `verify` passes.
/// Returns whether it is complete, and how many `.bulk` files the reopening
/// deleted.
fn check_import(db: &Path, name: &str, head: Address, iteration: u64) -> (bool, usize) {
    let store = Store::open(db).unwrap_or_else(|e| panic!("iteration {iteration}: reopen: {e}"));
    let leftover = bulk_files(db);
    assert!(
        leftover.is_empty(),
        "iteration {iteration}: .bulk files survived the reopening: {leftover:?}"
    );
    let reclaimed = store.reclaimed_bulk_files().len();
    let Some(id) = store.find(name).expect("find import") else {
        return (false, reclaimed);
    };
    let info = store.info(&id).expect("info");
    assert_eq!(
        (info.len, info.head),
        (IMPORT_EVENTS, head),
        "iteration {iteration}: a partial import is stored"
    );
    let verified = store.verify(&id).expect("verify import");
    assert!(
        verified.is_ok(),
        "iteration {iteration}: {:?}",
        verified.err()
    );
    (true, reclaimed)
}

/// One import kill: `import-ITERATION`, killed at a random moment of an
/// import that takes about `took`, checked, and retried if it did not
/// finish.
fn import_kill(
    db: &Path,
    file: &Path,
    (head, took): (Address, Duration),
    seed: u64,
    iteration: u64,
) {
    let name = format!("import-{iteration}");
    // From 20% to 110% of an import: mostly in its second pass, where it
    // writes, and where sled's flusher (every 500 ms) may already have
    // written what an import in pieces stored so far.
    let took = took.as_micros() as u64;
    let after = took / 5 + splitmix(seed ^ 0x1111) % (took * 9 / 10 + 1);
    let after = Duration::from_micros(after);
    import(db, file, &name, Some(after));
    let (complete, reclaimed) = check_import(db, &name, head, iteration);
    if complete {
        println!("  iteration {iteration}: import killed after {after:?} had finished");
    } else {
        println!(
            "  iteration {iteration}: import killed after {after:?}: absent \
             ({reclaimed} .bulk files reclaimed); retried"
        );
        import(db, file, &name, None);
        assert!(
            check_import(db, &name, head, iteration).0,
            "iteration {iteration}: the retried import is missing"
        );
    }
}

fn main() {
    if let Ok(db) = std::env::var(CHILD_ENV) {
        child(&db);
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
    let db_text = db.to_string_lossy().into_owned();
    let exe = std::env::current_exe().expect("current exe");
    // The import every import kill interrupts, timed once uninterrupted.
    let import_file = dir.path().join("import.ndjson");
    write_import_file(&import_file);
    import(&db, &import_file, "import", None);
    // The first one also created the database; time a second.
    let timed = Instant::now();
    import(&db, &import_file, "import-timed", None);
    let took = timed.elapsed();
    let import_head = {
        let store = Store::open(&db).expect("open");
        let id = store.resolve("import").expect("the first import");
        store.info(&id).expect("info").head
    };
    println!("crash_recovery: an uninterrupted import takes {took:?}");
    let mut acked: Option<u64> = None;
    let mut every_ack = HashSet::new();
    let started = Instant::now();
    for iteration in 0..iterations {
        seed = splitmix(seed);
        if seed % 4 == 1 {
            import_kill(&db, &import_file, (import_head, took), seed, iteration);
            continue;
        }
        let batches = child_kill(&exe, &db_text, seed, iteration, &mut acked, &mut every_ack);
        if iteration % 10 == 0 {
            println!(
                "  iteration {iteration}: {batches} batches stored, last acknowledged {acked:?}"
            );
        }
    }
    let server_kills: u64 = std::env::var("CONVSTORE_CRASH_SERVER_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let server_db = dir.path().join("server-db");
    for iteration in 0..server_kills {
        seed = splitmix(seed);
        server_kill(&server_db.to_string_lossy(), seed, iteration);
    }
    // The same on PostgreSQL: a child killed mid-append, then a server.
    let mut postgres = String::from("no PostgreSQL: skipped");
    if let Some(url) = support::postgres::fresh_url() {
        let kills = (iterations / 4).max(4);
        let (mut acked, mut every_ack) = (None, HashSet::new());
        for iteration in 0..kills {
            seed = splitmix(seed);
            child_kill(&exe, &url, seed, iteration, &mut acked, &mut every_ack);
        }
        let server_url = support::postgres::fresh_url().expect("a second schema");
        for iteration in 0..(server_kills / 2).max(2) {
            seed = splitmix(seed);
            server_kill(&server_url, seed, iteration);
        }
        postgres = format!(
            "{kills} kills and {} server kills on PostgreSQL",
            (server_kills / 2).max(2)
        );
    }
    println!(
        "crash_recovery: {iterations} kills and {server_kills} server kills survived, {postgres}, in {:.1}s; test result: ok. 1 passed; 0 failed",
        started.elapsed().as_secs_f64()
    );
}

/// One kill of a child appending to `db`: checks the database after it,
/// records what the child acknowledged; returns the batches stored.
fn child_kill(
    exe: &Path,
    db: &str,
    seed: u64,
    iteration: u64,
    acked: &mut Option<u64>,
    every_ack: &mut HashSet<u64>,
) -> u64 {
    let mut process = Command::new(exe)
        .env(CHILD_ENV, db)
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
    if !seed.is_multiple_of(5) {
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
        *acked = Some(acked.map_or(k, |a| a.max(k)));
        every_ack.insert(k);
    }
    check(db, *acked, every_ack, iteration)
}

/// Events a server client appends per batch.
const SERVER_BATCH: u64 = 3;

/// The text of event `j` of batch `k` of client `c`.
fn server_text(c: usize, k: u64, j: u64) -> String {
    format!("client {c} batch {k} event {j}")
}

#[allow(clippy::format_collect)]
/// One server kill: four clients append over HTTP until the server is
/// killed; then every acknowledged batch must be in the database, whole.
fn server_kill(db: &str, seed: u64, iteration: u64) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_convstore"))
        .arg("--db")
        .arg(db)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("convstore serve starts");
    let mut url = String::new();
    BufReader::new(server.stdout.take().expect("stdout"))
        .read_line(&mut url)
        .expect("the URL");
    let url = url.trim().to_owned();
    assert!(url.starts_with("http://"), "iteration {iteration}: {url:?}");
    let acked: Vec<Arc<Mutex<Vec<u64>>>> = (0..4).map(|_| Arc::default()).collect();
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let acked = Arc::clone(&acked[c]);
            let url = format!("{url}/v1/conversations/server-{c}/events");
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(5))
                    .build();
                // Where this client's conversation ends: its next batch.
                let mut k = match agent.get(&url.replace("/events", "")).call() {
                    Ok(r) => {
                        r.into_json::<serde_json::Value>().expect("json")["events"]
                            .as_u64()
                            .expect("events")
                            / SERVER_BATCH
                    }
                    Err(_) => 0,
                };
                loop {
                    let body: String = (0..SERVER_BATCH)
                        .map(|j| {
                            format!(
                                "{{\"type\":\"user\",\"text\":\"{}\"}}\n",
                                server_text(c, k, j)
                            )
                        })
                        .collect();
                    let expected = k * SERVER_BATCH;
                    match agent
                        .post(&format!("{url}?expected_seq={expected}"))
                        .set("Content-Type", "application/x-ndjson")
                        .send_string(&body)
                    {
                        Ok(r) if r.status() == 200 || r.status() == 201 => {
                            acked.lock().expect("acked").push(k);
                            k += 1;
                        }
                        // The server is gone.
                        _ => return,
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50 + splitmix(seed) % 400));
    server.kill().expect("kill -9");
    let _ = server.wait();
    for client in clients {
        client.join().expect("client");
    }
    let store = open(db).expect("the database opens after kill -9");
    for (c, acked) in acked.iter().enumerate() {
        let acked = acked.lock().expect("acked");
        let Ok(id) = store.resolve(&format!("server-{c}")) else {
            assert!(acked.is_empty(), "iteration {iteration}: client {c} acknowledged {acked:?} but its conversation is missing");
            continue;
        };
        let len = store.info(&id).expect("info").len;
        assert_eq!(
            len % SERVER_BATCH,
            0,
            "iteration {iteration}: client {c}: a partial batch ({len} records)"
        );
        for k in acked.iter() {
            assert!(
                (k + 1) * SERVER_BATCH <= len,
                "iteration {iteration}: client {c}: batch {k} was acknowledged over HTTP but the log has {len} records"
            );
        }
        for record in store.scan(&id, 0..len).expect("scan") {
            let record = record.expect("record");
            let (k, j) = (record.seq / SERVER_BATCH, record.seq % SERVER_BATCH);
            match &record.event.kind {
                EventKind::User { text } => assert_eq!(*text, server_text(c, k, j)),
                other => panic!("iteration {iteration}: unexpected {other:?}"),
            }
        }
    }
    assert!(
        store.verify_all().expect("verify runs").is_ok(),
        "iteration {iteration}: verify fails after a server kill"
    );
    drop(store);
    if iteration.is_multiple_of(5) {
        println!(
            "  server iteration {iteration}: {} batches acknowledged this round",
            acked
                .iter()
                .map(|a| a.lock().expect("acked").len())
                .sum::<usize>()
        );
    }
}
