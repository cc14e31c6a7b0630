//! `/metrics` in the Prometheus text format: requests and their latencies
//! by route, appends, flushes and the size of their groups, connections,
//! requests in flight and followers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A histogram with fixed upper bounds.
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    /// The sum of observations, in millionths.
    sum_micro: AtomicU64,
    count: AtomicU64,
}

const SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];
const SIZES: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micro: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, value: f64) {
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            if value <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micro
            .fetch_add((value * 1e6) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let total = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {total}");
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(
            out,
            "{name}_sum{braces} {}",
            self.sum_micro.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count{braces} {total}");
    }
}

/// The server's metrics.
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    /// Append requests answered with success.
    pub appends: AtomicU64,
    /// Events those appends stored.
    pub appended_events: AtomicU64,
    /// Appends refused because the head or length was not the expected one.
    pub conflicts: AtomicU64,
    /// Appends answered from the idempotency record of an earlier one.
    pub idempotent_replays: AtomicU64,
    /// Group commit rounds.
    pub flushes: AtomicU64,
    flush_seconds: Histogram,
    group_size: Histogram,
    /// Open connections.
    pub connections: AtomicU64,
    /// Connections refused at the limit.
    pub refused_connections: AtomicU64,
    /// Requests being handled.
    pub in_flight: AtomicU64,
    /// Requests refused at the in-flight limit.
    pub refused_requests: AtomicU64,
    /// Open follow streams.
    pub followers: AtomicU64,
    /// Times a follower was told it fell behind.
    pub followers_behind: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Mutex::new(BTreeMap::new()),
            latency: Mutex::new(BTreeMap::new()),
            appends: AtomicU64::new(0),
            appended_events: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            idempotent_replays: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            flush_seconds: Histogram::new(SECONDS),
            group_size: Histogram::new(SIZES),
            connections: AtomicU64::new(0),
            refused_connections: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            refused_requests: AtomicU64::new(0),
            followers: AtomicU64::new(0),
            followers_behind: AtomicU64::new(0),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A label value with `\`, `"` and newlines escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Counts a request answered with `status` after `elapsed` (until its
    /// headers: a stream's body is not timed).
    pub fn request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        *lock(&self.requests)
            .entry((method.to_owned(), route.to_owned(), status))
            .or_insert(0) += 1;
        lock(&self.latency)
            .entry(route.to_owned())
            .or_insert_with(|| Histogram::new(SECONDS))
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one group commit round of `group` writers.
    pub fn flush(&self, group: usize, elapsed: Duration) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.group_size.observe(group as f64);
        self.flush_seconds.observe(elapsed.as_secs_f64());
    }

    /// The text format.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        out.push_str("# HELP convstore_http_requests_total Requests answered, by method, route and status.\n# TYPE convstore_http_requests_total counter\n");
        for ((method, route, status), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "convstore_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{status}\"}} {n}",
                label(method),
                label(route)
            );
        }
        out.push_str("# HELP convstore_http_request_duration_seconds Time to answer a request (to its headers; a streamed body is not timed).\n# TYPE convstore_http_request_duration_seconds histogram\n");
        for (route, histogram) in lock(&self.latency).iter() {
            histogram.write(
                &mut out,
                "convstore_http_request_duration_seconds",
                &format!("route=\"{}\"", label(route)),
            );
        }
        let counters = [
            (
                "convstore_appends_total",
                "Append requests stored and acknowledged.",
                &self.appends,
            ),
            (
                "convstore_appended_events_total",
                "Events stored by acknowledged appends.",
                &self.appended_events,
            ),
            (
                "convstore_append_conflicts_total",
                "Appends refused: the head or length was not the expected one.",
                &self.conflicts,
            ),
            (
                "convstore_idempotent_replays_total",
                "Appends answered with the result of an earlier request with the same Idempotency-Key.",
                &self.idempotent_replays,
            ),
            (
                "convstore_flushes_total",
                "Group commit rounds: one durable flush each.",
                &self.flushes,
            ),
            (
                "convstore_refused_connections_total",
                "Connections refused at --max-connections.",
                &self.refused_connections,
            ),
            (
                "convstore_refused_requests_total",
                "Requests refused at --max-in-flight.",
                &self.refused_requests,
            ),
            (
                "convstore_followers_behind_total",
                "Times a follower was told it fell behind.",
                &self.followers_behind,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        let gauges = [
            (
                "convstore_connections",
                "Open connections.",
                &self.connections,
            ),
            (
                "convstore_requests_in_flight",
                "Requests being handled.",
                &self.in_flight,
            ),
            (
                "convstore_followers",
                "Open follow streams.",
                &self.followers,
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP convstore_flush_duration_seconds Time of one group commit flush.\n# TYPE convstore_flush_duration_seconds histogram\n");
        self.flush_seconds
            .write(&mut out, "convstore_flush_duration_seconds", "");
        out.push_str("# HELP convstore_flush_group_size Writes made durable by one flush.\n# TYPE convstore_flush_group_size histogram\n");
        self.group_size
            .write(&mut out, "convstore_flush_group_size", "");
        out
    }
}
