//! convstore against what a user would otherwise pick, in the same run:
//! one JSON file per conversation (JP's layout: append = rewrite the file;
//! project = load it and project in memory) and an SQLite table (WAL; one
//! row per event holding its JSON; project = select all, parse, project).
//! The alternatives get convstore's own in-memory engine to project, so
//! only storage is compared.
//!
//! `cargo bench --bench alternatives` runs 10^4 and 10^5 events; with
//! `CONVSTORE_BENCH_FULL=1` also 10^6. `-- --test` runs each once (CI).

#![allow(missing_docs)] // criterion_group! generates an undocumented fn

#[path = "support.rs"]
mod support;

use std::hint::black_box;
use std::path::Path;

use convstore_engine::generate::generate;
use convstore_projection::{project, LogEvent};
use convstore_store::json::{event_to_string, parse_event};
use convstore_store::{AppendOptions, Event, Store, Timestamp};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use support::{project_from_store, sizes};

/// The events of a generated conversation with 1% compactions.
fn events(n: u64) -> Vec<Event> {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("db")).expect("open");
    let id = generate(&store, "c", n, n / 100, 1).expect("generate");
    store
        .scan(&id, 0..u64::MAX)
        .expect("scan")
        .map(|r| r.expect("record").event)
        .collect()
}

mod json_file {
    use super::{event_to_string, Event, Path, Timestamp};

    pub fn write(path: &Path, events: &[Event]) {
        let array: Vec<serde_json::Value> = events
            .iter()
            .map(|e| serde_json::from_str(&event_to_string(e)).expect("json"))
            .collect();
        std::fs::write(path, serde_json::to_vec(&array).expect("serialize")).expect("write");
    }

    pub fn read(path: &Path) -> Vec<Event> {
        let array: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(path).expect("read")).expect("parse");
        array
            .into_iter()
            .map(|v| convstore_store::json::event_from_value(v, Timestamp::now()).expect("event"))
            .collect()
    }
}

mod sqlite {
    use super::{event_to_string, parse_event, Event, Path, Timestamp};

    pub fn open(path: &Path) -> rusqlite::Connection {
        let db = rusqlite::Connection::open(path).expect("sqlite");
        db.pragma_update(None, "journal_mode", "WAL").expect("wal");
        db.pragma_update(None, "synchronous", "FULL").expect("sync");
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, json TEXT NOT NULL)",
        )
        .expect("table");
        db
    }

    pub fn insert(db: &mut rusqlite::Connection, first: usize, events: &[Event]) {
        let tx = db.transaction().expect("tx");
        {
            let mut stmt = tx
                .prepare_cached("INSERT INTO events (seq, json) VALUES (?1, ?2)")
                .expect("prepare");
            for (i, e) in events.iter().enumerate() {
                stmt.execute(rusqlite::params![(first + i) as i64, event_to_string(e)])
                    .expect("insert");
            }
        }
        tx.commit().expect("commit");
    }

    pub fn read(db: &rusqlite::Connection) -> Vec<Event> {
        let mut stmt = db
            .prepare("SELECT json FROM events ORDER BY seq")
            .expect("prepare");
        let rows = stmt
            .query_map([], |row| row.get::<_, String>(0))
            .expect("query");
        rows.map(|r| parse_event(&r.expect("row"), Timestamp::now()).expect("event"))
            .collect()
    }
}

fn alternatives(c: &mut Criterion) {
    let mut group = c.benchmark_group("alternatives");
    group.sample_size(10);
    for n in sizes() {
        let data = events(n);
        group.throughput(Throughput::Elements(n));

        // Ingest everything, durable at the end.
        group.bench_with_input(BenchmarkId::new("ingest/convstore", n), &n, |b, _| {
            b.iter_batched(
                || tempfile::tempdir().expect("dir"),
                |dir| {
                    let store = Store::open(dir.path().join("db")).expect("open");
                    let options = AppendOptions::new().unsynced(true);
                    let id = store.create_conversation(None).expect("create");
                    for batch in data.chunks(10_000) {
                        store.append(&id, batch, &options).expect("append");
                    }
                    store.flush().expect("flush");
                    dir
                },
                BatchSize::PerIteration,
            );
        });
        group.bench_with_input(BenchmarkId::new("ingest/sqlite", n), &n, |b, _| {
            b.iter_batched(
                || tempfile::tempdir().expect("dir"),
                |dir| {
                    let mut db = sqlite::open(&dir.path().join("db.sqlite"));
                    for (i, batch) in data.chunks(10_000).enumerate() {
                        sqlite::insert(&mut db, i * 10_000, batch);
                    }
                    dir
                },
                BatchSize::PerIteration,
            );
        });
        group.bench_with_input(BenchmarkId::new("ingest/json_file", n), &n, |b, _| {
            b.iter_batched(
                || tempfile::tempdir().expect("dir"),
                |dir| {
                    json_file::write(&dir.path().join("events.json"), &data);
                    dir
                },
                BatchSize::PerIteration,
            );
        });

        // Stores holding the n events, for appending one more and projecting.
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(dir.path().join("db")).expect("open");
        let (id, _) = store
            .create_and_append(None, &data, &AppendOptions::default())
            .expect("append");
        let mut db = sqlite::open(&dir.path().join("db.sqlite"));
        sqlite::insert(&mut db, 0, &data);
        let file = dir.path().join("events.json");
        json_file::write(&file, &data);
        let one = data[data.len() / 2].clone();

        group.throughput(Throughput::Elements(n));
        let len = store.info(&id).expect("info").len;
        group.bench_with_input(BenchmarkId::new("project/convstore", n), &n, |b, _| {
            b.iter(|| project_from_store(&store, &id, len));
        });
        group.bench_with_input(BenchmarkId::new("project/sqlite", n), &n, |b, _| {
            b.iter(|| black_box(project(&LogEvent::sequence(sqlite::read(&db))).len()));
        });
        group.bench_with_input(BenchmarkId::new("project/json_file", n), &n, |b, _| {
            b.iter(|| black_box(project(&LogEvent::sequence(json_file::read(&file))).len()));
        });
        // Last: each iteration adds an event to the stores above.
        group.throughput(Throughput::Elements(1));
        group.bench_with_input(BenchmarkId::new("append_one/convstore", n), &n, |b, _| {
            b.iter(|| {
                store
                    .append(&id, std::slice::from_ref(&one), &AppendOptions::default())
                    .expect("append")
            });
        });
        let mut next = n as usize * 2;
        group.bench_with_input(BenchmarkId::new("append_one/sqlite", n), &n, |b, _| {
            b.iter(|| {
                next += 1;
                sqlite::insert(&mut db, next, std::slice::from_ref(&one));
            });
        });
        group.bench_with_input(BenchmarkId::new("append_one/json_file", n), &n, |b, _| {
            b.iter(|| {
                let mut all = json_file::read(&file);
                all.push(one.clone());
                json_file::write(&file, &all);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, alternatives);
criterion_main!(benches);
