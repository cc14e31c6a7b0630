//! Many threads on one store: on different conversations nothing is lost;
//! on one conversation with `expect_head`, every conflict is reported and
//! the chain stays valid.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::sync::Arc;

use support::backends::Place;

use convstore_store::{
    Address, AppendOptions, ConversationId, Event, EventKind, Store, StoreError, Timestamp,
};

fn user(text: String) -> Event {
    Event::new(Timestamp::now(), EventKind::User { text })
}

#[test]
fn threads_on_different_conversations_lose_nothing() {
    for place in Place::each() {
        let store = Arc::new(place.open());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    let id = store.create_conversation(Some(&format!("c{t}"))).unwrap();
                    for i in 0..50 {
                        let batch = vec![user(format!("{t}-{i}-a")), user(format!("{t}-{i}-b"))];
                        let options = AppendOptions::new().unsynced(i % 2 == 0);
                        store.append(&id, &batch, &options).unwrap();
                    }
                    id
                })
            })
            .collect();
        let ids: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for (t, id) in ids.iter().enumerate() {
            let texts: Vec<String> = store
                .scan(id, 0..u64::MAX)
                .unwrap()
                .map(|r| match r.unwrap().event.kind {
                    EventKind::User { text } => text,
                    other => panic!("{other:?}"),
                })
                .collect();
            let expected: Vec<String> = (0..50)
                .flat_map(|i| [format!("{t}-{i}-a"), format!("{t}-{i}-b")])
                .collect();
            assert_eq!(texts, expected);
        }
        assert_eq!(store.verify_all().unwrap().unwrap().records, 8 * 100);
    }
}

#[test]
fn racing_appends_with_expect_head_report_every_conflict() {
    for place in Place::each() {
        let store = Arc::new(place.open());
        let id = store.create_conversation(Some("shared")).unwrap();
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    let (mut won, mut conflicts) = (0u64, 0u64);
                    while won < 20 {
                        let head = store.info(&id).unwrap().head;
                        let options = AppendOptions::new().expecting(Some(head)).unsynced(true);
                        match store.append(&id, &[user(format!("{t}-{won}"))], &options) {
                            Ok(_) => won += 1,
                            Err(StoreError::HeadMismatch { expected, actual }) => {
                                assert_eq!(expected, head);
                                assert_ne!(actual, head);
                                conflicts += 1;
                            }
                            Err(other) => panic!("{other}"),
                        }
                    }
                    conflicts
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Every success is in the log exactly once, in some order, and each
        // thread's own appends are in its order.
        let texts: Vec<String> = store
            .scan(&id, 0..u64::MAX)
            .unwrap()
            .map(|r| match r.unwrap().event.kind {
                EventKind::User { text } => text,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(texts.len(), 6 * 20);
        for t in 0..6 {
            let mine: Vec<&String> = texts
                .iter()
                .filter(|x| x.starts_with(&format!("{t}-")))
                .collect();
            let expected: Vec<String> = (0..20).map(|i| format!("{t}-{i}")).collect();
            assert_eq!(mine, expected.iter().collect::<Vec<_>>());
        }
        assert!(store.verify(&id).unwrap().is_ok());
        assert_ne!(store.info(&id).unwrap().head, Address::ROOT);
    }
}

/// Every record of `id`'s log as (seq, address, event).
fn read_log(store: &Store, id: &ConversationId) -> Vec<(u64, Address, EventKind)> {
    store
        .scan(id, 0..u64::MAX)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.seq, r.address, r.event.kind)
        })
        .collect()
}

#[test]
fn reads_racing_small_appends_and_settles_see_a_consistent_log() {
    // One writer appends an event at a time, settling the staged records
    // every eight; readers scan the log meanwhile, with no lock. Every
    // read is a prefix of the final log, record for record.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path().join("db")).unwrap());
    store.set_settle_records(8);
    let id = store.create_conversation(Some("busy")).unwrap();
    // The writer waits for a read every 50 appends, so that reads and
    // appends interleave on any machine.
    let done_reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let store = Arc::clone(&store);
        let done_reads = Arc::clone(&done_reads);
        std::thread::spawn(move || {
            let options = AppendOptions::new().unsynced(true);
            for i in 0..600 {
                while done_reads.load(std::sync::atomic::Ordering::SeqCst) < i / 50 {
                    std::thread::yield_now();
                }
                store
                    .append(&id, &[user(format!("e{i}"))], &options)
                    .unwrap();
            }
        })
    };
    let mut reads = Vec::new();
    while !writer.is_finished() {
        let read = read_log(&store, &id);
        let decoded: usize = store
            .chunks(&id, 0, read.len() as u64)
            .unwrap()
            .map(|c| {
                c.unwrap()
                    .events(&store, 0, u64::MAX, |_, _, _| false)
                    .unwrap()
                    .len()
            })
            .sum();
        assert_eq!(decoded, read.len());
        reads.push(read);
        done_reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    writer.join().unwrap();
    let last = read_log(&store, &id);
    assert_eq!(last.len(), 600);
    for (i, (seq, _, kind)) in last.iter().enumerate() {
        assert_eq!(*seq, i as u64);
        assert_eq!(
            *kind,
            EventKind::User {
                text: format!("e{i}")
            }
        );
    }
    assert!(reads.len() >= 11, "the reads raced the appends");
    for read in &reads {
        assert_eq!(read[..], last[..read.len()]);
    }
    assert!(store.verify(&id).unwrap().is_ok());
}
