//! A load generator for `convstore serve`, on loopback, bounded in count
//! and time. It talks HTTP/1.1 with keep-alive (ureq), one thread a client.
//!
//! ```text
//! cargo run --release --example server_load -- URL DB SCENARIO [N]
//! ```
//!
//! Scenarios (N scales the counts; defaults in brackets):
//! - `seq`: one client, N [2000] sequential durable appends of one event.
//! - `concurrent`: 16 clients on 16 conversations, N [1000] appends each.
//! - `conflict`: 16 clients on one conversation, N [100] appends each with
//!   `expected_seq`; every refusal must be a 409, the log must hold every
//!   acknowledged append once, and verify must pass.
//! - `follow`: a follower of a conversation, N [500] sequential appends;
//!   the time from sending an append to its event reaching the follower.
//! - `followers`: N [100] followers on one conversation, 200 appends; the
//!   server's resident memory before and after.
//! - `view NAME`: reads materialized view `default` of conversation NAME
//!   N [20] times; and the full projected view once, timed.
//! - `stream NAME`: 16 clients each stream the raw log of NAME at once;
//!   the server's peak memory.
//!
//! Prints one line per measure.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::{Duration, Instant};

/// Whether answers may come gzip-compressed (`GZIP=1`; default: no, as
/// curl asks, and what loopback clients want: compression costs CPU).
fn encoding() -> &'static str {
    if std::env::var_os("GZIP").is_some_and(|v| v == "1") {
        "gzip"
    } else {
        "identity"
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(600))
        .max_idle_connections_per_host(4)
        .build()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn summary(label: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{label}: n={} p50={:.3} ms p90={:.3} ms p99={:.3} ms max={:.3} ms",
        times.len(),
        percentile(&times, 0.5),
        percentile(&times, 0.9),
        percentile(&times, 0.99),
        percentile(&times, 1.0)
    );
}

fn append(agent: &ureq::Agent, url: &str, body: &str) -> Result<u16, String> {
    match agent
        .post(url)
        .set("Content-Type", "application/x-ndjson")
        .send_string(body)
    {
        Ok(r) => {
            let status = r.status();
            let _ = r.into_string();
            Ok(status)
        }
        Err(ureq::Error::Status(status, r)) => {
            let _ = r.into_string();
            Ok(status)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The server's resident and peak memory, in MiB (from /proc).
fn memory(db: &Path) -> (f64, f64) {
    let text = std::fs::read_to_string(db.join("convstore.server")).unwrap_or_default();
    let pid = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v["pid"].as_u64())
        .unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn event(i: usize) -> String {
    format!("{{\"type\":\"user\",\"text\":\"message {i}: a line of the conversation\"}}\n")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: server_load URL DB SCENARIO [ARG] [N]");
        std::process::exit(2);
    }
    let (url, db, scenario) = (&args[1], Path::new(&args[2]), args[3].as_str());
    let n =
        |at: usize, default: usize| args.get(at).and_then(|v| v.parse().ok()).unwrap_or(default);
    let tag = std::process::id();
    match scenario {
        "seq" => {
            let agent = agent();
            let target = format!("{url}/v1/conversations/seq-{tag}/events");
            append(&agent, &target, &event(0)).expect("first append");
            let times: Vec<Duration> = (0..n(4, 2000))
                .map(|i| {
                    let started = Instant::now();
                    let status = append(&agent, &target, &event(i)).expect("append");
                    assert_eq!(status, 200);
                    started.elapsed()
                })
                .collect();
            summary("seq: one client, durable appends of one event", times);
        }
        "concurrent" => {
            let each = n(4, 1000);
            let started = Instant::now();
            let all: Vec<Duration> = std::thread::scope(|scope| {
                let workers: Vec<_> = (0..16)
                    .map(|c| {
                        scope.spawn(move || {
                            let agent = agent();
                            let target = format!("{url}/v1/conversations/conc-{tag}-{c}/events");
                            (0..each)
                                .map(|i| {
                                    let t = Instant::now();
                                    let status =
                                        append(&agent, &target, &event(i)).expect("append");
                                    assert!(status == 200 || status == 201, "{status}");
                                    t.elapsed()
                                })
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .flat_map(|w| w.join().expect("client"))
                    .collect()
            });
            let elapsed = started.elapsed();
            println!(
                "concurrent: 16 clients x {each} appends in {:.2} s: {:.0} durable appends/s",
                elapsed.as_secs_f64(),
                all.len() as f64 / elapsed.as_secs_f64()
            );
            summary("concurrent: latency", all);
        }
        "conflict" => {
            let each = n(4, 100);
            let name = format!("race-{tag}");
            let base = format!("{url}/v1/conversations/{name}");
            append(&agent(), &format!("{base}/events"), &event(0)).expect("first");
            let (ok, conflicts) = std::thread::scope(|scope| {
                let workers: Vec<_> = (0..16)
                    .map(|c| {
                        let base = base.clone();
                        scope.spawn(move || {
                            let agent = agent();
                            let (mut ok, mut conflicts) = (0usize, 0usize);
                            for i in 0..each {
                                let info: serde_json::Value = agent
                                    .get(&base)
                                    .call()
                                    .expect("info")
                                    .into_json()
                                    .expect("json");
                                let seq = info["events"].as_u64().expect("events");
                                let target = format!("{base}/events?expected_seq={seq}");
                                match append(&agent, &target, &event(c * 100_000 + i))
                                    .expect("append")
                                {
                                    200 => ok += 1,
                                    409 => conflicts += 1,
                                    other => panic!("answered {other}"),
                                }
                            }
                            (ok, conflicts)
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|w| w.join().expect("client"))
                    .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
            });
            let log = agent()
                .get(&format!("{base}/events"))
                .call()
                .expect("log")
                .into_string()
                .expect("text");
            let verified: serde_json::Value = agent()
                .get(&format!("{url}/v1/verify?conversation={name}"))
                .call()
                .expect("verify")
                .into_json()
                .expect("json");
            let stored = log.lines().count() - 1;
            println!(
                "conflict: 16 clients x {each} on one conversation: {ok} stored, {conflicts} answered 409, log holds {stored} (lost: {}), verify ok: {}",
                ok as i64 - stored as i64,
                verified["ok"]
            );
            assert_eq!(stored, ok, "every acknowledged append is in the log, once");
            assert_eq!(verified["ok"], true);
        }
        "follow" => {
            let name = format!("follow-{tag}");
            let base = format!("{url}/v1/conversations/{name}");
            let agent = agent();
            append(&agent, &format!("{base}/events"), &event(0)).expect("first");
            let stream = ureq::AgentBuilder::new()
                .build()
                .get(&format!("{base}/follow"))
                .call()
                .expect("follow");
            let (tx, rx) = std::sync::mpsc::channel::<Instant>();
            let reader = std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.into_reader());
                let mut line = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line.starts_with("data: ") && tx.send(Instant::now()).is_err() {
                        return;
                    }
                }
            });
            let mut times = Vec::new();
            for i in 0..n(4, 500) {
                let sent = Instant::now();
                append(&agent, &format!("{base}/events"), &event(i)).expect("append");
                let got = rx.recv_timeout(Duration::from_secs(10)).expect("delivered");
                times.push(got.duration_since(sent));
            }
            drop(rx);
            summary("follow: append sent to event received", times);
            drop(reader);
        }
        "followers" => {
            let count = n(4, 100);
            let name = format!("many-{tag}");
            let base = format!("{url}/v1/conversations/{name}");
            append(&agent(), &format!("{base}/events"), &event(0)).expect("first");
            let before = memory(db);
            let (done_tx, done_rx) = std::sync::mpsc::channel::<usize>();
            let mut readers = Vec::new();
            for _ in 0..count {
                let stream = ureq::AgentBuilder::new()
                    .build()
                    .get(&format!("{base}/follow"))
                    .call()
                    .expect("follow");
                let done = done_tx.clone();
                readers.push(std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.into_reader());
                    let mut line = String::new();
                    let mut seen = 0;
                    while seen < 200 {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            break;
                        }
                        if line.starts_with("data: ") {
                            seen += 1;
                        }
                    }
                    let _ = done.send(seen);
                }));
            }
            let agent = agent();
            for i in 0..200 {
                append(&agent, &format!("{base}/events"), &event(i)).expect("append");
            }
            let mut complete = 0;
            for _ in 0..count {
                if done_rx.recv_timeout(Duration::from_secs(60)) == Ok(200) {
                    complete += 1;
                }
            }
            let after = memory(db);
            println!(
                "followers: {count} followers, 200 appends, {complete} followers got all 200; server RSS {:.1} MiB before, {:.1} MiB after, peak {:.1} MiB",
                before.0, after.0, after.1
            );
        }
        "view" => {
            let name = &args[4];
            let times: Vec<Duration> = (0..n(5, 20))
                .map(|_| {
                    let started = Instant::now();
                    let mut body = agent()
                        .get(&format!("{url}/v1/conversations/{name}/views/default"))
                        .set("Accept-Encoding", encoding())
                        .call()
                        .expect("view")
                        .into_reader();
                    std::io::copy(&mut body, &mut std::io::sink()).expect("read");
                    started.elapsed()
                })
                .collect();
            summary("view: materialized view default, read whole", times);
            let started = Instant::now();
            let mut body = agent()
                .get(&format!("{url}/v1/conversations/{name}/view"))
                .set("Accept-Encoding", encoding())
                .call()
                .expect("project")
                .into_reader();
            let bytes = std::io::copy(&mut body, &mut std::io::sink()).expect("read");
            println!(
                "project: the full projected view streamed: {bytes} bytes in {:.3} s",
                started.elapsed().as_secs_f64()
            );
        }
        "stream" => {
            let name = &args[4];
            let before = memory(db);
            let started = Instant::now();
            let total: u64 = std::thread::scope(|scope| {
                let workers: Vec<_> = (0..16)
                    .map(|_| {
                        scope.spawn(|| {
                            let mut body = agent()
                                .get(&format!("{url}/v1/conversations/{name}/events"))
                                .set("Accept-Encoding", encoding())
                                .call()
                                .expect("log")
                                .into_reader();
                            let mut buf = vec![0; 1 << 16];
                            let mut n = 0u64;
                            loop {
                                match body.read(&mut buf) {
                                    Ok(0) | Err(_) => return n,
                                    Ok(k) => n += k as u64,
                                }
                            }
                        })
                    })
                    .collect();
                workers.into_iter().map(|w| w.join().expect("client")).sum()
            });
            let after = memory(db);
            println!(
                "stream: 16 clients each streamed the raw log of {name}: {:.0} MiB in all in {:.1} s; server RSS {:.1} MiB before, peak {:.1} MiB",
                total as f64 / 1_048_576.0,
                started.elapsed().as_secs_f64(),
                before.0,
                after.1
            );
        }
        other => {
            eprintln!("unknown scenario {other}");
            std::process::exit(2);
        }
    }
}
