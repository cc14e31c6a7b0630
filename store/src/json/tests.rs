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
    // One line: its column only (the caller names the line).
    match parse(r#"{"type":"user","te"#) {
        Err(EventError::Syntax(m)) => assert_eq!(m, "EOF while parsing a string at column 18"),
        other => panic!("{other:?}"),
    }
    match parse("{\n\"type\": 1,,}") {
        Err(EventError::Syntax(m)) => assert!(m.ends_with("at line 2 column 11"), "{m}"),
        other => panic!("{other:?}"),
    }
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

mod fast_reader {
    //! The fast reader answers only what the strict one would: on lines
    //! made of the fields of every type, valid or not (missing, extra,
    //! `null`, mistyped, duplicated, escaped keys, nested duplicates,
    //! numbers too large), whatever it reads equals the strict reader's
    //! event, and it reads most valid lines.
    use proptest::prelude::*;

    use super::super::{fast, parse::parse_strictly};
    use crate::event::Timestamp;

    fn value() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            r#""text""#,
            r#""with \"escapes\" \n \u00e9 \ud83d\ude42""#,
            r#""2025-01-05T04:00:00.000001Z""#,
            r#""2025-01-05T04:00:00+02:00""#,
            r#""not a time""#,
            "null",
            "true",
            "false",
            "0",
            "12345678901234567890123",
            "1e400",
            "-1.5e3",
            "[]",
            r#"[1, "two", {"3": 4}]"#,
            "{}",
            r#"{ "path" : "src/main.rs" , "n" : 1.0 }"#,
            r#"{"a": 1, "a": 2}"#,
            r#"{"deep": {"x": [1e400]}}"#,
            r#"{"z": 1, "a": {"b": null}}"#,
        ])
        .prop_map(str::to_owned)
    }

    fn key() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "type",
            "timestamp",
            "text",
            "id",
            "name",
            "content",
            "is_error",
            "arguments",
            "delta",
            "payload",
            "meta",
            "from_turn",
            "extra",
            "te\\u0078t",
        ])
        .prop_map(str::to_owned)
    }

    fn type_name() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "turn_start",
            "user",
            "assistant",
            "reasoning",
            "system",
            "tool_call",
            "tool_result",
            "config",
            "extension",
            "compaction",
            "bogus",
        ])
        .prop_map(|t| format!("\"{t}\""))
    }

    /// A valid line of `kind`'s fields, with values drawn at random.
    fn line() -> impl Strategy<Value = String> {
        (
            type_name(),
            prop::collection::vec((key(), value()), 0..6),
            prop::sample::select(vec!["", " ", "\n"]),
            any::<bool>(),
        )
            .prop_map(|(kind, fields, space, type_last)| {
                let mut parts: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("\"{k}\":{space}{v}"))
                    .collect();
                let at = if type_last { parts.len() } else { 0 };
                parts.insert(at, format!("\"type\":{kind}"));
                format!("{{{space}{}{space}}}", parts.join(","))
            })
    }

    /// Valid events of every flat type, to check the fast reader takes
    /// them.
    fn valid() -> impl Strategy<Value = String> {
        let text = prop::sample::select(vec!["hi", "with \\\"q\\\" \\n", "é 🙂"]);
        let object = prop::sample::select(vec![
            "{}",
            r#"{"b":1,"a":[1.0,"x"]}"#,
            r#"{ "n" : 12345678901234567890 }"#,
        ]);
        (text, object, 0..8u8, any::<bool>()).prop_map(|(text, object, t, stamp)| {
            let body = match t {
                0 => r#""type":"turn_start""#.to_owned(),
                1 => format!(r#""type":"user","text":"{text}""#),
                2 => format!(r#""type":"assistant","text":"{text}","meta":{object}"#),
                3 => format!(r#""type":"reasoning","text":"{text}""#),
                4 => {
                    format!(r#""type":"tool_call","id":"c1","name":"{text}","arguments":{object}"#)
                }
                5 => {
                    format!(r#""type":"tool_result","id":"c1","content":"{text}","is_error":true"#)
                }
                6 => format!(r#""type":"config","delta":{object}"#),
                _ => format!(r#""type":"extension","name":"x","payload":{object}"#),
            };
            let stamp = if stamp {
                r#","timestamp":"2025-01-05T04:00:00.000001Z""#
            } else {
                ""
            };
            format!("{{{body}{stamp}}}")
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        #[test]
        fn answers_only_what_the_strict_reader_answers(text in line()) {
            let now = Timestamp::from_micros(7).unwrap();
            if let Some(event) = fast::parse(&text, now) {
                prop_assert_eq!(Ok(event), parse_strictly(&text, now), "{}", text);
            }
        }

        #[test]
        fn reads_valid_flat_events(text in valid()) {
            let now = Timestamp::from_micros(7).unwrap();
            let strict = parse_strictly(&text, now);
            prop_assert!(strict.is_ok(), "{} {:?}", text, strict);
            prop_assert_eq!(fast::parse(&text, now), strict.ok(), "{}", text);
        }
    }
}
