//! The projection engine against the reference transcription of SPEC §4.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use convstore_projection::openai::{to_messages, validate};
use convstore_projection::reference::naive_project;
use convstore_projection::{project, LogEvent, ViewEvent};
use proptest::prelude::*;
use support::gen;

fn with_threads(threads: usize, events: &[LogEvent]) -> Vec<ViewEvent> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(|| project(events))
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
