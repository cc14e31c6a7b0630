//! Durable single-event appends from several writers at once, on any
//! backend: appends per second in total, and latency percentiles.
//!
//! ```text
//! cargo run --release --example concurrent_appends -- LOCATION [WRITERS] [SECONDS] [own|one]
//! ```
//!
//! LOCATION is a database directory (created if missing) or a PostgreSQL
//! URL. Each of WRITERS threads (default 8) appends one event at a time,
//! durable when it returns, for SECONDS (default 10): to a conversation of
//! its own (`own`, the default) or all to one (`one`: writers that lose a
//! race plan again). The writers share one store, as a server's requests
//! do.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convstore_store::backend::postgres::{PgBackend, Setup};
use convstore_store::{AppendOptions, Event, EventKind, Store, Timestamp};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(location) = args.next() else {
        eprintln!("usage: concurrent_appends LOCATION [WRITERS] [SECONDS] [own|one]");
        std::process::exit(2)
    };
    let writers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let seconds: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10.0);
    let one = args.next().as_deref() == Some("one");
    let store = Arc::new(if location.starts_with("postgres") {
        Store::with_backend(Arc::new(
            PgBackend::connect(&location, Setup::Create).expect("connect to PostgreSQL"),
        ))
        .expect("open")
    } else {
        Store::open(&location).expect("open")
    });
    let shared = store.create_conversation(None).expect("create");
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            std::thread::spawn(move || {
                let id = if one {
                    shared
                } else {
                    store.create_conversation(None).expect("create")
                };
                let mut times = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let event = Event::new(
                        Timestamp::now(),
                        EventKind::User {
                            text: format!("writer {w} append {i}: {}", "lorem ipsum ".repeat(20)),
                        },
                    );
                    let at = Instant::now();
                    store
                        .append(&id, &[event], &AppendOptions::new())
                        .expect("append");
                    times.push(at.elapsed());
                    i += 1;
                }
                times
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut times: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("writer"))
        .collect();
    let elapsed = started.elapsed().as_secs_f64();
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    println!(
        "{writers} writers ({}) on {}: {} durable appends in {elapsed:.1} s = {:.0} appends/s; latency p50 {:.2} ms p99 {:.2} ms",
        if one { "one conversation" } else { "a conversation each" },
        store.describe(),
        times.len(),
        times.len() as f64 / elapsed,
        at(0.5),
        at(0.99)
    );
}
