//! Projection: the store-backed pipeline `convstore project` runs (the
//! whole view, and the last 10 turns as `--turns` reads them), the
//! in-memory engine, resolution alone, and the reference projection at
//! small sizes (to show its cost curve), over events × overlays.
//!
//! `cargo bench --bench project` runs 10^4 and 10^5 events; with
//! `CONVSTORE_BENCH_FULL=1` also 10^6. `-- --test` runs each once (CI).

#![allow(missing_docs)] // criterion_group! generates an undocumented fn

#[path = "support.rs"]
mod support;

use convstore_store::Seq;
use std::hint::black_box;

use convstore_engine::generate::generate;
use convstore_engine::pipeline;
use convstore_projection::reference::naive_project;
use convstore_projection::{project, resolve, LogEvent, Overlay};
use convstore_store::{EventKind, Store};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use support::{project_from_store, sizes};

/// A generated conversation of `n` events and `m` overlays in a fresh store.
fn fixture(n: u64, m: u64) -> (tempfile::TempDir, Store, convstore_store::ConversationId) {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("db")).expect("open");
    let id = generate(&store, "c", n, m, 1).expect("generate");
    (dir, store, id)
}

fn load(store: &Store, id: &convstore_store::ConversationId) -> Vec<LogEvent> {
    store
        .scan(id, 0..u64::MAX)
        .expect("scan")
        .map(|r| {
            let r = r.expect("record");
            LogEvent {
                seq: r.seq,
                turn: r.turn,
                event: r.event,
            }
        })
        .collect()
}

fn projection(c: &mut Criterion) {
    let mut group = c.benchmark_group("project");
    group.sample_size(10);
    for n in sizes() {
        for m in [1u64, 100, 10_000] {
            if m * 10 > n {
                continue;
            }
            let (_dir, store, id) = fixture(n, m);
            let len = store.info(&id).expect("info").len;
            group.throughput(Throughput::Elements(n));
            group.bench_with_input(
                BenchmarkId::new(format!("store/{m}_overlays"), n),
                &n,
                |b, _| b.iter(|| project_from_store(&store, &id, len)),
            );
            // The last 10 turns, as `project --turns` reads them.
            let scope = convstore_engine::Scope { end: len };
            let last_turn = store.turn_of(&id, Seq(len - 1)).expect("turn").0;
            let turns = last_turn.saturating_sub(9)..=last_turn;
            group.bench_with_input(
                BenchmarkId::new(format!("last_10_turns/{m}_overlays"), n),
                &n,
                |b, _| {
                    b.iter(|| {
                        let (projector, seqs) =
                            pipeline::plan_turns(&store, &id, scope, turns.clone()).expect("plan");
                        let mut count = 0;
                        pipeline::stream_range(
                            &store,
                            &id,
                            seqs,
                            &projector,
                            |v| v.len(),
                            |n| {
                                count += n;
                                Ok(())
                            },
                        )
                        .expect("stream");
                        black_box(count)
                    });
                },
            );
            let events = load(&store, &id);
            group.bench_with_input(
                BenchmarkId::new(format!("memory/{m}_overlays"), n),
                &n,
                |b, _| {
                    b.iter(|| black_box(project(&events).len()));
                },
            );
            let overlays: Vec<Overlay> = events
                .iter()
                .filter_map(|e| match &e.event.kind {
                    EventKind::Compaction(c) => {
                        Some(Overlay::from_compaction(e.seq, e.event.timestamp, c))
                    }
                    _ => None,
                })
                .collect();
            let last = events.last().map(|e| e.turn);
            group.bench_with_input(
                BenchmarkId::new(format!("resolve/{m}_overlays"), n),
                &n,
                |b, _| {
                    b.iter(|| black_box(resolve(overlays.clone(), last).spans.len()));
                },
            );
        }
    }
    group.finish();

    let mut group = c.benchmark_group("reference");
    group.sample_size(10);
    for n in [1_000u64, 3_000] {
        let (_dir, store, id) = fixture(n, 100);
        let events = load(&store, &id);
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::new("naive/100_overlays", n), &n, |b, _| {
            b.iter(|| black_box(naive_project(&events).len()));
        });
        group.bench_with_input(BenchmarkId::new("engine/100_overlays", n), &n, |b, _| {
            b.iter(|| black_box(project(&events).len()));
        });
    }
    group.finish();
}

criterion_group!(benches, projection);
criterion_main!(benches);
