//! Latency of single-event durable appends, as percentiles.
//!
//! ```text
//! cargo run --release --example append_latency -- [EVENTS] [APPENDS] [DIR | postgres://...]
//! ```
//!
//! Fills a store in `DIR` (default: a temporary directory; or a
//! PostgreSQL database, given by URL) with `EVENTS` events (default
//! 100,000) in batches, then times `APPENDS` (default 2,000) appends of
//! one event each, durable when they return. Beside them, on the same file
//! system in the same run, it times the floor any durable append pays
//! there: a 300-byte `write` plus `fdatasync` on a plain file. Criterion
//! reports means; the product's goal is a median, hence this harness.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use convstore_store::backend::postgres::{PgBackend, Setup};
use convstore_store::{AppendOptions, Event, EventKind, Store, Timestamp};

fn main() {
    let mut args = std::env::args().skip(1);
    let events: u64 = parse(args.next(), 100_000);
    let appends: usize = parse(args.next(), 2_000).max(1);
    let temporary = tempfile::tempdir().expect("temporary directory");
    let given = args.next();
    let url = given.clone().filter(|g| g.starts_with("postgres"));
    let dir = match (&given, &url) {
        (Some(dir), None) => dir.into(),
        _ => temporary.path().to_path_buf(),
    };
    let store = match &url {
        Some(url) => Store::with_backend(std::sync::Arc::new(
            PgBackend::connect(url, Setup::Create).expect("connect to PostgreSQL"),
        ))
        .expect("open the store"),
        None => Store::open(dir.join("db")).expect("open the store"),
    };
    let id = store.create_conversation(None).expect("create");
    let batch = AppendOptions::new().unsynced(true);
    for start in (0..events).step_by(10_000) {
        let chunk: Vec<Event> = (start..events.min(start + 10_000)).map(event).collect();
        store.append(&id, &chunk, &batch).expect("fill");
    }
    store.flush().expect("flush");

    let mut durable = Vec::with_capacity(appends);
    let mut unsynced = Vec::with_capacity(appends);
    let mut flush = Vec::with_capacity(appends);
    for i in 0..appends as u64 {
        let one = [event(events + 2 * i)];
        let started = Instant::now();
        store
            .append(&id, &one, &AppendOptions::default())
            .expect("append");
        durable.push(started.elapsed());

        let one = [event(events + 2 * i + 1)];
        let started = Instant::now();
        store.append(&id, &one, &batch).expect("append");
        let applied = Instant::now();
        store.flush().expect("flush");
        unsynced.push(applied - started);
        flush.push(applied.elapsed());
    }
    let floor = disk_floor(&dir, appends);

    println!(
        "store of {events} events, {appends} single-event appends, in {}",
        store.describe()
    );
    report("durable append", durable);
    report("  apply (no sync)", unsynced);
    report("  then flush", flush);
    report("write + fdatasync", floor);
}

fn parse<T: std::str::FromStr>(arg: Option<String>, default: T) -> T {
    let Some(arg) = arg else { return default };
    arg.parse().unwrap_or_else(|_| {
        eprintln!("append_latency: {arg:?} is not a count; usage: [EVENTS] [APPENDS] [DIR]");
        std::process::exit(2)
    })
}

/// Event `i` of a conversation of about 300-byte events, turns of eight.
fn event(i: u64) -> Event {
    let t = Timestamp::from_micros(1_750_000_000_000_000 + i as i64).expect("timestamp");
    let text = format!(
        "{i} {}",
        "lorem ipsum dolor sit amet ".repeat(2 + (i % 20) as usize)
    );
    let kind = match i % 8 {
        0 => EventKind::TurnStart,
        1 => EventKind::User { text },
        2 => EventKind::Reasoning { text },
        _ => EventKind::Assistant { text },
    };
    Event::new(t, kind)
}

/// `n` durable 300-byte appends to a plain file in `dir`.
fn disk_floor(dir: &Path, n: usize) -> Vec<Duration> {
    let path = dir.join("floor.bin");
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("floor file");
    let bytes = [b'x'; 300];
    let times = (0..n)
        .map(|_| {
            let started = Instant::now();
            file.write_all(&bytes).expect("write");
            file.sync_data().expect("fdatasync");
            started.elapsed()
        })
        .collect();
    drop(file);
    std::fs::remove_file(path).expect("remove floor file");
    times
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    println!(
        "{what:<20} p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms",
        at(0.5),
        at(0.9),
        at(0.99)
    );
}
