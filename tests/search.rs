//! The search index against a plain scan of the logs (I19): after random
//! appends, forks and compactions, on each backend, a search for each word
//! finds exactly the records whose text holds it (a fork: its own records
//! and its parents' before its fork point), and `verify`'s check agrees.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::collections::BTreeSet;

use convstore_engine::compact::CompactRequest;
use convstore_engine::fork::ForkAt;
use convstore_engine::projection::Tokenizer;
use convstore_engine::search::{indexed_text, SearchQuery};
use convstore_engine::store::event::ToolCallPolicy;
use convstore_engine::store::{AppendOptions, ConversationId, Event, EventKind, Timestamp};
use convstore_engine::Engine;
use proptest::prelude::*;

use support::backends::{Kind, Place};

const WORDS: [&str; 8] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
];

#[derive(Debug, Clone)]
enum Step {
    /// Append to conversation `conv % n`: (kind, word indexes) per event.
    Append(usize, Vec<(u8, Vec<usize>)>),
    /// Fork conversation `conv % n` after turn `turn % turns`.
    Fork(usize, u64),
    /// Strip tool calls over conversation `conv % n`.
    Compact(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (any::<usize>(), prop::collection::vec((0u8..4, prop::collection::vec(0..WORDS.len(), 0..4)), 1..6))
            .prop_map(|(c, events)| Step::Append(c, events)),
        1 => (any::<usize>(), any::<u64>()).prop_map(|(c, t)| Step::Fork(c, t)),
        1 => any::<usize>().prop_map(Step::Compact),
    ]
}

fn event(kind: u8, words: &[usize], n: usize) -> Event {
    let text: Vec<&str> = words.iter().map(|&w| WORDS[w]).collect();
    let text = text.join(" ");
    let kind = match kind {
        0 => EventKind::TurnStart,
        1 => EventKind::User { text },
        2 => EventKind::Assistant { text },
        _ => EventKind::ToolResult {
            id: format!("c{n}"),
            content: text,
            is_error: false,
        },
    };
    Event {
        timestamp: Timestamp::from_micros(1_700_000_000_000_000 + n as i64).unwrap(),
        kind,
        meta: None,
    }
}

/// What a search for `word` limited to `id` should find: its records (and
/// its parents' before each fork point) whose text holds the word.
fn scanned(engine: &Engine, id: &ConversationId, word: &str) -> BTreeSet<u64> {
    let store = engine.store();
    let len = store.info(id).unwrap().len;
    store
        .scan(id, 0..len)
        .unwrap()
        .map(Result::unwrap)
        .filter(|r| {
            indexed_text(&r.event)
                .is_some_and(|t| t.split(|c: char| !c.is_alphanumeric()).any(|w| w == word))
        })
        .map(|r| r.seq)
        .collect()
}

fn found(
    engine: &Engine,
    id: Option<ConversationId>,
    word: &str,
) -> BTreeSet<(ConversationId, u64)> {
    engine
        .search(&SearchQuery {
            text: word.to_owned(),
            conversation: id,
            kinds: Vec::new(),
            since: None,
            limit: 100_000,
        })
        .unwrap()
        .into_iter()
        .map(|h| (h.conversation, h.seq))
        .collect()
}

fn run(place: &Place, steps: &[Step]) {
    let engine = Engine::from_store(place.open());
    let mut ids: Vec<ConversationId> = Vec::new();
    let mut n = 0usize;
    for step in steps {
        match step {
            Step::Append(c, events) => {
                let batch: Vec<Event> = events
                    .iter()
                    .map(|(k, w)| {
                        n += 1;
                        event(*k, w, n)
                    })
                    .collect();
                if ids.is_empty() || c % 3 == 0 {
                    let (id, _) = engine
                        .store()
                        .create_and_append(None, &batch, &AppendOptions::default())
                        .unwrap();
                    engine.after_write(&id);
                    ids.push(id);
                } else {
                    let id = ids[c % ids.len()];
                    engine
                        .append(&id, &batch, &AppendOptions::default())
                        .unwrap();
                }
            }
            Step::Fork(c, t) if !ids.is_empty() => {
                let parent = ids[c % ids.len()];
                let len = engine.store().info(&parent).unwrap().len;
                let forked = engine
                    .fork(&parent, ForkAt::Seq(t % len), None, None)
                    .unwrap();
                ids.push(forked.id);
            }
            Step::Compact(c) if !ids.is_empty() => {
                let id = ids[c % ids.len()];
                let mut request = CompactRequest::default();
                request.tool_calls = Some(ToolCallPolicy::Strip);
                request.force = true;
                engine.compact(&id, &request, &Tokenizer::Chars4).unwrap();
            }
            Step::Fork(..) | Step::Compact(_) => {}
        }
        assert_eq!(engine.take_index_error(), None);
    }
    for word in WORDS {
        let mut everywhere = BTreeSet::new();
        for id in &ids {
            let expected: BTreeSet<(ConversationId, u64)> = scanned(&engine, id, word)
                .into_iter()
                .map(|s| (*id, s))
                .collect();
            assert_eq!(
                found(&engine, Some(*id), word),
                expected,
                "{word} in {id:?}"
            );
            let own_start = engine.store().info(id).unwrap().fork.map_or(0, |f| f.at);
            everywhere.extend(expected.into_iter().filter(|(_, s)| *s >= own_start));
        }
        assert_eq!(found(&engine, None, word), everywhere, "{word} everywhere");
    }
    let check = engine.check_index(None).unwrap();
    if let Some(check) = check {
        assert_eq!(check.problem, None);
        assert_eq!(check.behind, 0);
    }
    // Rebuilt from the logs, it finds the same.
    let before: Vec<_> = WORDS.iter().map(|w| found(&engine, None, w)).collect();
    engine.reindex().unwrap();
    let after: Vec<_> = WORDS.iter().map(|w| found(&engine, None, w)).collect();
    assert_eq!(before, after);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn search_equals_a_scan_of_the_logs(steps in prop::collection::vec(step(), 1..25), backend in any::<u8>()) {
        run(&Place::of(Kind::nth(backend)), &steps);
    }
}
