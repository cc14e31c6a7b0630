//! Deleting conversations (`Store::delete`): every key under them goes,
//! texts other conversations hold stay, forks are refused unless deleted
//! with their parent, segment files holding only deleted records go, and
//! a deletion cut short after the batch that decided it is finished by
//! the next open. On every backend.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use convstore_store::backend::{self, Keyspace};
use convstore_store::{
    testing, AppendOptions, BlobHash, BulkTarget, ConversationId, Event, EventKind, Store,
    StoreError, Timestamp,
};
use support::backends::Place;

fn user(text: &str) -> Event {
    Event::new(
        Timestamp::now(),
        EventKind::User {
            text: text.to_owned(),
        },
    )
}

fn append(store: &Store, name: &str, texts: &[&str]) -> ConversationId {
    let events: Vec<Event> = texts.iter().map(|t| user(t)).collect();
    store
        .create_and_append(Some(name), &events, &AppendOptions::default())
        .unwrap()
        .0
}

/// Keys of the main keyspace that hold `id` where every per-conversation
/// key holds it (after the tag byte).
fn keys_of(store: &Store, id: &ConversationId) -> Vec<Vec<u8>> {
    store
        .backend()
        .scan(Keyspace::Main, backend::prefixed(Vec::new()), false)
        .map(|pair| pair.unwrap().0.to_vec())
        .filter(|key| key.get(1..17) == Some(id.as_bytes().as_slice()))
        .collect()
}

fn has_blob(store: &Store, text: &str) -> bool {
    store
        .backend()
        .contains(Keyspace::Blobs, BlobHash::of(text.as_bytes()).as_bytes())
        .unwrap()
}

fn ok(store: &Store) {
    let report = store.verify_all().unwrap().unwrap();
    assert_eq!(
        report.conversations as usize,
        store.conversations().unwrap().len()
    );
}

#[test]
fn a_deleted_conversation_leaves_nothing_and_the_others_stay() {
    let own = "only in a: ".repeat(200);
    let shared = "in a and b: ".repeat(200);
    for place in Place::each() {
        let store = place.open();
        let server = store.backend().is_server();
        let a = append(&store, "a", &["hello", &own, &shared]);
        let b = append(&store, "b", &[&shared, "bye"]);
        let (fork, _) = store.fork(&a, 2, Some("a-fork"), &[user("mine")]).unwrap();
        let (grandchild, _) = store.fork(&fork, 3, None, &[user("deeper")]).unwrap();

        // A parent with forks is refused alone, and nothing changes.
        match store.delete(&a, false) {
            Err(StoreError::HasForks {
                conversation,
                forks,
            }) => {
                assert_eq!(conversation, "a");
                assert_eq!(forks, vec!["a-fork".to_owned(), grandchild.hex()]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(store.info(&a).unwrap().len, 3);
        ok(&store);

        // A fork alone goes without touching its parent.
        let gone = store.delete(&grandchild, false).unwrap();
        assert_eq!(gone.conversations.len(), 1);
        assert_eq!(gone.conversations[0].parent, Some(fork));
        assert!(keys_of(&store, &grandchild).is_empty());
        ok(&store);

        let gone = store.delete(&a, true).unwrap();
        let ids: Vec<ConversationId> = gone.conversations.iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![a, fork]);
        assert_eq!(gone.conversations[0].len, 3);
        for id in [a, fork] {
            assert!(keys_of(&store, &id).is_empty(), "server: {server}");
            assert!(matches!(
                store.info(&id),
                Err(StoreError::NoSuchConversation { .. })
            ));
        }
        assert_eq!(store.find_name("a").unwrap(), None);
        assert_eq!(store.find_name("a-fork").unwrap(), None);
        // A server's blobs stay (other processes' appends may rely on
        // them); elsewhere the text only `a` held goes.
        assert_eq!(has_blob(&store, &own), server);
        assert_eq!(gone.blobs, u64::from(!server));
        assert!(has_blob(&store, &shared));
        let texts: Vec<String> = store
            .scan(&b, 0..2)
            .unwrap()
            .map(|r| match r.unwrap().event.kind {
                EventKind::User { text } => text,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(texts, vec![shared.clone(), "bye".to_owned()]);
        ok(&store);

        // The name is free again, and the database opens as it is.
        append(&store, "a", &["again"]);
        drop(store);
        let store = place.open();
        assert_eq!(store.conversations().unwrap().len(), 2);
        ok(&store);
    }
}

#[test]
fn a_database_whose_every_conversation_was_deleted_opens_empty() {
    for place in Place::each() {
        let store = place.open();
        let a = append(&store, "a", &["one", "two"]);
        store.delete(&a, false).unwrap();
        assert!(store.conversations().unwrap().is_empty());
        drop(store);
        // The sled backend's state file no longer counts it: an open that
        // expected a conversation would refuse the database.
        let store = place.open();
        assert!(store.conversations().unwrap().is_empty());
        append(&store, "a", &["three"]);
        ok(&store);
    }
}

#[test]
fn a_deletion_cut_short_is_finished_when_the_database_opens() {
    let own = "only in a: ".repeat(200);
    for place in Place::each() {
        let store = place.open();
        let server = store.backend().is_server();
        let a = append(&store, "a", &["hello", &own]);
        let b = append(&store, "b", &["kept"]);
        testing::decide_deletion(&store, &a).unwrap();
        // Decided: no reader finds it, though its keys are still there.
        assert!(store.find_name("a").unwrap().is_none());
        assert!(!keys_of(&store, &a).is_empty());
        drop(store);
        let store = place.open();
        assert!(keys_of(&store, &a).is_empty());
        assert_eq!(has_blob(&store, &own), server);
        assert_eq!(store.info(&b).unwrap().len, 1);
        ok(&store);
    }
}

/// A reader that found a conversation and then misses its chunks, taken
/// by a delete meanwhile, is told the conversation is gone, not that the
/// database is damaged; while the conversation is there, a missing chunk
/// is damage.
#[test]
fn a_chunk_a_delete_took_under_a_reader_says_the_conversation_is_gone() {
    for place in Place::each() {
        let store = place.open();
        store.set_settle_records(1);
        let [a, b] = ["a", "b"].map(|name| append(&store, name, &["hello", "world"]));
        testing::load_settled_chunk(&store, &a, 0).unwrap();
        let first = testing::drop_a_chunk(&store, &b, 0).unwrap().unwrap();
        let damaged = testing::load_settled_chunk(&store, &b, first).unwrap_err();
        assert!(matches!(damaged, StoreError::Corrupt { .. }), "{damaged}");
        testing::decide_deletion(&store, &a).unwrap();
        let first = testing::drop_a_chunk(&store, &a, 0).unwrap().unwrap();
        let gone = testing::load_settled_chunk(&store, &a, first).unwrap_err();
        assert!(
            matches!(gone, StoreError::NoSuchConversation { .. }),
            "{gone}"
        );
    }
}

#[test]
fn segment_files_holding_only_deleted_records_are_removed() {
    let place = Place::new(false);
    let store = place.open();
    store.set_bulk_memory_bytes(1 << 16);
    let long = |i: usize| format!("{i} {}", "x".repeat(3000));
    let mut bulk = store
        .begin_bulk(
            BulkTarget::New { name: Some("big") },
            &AppendOptions::default(),
        )
        .unwrap();
    let events: Vec<Event> = (0..2000).map(|i| user(&long(i))).collect();
    bulk.push(&events).unwrap();
    let (big, _) = bulk.commit().unwrap();
    let small = append(&store, "small", &["one"]);
    let dir = store.path().unwrap().join("segments");
    let files = || std::fs::read_dir(&dir).unwrap().count();
    assert!(files() > 0);
    let before = store.size_on_disk().unwrap();
    let gone = store.delete(&big, false).unwrap();
    assert_eq!(gone.blobs, 2000);
    assert!(gone.segment_files > 0);
    assert!(gone.segment_bytes > 5_500_000, "{gone:?}");
    assert_eq!(files(), 0);
    let after = store.size_on_disk().unwrap();
    assert!(after + 5_500_000 < before, "{before} -> {after}");
    ok(&store);
    // Appends go on in a new file.
    store.set_segment_min_bytes(0);
    store
        .append(&small, &[user(&long(7))], &AppendOptions::default())
        .unwrap();
    assert_eq!(files(), 1);
    drop(store);
    let store = place.open();
    assert_eq!(store.info(&small).unwrap().len, 2);
    ok(&store);
}

/// A deletion that empties two segment files moves the bodies other
/// conversations hold out of the first into neither: the second, current
/// file, emptied after it, would take them with it.
#[test]
fn bodies_moved_out_of_one_emptied_file_do_not_land_in_another() {
    let place = Place::new(false);
    let store = place.open();
    store.set_segment_min_bytes(0);
    store.set_bulk_memory_bytes(1 << 12);
    let long = |tag: &str, i: usize| format!("{tag} {i} {}", "x".repeat(2000));
    let texts = |tag: &str| -> Vec<String> { (0..50).map(|i| long(tag, i)).collect() };
    let (x, y) = (texts("x"), texts("y"));
    // x and y in segment file 1...
    let doomed = append(
        &store,
        "x",
        &x.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let kept = append(
        &store,
        "y",
        &y.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    // ...then x again, through a bulk append: file 2, where appends go on.
    let mut bulk = store
        .begin_bulk(BulkTarget::Existing(doomed), &AppendOptions::default())
        .unwrap();
    let more: Vec<Event> = (0..50).map(|i| user(&long("x2", i))).collect();
    bulk.push(&more).unwrap();
    bulk.commit().unwrap();
    let dir = store.path().unwrap().join("segments");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    let gone = store.delete(&doomed, false).unwrap();
    assert_eq!(gone.segment_files, 2, "{gone:?}");
    let read: Vec<String> = (0..50)
        .map(|seq| match store.record(&kept, seq).unwrap().event.kind {
            EventKind::User { text } => text,
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(read, y);
    ok(&store);
}

/// An operation of the model test.
#[derive(Debug, Clone)]
enum Op {
    /// Appends texts (indexes into the pool) to conversation `c`, in
    /// sled (`false`) or the segment files (`true`).
    Append(usize, Vec<usize>, bool),
    /// Forks conversation `c` at a fraction of its length.
    Fork(usize, u8),
    /// Deletes conversation `c`, with its forks or not.
    Delete(usize, bool),
    /// Redacts the text of record `k` (modulo its length) of conversation
    /// `c`.
    Redact(usize, usize),
    /// Drops the payloads of conversation `c`'s own records whose seq is
    /// `r` modulo `m` (a retention pass, `Store::drop_payloads`).
    Gc(usize, usize, usize),
    /// Opens the database again.
    Reopen,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..4usize, proptest::collection::vec(0..8usize, 1..5), any::<bool>())
            .prop_map(|(c, t, s)| Op::Append(c, t, s)),
        2 => (0..4usize, any::<u8>()).prop_map(|(c, f)| Op::Fork(c, f)),
        2 => (0..4usize, any::<bool>()).prop_map(|(c, w)| Op::Delete(c, w)),
        2 => (0..4usize, 0..64usize).prop_map(|(c, k)| Op::Redact(c, k)),
        2 => (0..4usize, 1..4usize, 0..4usize).prop_map(|(c, m, r)| Op::Gc(c, m, r % m)),
        1 => Just(Op::Reopen),
    ]
}

/// Texts appended: short ones stay in the records, long ones (over 1 KiB)
/// are blobs shared by every record that holds them.
fn pool(i: usize) -> String {
    if i.is_multiple_of(2) {
        format!("short {i}")
    } else {
        format!("long {i} {}", "y".repeat(1500 + i))
    }
}

/// A conversation of the model: its name, parent, and records.
#[derive(Debug, Clone)]
struct Modelled {
    name: String,
    id: ConversationId,
    parent: Option<usize>,
    /// Records it shares with its parent.
    at: usize,
    texts: Vec<Record>,
}

/// A record of the model: an appended text (an index into the model's
/// texts, which a fork shares with its parent, so a redaction through
/// either shows in both), or a redaction event.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Record {
    Text(usize),
    Redaction,
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Appends, forks, deletes, redactions, retention passes and reopens
    /// against a model:
    /// after each step the store holds exactly the model's conversations
    /// with their texts (a redacted one `[redacted]` in every conversation
    /// sharing the record, a redaction event after it in the conversation
    /// it was asked of), verifies, and (but on a database server) holds
    /// exactly the blobs of the long texts not redacted.
    #[test]
    fn deletes_match_a_model(ops in proptest::collection::vec(op(), 1..24), memory: bool) {
        let place = Place::new(memory);
        let mut store = place.open();
        let mut model: Vec<Option<Modelled>> = Vec::new();
        // Every text appended, and whether it was redacted.
        let mut written: Vec<(String, bool)> = Vec::new();
        let mut named = 0;
        for op in ops {
            let live: Vec<usize> = (0..model.len()).filter(|&i| model[i].is_some()).collect();
            match op {
                Op::Append(c, texts, segments) => {
                    store.set_segment_min_bytes(if segments { 0 } else { u64::MAX });
                    let texts: Vec<String> = texts.into_iter().map(pool).collect();
                    let events: Vec<Event> = texts.iter().map(|t| user(t)).collect();
                    let first = written.len();
                    written.extend(texts.into_iter().map(|t| (t, false)));
                    let texts: Vec<Record> = (first..written.len()).map(Record::Text).collect();
                    if let Some(&i) = live.get(c) {
                        let m = model[i].as_mut().unwrap();
                        store.append(&m.id, &events, &AppendOptions::default()).unwrap();
                        m.texts.extend(texts);
                    } else {
                        named += 1;
                        let name = format!("c{named}");
                        let (id, _) = store
                            .create_and_append(Some(&name), &events, &AppendOptions::default())
                            .unwrap();
                        model.push(Some(Modelled { name, id, parent: None, at: 0, texts }));
                    }
                }
                Op::Fork(c, fraction) => {
                    if let Some(&i) = live.get(c) {
                        let parent = model[i].clone().unwrap();
                        let at = parent.texts.len() * usize::from(fraction) / 255;
                        named += 1;
                        let name = format!("c{named}");
                        let (id, _) = store.fork(&parent.id, at as u64, Some(&name), &[]).unwrap();
                        model.push(Some(Modelled {
                            name,
                            id,
                            parent: Some(i),
                            at,
                            texts: parent.texts[..at].to_vec(),
                        }));
                    }
                }
                Op::Delete(c, with_forks) => {
                    if let Some(&i) = live.get(c) {
                        // Its descendants in the model.
                        let mut doomed = vec![i];
                        let mut k = 0;
                        while k < doomed.len() {
                            let p = doomed[k];
                            for (j, m) in model.iter().enumerate() {
                                if m.as_ref().is_some_and(|m| m.parent == Some(p)) {
                                    doomed.push(j);
                                }
                            }
                            k += 1;
                        }
                        let id = model[i].as_ref().unwrap().id;
                        match store.delete(&id, with_forks) {
                            Ok(gone) => {
                                proptest::prop_assert!(with_forks || doomed.len() == 1);
                                proptest::prop_assert_eq!(gone.conversations.len(), doomed.len());
                                for j in doomed {
                                    model[j] = None;
                                }
                            }
                            Err(StoreError::HasForks { .. }) => {
                                proptest::prop_assert!(!with_forks && doomed.len() > 1);
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                Op::Redact(c, k) => {
                    if let Some(&i) = live.get(c).filter(|&&i| !model[i].as_ref().unwrap().texts.is_empty()) {
                        let m = model[i].as_mut().unwrap();
                        let seq = k % m.texts.len();
                        let done = store.redact(&m.id, seq as u64, None, "model");
                        match (m.texts[seq], done) {
                            (Record::Text(t), Ok(_)) if !written[t].1 => {
                                written[t].1 = true;
                                m.texts.push(Record::Redaction);
                            }
                            (_, Err(StoreError::NotRedactable { .. })) => {
                                // A redaction event, a text redacted before,
                                // or a database server (none redacts yet).
                                let refused = match m.texts[seq] {
                                    Record::Text(t) => written[t].1,
                                    Record::Redaction => true,
                                };
                                proptest::prop_assert!(refused || store.backend().is_server());
                            }
                            (record, other) => panic!("{record:?}: {other:?}"),
                        }
                    }
                }
                Op::Gc(c, every, rest) => {
                    if let Some(&i) = live.get(c) {
                        let m = model[i].as_ref().unwrap();
                        let select = |seq: u64, _, _| seq as usize % every == rest;
                        let done = store.drop_payloads(&m.id, &[], &select, "model", false, &mut || Ok(()));
                        if store.backend().is_server() {
                            proptest::prop_assert!(done.is_err());
                        } else {
                            let dropped = done.unwrap().unwrap();
                            let mut expected = 0;
                            for (seq, record) in m.texts.iter().enumerate().skip(m.at) {
                                if let Record::Text(t) = *record {
                                    if seq % every == rest && !written[t].1 {
                                        written[t].1 = true;
                                        expected += 1;
                                    }
                                }
                            }
                            proptest::prop_assert_eq!(dropped.records, expected);
                            proptest::prop_assert_eq!(dropped.unfinished, None);
                        }
                    }
                }
                Op::Reopen => {
                    drop(store);
                    store = place.open();
                }
            }
            // The store holds the model.
            let mut names: Vec<String> = store
                .conversations()
                .unwrap()
                .into_iter()
                .map(|c| c.name.unwrap())
                .collect();
            names.sort();
            let mut expected: Vec<String> = model.iter().flatten().map(|m| m.name.clone()).collect();
            expected.sort();
            proptest::prop_assert_eq!(names, expected);
            for m in model.iter().flatten() {
                let texts: Vec<String> = store
                    .scan(&m.id, 0..u64::MAX)
                    .unwrap()
                    .map(|r| match r.unwrap().event.kind {
                        EventKind::User { text } => text,
                        EventKind::Config { .. } => "(redaction)".to_owned(),
                        other => panic!("{other:?}"),
                    })
                    .collect();
                let expected: Vec<String> = m
                    .texts
                    .iter()
                    .map(|r| match *r {
                        Record::Text(t) if written[t].1 => "[redacted]".to_owned(),
                        Record::Text(t) => written[t].0.clone(),
                        Record::Redaction => "(redaction)".to_owned(),
                    })
                    .collect();
                proptest::prop_assert_eq!(&texts, &expected);
            }
            ok(&store);
            if !store.backend().is_server() {
                let mut held: Vec<[u8; 32]> = model
                    .iter()
                    .flatten()
                    .flat_map(|m| m.texts.iter())
                    .filter_map(|r| match *r {
                        Record::Text(t) if !written[t].1 => Some(&written[t].0),
                        _ => None,
                    })
                    .filter(|t| t.len() > convstore_store::INLINE_MAX)
                    .map(|t| *BlobHash::of(t.as_bytes()).as_bytes())
                    .collect();
                held.sort_unstable();
                held.dedup();
                let mut stored: Vec<[u8; 32]> = store
                    .backend()
                    .scan(Keyspace::Blobs, backend::prefixed(Vec::new()), false)
                    .map(|pair| pair.unwrap().0.to_vec())
                    .filter_map(|k| <[u8; 32]>::try_from(k.as_slice()).ok())
                    .collect();
                stored.sort_unstable();
                proptest::prop_assert_eq!(stored, held);
            }
        }
    }
}
