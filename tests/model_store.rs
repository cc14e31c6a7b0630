//! Property tests of the store against a plain model: the events appended,
//! in order.

mod support;

use convstore_store::json::{event_to_string, parse_event};
use convstore_store::{testing, Address, AppendOptions, Event, EventKind, Store, Timestamp};
use convstore_store::{Seq, Turn};
use proptest::prelude::*;
use support::backends::{Kind, Place};
use support::gen;

fn open(place: &Place) -> Store {
    place.open()
}

/// A store whose appends keep their bodies in the segment files (`true`)
/// or in sled (`false`), whatever their size.
fn open_placing(dir: &Place, in_segments: bool) -> Store {
    let store = open(dir);
    store.set_segment_min_bytes(if in_segments { 0 } else { u64::MAX });
    store
}

fn fast() -> AppendOptions {
    AppendOptions::new().unsynced(true)
}

fn scan_all(
    store: &Store,
    id: &convstore_store::ConversationId,
) -> Vec<convstore_store::LogRecord> {
    store
        .scan(id, 0..u64::MAX)
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("records")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any valid event round-trips JSON -> store -> JSON unchanged.
    #[test]
    fn events_round_trip_json_store_json(events in gen::events(24), in_segments: bool, backend: u8) {
        let dir = Place::of(Kind::nth(backend));
        let store = open_placing(&dir, in_segments);
        let lines: Vec<String> = events.iter().map(event_to_string).collect();
        let parsed: Vec<Event> = lines
            .iter()
            .map(|l| parse_event(l, Timestamp::now()).unwrap())
            .collect();
        prop_assert_eq!(&parsed, &events);
        let (id, _) = store.create_and_append(None, &parsed, &fast()).unwrap();
        let back: Vec<String> = scan_all(&store, &id).iter().map(|r| event_to_string(&r.event)).collect();
        prop_assert_eq!(back, lines);
    }

    /// A log of random batches verifies, before and after a reopen, and the
    /// turn index answers like the turn rule.
    #[test]
    fn random_logs_verify_and_index_turns(
        batches in prop::collection::vec(gen::events(12), 1..8),
        placing in prop::collection::vec(any::<bool>(), 8),
        settle in 1u64..40,
        backend: u8,
    ) {
        let dir = Place::of(Kind::nth(backend));
        let all: Vec<Event> = batches.concat();
        let id = {
            let store = open(&dir);
            // Staged records settled every `settle` records: settled and
            // staged chunks, interleaved.
            store.set_settle_records(settle);
            let id = store.create_conversation(Some("c")).unwrap();
            // Batches in sled and in the segment files, interleaved.
            for (batch, in_segments) in batches.iter().zip(&placing) {
                store.set_segment_min_bytes(if *in_segments { 0 } else { u64::MAX });
                store.append(&id, batch, &fast()).unwrap();
            }
            prop_assert!(store.verify(&id).unwrap().is_ok());
            id
        };
        let store = open(&dir);
        let report = store.verify_all().unwrap().unwrap();
        prop_assert_eq!(report.records, all.len() as u64);
        let records = scan_all(&store, &id);
        let turns = model_turns(&all);
        prop_assert_eq!(records.iter().map(|r| r.turn).collect::<Vec<_>>(), turns.clone());
        prop_assert_eq!(records.iter().map(|r| r.event.clone()).collect::<Vec<_>>(), all.clone());
        for (seq, turn) in turns.iter().enumerate() {
            prop_assert_eq!(store.turn_of(&id, Seq(seq as u64)).unwrap().0, *turn);
        }
        for turn in 0..=turns.last().copied().unwrap_or(0) + 1 {
            let expected = turns.iter().position(|t| *t == turn).map(|p| p as u64);
            prop_assert_eq!(store.first_seq_of_turn(&id, Turn(turn)).unwrap().map(|s| s.0), expected);
        }
        // The overlay entries are the compaction records, for any prefix.
        let cut = all.len() as u64 / 2;
        for end in [cut, u64::MAX] {
            let expected: Vec<(u64, u64, Event)> = records
                .iter()
                .filter(|r| r.seq < end && r.event.kind.event_type() == convstore_store::EventType::Compaction)
                .map(|r| (r.seq, r.turn, r.event.clone()))
                .collect();
            let overlays: Vec<(u64, u64, Event)> = store
                .overlays(&id, end)
                .unwrap()
                .into_iter()
                .map(|o| (o.seq, o.turn, o.event))
                .collect();
            prop_assert_eq!(overlays, expected);
        }
        // The call directories give the latest name per call id, for any
        // prefix; the first conversation event of each turn is found.
        for end in [cut, u64::MAX] {
            let mut names = std::collections::HashMap::new();
            for r in records.iter().filter(|r| r.seq < end) {
                if let convstore_store::EventKind::ToolCall { id, name, .. } = &r.event.kind {
                    names.insert(id.as_str(), name.as_str());
                }
            }
            let names: convstore_store::ToolNames = names.into_iter().collect();
            prop_assert_eq!(store.tool_names(&id, end).unwrap(), names);
            for turn in 0..=turns.last().copied().unwrap_or(0) {
                let expected = records
                    .iter()
                    .find(|r| r.seq < end && r.turn == turn && r.event.kind.event_type().is_conversation())
                    .map(|r| r.seq);
                prop_assert_eq!(store.first_conversation_seq(&id, Turn(turn), Seq(end)).unwrap().map(|s| s.0), expected);
            }
        }
        let info = store.info(&id).unwrap();
        prop_assert_eq!(info.len, all.len() as u64);
        prop_assert_eq!(info.turns, turns.last().map_or(0, |t| t + 1));
        prop_assert_eq!(info.head, records.last().unwrap().address);
    }

    /// Flipping any byte of a stored record makes verify fail and name it.
    #[test]
    fn flipping_a_record_byte_names_that_record(
        batches in prop::collection::vec(gen::events(10), 1..5),
        pick in any::<prop::sample::Index>(),
        byte in any::<prop::sample::Index>(),
        mask in 1u8..=255,
        in_segments: bool,
        settle in 1u64..30,
        backend: u8,
    ) {
        let dir = Place::of(Kind::nth(backend));
        let store = open_placing(&dir, in_segments);
        store.set_settle_records(settle);
        let id = store.create_conversation(None).unwrap();
        for batch in &batches {
            store.append(&id, batch, &fast()).unwrap();
        }
        let len = batches.iter().map(Vec::len).sum::<usize>();
        let seq = pick.index(len) as u64;
        let bytes = testing::record_bytes(&store, &id, seq).unwrap();
        testing::flip_record_byte(&store, &id, seq, byte.index(bytes.len()), mask).unwrap();
        let failure = store.verify(&id).unwrap().unwrap_err();
        prop_assert_eq!(failure.seq, Some(seq), "{}", failure);
        prop_assert!(store.verify_all().unwrap().is_err());
    }

    /// N events in one call or in N calls give the same head, and equal
    /// histories in two conversations have equal heads.
    #[test]
    fn one_batch_or_many_give_the_same_head(events in gen::events(30), split in 1usize..5, backend: u8) {
        let dir = Place::of(Kind::nth(backend));
        let store = open(&dir);
        let (whole, appended) = store.create_and_append(None, &events, &fast()).unwrap();
        let single = store.create_conversation(None).unwrap();
        let mut head = Address::ROOT;
        for event in &events {
            head = store.append(&single, std::slice::from_ref(event), &fast()).unwrap().head;
        }
        prop_assert_eq!(head, appended.head);
        let pieces = store.create_conversation(None).unwrap();
        for chunk in events.chunks(split) {
            head = store.append(&pieces, chunk, &fast()).unwrap().head;
        }
        prop_assert_eq!(head, appended.head);
        prop_assert_eq!(store.info(&whole).unwrap().head, appended.head);
        prop_assert!(store.verify_all().unwrap().is_ok());
    }
}

/// Verify checks chunks side by side in windows; what it reports is still
/// the first bad record in log order, wherever the bad records fall.
#[test]
fn verify_names_the_first_bad_record_across_windows() {
    for dir in Place::each() {
        let store = open(&dir);
        let id = store.create_conversation(None).unwrap();
        // One append per event: one chunk per record, more than two windows.
        let events: Vec<Event> = (0..700)
            .map(|i| {
                let line = match i % 5 {
                    0 => r#"{"type":"turn_start"}"#.to_owned(),
                    _ => format!(r#"{{"type":"user","text":"message {i}"}}"#),
                };
                parse_event(&line, Timestamp::now()).unwrap()
            })
            .collect();
        for event in &events {
            store
                .append(&id, std::slice::from_ref(event), &fast())
                .unwrap();
        }
        let bad = [650, 420, 300, 301];
        for seq in bad {
            testing::flip_record_byte(&store, &id, seq, 0, 0x10).unwrap();
        }
        for (fixed, expected) in [
            (None, 300),
            (Some(300), 301),
            (Some(301), 420),
            (Some(420), 650),
        ] {
            if let Some(seq) = fixed {
                testing::flip_record_byte(&store, &id, seq, 0, 0x10).unwrap();
            }
            let failure = store.verify(&id).unwrap().unwrap_err();
            assert_eq!(failure.seq, Some(expected), "{failure}");
        }
        testing::flip_record_byte(&store, &id, 650, 0, 0x10).unwrap();
        let report = store.verify(&id).unwrap().unwrap();
        assert_eq!(report.records, 700);
    }
}

#[test]
fn expect_head_appends_only_on_a_match() {
    for dir in Place::each() {
        let store = open(&dir);
        let event = Event::new(Timestamp::now(), convstore_store::EventKind::TurnStart);
        let (id, first) = store
            .create_and_append(
                Some("c"),
                std::slice::from_ref(&event),
                &AppendOptions::default(),
            )
            .unwrap();
        let stale = AppendOptions::new().expecting(Some(Address::ROOT));
        let err = store
            .append(&id, std::slice::from_ref(&event), &stale)
            .unwrap_err();
        assert!(
            matches!(err, convstore_store::StoreError::HeadMismatch { .. }),
            "{err}"
        );
        assert_eq!(store.info(&id).unwrap().len, 1);
        let current = AppendOptions::new().expecting(Some(first.head));
        let second = store
            .append(&id, std::slice::from_ref(&event), &current)
            .unwrap();
        assert_eq!(second.first_seq, 1);
    }
}

#[test]
fn long_payloads_are_stored_once_across_conversations() {
    for dir in Place::each() {
        let store = open(&dir);
        let big = "lorem ipsum ".repeat(50_000);
        let event = Event::new(
            Timestamp::now(),
            convstore_store::EventKind::ToolResult {
                id: "1".into(),
                content: big.clone(),
                is_error: false,
            },
        );
        store
            .create_and_append(Some("a"), std::slice::from_ref(&event), &fast())
            .unwrap();
        store.flush().unwrap();
        let size_one = store.size_on_disk().unwrap();
        for name in ["b", "c", "d", "e"] {
            store
                .create_and_append(Some(name), std::slice::from_ref(&event), &fast())
                .unwrap();
        }
        store.flush().unwrap();
        let size_five = store.size_on_disk().unwrap();
        assert!(
        size_five < size_one + big.len() as u64,
        "four more copies of a {} byte payload grew the database from {size_one} to {size_five}",
        big.len()
    );
        let report = store.verify_all().unwrap().unwrap();
        assert_eq!(report.blobs, 1);
    }
}

#[test]
fn names_and_id_prefixes_resolve() {
    for dir in Place::each() {
        let store = open(&dir);
        let a = store.create_conversation(Some("alpha")).unwrap();
        let b = store.create_conversation(None).unwrap();
        assert_eq!(store.resolve("alpha").unwrap(), a);
        assert_eq!(store.resolve(&b.hex()).unwrap(), b);
        assert_eq!(store.resolve(&b.hex()[..10]).unwrap(), b);
        assert_eq!(store.resolve(&b.hex()[..9].to_uppercase()).unwrap(), b);
        assert!(matches!(
            store.create_conversation(Some("alpha")),
            Err(convstore_store::StoreError::NameTaken { .. })
        ));
        assert!(store.create_conversation(Some(" spaced")).is_err());
        assert!(store.find("zz-not-there").unwrap().is_none());
        // Prefixes shorter than four digits are names, not prefixes.
        assert!(store.find(&b.hex()[..3]).unwrap().is_none());
    }
}

#[test]
fn an_ambiguous_prefix_is_an_error() {
    for dir in Place::each() {
        let store = open(&dir);
        // Random ids: create until two share their first four hex digits
        // (about 300 on average).
        let mut seen = std::collections::HashMap::new();
        let shared = loop {
            let id = store.create_conversation(None).unwrap();
            let prefix = id.hex()[..4].to_owned();
            if seen.insert(prefix.clone(), id).is_some() {
                break prefix;
            }
            assert!(seen.len() < 20_000, "no shared prefix");
        };
        let err = store.resolve(&shared).unwrap_err();
        assert!(
            matches!(
                err,
                convstore_store::StoreError::AmbiguousConversation { .. }
            ),
            "{err}"
        );
    }
}

#[test]
fn a_newer_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    drop(Store::open(&path).unwrap());
    testing::set_format_version(&path, 99).unwrap();
    match Store::open(&path) {
        Err(convstore_store::StoreError::UnsupportedFormat { found: 99, .. }) => {}
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("a version-99 database opened"),
    }
}

/// From format 9 a staged chunk has no turn index entry (readers take its
/// turns from the chunk); a format-8 database is still written with them,
/// for the builds of format 8. Both answer every turn question alike,
/// across settled and staged records and a fork of them, and verify.
#[test]
fn staged_chunks_are_turn_indexed_only_before_format_9() {
    for format in [8, convstore_store::FORMAT_VERSION] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        drop(Store::open(&path).unwrap());
        testing::set_format_version(&path, format).unwrap();
        let store = Store::open(&path).unwrap();
        assert_eq!(store.format_version(), format);
        store.set_settle_records(16);
        let id = store.create_conversation(Some("c")).unwrap();
        let mut all = Vec::new();
        for i in 0..40 {
            let event = if i % 3 == 0 {
                Event::new(Timestamp::now(), EventKind::TurnStart)
            } else {
                Event::new(
                    Timestamp::now(),
                    EventKind::User {
                        text: format!("message {i}"),
                    },
                )
            };
            store
                .append(&id, std::slice::from_ref(&event), &fast())
                .unwrap();
            all.push(event);
        }
        // Records 0..32 settled, 32..40 staged (a chunk each).
        assert_eq!(
            testing::staged_chunk_keys(&store, &id).unwrap(),
            8,
            "format {format}"
        );
        let indexed = testing::staged_turn_keys(&store, &id).unwrap();
        assert_eq!(indexed, if format < 9 { 8 } else { 0 }, "format {format}");
        let (fork, _) = store.fork(&id, 36, Some("f"), &[]).unwrap();
        let whole = model_turns(&all);
        for (conversation, len) in [(id, 40usize), (fork, 36)] {
            let turns = model_turns(&all[..len]);
            for (seq, turn) in turns.iter().enumerate() {
                assert_eq!(
                    store.turn_of(&conversation, Seq(seq as u64)).unwrap().0,
                    *turn
                );
            }
            for turn in 0..=turns.last().copied().unwrap() + 1 {
                let expected = turns.iter().position(|t| *t == turn).map(|p| p as u64);
                let found = store.first_seq_of_turn(&conversation, Turn(turn)).unwrap();
                assert_eq!(found.map(|s| s.0), expected, "format {format}, turn {turn}");
            }
            // Each chunk's turns, as a view passing over it reads them.
            let spans = store.chunk_turns(&conversation, 0, len as u64).unwrap();
            for raw in store.chunks(&conversation, 0, len as u64).unwrap() {
                let raw = raw.unwrap();
                let (first, end) = (
                    raw.first_seq() as usize,
                    raw.first_seq() as usize + raw.len(),
                );
                let expected = (whole[first], whole[end - 1]);
                assert_eq!(
                    raw.turns(&spans),
                    Some(expected),
                    "format {format}, chunk at {first}"
                );
            }
        }
        assert!(store.verify(&id).unwrap().is_ok(), "format {format}");
        // A staged chunk gone (damage) fails every turn question that
        // reaches it, naming it, rather than answering without it.
        let damaged = store.create_conversation(Some("damaged")).unwrap();
        for event in &all {
            store
                .append(&damaged, std::slice::from_ref(event), &fast())
                .unwrap();
        }
        // Records 32..40 staged, a chunk each: record 36 opens turn 12.
        assert_eq!(
            testing::drop_a_staged_chunk(&store, &damaged, 4).unwrap(),
            Some(36)
        );
        for turn in [12, 13] {
            let error = store
                .first_seq_of_turn(&damaged, Turn(turn))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("chunk at seq 36 is missing"),
                "format {format}: {error}"
            );
        }
        let error = store.chunk_turns(&damaged, 0, 40).unwrap_err().to_string();
        assert!(
            error.contains("chunk at seq 36 is missing"),
            "format {format}: {error}"
        );
        // A record's turn: the record is named, whether a chunk before it
        // is left (36) or none is (32, the first staged one, dropped too).
        assert_eq!(
            testing::drop_a_staged_chunk(&store, &damaged, 0).unwrap(),
            Some(32)
        );
        for seq in [32, 36] {
            let error = store.turn_of(&damaged, Seq(seq)).unwrap_err().to_string();
            assert!(
                error.contains(&format!("record {seq} is missing from the log")),
                "format {format}: {error}"
            );
        }
        assert!(store.verify(&damaged).unwrap().is_err(), "format {format}");
        // Staged records are settled at 64 KiB too: records of about 900
        // bytes, an append each, settle every 72 or so, long before the
        // 256-record bound.
        store.set_settle_records(256);
        let long = store.create_conversation(Some("long")).unwrap();
        let mut settles = 0;
        for i in 0..200u64 {
            let event = Event::new(
                Timestamp::now(),
                EventKind::User {
                    text: format!("{i:04}").repeat(225),
                },
            );
            store.append(&long, &[event], &fast()).unwrap();
            let (settled, _) = testing::staging_state(&store, &long).unwrap().unwrap();
            assert!(i + 1 - settled <= 73, "format {format}: {i} {settled}");
            settles += u64::from(settled == i + 1);
        }
        assert!(settles >= 2, "format {format}: {settles}");
        assert!(store.verify(&long).unwrap().is_ok(), "format {format}");
    }
}

/// A fork taken inside its parent's staged records reads the same shared
/// records after the parent settles them, and stages its own appends.
#[test]
fn forks_read_through_staged_and_settled_records() {
    for dir in Place::each() {
        let store = open(&dir);
        store.set_settle_records(10);
        let events = |from: usize, n: usize| -> Vec<Event> {
            (from..from + n)
                .map(|i| {
                    let kind = if i % 4 == 0 {
                        convstore_store::EventKind::TurnStart
                    } else {
                        convstore_store::EventKind::User {
                            text: format!("event {i}"),
                        }
                    };
                    Event::new(Timestamp::now(), kind)
                })
                .collect()
        };
        let parent = store.create_conversation(Some("p")).expect("create");
        let mut model = Vec::new();
        for e in events(0, 14) {
            store
                .append(&parent, std::slice::from_ref(&e), &fast())
                .expect("append");
            model.push(e);
        }
        // Records 10..14 are staged; fork after record 12.
        let (fork, _) = store.fork(&parent, 12, Some("f"), &[]).expect("fork");
        let mut fork_model = model[..12].to_vec();
        for e in events(100, 25) {
            store
                .append(&fork, std::slice::from_ref(&e), &fast())
                .expect("append");
            fork_model.push(e);
        }
        for e in events(14, 30) {
            store
                .append(&parent, std::slice::from_ref(&e), &fast())
                .expect("append");
            model.push(e);
        }
        let texts =
            |id| -> Vec<Event> { scan_all(&store, id).into_iter().map(|r| r.event).collect() };
        assert_eq!(texts(&parent), model);
        assert_eq!(texts(&fork), fork_model);
        for (id, len) in [(&parent, model.len()), (&fork, fork_model.len())] {
            for seq in 0..len as u64 {
                let turn = store.turn_of(id, Seq(seq)).expect("turn").0;
                assert_eq!(turn, seq / 4, "seq {seq}");
            }
            assert!(store.verify(id).expect("verify").is_ok());
        }
        assert!(store.verify_all().expect("verify").is_ok());
        // Damage in the parent past the fork point is not the fork's: the
        // parent is not asked for the fork's own turns.
        let turns = |id| -> Vec<_> {
            (0..=10)
                .map(|t| {
                    store
                        .first_seq_of_turn(id, Turn(t))
                        .map(|s| s.map(|s| s.0))
                        .map_err(|e| e.to_string())
                })
                .collect()
        };
        let before = turns(&fork);
        assert_eq!(
            testing::drop_a_chunk(&store, &parent, 2).expect("damage"),
            Some(20),
            "{}",
            dir.name()
        );
        assert_eq!(turns(&fork), before, "{}", dir.name());
        assert!(turns(&parent)[5].is_err(), "{}", dir.name());
    }
}

/// An append that would settle a damaged staged record fails, naming it,
/// and stores nothing; `verify` names the same record.
#[test]
fn a_damaged_staged_record_fails_the_settling_append() {
    for dir in Place::each() {
        let store = open(&dir);
        store.set_settle_records(8);
        let user = |i: usize| {
            Event::new(
                Timestamp::now(),
                convstore_store::EventKind::User {
                    text: format!("event {i}"),
                },
            )
        };
        let id = store.create_conversation(Some("c")).expect("create");
        for i in 0..11 {
            store.append(&id, &[user(i)], &fast()).expect("append");
        }
        // Records 0..8 were settled by the eighth append; 8..11 are staged.
        testing::flip_record_byte(&store, &id, 9, 3, 0x40).expect("damage");
        assert_eq!(store.verify(&id).expect("verify").unwrap_err().seq, Some(9));
        let head = store.info(&id).expect("info").head;
        let many: Vec<Event> = (11..20).map(user).collect();
        let error = store.append(&id, &many, &fast()).unwrap_err().to_string();
        assert!(error.contains("staged record 9"), "{error}");
        let info = store.info(&id).expect("info");
        assert_eq!((info.len, info.head), (11, head));
        // Appends that keep staging still work.
        store.set_settle_records(1000);
        store.append(&id, &[user(11)], &fast()).expect("append");
        assert_eq!(store.info(&id).expect("info").len, 12);
    }
}

/// The turn of each event, by SPEC §2's rule, written out here rather than
/// taken from the store's `TurnTracker`: turns start at 0, and a
/// `turn_start` opens the next turn only when the current one already
/// holds a conversation event (anything but config, system, compaction).
fn model_turns(events: &[Event]) -> Vec<u64> {
    let mut turn = 0;
    let mut holds_conversation = false;
    events
        .iter()
        .map(|event| {
            if matches!(event.kind, EventKind::TurnStart) && holds_conversation {
                turn += 1;
                holds_conversation = false;
            }
            if !matches!(
                event.kind,
                EventKind::Config { .. } | EventKind::System { .. } | EventKind::Compaction(_)
            ) {
                holds_conversation = true;
            }
            turn
        })
        .collect()
}
