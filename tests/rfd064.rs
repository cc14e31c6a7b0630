//! RFD 064's projection example and stacking table, with the exact strings
//! (SPEC §4: stripped arguments are `{}`, not `{[compacted]}`).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use convstore_projection::{project, LogEvent, ViewEvent, SUMMARY_HEADER};
use convstore_store::json::parse_event;
use convstore_store::{EventKind, Timestamp};
use serde_json::{json, Value};

/// Builds a log from JSON values, timestamps one second apart.
fn log(values: &[Value]) -> Vec<LogEvent> {
    LogEvent::sequence(values.iter().enumerate().map(|(seq, v)| {
        let mut v = v.clone();
        if v.get("timestamp").is_none() {
            let t = Timestamp::from_micros(1_750_000_000_000_000 + seq as i64 * 1_000_000).unwrap();
            v["timestamp"] = json!(t.to_string());
        }
        parse_event(&v.to_string(), Timestamp::now()).unwrap()
    }))
}

/// A view event as (type, main field) for comparing with the RFD's listing.
fn brief(v: &ViewEvent) -> (String, String) {
    let kind = v.event.kind.event_type().as_str().to_owned();
    let detail = match &v.event.kind {
        EventKind::User { text }
        | EventKind::Assistant { text }
        | EventKind::Reasoning { text } => text.clone(),
        EventKind::ToolCall {
            id,
            name,
            arguments,
        } => format!("{id} {name} {}", arguments.as_str()),
        EventKind::ToolResult {
            id,
            content,
            is_error,
        } => format!("{id} {content} {is_error}"),
        _ => String::new(),
    };
    (kind, detail)
}

fn raw_example() -> Vec<Value> {
    vec![
        json!({"type":"turn_start"}),
        json!({"type":"user","text":"set up the project"}),
        json!({"type":"assistant","text":"I'll create the project structure."}),
        json!({"type":"tool_call","id":"1","name":"fs_create_file","arguments":{"path":"src/main.rs"}}),
        json!({"type":"tool_result","id":"1","content":"<200 lines of code>","is_error":false}),
        json!({"type":"assistant","text":"Created src/main.rs with a basic setup."}),
        json!({"type":"turn_start"}),
        json!({"type":"user","text":"add error handling"}),
        json!({"type":"reasoning","text":"<500 tokens of thinking>"}),
        json!({"type":"tool_call","id":"2","name":"fs_read_file","arguments":{"path":"src/main.rs"}}),
        json!({"type":"tool_result","id":"2","content":"<200 lines of code>","is_error":false}),
        json!({"type":"tool_call","id":"3","name":"fs_modify_file","arguments":{"path":"src/main.rs"}}),
        json!({"type":"tool_result","id":"3","content":"<300 lines of diff>","is_error":false}),
        json!({"type":"assistant","text":"Added error handling to main."}),
        json!({"type":"turn_start"}),
        json!({"type":"user","text":"now add logging"}),
        json!({"type":"reasoning","text":"<400 tokens of thinking>"}),
        json!({"type":"tool_call","id":"4","name":"fs_modify_file","arguments":{"path":"src/main.rs"}}),
        json!({"type":"tool_result","id":"4","content":"<250 lines of diff>","is_error":false}),
        json!({"type":"assistant","text":"Added tracing-based logging."}),
        json!({"type":"turn_start"}),
        json!({"type":"user","text":"turn 3 stays raw"}),
        json!({"type":"reasoning","text":"raw thinking"}),
    ]
}

#[test]
fn rfd_064_projection_example() {
    let mut values = raw_example();
    values.push(json!({
        "type": "compaction", "from_turn": 0, "to_turn": 2, "reasoning": "strip",
        "tool_calls": {"policy": "strip", "request": true, "response": true,
                       "tools": {"fs_read_file": {"request": "keep"}}},
    }));
    let view = project(&log(&values));
    assert!(view.iter().all(|v| v.summary_of.is_none()));
    let got: Vec<(String, String)> = view
        .iter()
        .filter(|v| v.event.kind != EventKind::TurnStart)
        .map(brief)
        .collect();
    let expected: Vec<(&str, &str)> = vec![
        ("user", "set up the project"),
        ("assistant", "I'll create the project structure."),
        ("tool_call", "1 fs_create_file {}"),
        ("tool_result", "1 [compacted] fs_create_file: success false"),
        ("assistant", "Created src/main.rs with a basic setup."),
        ("user", "add error handling"),
        ("tool_call", r#"2 fs_read_file {"path":"src/main.rs"}"#),
        ("tool_result", "2 [compacted] fs_read_file: success false"),
        ("tool_call", "3 fs_modify_file {}"),
        ("tool_result", "3 [compacted] fs_modify_file: success false"),
        ("assistant", "Added error handling to main."),
        ("user", "now add logging"),
        ("tool_call", "4 fs_modify_file {}"),
        ("tool_result", "4 [compacted] fs_modify_file: success false"),
        ("assistant", "Added tracing-based logging."),
        ("user", "turn 3 stays raw"),
        ("reasoning", "raw thinking"),
    ];
    let expected: Vec<(String, String)> = expected
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
    assert_eq!(got, expected);
    // Turn starts pass through: four turns, four turn_start events.
    assert_eq!(
        view.iter()
            .filter(|v| v.event.kind == EventKind::TurnStart)
            .count(),
        4
    );
}

/// Stacking: A (appended at turn 20) summarizes 0..=20; later B (at turn
/// 30) strips tool responses over 0..=30.
#[test]
fn rfd_064_stacking_table() {
    let mut values = Vec::new();
    for turn in 0..=30 {
        values.push(json!({"type":"turn_start"}));
        values.push(json!({"type":"user","text":format!("question {turn}")}));
        values.push(json!({"type":"reasoning","text":format!("thinking {turn}")}));
        values.push(json!({"type":"tool_call","id":format!("c{turn}"),"name":"grep","arguments":{"q":turn}}));
        values.push(json!({"type":"tool_result","id":format!("c{turn}"),"content":format!("result {turn}"),"is_error":false}));
        if turn == 20 {
            values.push(json!({"type":"compaction","from_turn":0,"to_turn":20,"summary":"A: turns 0 to 20"}));
        }
        if turn == 30 {
            values.push(json!({"type":"compaction","from_turn":0,"to_turn":30,
                "tool_calls":{"policy":"strip","request":false,"response":true}}));
        }
    }
    let view = project(&log(&values));
    // Turn 5, any event and tool calls: A summarizes (its summary beats B's
    // newer strip).
    assert!(view.iter().all(|v| v.turn != 5 || v.summary_of.is_some()));
    let injected: Vec<&ViewEvent> = view.iter().filter(|v| v.summary_of.is_some()).collect();
    assert_eq!(injected.len(), 3, "one run, three injected events");
    assert_eq!(
        brief(injected[1]),
        ("user".to_owned(), SUMMARY_HEADER.to_owned())
    );
    assert_eq!(
        brief(injected[2]),
        ("assistant".to_owned(), "A: turns 0 to 20".to_owned())
    );
    assert_eq!(injected[0].summary_of, Some((0, 20)));
    assert_eq!(
        injected[0].seq, 0,
        "injected before the first dropped event"
    );
    // Turn 25, tool calls: B strips responses and keeps requests.
    let turn25: Vec<(String, String)> = view.iter().filter(|v| v.turn == 25).map(brief).collect();
    assert!(turn25.contains(&("tool_call".to_owned(), r#"c25 grep {"q":25}"#.to_owned())));
    assert!(turn25.contains(&(
        "tool_result".to_owned(),
        "c25 [compacted] grep: success false".to_owned()
    )));
    // Turn 25, reasoning: no policy, kept.
    assert!(turn25.contains(&("reasoning".to_owned(), "thinking 25".to_owned())));
}

#[test]
fn a_newer_summary_nested_in_an_older_one_splits_it_into_two_runs() {
    let mut values = Vec::new();
    for turn in 0..6 {
        values.push(json!({"type":"turn_start"}));
        values.push(json!({"type":"user","text":format!("q{turn}")}));
    }
    values.push(json!({"type":"compaction","from_turn":0,"to_turn":5,"summary":"old"}));
    values.push(json!({"type":"compaction","from_turn":2,"to_turn":3,"summary":"new"}));
    let view = project(&log(&values));
    let texts: Vec<(String, Option<(u64, u64)>)> = view
        .iter()
        .filter(|v| matches!(v.event.kind, EventKind::Assistant { .. }))
        .map(|v| (brief(v).1, v.summary_of))
        .collect();
    assert_eq!(
        texts,
        [
            ("old".to_owned(), Some((0, 1))),
            ("new".to_owned(), Some((2, 3))),
            ("old".to_owned(), Some((4, 5))),
        ]
    );
}

#[test]
fn equal_timestamps_go_to_the_later_overlay_and_revert_restores() {
    let t = "2025-01-05T04:00:00.000000Z";
    let values = vec![
        json!({"type":"turn_start"}),
        json!({"type":"reasoning","text":"r"}),
        json!({"type":"compaction","from_turn":0,"to_turn":9,"reasoning":"keep","timestamp":t}),
        json!({"type":"compaction","from_turn":0,"to_turn":9,"reasoning":"strip","timestamp":t}),
    ];
    let view = project(&log(&values));
    assert!(view
        .iter()
        .all(|v| !matches!(v.event.kind, EventKind::Reasoning { .. })));
    let mut values = values;
    values.push(json!({"type":"compaction","from_turn":0,"to_turn":0,"revert":true,"timestamp":"2025-01-05T05:00:00Z"}));
    let view = project(&log(&values));
    assert!(view
        .iter()
        .any(|v| matches!(v.event.kind, EventKind::Reasoning { .. })));
}
