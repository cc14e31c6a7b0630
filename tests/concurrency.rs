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

#[test]
fn settled_records_leave_no_staged_copy_once_no_read_can_reach_it() {
    // An event at a time, settled every eight: each settle deletes the
    // staged copies it replaced, unless a read that may reach them runs;
    // then the first write after that read deletes them.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    store.set_settle_records(8);
    let id = store.create_conversation(Some("one")).unwrap();
    let options = AppendOptions::new().unsynced(true);
    let append = |i: usize| {
        store
            .append(&id, &[user(format!("e{i}"))], &options)
            .unwrap();
    };
    for i in 0..100 {
        append(i);
    }
    // 100 = 12 settles of 8 (the settling append's own record is written
    // settled), and 4 staged.
    assert_eq!(
        convstore_store::testing::staged_chunk_keys(&store, &id).unwrap(),
        4
    );
    let reading = store.scan(&id, 0..100).unwrap();
    // Three settles, each of seven staged records and its own.
    for i in 100..120 {
        append(i);
    }
    assert_eq!(
        convstore_store::testing::staged_chunk_keys(&store, &id).unwrap(),
        21,
        "the staged copies a running read may reach stay"
    );
    assert_eq!(
        reading.map(|r| r.unwrap().seq).collect::<Vec<_>>(),
        (0..100).collect::<Vec<_>>()
    );
    append(120);
    assert_eq!(
        convstore_store::testing::staged_chunk_keys(&store, &id).unwrap(),
        1
    );
    assert_eq!(read_log(&store, &id).len(), 121);
    assert!(store.verify(&id).unwrap().is_ok());
}

/// One append of a group: to which conversation, how many events (0: an
/// empty append), whether one is too large, a long text (a blob), what
/// head it expects (none, the conversation's at the round's start, a
/// wrong one) and an idempotency key.
#[derive(Debug, Clone)]
struct GroupOp {
    conv: usize,
    events: usize,
    too_large: bool,
    long: bool,
    expect: u8,
    key: Option<u8>,
}

fn group_op() -> impl proptest::strategy::Strategy<Value = GroupOp> {
    use proptest::prelude::*;
    (
        0..4usize,
        0..4usize,
        proptest::bool::weighted(0.05),
        proptest::bool::weighted(0.2),
        0..4u8,
        proptest::option::weighted(0.3, 0..3u8),
    )
        .prop_map(|(conv, events, too_large, long, expect, key)| GroupOp {
            conv,
            events,
            too_large,
            long,
            expect,
            key,
        })
}

/// The events of op `n` of a run (the same in both stores).
fn group_events(n: usize, op: &GroupOp) -> Vec<Event> {
    (0..op.events)
        .map(|i| {
            let text = if op.too_large && i == 0 {
                "x".repeat(6_000)
            } else if op.long && i == 0 {
                format!("{n}: {}", "long ".repeat(300))
            } else {
                format!("op {n} event {i}")
            };
            Event::new(
                Timestamp::from_micros(1_700_000_000_000_000 + n as i64).unwrap(),
                EventKind::User { text },
            )
        })
        .collect()
}

/// What a result says, comparable between two stores.
fn outcome(result: &Result<convstore_store::Appended, StoreError>) -> String {
    match result {
        Ok(a) => format!("ok {} {} {} {}", a.first_seq, a.count, a.head, a.replayed),
        Err(e) => format!("error {e}"),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// `Store::append_group` gives each append the result `Store::append`
    /// gives it one after the other, and stores the same logs: settles to
    /// the segment files, blobs, expected heads, idempotency keys,
    /// refusals and second appends to one conversation among them.
    #[test]
    fn a_group_of_appends_stores_what_appends_one_by_one_store(
        memory: bool,
        rounds in proptest::collection::vec(proptest::collection::vec(group_op(), 1..7), 1..6),
    ) {
        let (grouped_place, single_place) = (Place::new(memory), Place::new(memory));
        let (grouped, single) = (grouped_place.open(), single_place.open());
        let mut ids = Vec::new();
        for store in [&grouped, &single] {
            store.set_settle_records(3);
            store.set_max_event_bytes(4_096);
            ids.push(
                (0..4)
                    .map(|c| store.create_conversation(Some(&format!("c{c}"))).unwrap())
                    .collect::<Vec<_>>(),
            );
        }
        let mut n = 0;
        for round in &rounds {
            let heads: Vec<Address> = ids[1]
                .iter()
                .map(|id| single.info(id).unwrap().head)
                .collect();
            let options = |op: &GroupOp| {
                let expect = match op.expect {
                    1 => Some(heads[op.conv]),
                    2 => Some(Address::ROOT),
                    _ => None,
                };
                let key = op.key.map(|k| {
                    convstore_store::IdempotencyKey::new(&format!("key {k}"), [op.events as u8; 32])
                });
                AppendOptions::new().expecting(expect).idempotent(key).unsynced(true)
            };
            let events: Vec<Vec<Event>> = round
                .iter()
                .map(|op| {
                    n += 1;
                    group_events(n, op)
                })
                .collect();
            let items: Vec<convstore_store::GroupAppend<'_>> = round
                .iter()
                .zip(&events)
                .map(|(op, events)| convstore_store::GroupAppend {
                    id: &ids[0][op.conv],
                    events,
                    options: options(op),
                })
                .collect();
            let together: Vec<String> = grouped.append_group(&items).iter().map(outcome).collect();
            let apart: Vec<String> = round
                .iter()
                .zip(&events)
                .map(|(op, events)| outcome(&single.append(&ids[1][op.conv], events, &options(op))))
                .collect();
            proptest::prop_assert_eq!(together, apart);
        }
        grouped.flush().unwrap();
        for (a, b) in ids[0].iter().zip(&ids[1]) {
            let log = |store: &Store, id: &ConversationId| -> Vec<(u64, Address)> {
                store
                    .scan(id, 0..u64::MAX)
                    .unwrap()
                    .map(|r| {
                        let r = r.unwrap();
                        (r.seq, r.address)
                    })
                    .collect()
            };
            proptest::prop_assert_eq!(log(&grouped, a), log(&single, b));
        }
        proptest::prop_assert!(grouped.verify_all().unwrap().is_ok());
        drop(grouped);
        // Reopened, the same.
        let reopened = grouped_place.open();
        proptest::prop_assert!(reopened.verify_all().unwrap().is_ok());
    }
}
