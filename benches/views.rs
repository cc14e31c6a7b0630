//! Materialized views and forks: reading a current view against projecting
//! the log, bringing a view up to date after one appended turn, and forking
//! at the end of a log of growing length.
//!
//! `cargo bench --bench views` runs 10^4 and 10^5 events; with
//! `CONVSTORE_BENCH_FULL=1` also 10^6. `-- --test` runs each once (CI).

#![allow(missing_docs)] // criterion_group! generates an undocumented fn

#[path = "support.rs"]
mod support;

use std::hint::black_box;

use convstore_engine::generate::generate;
use convstore_engine::views;
use convstore_store::{AppendOptions, ConversationId, Event, EventKind, Store, Timestamp};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use support::{project_from_store, sizes};

fn fixture(n: u64, m: u64) -> (tempfile::TempDir, Store, ConversationId) {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("db")).expect("open");
    let id = generate(&store, "c", n, m, 1).expect("generate");
    (dir, store, id)
}

fn read_view(store: &Store, id: &ConversationId) -> u64 {
    let mut count = 0u64;
    views::read(store, id, "v", |_| {
        count += 1;
        Ok(())
    })
    .expect("read");
    black_box(count)
}

/// A current view read whole, beside `project` of the same log.
fn reads(c: &mut Criterion) {
    let mut group = c.benchmark_group("view_read");
    group.sample_size(10);
    for n in sizes() {
        for m in [100u64, 10_000] {
            if m * 10 > n {
                continue;
            }
            let (_dir, store, id) = fixture(n, m);
            views::refresh(&store, &id, "v", None).expect("build");
            group.throughput(Throughput::Elements(n));
            let label = format!("{n}x{m}");
            group.bench_function(BenchmarkId::new("project", &label), |b| {
                b.iter(|| project_from_store(&store, &id, n));
            });
            group.bench_function(BenchmarkId::new("view", &label), |b| {
                b.iter(|| read_view(&store, &id));
            });
        }
    }
    group.finish();
}

/// One turn of ten events appended, then the view brought up to date.
fn updates(c: &mut Criterion) {
    let mut group = c.benchmark_group("view_update");
    group.sample_size(10);
    let now = Timestamp::now();
    let turn: Vec<Event> = std::iter::once(Event::new(now, EventKind::TurnStart))
        .chain((0..9).map(|i| {
            Event::new(
                now,
                EventKind::Assistant {
                    text: format!("part {i} of an answer"),
                },
            )
        }))
        .collect();
    for n in sizes() {
        let (_dir, store, id) = fixture(n, 100);
        views::refresh(&store, &id, "v", None).expect("build");
        group.bench_function(BenchmarkId::new("append_turn", n), |b| {
            b.iter_batched(
                || {
                    let options = AppendOptions::new().unsynced(true);
                    store.append(&id, &turn, &options).expect("append");
                },
                |()| views::refresh(&store, &id, "v", None).expect("refresh"),
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

/// A fork at the end of a log: constant in the log's length.
fn forks(c: &mut Criterion) {
    let mut group = c.benchmark_group("fork");
    group.sample_size(10);
    let mut lengths = vec![10];
    lengths.extend(sizes());
    for n in lengths {
        let (_dir, store, id) = fixture(n, 0);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| store.fork(&id, n, None, &[]).expect("fork"));
        });
    }
    group.finish();
}

criterion_group!(benches, reads, updates, forks);
criterion_main!(benches);
