use super::*;
use crate::event::{Event, Timestamp};

fn parse(text: &str) -> Result<Event, EventError> {
    parse_event(text, Timestamp::from_micros(0).unwrap())
}

fn roundtrip(text: &str) -> String {
    event_to_string(&parse(text).unwrap())
}

fn field_error(text: &str) -> (String, String) {
    match parse(text) {
        Err(EventError::Field { field, problem }) => (field, problem),
        other => panic!("expected a field error for {text}, got {other:?}"),
    }
}

#[test]
fn every_event_type_round_trips_unchanged() {
    let lines = [
        r#"{"type":"turn_start","timestamp":"2025-01-05T04:00:00.000000Z"}"#,
        r#"{"type":"user","text":"hi \"there\"\n","timestamp":"2025-01-05T04:00:00.000001Z"}"#,
        r#"{"type":"assistant","text":"hello","timestamp":"2025-01-05T04:00:00.000000Z","meta":{"z":1,"a":[1.0,2e+3,-0,12345678901234567890123]}}"#,
        r#"{"type":"reasoning","text":"hmm","timestamp":"2025-01-05T04:00:00.000000Z"}"#,
        r#"{"type":"tool_call","id":"1","name":"fs_read_file","arguments":{"path":"src/main.rs"},"timestamp":"2025-01-05T04:00:00.000000Z"}"#,
        r#"{"type":"tool_result","id":"1","content":"fn main() {}","is_error":false,"timestamp":"2025-01-05T04:00:00.000000Z"}"#,
        r#"{"type":"system","text":"be brief","timestamp":"2025-01-05T04:00:00.000000Z"}"#,
        r#"{"type":"config","delta":{"model":"x"},"timestamp":"2025-01-05T04:00:00.000000Z"}"#,
        r#"{"type":"extension","name":"inquiry_request","payload":[1,"two",{"3":4}],"timestamp":"2025-01-05T04:00:00.000000Z"}"#,
        r#"{"type":"compaction","from_turn":0,"to_turn":2,"summary":"s","reasoning":"strip","tool_calls":"strip-requests","timestamp":"2025-01-05T04:00:00.000000Z"}"#,
        r#"{"type":"compaction","from_turn":0,"to_turn":2,"reasoning":"keep","tool_calls":{"policy":"strip","request":true,"response":false,"tools":{"fs_read_file":{"request":"keep","response":"strip"},"git":{}}},"timestamp":"2025-01-05T04:00:00.000000Z","meta":{}}"#,
        r#"{"type":"compaction","from_turn":1,"to_turn":1,"tool_calls":{"policy":"omit"},"profile":"default","tokens_before":10,"model":"m","tokens_after":5,"timestamp":"2025-01-05T04:00:00.000000Z"}"#,
        r#"{"type":"compaction","from_turn":3,"to_turn":9,"revert":true,"timestamp":"2025-01-05T04:00:00.000000Z"}"#,
        r#"{"type":"compaction","from_turn":3,"to_turn":9,"tool_calls":"omit","revert":false,"timestamp":"2025-01-05T04:00:00.000000Z"}"#,
    ];
    for line in lines {
        assert_eq!(roundtrip(line), line);
    }
}

#[test]
fn timestamps_are_normalised_to_utc_microseconds() {
    let out = roundtrip(r#"{"type":"turn_start","timestamp":"2025-01-05T05:00:00+01:00"}"#);
    assert_eq!(
        out,
        r#"{"type":"turn_start","timestamp":"2025-01-05T04:00:00.000000Z"}"#
    );
}

#[test]
fn a_missing_timestamp_takes_the_default() {
    let event = parse(r#"{"type":"turn_start"}"#).unwrap();
    assert_eq!(event.timestamp.as_micros(), 0);
}

#[test]
fn unknown_type_is_named() {
    let (field, problem) = field_error(r#"{"type":"chat","text":"x"}"#);
    assert_eq!(field, "type");
    assert!(problem.contains("\"chat\""), "{problem}");
}

#[test]
fn missing_mistyped_and_unknown_fields_are_named() {
    assert_eq!(field_error(r#"{"type":"user"}"#).0, "text");
    assert_eq!(field_error(r#"{"type":"user","text":5}"#).0, "text");
    assert_eq!(field_error(r#"{"text":"x"}"#).0, "type");
    assert_eq!(
        field_error(r#"{"type":"user","text":"x","txt":"y"}"#).0,
        "txt"
    );
    assert_eq!(
        field_error(r#"{"type":"tool_result","id":"1","content":"x"}"#).0,
        "is_error"
    );
    assert_eq!(
        field_error(r#"{"type":"tool_call","id":"1","name":"n","arguments":[]}"#).0,
        "arguments"
    );
    assert_eq!(field_error(r#"{"type":"config","delta":"x"}"#).0, "delta");
    assert_eq!(
        field_error(r#"{"type":"extension","name":"x"}"#).0,
        "payload"
    );
    assert_eq!(
        field_error(r#"{"type":"user","text":"x","meta":[]}"#).0,
        "meta"
    );
    assert_eq!(
        field_error(r#"{"type":"user","text":"x","timestamp":"today"}"#).0,
        "timestamp"
    );
    assert_eq!(
        field_error(r#"{"type":"user","text":"x","timestamp":1}"#).0,
        "timestamp"
    );
}

#[test]
fn compaction_fields_are_validated() {
    assert_eq!(
        field_error(r#"{"type":"compaction","to_turn":1}"#).0,
        "from_turn"
    );
    assert_eq!(
        field_error(r#"{"type":"compaction","from_turn":-1,"to_turn":1}"#).0,
        "from_turn"
    );
    assert_eq!(
        field_error(r#"{"type":"compaction","from_turn":1.5,"to_turn":1}"#).0,
        "from_turn"
    );
    assert_eq!(
        field_error(r#"{"type":"compaction","from_turn":2,"to_turn":1}"#).0,
        "to_turn"
    );
    assert_eq!(
        field_error(r#"{"type":"compaction","from_turn":0,"to_turn":1,"reasoning":"omit"}"#).0,
        "reasoning"
    );
    assert_eq!(
        field_error(r#"{"type":"compaction","from_turn":0,"to_turn":1,"tool_calls":"drop"}"#).0,
        "tool_calls"
    );
    assert_eq!(field_error(r#"{"type":"compaction","from_turn":0,"to_turn":1,"tool_calls":{"policy":"strip","request":"yes"}}"#).0, "tool_calls.request");
    assert_eq!(field_error(r#"{"type":"compaction","from_turn":0,"to_turn":1,"tool_calls":{"policy":"strip","tools":{"x":{"request":"drop"}}}}"#).0, "tool_calls.tools.x.request");
    assert_eq!(field_error(r#"{"type":"compaction","from_turn":0,"to_turn":1,"tool_calls":{"policy":"omit","request":true}}"#).0, "tool_calls.request");
    assert_eq!(
        field_error(
            r#"{"type":"compaction","from_turn":0,"to_turn":1,"revert":true,"reasoning":"strip"}"#
        )
        .0,
        "revert"
    );
    assert_eq!(
        field_error(r#"{"type":"compaction","from_turn":0,"to_turn":1,"tokens_before":"many"}"#).0,
        "tokens_before"
    );
    assert_eq!(
        field_error(r#"{"type":"compaction","from_turn":0,"to_turn":1,"summary":{"summary":"x"}}"#)
            .0,
        "summary"
    );
}

#[test]
fn huge_turn_numbers_are_kept() {
    let line = r#"{"type":"compaction","from_turn":0,"to_turn":18446744073709551615,"reasoning":"strip","timestamp":"2025-01-05T04:00:00.000000Z"}"#;
    assert_eq!(roundtrip(line), line);
}

#[test]
fn invalid_json_and_non_objects_are_refused() {
    assert!(matches!(parse("{"), Err(EventError::Syntax(_))));
    assert!(matches!(parse("[1]"), Err(EventError::NotObject)));
    let deep = "[".repeat(100_000);
    assert!(matches!(parse(&deep), Err(EventError::Syntax(_))));
}

#[test]
fn strings_escape_as_serde_json_does() {
    let s = "a\u{0}b\u{1f}c\"\\\t\r\n\u{8}\u{c}\u{7f}é😀";
    let mut out = Vec::new();
    write_json_string(&mut out, s);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        serde_json::to_string(s).unwrap()
    );
}
