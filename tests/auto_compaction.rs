//! Automatic compaction on a long conversation appended turn by turn.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use convstore_engine::auto::{self, automatic_ranges};
use convstore_engine::views;
use convstore_projection::config::Config;
use convstore_projection::{estimate_chars, tokens_for_chars};
use convstore_store::{AppendOptions, ConversationId, Event, EventKind, Store, Timestamp};

/// Turns appended one by one: `CONVSTORE_AUTO_TURNS`, else 10,000 in an
/// optimized build and 2,000 in a debug one (`.ci/run` runs it again
/// with 10,000).
fn turn_count() -> u64 {
    std::env::var("CONVSTORE_AUTO_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            2_000
        } else {
            10_000
        })
}

/// A turn as agents have them: a request, some reasoning, a file read
/// with a long result, an answer (about 600 tokens).
fn turn(i: u64) -> Vec<Event> {
    let now = Timestamp::now();
    let module = i % 97;
    vec![
        Event::new(now, EventKind::TurnStart),
        Event::new(
            now,
            EventKind::User {
                text: format!("Request {i}: look at module m{module} and tell me what it does."),
            },
        ),
        Event::new(
            now,
            EventKind::Reasoning {
                text: format!("I should read src/m{module}.rs first. ").repeat(10),
            },
        ),
        Event::new(
            now,
            EventKind::ToolCall {
                id: format!("call-{i}"),
                name: "fs_read_file".to_owned(),
                arguments: convstore_store::Json::from_value(
                    &serde_json::json!({"path": format!("src/m{module}.rs")}),
                ),
            },
        ),
        Event::new(
            now,
            EventKind::ToolResult {
                id: format!("call-{i}"),
                content: format!("fn step_{i}(input: &str) -> usize {{ input.len() }}\n").repeat(30),
                is_error: i % 50 == 7,
            },
        ),
        Event::new(
            now,
            EventKind::Assistant {
                text: format!(
                    "Answer {i}: module m{module} parses the input, checks the bounds and writes the result."
                ),
            },
        ),
    ]
}

fn view_tokens(store: &Store, id: &ConversationId) -> u64 {
    let mut chars = 0;
    views::read(store, id, auto::VIEW, |v| {
        chars += estimate_chars(&v.event);
        Ok(())
    })
    .unwrap();
    tokens_for_chars(chars)
}

const WINDOW: u64 = 16_000;

fn config(profile: &str) -> Config {
    Config::parse(&format!(
        "[compaction.auto]\nenabled = true\ncontext_window = {WINDOW}\ntoken_floor = 500\n\
         keep_last = 3\nmin_turns = 3\nprofile = \"{profile}\"\n"
    ))
    .unwrap()
}

/// Under the window at every step, never over a pinned turn, and additive:
/// automatic compactions do not overlap, folds aside.
#[test]
fn auto_compaction_keeps_the_view_under_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let id = store.create_conversation(Some("long")).unwrap();
    let pins = [(40, 41), (1_000, 1_000)];
    for (a, b) in pins {
        store.pin(&id, a, b).unwrap();
    }
    let config = config("heavy");
    let options = AppendOptions::new().unsynced(true);
    let mut compactions = 0;
    let mut folds = 0;
    for i in 0..turn_count() {
        store.append(&id, &turn(i), &options).unwrap();
        if let Some(report) = auto::run(
            &store,
            &id,
            &config,
            &convstore_engine::Secrets::none(),
            true,
        )
        .unwrap()
        .filter(|r| r.skipped.is_none())
        {
            compactions += 1;
            folds += u64::from(report.fold);
            assert!(report.tokens_after < report.tokens_before, "{report:?}");
            // The compaction stores the tokens the report gives.
            let last = store.info(&id).unwrap().len - 1;
            let EventKind::Compaction(stored) = store.record(&id, last).unwrap().event.kind else {
                panic!("record {last} is not the compaction");
            };
            let info: serde_json::Value =
                serde_json::from_str(stored.info.unwrap().as_str()).unwrap();
            assert_eq!(info["tokens_after"], report.tokens_after, "{report:?}");
        }
        let tokens = view_tokens(&store, &id);
        assert!(tokens < WINDOW, "turn {i}: the view has {tokens} tokens");
    }
    let ranges = automatic_ranges(&store, &id).unwrap();
    assert_eq!(ranges.len() as u64, compactions);
    eprintln!("{compactions} compactions, {folds} folds");
    assert!(
        compactions > 10 && folds > 0,
        "{compactions} compactions, {folds} folds"
    );
    for &(a, b, _) in &ranges {
        for (p, q) in pins {
            assert!(
                b < p || a > q,
                "turns {a}..={b} cover pinned turns {p}..={q}"
            );
        }
    }
    // Additive: each compaction starts after the last one ended, unless it
    // folds (starts at or before the first summarized turn).
    // (A fold starts where an earlier summary did and covers it whole.)
    let mut end = None;
    for (i, &(a, b, _)) in ranges.iter().enumerate() {
        if let Some(e) = end {
            let folds = ranges[..i]
                .iter()
                .any(|&(a0, b0, summary)| summary && a0 == a && b0 <= b);
            assert!(
                a > e || folds,
                "turns {a}..={b} overlap an earlier compaction"
            );
        }
        end = Some(end.map_or(b, |e: u64| e.max(b)));
    }
    // The view kept along the way equals a fresh projection.
    let state = store.view_state(&id, auto::VIEW).unwrap().unwrap();
    assert_eq!(views::check(&store, &id, &state).unwrap(), None);
}

/// A failing summarizer: the automatic compaction uses mechanical policies,
/// and so do later ones, until a manual compaction succeeds.
#[test]
fn a_failed_summarizer_falls_back_to_mechanical_policies() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let id = store.create_conversation(Some("c")).unwrap();
    let config = Config::parse(
        "[compaction.auto]\nenabled = true\ncontext_window = 1000\ntoken_floor = 100\nprofile = \"broken\"\n\
         [compaction.profiles.broken]\nreasoning = \"strip\"\n\
         [compaction.profiles.broken.summary]\nsummarizer = \"command\"\ncommand = [\"false\"]\n"
    )
    .unwrap();
    let options = AppendOptions::default();
    let mut reports = Vec::new();
    for i in 0..80 {
        let mut events = turn(i);
        events.push(Event::new(
            Timestamp::now(),
            EventKind::Reasoning {
                text: "thinking it over ".repeat(10),
            },
        ));
        store.append(&id, &events, &options).unwrap();
        if let Some(report) = auto::run(
            &store,
            &id,
            &config,
            &convstore_engine::Secrets::none(),
            false,
        )
        .unwrap()
        .filter(|r| r.skipped.is_none())
        {
            reports.push(report);
        }
    }
    assert!(reports.len() >= 2, "{reports:?}");
    assert!(reports[0]
        .summarizer_error
        .as_deref()
        .unwrap()
        .contains("false"));
    // Later runs do not try the summarizer again.
    assert!(reports[1..].iter().all(|r| r.summarizer_error.is_none()));
    assert!(reports.iter().all(|r| r.profile == "default"));
    assert!(store.auto_state(&id).unwrap().summarizer_failed);
    let len = store.info(&id).unwrap().len;
    let stored: Vec<_> = store
        .overlays(&id, len)
        .unwrap()
        .into_iter()
        .map(|o| o.event)
        .collect();
    assert!(stored
        .iter()
        .all(|e| matches!(&e.kind, EventKind::Compaction(c) if c.summary.is_none())));
}
