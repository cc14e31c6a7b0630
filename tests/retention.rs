//! Retention (`gc`): the payloads a compaction covers go, every view
//! stays as it was, the chain verifies, and the texts leave the files; an
//! age policy drops only older payloads; a dry run stores nothing.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::path::Path;

use convstore_engine::retention::Retention;
use convstore_engine::{parse_ndjson, views, Engine};
use convstore_store::{AppendOptions, ConversationId, Store};
use support::backends::Place;

/// Turn `t` of a conversation: a question, reasoning, a call and its
/// (long, so stored as a blob) result, an answer; marked with `tag`.
fn turn(t: u64, tag: &str, time: &str) -> String {
    let long = format!("RESULT-{tag}-{t} ").repeat(1500);
    [
        format!(r#"{{"type":"turn_start","timestamp":"{time}"}}"#),
        format!(r#"{{"type":"user","text":"QUESTION-{tag}-{t}","timestamp":"{time}"}}"#),
        format!(r#"{{"type":"reasoning","text":"THINKING-{tag}-{t}","timestamp":"{time}"}}"#),
        format!(
            r#"{{"type":"tool_call","id":"c{tag}{t}","name":"fs_read","arguments":{{"path":"ARGS-{tag}-{t}"}},"timestamp":"{time}"}}"#
        ),
        format!(
            r#"{{"type":"tool_result","id":"c{tag}{t}","content":"{long}","is_error":false,"timestamp":"{time}"}}"#
        ),
        format!(r#"{{"type":"assistant","text":"ANSWER-{tag}-{t}","timestamp":"{time}"}}"#),
    ]
    .join("\n")
}

fn events(lines: &str) -> Vec<convstore_store::Event> {
    parse_ndjson(lines).unwrap()
}

/// The view of `id` as NDJSON lines.
fn view(engine: &Engine, id: &ConversationId) -> Vec<String> {
    let mut out = Vec::new();
    engine
        .project(id, None, |e| {
            out.push(format!("{} {} {:?}", e.seq, e.turn, e.event));
            Ok(())
        })
        .unwrap();
    out
}

/// Every record of `id` as text.
fn records(store: &Store, id: &ConversationId) -> Vec<String> {
    let len = store.info(id).unwrap().len;
    store
        .scan(id, 0..len)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            format!("{} {:?}", r.address, r.event)
        })
        .collect()
}

/// Whether any file under `dir` holds `needle`.
fn found_in_files(dir: &Path, needle: &str) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    return true;
                }
            }
        }
    }
    false
}

const COVERED: Retention = Retention {
    older_than: None,
    only_compacted: true,
};

#[test]
fn covered_payloads_go_and_every_view_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let engine = Engine::from_store(Store::open(&path).unwrap());
    let store = engine.store();
    let time = "2026-01-01T00:00:00Z";
    let mut text: Vec<String> = (0..6).map(|t| turn(t, "a", time)).collect();
    // Turns 0..=3 stripped (reasoning, calls and results), turn 1 also
    // summarized.
    text.push(
        r#"{"type":"compaction","from_turn":0,"to_turn":3,"reasoning":"strip","tool_calls":"strip","timestamp":"2026-01-02T00:00:00Z"}"#
            .to_owned(),
    );
    text.push(
        r#"{"type":"compaction","from_turn":1,"to_turn":1,"summary":"SUMMARY-1","timestamp":"2026-01-03T00:00:00Z"}"#
            .to_owned(),
    );
    let (id, _) = store
        .create_and_append(
            Some("c"),
            &events(&text.join("\n")),
            &AppendOptions::default(),
        )
        .unwrap();
    // A fork of all of it that keeps turn 2 as it was: a revert of that
    // turn in its own log.
    let shared = store.info(&id).unwrap().len;
    let fork_events = events(&format!(
        "{}\n{}",
        r#"{"type":"compaction","from_turn":2,"to_turn":2,"revert":true,"timestamp":"2026-01-04T00:00:00Z"}"#,
        turn(9, "f", time)
    ));
    let (fork, _) = store.fork(&id, shared, Some("f"), &fork_events).unwrap();
    // A view stored before a later compaction, never refreshed since.
    store
        .append(&id, &events(&turn(6, "a", time)), &AppendOptions::default())
        .unwrap();
    views::refresh(store, &id, "stale", None).unwrap();
    store
        .append(
            &id,
            &events(
                r#"{"type":"compaction","from_turn":6,"to_turn":6,"reasoning":"strip","timestamp":"2026-01-05T00:00:00Z"}"#,
            ),
            &AppendOptions::default(),
        )
        .unwrap();
    let (view_a, view_f) = (view(&engine, &id), view(&engine, &fork));
    let (raw_a, raw_f) = (records(store, &id), records(store, &fork));

    // A dry run counts and stores nothing.
    let dry = engine.gc(&id, &COVERED, true).unwrap();
    assert_eq!(records(store, &id), raw_a);
    // Dropped: turns 0 and 3 (reasoning, call, result), 1 (summarized:
    // question, reasoning, call, result, answer) and 6's reasoning; turn
    // 2 stays (the fork shows it), and 4, 5 (not compacted).
    assert_eq!(dry.records, 3 + 5 + 3 + 1, "{dry:?}");
    let dropped = engine.gc(&id, &COVERED, false).unwrap();
    assert_eq!(
        (dropped.records, dropped.bytes, dropped.blobs_removed),
        (dry.records, dry.bytes, dry.blobs_removed)
    );
    assert!(dropped.blobs_removed >= 3, "{dropped:?}");

    // Every view as it was; every address as it was.
    assert_eq!(view(&engine, &id), view_a);
    assert_eq!(view(&engine, &fork), view_f);
    let addresses = |rows: &[String]| -> Vec<String> {
        rows.iter()
            .map(|r| r.split(' ').next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(addresses(&records(store, &id)), addresses(&raw_a));
    assert_eq!(addresses(&records(store, &fork)), addresses(&raw_f));
    assert_eq!(store.info(&id).unwrap().len, raw_a.len() as u64);
    let (state, _) = views::refresh(store, &id, "stale", None).unwrap();
    assert_eq!(views::check(store, &id, &state).unwrap(), None);
    // Every redacted record counted once; a fork's verify counts those
    // its log holds, the parent's before the fork point too.
    let report = store.verify_all().unwrap().unwrap();
    assert_eq!(report.redacted, dropped.records);
    let held = store.redactions(&fork, false).unwrap().len() as u64;
    assert!(held > store.redactions(&fork, true).unwrap().len() as u64);
    assert_eq!(store.verify(&fork).unwrap().unwrap().redacted, held);

    // What went reads [redacted], says why, and is gone from the files;
    // what a view shows is still there.
    let raw = records(store, &id).join("\n");
    for gone in [
        "RESULT-a-0",
        "RESULT-a-1",
        "ANSWER-a-1",
        "ARGS-a-3",
        "THINKING-a-6",
    ] {
        assert!(!raw.contains(gone), "{gone} still in the log");
    }
    for kept in [
        "RESULT-a-2",
        "THINKING-a-2",
        "ANSWER-a-0",
        "QUESTION-a-3",
        "THINKING-a-4",
    ] {
        assert!(raw.contains(kept), "{kept} is gone from the log");
    }
    let seq_of_result_0 = 4;
    let record = store.record(&id, seq_of_result_0).unwrap();
    assert_eq!(
        record.redaction.map(|r| r.reason).as_deref(),
        Some("retention: covered by a compaction")
    );
    let groups = store.redaction_groups(&id).unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].records, dropped.records);
    assert!(dropped.view_blocks >= 1, "{dropped:?}");
    drop(engine);
    // The first append (over 64 KiB) went to the segment files, where a
    // dropped text's bytes are gone for good; sled keeps what it
    // overwrote in `db` until it reuses the space (ARCHITECTURE.md).
    for gone in ["RESULT-a-0", "RESULT-a-1", "RESULT-a-3"] {
        assert!(!found_in_files(dir.path(), gone), "{gone} still on disk");
    }

    // Reopened: as it was; a second pass finds nothing.
    let engine = Engine::from_store(Store::open(&path).unwrap());
    assert_eq!(view(&engine, &id), view_a);
    assert_eq!(engine.gc(&id, &COVERED, false).unwrap().records, 0);
    assert!(engine.store().verify_all().unwrap().is_ok());
}

/// A read that looked chunks up before `gc` rewrote them reads them as
/// `gc` left them, not the bytes `gc` gave back to the file system (which
/// read as zeros and fail their checksum) nor the long texts it removed:
/// chunks in the segment files and in sled, read in parallel
/// (`Store::chunks`) and record by record (`Store::scan`).
#[test]
fn chunks_looked_up_before_gc_are_read_as_gc_left_them() {
    for segment_min_bytes in [0, u64::MAX] {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::from_store(Store::open(dir.path().join("db")).unwrap());
        let store = engine.store();
        // Every append's records in the segment files, or none.
        store.set_segment_min_bytes(segment_min_bytes);
        let time = "2026-01-01T00:00:00Z";
        let mut text: Vec<String> = (0..40).map(|t| turn(t, "a", time)).collect();
        text.push(
            r#"{"type":"compaction","from_turn":0,"to_turn":39,"reasoning":"strip","tool_calls":"strip","timestamp":"2026-01-02T00:00:00Z"}"#
                .to_owned(),
        );
        let (id, _) = store
            .create_and_append(
                Some("c"),
                &events(&text.join("\n")),
                &AppendOptions::default(),
            )
            .unwrap();
        let len = store.info(&id).unwrap().len;
        let chunks: Vec<_> = store
            .chunks(&id, 0, len)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(!chunks.is_empty());
        let before = records(store, &id);
        let mut scan = store.scan(&id, 0..len).unwrap();
        let mut scanned = vec![scan.next().unwrap().unwrap()];
        let dropped = engine.gc(&id, &COVERED, false).unwrap();
        assert!(
            dropped.records >= 40 && dropped.blobs_removed >= 40,
            "{dropped:?}"
        );
        let mut read = Vec::new();
        for chunk in &chunks {
            for r in chunk.log_records(store, 0, len).unwrap() {
                read.push(format!("{} {:?}", r.address, r.event));
            }
        }
        // Each record as it was before gc (read from bytes loaded before)
        // or after, whole.
        let after = records(store, &id);
        assert_ne!(before, after);
        let whole = |got: &[String]| {
            assert_eq!(got.len(), after.len());
            let mixed = got
                .iter()
                .zip(before.iter().zip(&after))
                .position(|(g, (b, a))| g != b && g != a);
            assert_eq!(mixed, None, "{segment_min_bytes}");
            assert!(got.iter().any(|r| r.contains("[redacted]")));
        };
        whole(&read);
        scanned.extend(scan.map(Result::unwrap));
        let scanned: Vec<_> = scanned
            .iter()
            .map(|r| format!("{} {:?}", r.address, r.event))
            .collect();
        whole(&scanned);
    }
}

#[test]
fn an_age_policy_drops_only_older_payloads() {
    for place in Place::each() {
        let engine = Engine::from_store(place.open());
        let store = engine.store();
        let old = "2020-01-01T00:00:00Z";
        let now = convstore_store::Timestamp::now().to_string();
        let text = format!(
            "{}\n{}\n{}\n{}",
            r#"{"type":"system","text":"SYSTEM-OLD","timestamp":"2020-01-01T00:00:00Z"}"#,
            r#"{"type":"config","delta":{"model":"MODEL-OLD"},"timestamp":"2020-01-01T00:00:00Z"}"#,
            turn(0, "old", old),
            turn(1, "new", &now)
        );
        let (id, _) = store
            .create_and_append(Some("c"), &events(&text), &AppendOptions::default())
            .unwrap();
        views::refresh(store, &id, "v", None).unwrap();
        let all = Retention {
            older_than: Some(30 * 86_400 * 1_000_000),
            only_compacted: false,
        };
        let got = engine.gc(&id, &all, false);
        if place.name() == "postgres" {
            assert!(got.is_err(), "{got:?}");
            assert!(!records(store, &id).join("").contains("[redacted]"));
            continue;
        }
        // The system text and the five payloads of the old turn; the
        // config and the new turn stay.
        assert_eq!(got.unwrap().records, 6, "{}", place.name());
        let raw = records(store, &id).join("\n");
        assert!(raw.contains("MODEL-OLD") && raw.contains("RESULT-new-1"));
        assert!(!raw.contains("SYSTEM-OLD") && !raw.contains("THINKING-old-0"));
        // The stored view shows what the log now holds.
        let (state, _) = views::refresh(store, &id, "v", None).unwrap();
        assert_eq!(views::check(store, &id, &state).unwrap(), None);
        let shown = view(&engine, &id).join("\n");
        assert!(shown.contains("[redacted]") && !shown.contains("QUESTION-old-0"));
        assert!(store.verify_all().unwrap().is_ok());
    }
}

#[test]
fn a_policy_that_would_drop_everything_is_refused() {
    let config = convstore_engine::projection::config::RetentionConfig::default();
    assert!(Retention::new(&config, None, true).is_err());
    assert!(Retention::new(&config, Some("90"), false).is_err());
    let r = Retention::new(&config, Some("90d"), true).unwrap();
    assert_eq!(r.reason(), "retention: older than 90d");
    let r = Retention::new(&config, Some("36h"), false).unwrap();
    assert_eq!(
        r.reason(),
        "retention: covered by a compaction, older than 36h"
    );
    let parsed = convstore_engine::projection::config::Config::parse(
        "[retention]\nonly_compacted = false\n",
    );
    assert!(parsed.is_err(), "{parsed:?}");
}

/// A payload that reads as its own stripped form (a call's `{}`) is kept:
/// a stored view, stale or not, could not tell it from a stripped one.
#[test]
fn a_stale_view_still_matches_its_own_projection() {
    let engine =
        Engine::from_store(Store::open(tempfile::tempdir().unwrap().path().join("db")).unwrap());
    let store = engine.store();
    let text = [
        r#"{"type":"user","text":"go"}"#,
        r#"{"type":"tool_call","id":"a","name":"t","arguments":{}}"#,
        r#"{"type":"tool_result","id":"a","content":"RESULT","is_error":false}"#,
        r#"{"type":"compaction","from_turn":0,"to_turn":0,"tool_calls":"strip-requests"}"#,
    ]
    .join("\n");
    let (id, _) = store
        .create_and_append(Some("c"), &events(&text), &AppendOptions::default())
        .unwrap();
    views::refresh(store, &id, "v", None).unwrap();
    store
        .append(
            &id,
            &events(r#"{"type":"compaction","from_turn":0,"to_turn":0,"tool_calls":"strip"}"#),
            &AppendOptions::default(),
        )
        .unwrap();
    let dropped = engine.gc(&id, &COVERED, false).unwrap();
    assert_eq!(dropped.records, 1, "the result only: {dropped:?}");
    let stale = store.view_state(&id, "v").unwrap().unwrap();
    assert_eq!(stale.len, 4);
    assert_eq!(views::check(store, &id, &stale).unwrap(), None);
    assert!(store.verify_all().unwrap().is_ok());
}
