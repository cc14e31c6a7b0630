//! Random operation sequences on a real store — appends (compactions
//! among them), forks, view updates and reopens — against a plain model:
//! each conversation is the list of events it holds. After every step each
//! conversation reads back as its model, its materialized view equals
//! `project` over the model, and everything verifies.
#![no_main]

use convstore_engine::views::{self, BlockLimits, RefreshOptions};
use convstore_projection::{project, LogEvent, ViewEvent};
use convstore_store::event::{Compaction, ReasoningPolicy, ToolCallPolicy};
use convstore_store::{AppendOptions, ConversationId, Event, EventKind, Json, Store, Timestamp};
use libfuzzer_sys::fuzz_target;

/// Reads the fuzz input a byte at a time (zeros once it runs out).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
}

fn event(bytes: &mut Bytes<'_>) -> Event {
    let b = bytes.next();
    let x = bytes.next();
    let id = format!("c{}", x % 4);
    let kind = match b % 9 {
        0 => EventKind::TurnStart,
        1 => EventKind::User {
            text: format!("u{x}"),
        },
        2 => EventKind::Assistant {
            text: format!("a{x}"),
        },
        3 => EventKind::Reasoning {
            text: format!("r{x}"),
        },
        4 => EventKind::ToolCall {
            id,
            name: format!("t{}", x % 3),
            arguments: Json::from_value(&serde_json::json!({ "x": x })),
        },
        5 => EventKind::ToolResult {
            id,
            content: format!("out{x}"),
            is_error: x % 2 == 0,
        },
        6 => EventKind::System {
            text: format!("s{x}"),
        },
        _ => {
            let from_turn = u64::from(x % 8);
            let y = bytes.next();
            let revert = y % 7 == 6;
            EventKind::Compaction(Compaction {
                from_turn,
                to_turn: from_turn + u64::from(y % 6),
                summary: (!revert && y % 3 == 0).then(|| format!("sum{y}")),
                reasoning: (!revert && y % 2 == 0).then_some(ReasoningPolicy::Strip),
                tool_calls: match y % 4 {
                    _ if revert => None,
                    0 => Some(ToolCallPolicy::Strip),
                    1 => Some(ToolCallPolicy::Omit),
                    _ => None,
                },
                revert: revert.then_some(true),
                info: None,
            })
        }
    };
    let micros = 1_700_000_000_000_000 + i64::from(bytes.next() % 4);
    Event::new(Timestamp::from_micros(micros).expect("in range"), kind)
}

fn model_view(events: &[Event]) -> Vec<ViewEvent> {
    project(&LogEvent::sequence(events.iter().cloned()))
}

const SMALL: RefreshOptions = RefreshOptions::new().with_limits(BlockLimits {
    events: 3,
    turns: 2,
});

fuzz_target!(|data: &[u8]| {
    let mut bytes = Bytes(data);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db");
    let mut store = Store::open(&path).expect("open");
    let first = store.create_conversation(None).expect("create");
    let mut models: Vec<(ConversationId, Vec<Event>)> = vec![(first, Vec::new())];
    for _ in 0..12 {
        if bytes.0.is_empty() {
            break;
        }
        let op = bytes.next();
        let pick = usize::from(bytes.next()) % models.len();
        match op % 8 {
            0..=4 => {
                let count = 1 + usize::from(bytes.next() % 8);
                let events: Vec<Event> = (0..count).map(|_| event(&mut bytes)).collect();
                // Odd ops keep the append's bodies in the segment files.
                store.set_segment_min_bytes(if op % 2 == 1 { 0 } else { u64::MAX });
                let (id, model) = &mut models[pick];
                store
                    .append(id, &events, &AppendOptions::default())
                    .expect("append");
                model.extend(events);
            }
            5 | 6 => {
                let (parent, model) = &models[pick];
                let at = usize::from(bytes.next()) % (model.len() + 1);
                let (id, _) = store.fork(parent, at as u64, None, &[]).expect("fork");
                let prefix = model[..at].to_vec();
                models.push((id, prefix));
            }
            _ => {
                drop(store);
                store = Store::open(&path).expect("reopen");
            }
        }
        for (id, model) in &models {
            let stored: Vec<Event> = store
                .scan(id, 0..u64::MAX)
                .expect("scan")
                .map(|r| r.expect("record").event)
                .collect();
            assert_eq!(&stored, model);
            views::refresh_with(&store, id, "v", None, SMALL).expect("view");
            let mut view = Vec::new();
            views::read(&store, id, "v", |v| {
                view.push(v);
                Ok(())
            })
            .expect("read view");
            assert_eq!(view, model_view(model));
        }
    }
    assert!(store.verify_all().expect("verify").is_ok());
});
