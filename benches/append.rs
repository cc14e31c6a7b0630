//! Append, scan and verify throughput on the sled store, and hashing a
//! log's short texts.
//!
//! `cargo bench --bench append` runs the full grid; `-- --test` runs each
//! benchmark once (what CI does).

#![allow(missing_docs)] // criterion_group! generates an undocumented fn

use std::hint::black_box;

use convstore_store::{AppendOptions, Event, EventKind, Json, Store, Timestamp};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};

/// A deterministic conversation of `n` events of about 300 bytes, turns of
/// eight events.
fn events(n: usize) -> Vec<Event> {
    let base = 1_750_000_000_000_000i64;
    (0..n)
        .map(|i| {
            let t = Timestamp::from_micros(base + i as i64).expect("timestamp");
            let body = "lorem ipsum dolor sit amet ".repeat(2 + i % 20);
            let kind = match i % 8 {
                0 => EventKind::TurnStart,
                1 => EventKind::User { text: body },
                2 | 3 => EventKind::Reasoning { text: body },
                4 => EventKind::ToolCall {
                    id: format!("c{i}"),
                    name: "fs_read_file".into(),
                    arguments: Json::from_value(
                        &serde_json::json!({"path": format!("src/{i}.rs")}),
                    ),
                },
                5 => EventKind::ToolResult {
                    id: format!("c{}", i - 1),
                    content: body,
                    is_error: false,
                },
                _ => EventKind::Assistant { text: body },
            };
            Event::new(t, kind)
        })
        .collect()
}

fn no_sync() -> AppendOptions {
    AppendOptions::new().unsynced(true)
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    group.sample_size(10);
    for batch in [1usize, 100, 10_000] {
        let total = 10_000usize.max(batch);
        let data = events(total);
        group.throughput(Throughput::Elements(total as u64));
        group.bench_with_input(
            BenchmarkId::new("batch_then_flush", batch),
            &batch,
            |b, &batch| {
                b.iter_batched(
                    || {
                        let dir = tempfile::tempdir().expect("dir");
                        let store = Store::open(dir.path().join("db")).expect("open");
                        let id = store.create_conversation(None).expect("create");
                        (dir, store, id)
                    },
                    |(dir, store, id)| {
                        for chunk in data.chunks(batch) {
                            store.append(&id, chunk, &no_sync()).expect("append");
                        }
                        store.flush().expect("flush");
                        (dir, store)
                    },
                    BatchSize::PerIteration,
                );
            },
        );
    }
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("db")).expect("open");
    let id = store.create_conversation(None).expect("create");
    let data = events(1_000);
    let mut i = 0;
    group.throughput(Throughput::Elements(1));
    group.bench_function("single_durable", |b| {
        b.iter(|| {
            i = (i + 1) % data.len();
            store
                .append(
                    &id,
                    std::slice::from_ref(&data[i]),
                    &AppendOptions::default(),
                )
                .expect("append");
        });
    });
    group.finish();
}

fn read(c: &mut Criterion) {
    let mut group = c.benchmark_group("read");
    group.sample_size(10);
    for n in [10_000usize, 100_000] {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(dir.path().join("db")).expect("open");
        let data = events(n);
        let (id, _) = store
            .create_and_append(None, &data, &no_sync())
            .expect("append");
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("scan", n), &n, |b, _| {
            b.iter(|| {
                let count = store.scan(&id, 0..u64::MAX).expect("scan").count();
                black_box(count)
            });
        });
        group.bench_with_input(BenchmarkId::new("verify", n), &n, |b, _| {
            b.iter(|| black_box(store.verify(&id).expect("verify").is_ok()));
        });
    }
    group.finish();
}

/// Opening a store and reading a log written an event per append, as every
/// CLI command does: settled every 256 records (the default) and never
/// settled (a chunk per append, the layout before staging), side by side.
fn read_appended_one_by_one(c: &mut Criterion) {
    let mut group = c.benchmark_group("read_one_by_one");
    group.sample_size(10);
    let n = 10_000usize;
    let data = events(n);
    for (layout, settle) in [("settled", 256), ("chunk_per_append", u64::MAX)] {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("db");
        let id = {
            let store = Store::open(&path).expect("open");
            store.set_settle_records(settle);
            let id = store.create_conversation(None).expect("create");
            for event in &data {
                store
                    .append(&id, std::slice::from_ref(event), &no_sync())
                    .expect("append");
            }
            store.flush().expect("flush");
            id
        };
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::new(format!("open_scan/{layout}"), n), |b| {
            b.iter(|| {
                let store = Store::open(&path).expect("open");
                black_box(store.scan(&id, 0..u64::MAX).expect("scan").count())
            });
        });
        group.bench_function(BenchmarkId::new(format!("open_verify/{layout}"), n), |b| {
            b.iter(|| {
                let store = Store::open(&path).expect("open");
                black_box(store.verify(&id).expect("verify").is_ok())
            });
        });
    }
    group.finish();
}

/// The short texts of a log hashed one by one (the `blake3` crate) and
/// together in SIMD lanes (`convstore_lanes`): 10,000 texts of the
/// generated set's sizes (55% 50-199 B, 33% 200-449 B, 12% 450-1,024 B),
/// back to back in one buffer as in a chunk.
fn hash_texts(c: &mut Criterion) {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut bytes = Vec::new();
    let mut spans = Vec::new();
    for _ in 0..10_000 {
        let len = match next() % 100 {
            0..=54 => 50 + next() % 150,
            55..=87 => 200 + next() % 250,
            _ => 450 + next() % 575,
        } as usize;
        let start = bytes.len();
        bytes.extend((0..len).map(|_| b'a' + (next() % 26) as u8));
        spans.push(start..bytes.len());
    }
    let texts: Vec<&[u8]> = spans.iter().map(|s| &bytes[s.clone()]).collect();
    let mut out = vec![[0u8; 32]; texts.len()];
    let mut group = c.benchmark_group("hash_texts");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("one_by_one", |b| {
        b.iter(|| convstore_lanes::one_by_one(black_box(&texts), &mut out));
    });
    group.bench_function("lanes", |b| {
        b.iter(|| convstore_lanes::hash_many(black_box(&texts), &mut out));
    });
    group.finish();
}

criterion_group!(benches, append, read, read_appended_one_by_one, hash_texts);
criterion_main!(benches);
