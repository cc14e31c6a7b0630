//! The storage seam: every backend keeps the guarantees the store builds
//! on (a conformance suite run on each), and two stores sharing one
//! backend, as two processes sharing a database server would, never lose
//! or misnumber an append.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::ops::Bound;
use std::sync::Arc;

use convstore_store::backend::postgres::{PgBackend, Setup};
use convstore_store::backend::{self, Backend, Batch, Condition, Keyspace, MemoryBackend};
use convstore_store::{AppendOptions, Event, EventKind, Store, StoreError, Timestamp};
use support::backends::Place;

/// The backend of each kind, fresh (a sled database reached through a
/// store opened on it).
fn each_backend() -> Vec<(Place, Arc<dyn Backend>)> {
    Place::each()
        .into_iter()
        .map(|place| {
            let backend = place.open().backend().clone();
            (place, backend)
        })
        .collect()
}

fn keys(pairs: &[(backend::Bytes, backend::Bytes)]) -> Vec<Vec<u8>> {
    pairs.iter().map(|(k, _)| k.to_vec()).collect()
}

/// A key of convstore's layout (`keys.rs`): a tag, a conversation id (16
/// bytes, every one `conv`), then `rest`. Backends may rely on the layout
/// (PostgreSQL keeps each tag's keys in a table of their own).
fn key(tag: u8, conv: u8, rest: &[u8]) -> Vec<u8> {
    let mut key = vec![tag];
    key.extend_from_slice(&[conv; 16]);
    key.extend_from_slice(rest);
    key
}

#[test]
fn every_backend_reads_scans_and_applies_as_promised() {
    // Chunks of conversation 5 (k1..k3), a lineage key before them, a
    // turn index key after them, a name and a blob.
    let k1 = key(b'c', 5, &[1]);
    let k2 = key(b'c', 5, &[2]);
    let k3 = key(b'c', 5, &[3]);
    let before = key(b'L', 9, b"");
    let after = key(b't', 1, &[0]);
    let chunks_of_5 = key(b'c', 5, b"");
    for (place, kv) in each_backend() {
        let name = place.name();
        let mut batch = Batch::new();
        for k in [&k1, &k3, &k2, &before, &after] {
            batch.put(k.clone(), k.clone());
        }
        batch.insert(Keyspace::Blobs, [7u8; 32].to_vec(), b"blob".to_vec());
        kv.apply(batch).unwrap();
        assert_eq!(
            kv.get(Keyspace::Main, &k2).unwrap().as_deref(),
            Some(&k2[..]),
            "{name}"
        );
        assert_eq!(
            kv.get(Keyspace::Blobs, &[7u8; 32]).unwrap().as_deref(),
            Some(&b"blob"[..]),
            "{name}"
        );
        assert!(
            kv.get(Keyspace::Blobs, &[8u8; 32]).unwrap().is_none(),
            "{name}"
        );
        // Ordered scans, both ways, with every kind of bound.
        let forward: Vec<_> = kv
            .scan(
                Keyspace::Main,
                backend::prefixed(chunks_of_5.clone()),
                false,
            )
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            keys(&forward),
            vec![k1.clone(), k2.clone(), k3.clone()],
            "{name}"
        );
        let back: Vec<_> = kv
            .scan(
                Keyspace::Main,
                backend::through(k1.clone(), k2.clone()),
                true,
            )
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(keys(&back), vec![k2.clone(), k1.clone()], "{name}");
        let open: Vec<_> = kv
            .scan(
                Keyspace::Main,
                (Bound::Excluded(k1.clone()), Bound::Unbounded),
                false,
            )
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            keys(&open),
            vec![k2.clone(), k3.clone(), after.clone()],
            "{name}"
        );
        let everything: Vec<_> = kv
            .scan(Keyspace::Main, (Bound::Unbounded, Bound::Unbounded), true)
            .collect::<Result<_, _>>()
            .unwrap();
        let everything: Vec<Vec<u8>> = keys(&everything)
            .into_iter()
            .filter(|k| k.len() > 1)
            .collect();
        assert_eq!(
            everything,
            vec![
                after.clone(),
                k3.clone(),
                k2.clone(),
                k1.clone(),
                before.clone()
            ],
            "{name}"
        );
        // Removal, and a conditional batch that holds, then one that does
        // not (nothing of it applied).
        let mut batch = Batch::new();
        batch.delete(k3.clone());
        kv.apply(batch).unwrap();
        assert!(!kv.contains(Keyspace::Main, &k3).unwrap(), "{name}");
        let new = key(b'C', 5, b"");
        let mut batch = Batch::new();
        batch.put(k2.clone(), b"two".to_vec());
        batch.put(new.clone(), b"x".to_vec());
        let holds = [
            Condition {
                key: k2.clone(),
                expected: Some(k2.clone()),
            },
            Condition {
                key: k3.clone(),
                expected: None,
            },
        ];
        assert!(kv.apply_if(&holds, batch.clone()).unwrap(), "{name}");
        assert!(
            !kv.apply_if(&holds, batch).unwrap(),
            "{name}: stale condition applied"
        );
        let never = b"Nnever".to_vec();
        let mut other = Batch::new();
        other.put(never.clone(), b"x".to_vec());
        assert!(!kv.apply_if(&holds, other).unwrap(), "{name}");
        assert!(!kv.contains(Keyspace::Main, &never).unwrap(), "{name}");
        assert!(kv.contains(Keyspace::Main, &new).unwrap(), "{name}");
        kv.sync().unwrap();
        assert!(kv.size_on_disk().unwrap() > 0, "{name}");
    }
}

/// Readers never see part of a batch in memory. (sled applies a batch
/// atomically for crashes, but a scan running beside it may see part of
/// it: convstore's readers bound what they read by the metadata they read
/// first, and log keys are never rewritten; see ARCHITECTURE.md.)
#[test]
fn a_batch_is_seen_whole_or_not_at_all() {
    for (place, kv) in each_backend()
        .into_iter()
        .filter(|(p, _)| p.name() == "memory")
    {
        let writer = {
            let kv = kv.clone();
            std::thread::spawn(move || {
                for round in 0u32..300 {
                    let mut batch = Batch::new();
                    for k in 0u8..20 {
                        batch.put(vec![b'a', k], round.to_be_bytes().to_vec());
                    }
                    kv.apply(batch).unwrap();
                }
            })
        };
        while !writer.is_finished() {
            let values: Vec<_> = kv
                .scan(Keyspace::Main, backend::prefixed(vec![b'a']), false)
                .collect::<Result<_, _>>()
                .unwrap();
            let rounds: std::collections::HashSet<_> =
                values.iter().map(|(_, v)| v.clone()).collect();
            assert!(rounds.len() <= 1, "{}: a torn batch", place.name());
        }
        writer.join().unwrap();
    }
}

fn user(text: &str) -> Event {
    Event::new(
        Timestamp::now(),
        EventKind::User {
            text: text.to_owned(),
        },
    )
}

/// Two stores over one backend, as two processes over one database
/// server: appends race, the backend serialises them, every append lands
/// once, in a valid chain with right seqs and turns; an append with an
/// expected head that lost the race is told so and stores nothing.
#[test]
fn stores_sharing_a_backend_serialise_their_appends() {
    let shared = Arc::new(MemoryBackend::new());
    let a = Arc::new(Store::with_backend(shared.clone()).unwrap());
    let b = Arc::new(Store::with_backend(shared).unwrap());
    race(&a, &b);
    // Two connections to one PostgreSQL database: as two processes, or
    // two machines.
    if let Some(url) = support::postgres::fresh_url() {
        let connect = || {
            let backend = PgBackend::connect(&url, Setup::Create).unwrap();
            Arc::new(Store::with_backend(Arc::new(backend)).unwrap())
        };
        race(&connect(), &connect());
    }
}

fn race(a: &Arc<Store>, b: &Arc<Store>) {
    let id = a.create_conversation(Some("shared")).unwrap();
    assert_eq!(b.resolve("shared").unwrap(), id);
    let threads: Vec<_> = [Arc::clone(a), Arc::clone(b)]
        .into_iter()
        .enumerate()
        .flat_map(|(s, store)| {
            (0..3).map(move |t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for i in 0..40 {
                        let text = format!("store {s} thread {t} event {i}");
                        store
                            .append(&id, &[user(&text)], &AppendOptions::default())
                            .unwrap();
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let info = b.info(&id).unwrap();
    assert_eq!(info.len, 240);
    assert!(a.verify(&id).unwrap().is_ok());
    let texts: std::collections::HashSet<String> = a
        .scan(&id, 0..u64::MAX)
        .unwrap()
        .map(|r| match r.unwrap().event.kind {
            EventKind::User { text } => text,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(texts.len(), 240);
    // Racing with an expected head: exactly one wins.
    let head = a.info(&id).unwrap().head;
    let options = AppendOptions::new().expecting(Some(head));
    a.append(&id, &[user("first")], &options).unwrap();
    match b.append(&id, &[user("second")], &options) {
        Err(StoreError::HeadMismatch { actual, .. }) => assert_ne!(actual, head),
        other => panic!("expected a head mismatch, got {other:?}"),
    }
    assert_eq!(b.info(&id).unwrap().len, 241);
    // A name taken through one store is taken for the other.
    a.create_conversation(Some("n")).unwrap();
    assert!(matches!(
        b.create_conversation(Some("n")),
        Err(StoreError::NameTaken { .. })
    ));
}
