//! The projection engine against the reference transcription of SPEC §4.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use convstore_projection::openai::{to_messages, validate};
use convstore_projection::reference::naive_project;
use convstore_projection::{project, LogEvent, ViewEvent};
use convstore_store::{EventKind, Json};
use proptest::prelude::*;
use support::gen;

fn with_threads(threads: usize, events: &[LogEvent]) -> Vec<ViewEvent> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(|| project(events))
}

/// A new store holding `raw` as conversation `c`, appended in `batches`
/// appends of about equal size (unsynced).
fn stored_in_batches(
    raw: &[convstore_store::Event],
    batches: usize,
) -> (
    tempfile::TempDir,
    convstore_store::Store,
    convstore_store::ConversationId,
) {
    use convstore_store::{AppendOptions, Store};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let options = AppendOptions::new().unsynced(true);
    let mut parts = raw.chunks(raw.len().div_ceil(batches));
    let first = parts.next().unwrap();
    let id = store
        .create_and_append(Some("c"), first, &options)
        .unwrap()
        .0;
    for part in parts {
        store.append(&id, part, &options).unwrap();
    }
    (dir, store, id)
}

/// The view of records `0..end` of `id` through the store's pipeline.
fn whole_view(
    store: &convstore_store::Store,
    id: &convstore_store::ConversationId,
    end: u64,
) -> Vec<ViewEvent> {
    use convstore_engine::pipeline::{plan, stream, Scope};
    let scope = Scope { end };
    let projector = plan(store, id, scope, None).unwrap();
    let mut view = Vec::new();
    stream(store, id, scope, &projector, |v| {
        view.push(v.clone());
        Ok(())
    })
    .unwrap();
    view
}

/// The event with `recall_hints` removed from its compaction's fields.
fn without_hints(mut e: LogEvent) -> LogEvent {
    if let EventKind::Compaction(c) = &mut e.event.kind {
        if let Some(info) = &c.info {
            let mut fields: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(info.as_str()).unwrap();
            fields.remove("recall_hints");
            c.info = (!fields.is_empty()).then(|| Json::from_value(&fields.into()));
        }
    }
    e
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// I4, I5, I6: the engine equals the reference, on one thread or four.
    #[test]
    fn engine_equals_reference(events in gen::projection_log(60)) {
        let expected = naive_project(&events);
        // What the projector says it drops leaves nothing in the view.
        let mut plan = convstore_projection::Plan::new();
        for e in &events {
            plan.observe(e.seq, e.turn, &e.event);
        }
        let projector = plan.finish();
        for e in &events {
            if projector.drops(e.seq, e.turn, e.event.kind.event_type()) {
                let mut out = Vec::new();
                projector.transform(e.clone(), &mut out);
                prop_assert!(out.is_empty());
            }
        }
        prop_assert_eq!(&project(&events), &expected);
        prop_assert_eq!(&with_threads(1, &events), &expected);
        prop_assert_eq!(&with_threads(4, &events), &expected);
    }

    /// Recall hints change the text of stripped results and summary
    /// headers only, by a suffix naming the records to recall; with every
    /// compaction's `recall_hints` removed, the view is SPEC §4's exactly
    /// (the reference's, and `engine_equals_reference` holds either way).
    #[test]
    fn recall_hints_change_only_their_text(events in gen::projection_log(60)) {
        let plain: Vec<LogEvent> = events.iter().cloned().map(without_hints).collect();
        let hinted = project(&events);
        let unhinted = project(&plain);
        prop_assert_eq!(&unhinted, &naive_project(&plain));
        prop_assert_eq!(hinted.len(), unhinted.len());
        for (h, u) in hinted.iter().zip(&unhinted) {
            prop_assert_eq!((h.seq, h.turn, h.summary_of), (u.seq, u.turn, u.summary_of));
            match (&h.event.kind, &u.event.kind) {
                (EventKind::ToolResult { content: hc, .. }, EventKind::ToolResult { content: uc, .. })
                    if hc != uc =>
                {
                    prop_assert!(uc.starts_with("[compacted] "));
                    prop_assert_eq!(hc, &format!("{uc} (recall {})", h.seq));
                }
                (EventKind::User { text: ht }, EventKind::User { text: ut }) if ht != ut => {
                    prop_assert!(h.summary_of.is_some());
                    let suffix = ht.strip_prefix(&format!("{ut} (recall {}..", h.seq));
                    prop_assert!(suffix.is_some(), "{}", ht);
                    let to: u64 = suffix.unwrap().trim_end_matches(')').parse().unwrap();
                    prop_assert!(to >= h.seq);
                    // The range ends with the run's last turn.
                    let (_, last) = h.summary_of.unwrap();
                    let last_event = events.iter().find(|e| e.seq == to).unwrap();
                    prop_assert_eq!(last_event.turn, last);
                    prop_assert!(events.iter().all(|e| e.seq <= to || e.turn > last));
                }
                _ => prop_assert_eq!(&h.event, &u.event),
            }
        }
    }

    /// The openai format of any view is a valid Chat Completions list.
    #[test]
    fn openai_messages_are_always_valid(events in gen::projection_log(60)) {
        let view = project(&events);
        let messages = to_messages(&view);
        prop_assert!(validate(&messages.messages).is_ok(), "{:?}", validate(&messages.messages));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Long streams split across many parallel chunks still agree.
    #[test]
    fn long_streams_agree(events in gen::projection_log(3000)) {
        prop_assert_eq!(project(&events), naive_project(&events));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The store's pipeline (chunks decoded in parallel, records the view
    /// drops or strips left unread, stripped results named from nearby
    /// calls) equals the reference, however the log was appended.
    #[test]
    fn the_store_pipeline_equals_the_reference(
        events in gen::projection_log(80),
        batches in 1usize..4,
    ) {
        use convstore_store::Event;

        prop_assume!(!events.is_empty());
        let raw: Vec<Event> = events.iter().map(|e| e.event.clone()).collect();
        let (_dir, store, id) = stored_in_batches(&raw, batches);
        let view = whole_view(&store, &id, store.info(&id).unwrap().len);
        prop_assert_eq!(view, naive_project(&events));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// A view that summarizes turns passes over the chunks it drops whole
    /// (once every `config` and `system` event, which every view keeps, has
    /// been read): the whole view, the view as of any record, and any turn
    /// range still equal the reference, however the log was appended into
    /// chunks.
    #[test]
    fn a_view_that_passes_over_summarized_chunks_equals_the_reference(
        events in prop::collection::vec(gen::projection_event(), 1..160),
        summary in (0u64..40, 0u64..40, "[a-z]{1,6}"),
        batches in 1usize..40,
        cut in any::<prop::sample::Index>(),
        turns in (0u64..40, 0u64..8),
        kept_kinds in any::<bool>(),
    ) {
        use convstore_engine::pipeline::{plan_turns, stream_range, Scope};
        use convstore_store::{Compaction, Event};

        // With or without the events every view keeps (a chunk holding one
        // is read), and a summary of a wide range last.
        let mut raw: Vec<Event> = events
            .into_iter()
            .filter(|e| {
                kept_kinds || !matches!(e.kind, EventKind::System { .. } | EventKind::Config { .. })
            })
            .collect();
        let (a, b, text) = summary;
        let wide = Compaction {
            from_turn: a.min(b),
            to_turn: a.max(b),
            summary: Some(text),
            reasoning: None,
            tool_calls: None,
            revert: None,
            info: None,
        };
        let newest = convstore_store::Timestamp::from_micros(1_700_000_000_000_010).unwrap();
        raw.push(Event::new(newest, EventKind::Compaction(wide)));
        let events = LogEvent::sequence(raw.clone());

        let (_dir, store, id) = stored_in_batches(&raw, batches);

        let end = cut.index(events.len()) + 1;
        for end in [events.len(), end] {
            let view = whole_view(&store, &id, end as u64);
            prop_assert_eq!(&view, &naive_project(&events[..end]));
        }

        let scope = Scope { end: events.len() as u64 };
        let last_turn = events.last().unwrap().turn;
        let first = turns.0.min(last_turn);
        let range = first..=first + turns.1;
        let (projector, seqs) = plan_turns(&store, &id, scope, range.clone()).unwrap();
        let mut view = Vec::new();
        stream_range(&store, &id, seqs, &projector, |v| v, |v| {
            view.extend(v.into_iter().filter(|v| range.contains(&v.turn)));
            Ok(())
        })
        .unwrap();
        let expected: Vec<ViewEvent> = naive_project(&events)
            .into_iter()
            .filter(|v| range.contains(&v.turn))
            .collect();
        prop_assert_eq!(view, expected);
    }
}
