//! Materialized views and forks against a plain model: each conversation
//! is the list of events it holds (a fork: its parent's prefix, then its
//! own), and its view is `project` over that list.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use support::backends::{Kind, Place};

use convstore_engine::views::{self, BlockLimits, RefreshOptions};
use convstore_projection::{project, LogEvent, ViewEvent};
use convstore_store::{AppendOptions, ConversationId, Event, Store};
use proptest::prelude::*;
use support::gen;

#[derive(Debug, Clone)]
enum Op {
    /// Append events to conversation `conv % count`.
    Append { conv: usize, events: Vec<Event> },
    /// Fork conversation `conv % count`, sharing `at` of its records (as a
    /// fraction of its length).
    Fork { conv: usize, at: f64 },
    /// Close and reopen the database.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..8usize, prop::collection::vec(gen::projection_event(), 1..8))
            .prop_map(|(conv, events)| Op::Append { conv, events }),
        2 => (0..8usize, 0.0..=1.0f64).prop_map(|(conv, at)| Op::Fork { conv, at }),
        1 => Just(Op::Reopen),
    ]
}

/// The model's view: `project` over the events with their seqs and turns.
fn model_view(events: &[Event]) -> Vec<ViewEvent> {
    project(&LogEvent::sequence(events.iter().cloned()))
}

fn stored_view(store: &Store, id: &ConversationId, name: &str) -> Vec<ViewEvent> {
    let mut out = Vec::new();
    views::read(store, id, name, |v| {
        out.push(v);
        Ok(())
    })
    .unwrap();
    out
}

/// Small blocks, so that updates replace some blocks and keep others.
const SMALL: RefreshOptions = RefreshOptions::new().with_limits(BlockLimits {
    events: 3,
    turns: 2,
});

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// After every step, every conversation reads back as its model, its
    /// view (kept current step by step, through restarts) equals a fresh
    /// projection of the model, a profile view equals a fresh projection
    /// through the store, and everything verifies. A fork's model is its
    /// parent's prefix plus its own events.
    #[test]
    fn views_stay_equal_to_fresh_projections(ops in prop::collection::vec(op(), 1..14), backend: u8) {
        let place = Place::of(Kind::nth(backend));
        let mut store = place.open();
        let first = store.create_conversation(Some("c0")).unwrap();
        let mut models: Vec<(ConversationId, Vec<Event>)> = vec![(first, Vec::new())];
        for op in ops {
            match op {
                Op::Append { conv, events } => {
                    let count = models.len();
                    let (id, model) = &mut models[conv % count];
                    store.append(id, &events, &AppendOptions::default()).unwrap();
                    model.extend(events);
                }
                Op::Fork { conv, at } => {
                    let (parent, model) = &models[conv % models.len()];
                    let at = ((model.len() as f64) * at).round() as usize;
                    let (id, _) = store.fork(parent, at as u64, None, &[]).unwrap();
                    let prefix = model[..at].to_vec();
                    models.push((id, prefix));
                }
                Op::Reopen => {
                    drop(store);
                    store = place.open();
                }
            }
            for (id, model) in &models {
                let records: Vec<Event> = store
                    .scan(id, 0..u64::MAX)
                    .unwrap()
                    .map(|r| r.unwrap().event)
                    .collect();
                prop_assert_eq!(&records, model);

                views::refresh_with(&store, id, "plain", None, SMALL).unwrap();
                prop_assert_eq!(stored_view(&store, id, "plain"), model_view(model));

                let (state, _) =
                    views::refresh_with(&store, id, "light", Some("light"), SMALL).unwrap();
                prop_assert_eq!(views::check(&store, id, &state).unwrap(), None);

                let verified = store.verify(id).unwrap();
                prop_assert!(verified.is_ok(), "{:?}", verified);
            }
        }
        let all = store.verify_all().unwrap();
        prop_assert!(all.is_ok(), "{:?}", all);
    }
}

/// A view brought up to date after an append recomputes only the turns
/// around the new events, not the whole log.
#[test]
fn an_append_recomputes_only_the_last_blocks() {
    for place in Place::each() {
        let store = place.open();
        let now = convstore_store::Timestamp::now();
        let turn = |i: usize| {
            vec![
                Event::new(now, convstore_store::EventKind::TurnStart),
                Event::new(
                    now,
                    convstore_store::EventKind::User {
                        text: format!("question {i}"),
                    },
                ),
            ]
        };
        let events: Vec<Event> = (0..100).flat_map(turn).collect();
        let (id, _) = store
            .create_and_append(Some("c"), &events, &AppendOptions::default())
            .unwrap();
        let limits = RefreshOptions::new().with_limits(BlockLimits {
            events: 8,
            turns: 4,
        });
        let (_, built) = views::refresh_with(&store, &id, "v", None, limits).unwrap();
        assert_eq!(built, views::Refresh::Built);
        store
            .append(&id, &turn(100), &AppendOptions::default())
            .unwrap();
        let (state, updated) = views::refresh_with(&store, &id, "v", None, limits).unwrap();
        // Turn 99 sits in the block of turns 96..=99; turn 100 is new.
        assert_eq!(updated, views::Refresh::Updated(vec![(96, 100)]));
        assert_eq!(views::check(&store, &id, &state).unwrap(), None);
        let (_, again) = views::refresh_with(&store, &id, "v", None, limits).unwrap();
        assert_eq!(again, views::Refresh::Current);
    }
}

/// A stored view that differs from a fresh projection is reported by
/// `check` (which `verify` runs for every view).
#[test]
fn check_finds_a_view_that_differs_from_the_log() {
    for place in Place::each() {
        let store = place.open();
        let now = convstore_store::Timestamp::now();
        let events = vec![
            Event::new(now, convstore_store::EventKind::TurnStart),
            Event::new(
                now,
                convstore_store::EventKind::User {
                    text: "hello".to_owned(),
                },
            ),
        ];
        let (id, _) = store
            .create_and_append(Some("c"), &events, &AppendOptions::default())
            .unwrap();
        let (state, _) = views::refresh(&store, &id, "v", None).unwrap();
        assert_eq!(views::check(&store, &id, &state).unwrap(), None);

        // Rewrite its one block with a changed text.
        let mut block = store
            .view_blocks(&id, "v", 0)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        block.events[1].event.kind = convstore_store::EventKind::User {
            text: "tampered".to_owned(),
        };
        replace_blocks(
            &store,
            &id,
            state.len,
            state.clone(),
            &[(0, u64::MAX)],
            vec![block],
        )
        .unwrap();
        let state = store.view_state(&id, "v").unwrap().unwrap();
        let problem = views::check(&store, &id, &state).unwrap().unwrap();
        assert!(problem.contains("event 1 differs"), "{problem}");

        // A write computed from a state that is no longer stored is refused.
        let stale = replace_blocks(&store, &id, state.len + 1, state, &[], Vec::new());
        assert!(matches!(
            stale,
            Err(convstore_store::StoreError::HeadMismatch { .. })
        ));
    }
}

/// A view whose state outlived its blocks (what a view update that failed
/// part way on a full disk left once) is named by `check` and rebuilt by
/// the next refresh, never served short.
#[test]
fn a_torn_view_is_rebuilt_at_its_next_refresh() {
    for place in Place::each() {
        let store = place.open();
        let now = convstore_store::Timestamp::now();
        let mut events = Vec::new();
        for i in 0..300 {
            events.push(Event::new(now, convstore_store::EventKind::TurnStart));
            events.push(Event::new(
                now,
                convstore_store::EventKind::User {
                    text: format!("message {i}"),
                },
            ));
        }
        let (id, _) = store
            .create_and_append(Some("c"), &events, &AppendOptions::default())
            .unwrap();
        let (state, _) = views::refresh(&store, &id, "v", None).unwrap();
        let whole = read_view(&store, &id, "v");
        assert_eq!(whole.len(), 600);

        // Every block gone, the state kept: the torn write's result.
        let torn_state = convstore_store::ViewState {
            events: 0,
            ..state.clone()
        };
        replace_blocks(
            &store,
            &id,
            state.len,
            torn_state,
            &[(1, u64::MAX)],
            Vec::new(),
        )
        .unwrap();
        let torn = store.view_state(&id, "v").unwrap().unwrap();
        let problem = views::check(&store, &id, &torn).unwrap().unwrap();
        assert!(problem.contains("blocks cover turns up to"), "{problem}");

        let (rebuilt, outcome) = views::refresh(&store, &id, "v", None).unwrap();
        assert_eq!(outcome, views::Refresh::Built);
        assert_eq!(rebuilt.events, 600);
        assert_eq!(views::check(&store, &id, &rebuilt).unwrap(), None);
        assert_eq!(read_view(&store, &id, "v"), whole);
        assert_eq!(
            views::refresh(&store, &id, "v", None).unwrap().1,
            views::Refresh::Current
        );
    }
}

/// Writes view "v" of `id` as `state` over the stored state of length
/// `expected_len`: the blocks starting in turns `removed` replaced by
/// `blocks`, the call index kept.
fn replace_blocks(
    store: &Store,
    id: &ConversationId,
    expected_len: u64,
    state: convstore_store::ViewState,
    removed: &[(u64, u64)],
    blocks: Vec<convstore_store::ViewBlock>,
) -> Result<(), convstore_store::StoreError> {
    store.write_view(
        id,
        &convstore_store::ViewUpdate {
            expected_len: Some(expected_len),
            state,
            removed: removed.to_vec(),
            blocks,
            reset_calls: false,
            calls: Vec::new(),
            no_sync: false,
        },
    )
}

fn read_view(store: &Store, id: &ConversationId, name: &str) -> Vec<ViewEvent> {
    let mut out = Vec::new();
    views::read(store, id, name, |e| {
        out.push(e);
        Ok(())
    })
    .unwrap();
    out
}

/// Events for [`turn_ranges_and_refreshes_project_as_the_whole_view_does`]: many
/// compactions, some of them summaries, over short, long and open-ended
/// turn ranges (every level of the range index), with timestamps out of
/// log order.
fn ranged_event() -> impl Strategy<Value = Event> {
    let compaction = (
        gen::compaction(),
        0u64..24,
        prop_oneof![0u64..3, 0u64..12, Just(u64::MAX / 2), Just(u64::MAX)],
    )
        .prop_map(|(mut c, from, len)| {
            c.from_turn = from;
            c.to_turn = from.saturating_add(len);
            c.summary = c.summary.map(|s| s.chars().take(8).collect());
            convstore_store::EventKind::Compaction(c)
        });
    prop_oneof![
        3 => gen::projection_event(),
        2 => (0i64..4, compaction).prop_map(|(t, kind)| Event {
            timestamp: convstore_store::Timestamp::from_micros(1_700_000_000_000_000 + t).unwrap(),
            meta: None,
            kind,
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The view of a turn range (`project --turns`), which reads only the
    /// compactions that meet it, is the whole view's events of those turns,
    /// as of any record, in a log written in pieces and in a fork of it; a
    /// stored view refreshed after each piece is the whole view.
    #[test]
    fn turn_ranges_and_refreshes_project_as_the_whole_view_does(
        events in prop::collection::vec(ranged_event(), 1..120),
        cuts in prop::collection::vec(1usize..40, 1..6),
        asked in prop::collection::vec((0u64..30, 0u64..8, 0.0..=1.0f64), 1..6),
        fork_at in 0.0..=1.0f64,
        backend: u8,
    ) {
        use convstore_engine::pipeline::{plan_turns, stream_range, Scope};
        let place = Place::of(Kind::nth(backend));
        let store = place.open();
        let id = store.create_conversation(Some("c")).unwrap();
        let mut at = 0;
        for cut in cuts.iter().cycle() {
            if at >= events.len() {
                break;
            }
            let end = (at + cut).min(events.len());
            store.append(&id, &events[at..end], &AppendOptions::default()).unwrap();
            at = end;
            // A stored view kept current piece by piece reads the
            // compactions meeting its dirty turns only.
            views::refresh_with(&store, &id, "v", None, SMALL).unwrap();
            prop_assert_eq!(stored_view(&store, &id, "v"), model_view(&events[..end]));
        }
        let shared = ((events.len() as f64) * fork_at).round() as usize;
        let (fork, _) = store.fork(&id, shared as u64, None, &[]).unwrap();
        if shared < events.len() {
            store.append(&fork, &events[shared..], &AppendOptions::default()).unwrap();
        }
        for conversation in [id, fork] {
            for &(first, len, as_of) in &asked {
                let end = ((events.len() as f64) * as_of).round().max(1.0) as usize;
                let turns = first..=first + len;
                let (projector, seqs) =
                    plan_turns(&store, &conversation, Scope { end: end as u64 }, turns.clone())
                        .unwrap();
                let mut got = Vec::new();
                stream_range(&store, &conversation, seqs, &projector, |v| v, |v| {
                    got.extend(v);
                    Ok(())
                })
                .unwrap();
                let want: Vec<ViewEvent> = model_view(&events[..end])
                    .into_iter()
                    .filter(|v| turns.contains(&v.turn))
                    .collect();
                prop_assert_eq!(got, want, "turns {:?} of the first {} records", turns, end);
            }
        }
        let verified = store.verify_all().unwrap();
        prop_assert!(verified.is_ok(), "{:?}", verified);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// An inspector page names, for each record a summary replaces, the
    /// turns of that summary's run wherever the page starts: as a page of
    /// the whole log does (whose resolution reads every compaction).
    #[test]
    fn inspector_pages_name_whole_summary_runs_wherever_they_start(
        events in prop::collection::vec(ranged_event(), 1..100),
        pages in prop::collection::vec((0.0..1.0f64, 1u64..12), 1..8),
    ) {
        use convstore_engine::inspect::{page, Start};
        use convstore_engine::pipeline::Scope;
        let place = Place::of(Kind::nth(0));
        let store = place.open();
        let id = store.create_conversation(Some("c")).unwrap();
        store.append(&id, &events, &AppendOptions::default()).unwrap();
        let scope = Scope { end: events.len() as u64 };
        let whole = page(&store, &id, scope, Start::Seq(0), u64::MAX).unwrap();
        prop_assert_eq!(whole.rows.len(), events.len());
        for &(at, limit) in &pages {
            let from = ((events.len() as f64) * at) as u64;
            let part = page(&store, &id, scope, Start::Seq(from), limit).unwrap();
            let end = part.summarized.len() + from as usize;
            prop_assert_eq!(&part.summarized[..], &whole.summarized[from as usize..end]);
        }
    }
}

/// Every turn range of a log under a summary of every turn and a later one
/// of its last turns, behind a system instruction (which no summary
/// replaces), projects as the whole view does: the first summary stands
/// at turn 0 and stops where the later one begins.
#[test]
fn turn_ranges_of_two_summary_runs_behind_a_system_instruction() {
    use convstore_engine::pipeline::{plan_turns, stream_range, Scope};
    use convstore_store::{Compaction, EventKind, Timestamp};
    let at = |kind| Event {
        timestamp: Timestamp::from_micros(1_700_000_000_000_000).unwrap(),
        meta: None,
        kind,
    };
    let summary = |from_turn, to_turn, text: &str| {
        at(EventKind::Compaction(Compaction {
            from_turn,
            to_turn,
            summary: Some(text.to_owned()),
            reasoning: None,
            tool_calls: None,
            revert: None,
            info: None,
        }))
    };
    let mut events = vec![at(EventKind::System { text: "s".into() })];
    for text in ["a", "b", "c", "d"] {
        events.push(at(EventKind::TurnStart));
        events.push(at(EventKind::User { text: text.into() }));
    }
    events.push(summary(0, 9, "all"));
    events.push(summary(3, 4, "late"));
    let whole = model_view(&events);
    for kind in Kind::all() {
        let place = Place::of(kind);
        let store = place.open();
        let id = store.create_conversation(Some("c")).unwrap();
        store
            .append(&id, &events, &AppendOptions::default())
            .unwrap();
        for first in 0..=4 {
            for last in first..=5 {
                let scope = Scope {
                    end: events.len() as u64,
                };
                let (projector, seqs) = plan_turns(&store, &id, scope, first..=last).unwrap();
                let mut got = Vec::new();
                stream_range(
                    &store,
                    &id,
                    seqs,
                    &projector,
                    |v| v,
                    |v| {
                        got.extend(v);
                        Ok(())
                    },
                )
                .unwrap();
                let want: Vec<ViewEvent> = whole
                    .iter()
                    .filter(|v| (first..=last).contains(&v.turn))
                    .cloned()
                    .collect();
                assert_eq!(got, want, "{kind:?} turns {first}..={last}");
            }
        }
    }
    let summaries: Vec<_> = whole.iter().filter_map(|v| v.summary_of).collect();
    assert_eq!(summaries, [(0, 2), (0, 2), (0, 2), (3, 3), (3, 3), (3, 3)]);
}
