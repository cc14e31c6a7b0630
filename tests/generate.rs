//! The generator: deterministic, and the `jp` shape follows the statistics
//! it embeds.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use convstore_engine::generate::{generate_spec, jp_shape, Shape, Spec, BATCH};
use convstore_store::Turn;
use convstore_store::{EventKind, Store};
use support::TestEnv;

fn median(mut xs: Vec<u64>) -> u64 {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

#[test]
fn the_same_seed_gives_the_same_head() {
    for shape in [Shape::Small, Shape::Jp] {
        let heads: Vec<_> = (0..2)
            .map(|_| {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::open(dir.path().join("db")).unwrap();
                let spec = Spec {
                    shape,
                    ..Spec::new(3_000, 30, 7)
                };
                let id = generate_spec(&store, "g", &spec).unwrap();
                store.info(&id).unwrap().head
            })
            .collect();
        assert_eq!(heads[0], heads[1], "{shape:?}");
    }
}

#[test]
fn the_jp_shape_follows_the_real_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let spec = Spec {
        shape: Shape::Jp,
        ..Spec::new(40_000, 0, 3)
    };
    let id = generate_spec(&store, "jp", &spec).unwrap();
    let info = store.info(&id).unwrap();
    let (mut results, mut users, mut per_turn) =
        (Vec::new(), Vec::new(), vec![0u64; info.turns as usize]);
    let mut kinds = [0u64; 3];
    for r in store.scan(&id, 0..info.len).unwrap() {
        let r = r.unwrap();
        per_turn[r.turn as usize] += 1;
        match &r.event.kind {
            EventKind::ToolResult { content, .. } => results.push(content.len() as u64),
            EventKind::User { text } => users.push(text.len() as u64),
            EventKind::ToolCall { .. } => kinds[0] += 1,
            EventKind::Assistant { .. } => kinds[1] += 1,
            EventKind::Reasoning { .. } => kinds[2] += 1,
            _ => {}
        }
    }
    // Medians fall in the middle quantile buckets of the real data.
    let r = median(results);
    assert!(
        (jp_shape::RESULT[8]..=jp_shape::RESULT[12]).contains(&r),
        "{r}"
    );
    let u = median(users);
    assert!((jp_shape::USER[8]..=jp_shape::USER[12]).contains(&u), "{u}");
    // Events a turn: turn_start, user, and steps (a tool step is two events).
    per_turn.pop(); // the last turn may be cut short
    let events = median(per_turn);
    assert!((8..=40).contains(&events), "{events} events a turn");
    // Tool steps are the most common, then answers, then reasoning.
    assert!(kinds[0] > kinds[1] && kinds[1] > kinds[2], "{kinds:?}");
}

#[test]
fn the_log_read_back_does_not_depend_on_how_it_was_appended() {
    // One event per append (an agent storing each event as it happens),
    // seven, and the generator's large batches: the same events, head,
    // turns, tool calls and view, whatever the chunks.
    use convstore_engine::pipeline::{plan, stream, Scope};

    let read = |batch: usize| {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("db")).unwrap();
        let id = generate_spec(
            &store,
            "g",
            &Spec {
                batch,
                ..Spec::new(2_000, 40, 5)
            },
        )
        .unwrap();
        let info = store.info(&id).unwrap();
        assert!(store.verify(&id).unwrap().is_ok(), "batch {batch}");
        let records: Vec<_> = store
            .scan(&id, 0..info.len)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let turns: Vec<_> = (0..info.turns)
            .map(|t| store.first_seq_of_turn(&id, Turn(t)).unwrap().map(|s| s.0))
            .collect();
        let calls = store.tool_calls(&id, 0, info.len).unwrap();
        let scope = Scope { end: info.len };
        let projector = plan(&store, &id, scope, None).unwrap();
        let mut view = Vec::new();
        stream(&store, &id, scope, &projector, |v| {
            view.push(format!("{v:?}"));
            Ok(())
        })
        .unwrap();
        (info.head, records, turns, calls, view)
    };
    let batched = read(BATCH);
    assert!(
        batched.4.len() > 100,
        "the view holds {} events",
        batched.4.len()
    );
    assert!(batched.1.iter().any(|r| r.seq > 0 && r.turn > 0));
    for batch in [1, 7] {
        let other = read(batch);
        assert_eq!(other.0, batched.0, "head, batch {batch}");
        assert_eq!(other.1, batched.1, "records, batch {batch}");
        assert_eq!(other.2, batched.2, "turn starts, batch {batch}");
        assert_eq!(other.3, batched.3, "tool calls, batch {batch}");
        assert_eq!(other.4, batched.4, "view, batch {batch}");
    }
}

/// `log` and `export` read the chunks in parallel: a chunk missing from
/// the middle or the end of a log, or from its staged records, fails them
/// with an error naming the first record missing, after every record
/// before it. A view of the log fails alike.
#[test]
fn a_log_missing_a_chunk_is_refused_by_log_and_export() {
    for (nth, staged) in [(1, false), (2, false), (1, true)] {
        let env = TestEnv::new();
        env.run(&[
            "gen",
            "g",
            "--events",
            "2500",
            "--compactions",
            "0",
            "--seed",
            "3",
        ])
        .ok();
        // Appended an event at a time: staged records, a chunk each.
        for text in ["one", "two", "three"] {
            env.run(&["append", "g", "--user", text]).ok();
        }
        let store = convstore_store::Store::open(env.db()).unwrap();
        let id = store.resolve("g").unwrap();
        let dropped = if staged {
            convstore_store::testing::drop_a_staged_chunk(&store, &id, nth)
        } else {
            convstore_store::testing::drop_a_chunk(&store, &id, nth)
        };
        let dropped = dropped.unwrap().unwrap();
        assert_eq!(dropped == 2501, staged, "{dropped}");
        drop(store);
        for command in [
            &["project", "g"][..],
            &["project", "g", "--format", "text"],
            &["project", "g", "--as-of", "2502"],
            &["view", "g"],
            &["recall", "g", "0..2502"],
        ] {
            let failed = env.run(command).fails();
            // Named by the record, or by the chunk a turn lookup reads.
            assert!(
                [
                    format!("record {dropped} is missing"),
                    format!("chunk at seq {dropped} is missing")
                ]
                .iter()
                .any(|m| failed.stderr.contains(m)),
                "{command:?}: {}",
                failed.stderr
            );
        }
        for command in [&["log", "g"][..], &["export", "g", "--format", "ndjson"]] {
            let failed = env.run(command).fails();
            assert!(
                failed
                    .stderr
                    .contains(&format!("record {dropped} is missing")),
                "{command:?}: {}",
                failed.stderr
            );
            // Every record before the gap is printed, whole.
            assert_eq!(
                failed.stdout.lines().count(),
                usize::try_from(dropped).unwrap(),
                "{command:?}"
            );
        }
    }
}

/// `--overlays strip`: every compaction strips reasoning and tool calls,
/// none summarizes or omits, so the view keeps every event but the
/// reasoning it covers and the compactions themselves.
#[test]
fn strip_overlays_keep_most_of_the_view() {
    let env = TestEnv::new();
    let args = ["--events", "5000", "--compactions", "100", "--seed", "4"];
    env.run(&[&["gen", "wide", "--overlays", "strip"][..], &args].concat())
        .ok();
    env.run(&[&["gen", "mixed"][..], &args].concat()).ok();
    let lines = |command: &[&str]| -> Vec<serde_json::Value> {
        env.run(command)
            .ok()
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let log = lines(&["log", "wide"]);
    let compactions: Vec<_> = log.iter().filter(|r| r["type"] == "compaction").collect();
    assert_eq!(compactions.len(), 100);
    for c in &compactions {
        assert_eq!(c["reasoning"], "strip", "{c}");
        assert_eq!(c["tool_calls"], "strip", "{c}");
        assert!(
            c.get("summary").is_none_or(serde_json::Value::is_null),
            "{c}"
        );
    }
    let reasoning = log.iter().filter(|r| r["type"] == "reasoning").count();
    let wide = lines(&["project", "wide"]);
    assert!(wide
        .iter()
        .all(|v| v["text"] != "[Summary of previous conversation]"));
    assert!(
        wide.len() >= 5000 - 100 - reasoning,
        "{} view events of 5000",
        wide.len()
    );
    assert!(wide.iter().any(|v| v["type"] == "tool_result"
        && v["content"].as_str().unwrap().starts_with("[compacted] ")));
    // The default mix keeps far fewer.
    let mixed = lines(&["project", "mixed"]);
    assert!(
        mixed.len() * 2 < wide.len(),
        "{} vs {}",
        mixed.len(),
        wide.len()
    );
}

/// A generated log (settled chunks in segment files) and a fork of it
/// that summarizes most of their turns and holds a `system` event: the
/// view, which passes over the chunks it drops whole, equals the
/// reference's, and such chunks exist.
#[test]
fn a_view_passing_over_summarized_chunks_equals_the_reference() {
    use convstore_engine::pipeline::{plan, stream, Scope};
    use convstore_projection::reference::naive_project;
    use convstore_projection::LogEvent;
    use convstore_store::{Compaction, Event, EventType, Timestamp};

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let id = generate_spec(&store, "g", &Spec::new(20_000, 100, 3)).unwrap();
    let info = store.info(&id).unwrap();
    let kept_kinds = [EventType::Config, EventType::System];
    assert_eq!(
        store.kind_counts(&id, info.len, &kept_kinds).unwrap(),
        vec![(id, 0)]
    );
    let summary = Compaction {
        from_turn: 1,
        to_turn: info.turns - 3,
        summary: Some("most of it".to_owned()),
        reasoning: None,
        tool_calls: None,
        revert: None,
        info: None,
    };
    let late = Timestamp::from_micros(4_000_000_000_000_000).unwrap();
    let (fork, _) = store
        .fork(
            &id,
            15_000,
            Some("f"),
            &[
                Event::new(
                    late,
                    EventKind::System {
                        text: "kept".into(),
                    },
                ),
                Event::new(late, EventKind::Compaction(summary)),
            ],
        )
        .unwrap();
    assert_eq!(
        store.kind_counts(&fork, 15_002, &kept_kinds).unwrap(),
        vec![(id, 0), (fork, 1)]
    );
    for id in [id, fork] {
        let len = store.info(&id).unwrap().len;
        let events: Vec<Event> = store
            .scan(&id, 0..len)
            .unwrap()
            .map(|r| r.unwrap().event)
            .collect();
        let scope = Scope { end: len };
        let projector = plan(&store, &id, scope, None).unwrap();
        let turns = store.chunk_turns(&id, 0, len).unwrap();
        let passed = store
            .chunks(&id, 0, len)
            .unwrap()
            .map(Result::unwrap)
            .filter(|c| {
                c.turns(&turns)
                    .is_some_and(|t| projector.drops_whole(t, c.seqs()))
            })
            .count();
        assert!(passed > 0, "no chunk is passed over");
        let mut view = Vec::new();
        stream(&store, &id, scope, &projector, |v| {
            view.push(v.clone());
            Ok(())
        })
        .unwrap();
        assert_eq!(view, naive_project(&LogEvent::sequence(events)));
    }
}
