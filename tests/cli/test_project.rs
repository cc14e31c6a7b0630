use convstore_projection::openai::validate;
use convstore_projection::{project, LogEvent};
use convstore_store::json::{write_event_fields, ObjectWriter};
use serde_json::Value;

use crate::support::TestEnv;

/// A conversation of six turns with reasoning and tool calls, timestamps a
/// minute apart from 2025-01-05T04:00Z.
pub(crate) fn seeded() -> TestEnv {
    let env = TestEnv::new();
    let mut lines = Vec::new();
    let mut minute = 0;
    let mut ts = || {
        minute += 1;
        format!("2025-01-05T{:02}:{:02}:00Z", 4 + minute / 60, minute % 60)
    };
    lines.push(format!(
        r#"{{"type":"system","text":"be brief","timestamp":"{}"}}"#,
        ts()
    ));
    for turn in 0..6 {
        lines.push(format!(r#"{{"type":"turn_start","timestamp":"{}"}}"#, ts()));
        lines.push(format!(
            r#"{{"type":"user","text":"question {turn}","timestamp":"{}"}}"#,
            ts()
        ));
        lines.push(format!(
            r#"{{"type":"reasoning","text":"thinking {turn}","timestamp":"{}"}}"#,
            ts()
        ));
        lines.push(format!(
            r#"{{"type":"tool_call","id":"c{turn}","name":"grep","arguments":{{"q":"{turn}"}},"timestamp":"{}"}}"#,
            ts()
        ));
        lines.push(format!(
            r#"{{"type":"tool_result","id":"c{turn}","content":"found {turn}","is_error":false,"timestamp":"{}"}}"#,
            ts()
        ));
        lines.push(format!(
            r#"{{"type":"assistant","text":"answer {turn}","timestamp":"{}"}}"#,
            ts()
        ));
    }
    env.run_with_stdin(&["append", "chat"], &lines.join("\n"))
        .ok();
    env
}

fn compactions(env: &TestEnv) -> Vec<Value> {
    env.run(&["log", "chat"])
        .ok()
        .lines()
        .into_iter()
        .filter(|r| r["type"] == "compaction")
        .collect()
}

#[test]
fn project_hides_compactions_and_marks_summaries() {
    let env = seeded();
    // Forced: on turns this short, the summary's header and the stripped
    // results' markers are longer than what they replace.
    env.run(&[
        "compact",
        "chat",
        "--summary",
        "turns 0-1",
        "--from",
        "0",
        "--to",
        "1",
        "--force",
    ])
    .ok();
    env.run(&[
        "compact",
        "chat",
        "--reasoning",
        "strip",
        "--tool-calls",
        "strip-responses",
        "--force",
    ])
    .ok();
    let view = env.run(&["project", "chat"]).ok().lines();
    assert!(view.iter().all(|v| v["type"] != "compaction"));
    let injected: Vec<&Value> = view
        .iter()
        .filter(|v| v.get("summary_of").is_some())
        .collect();
    assert_eq!(injected.len(), 3);
    assert_eq!(injected[0]["summary_of"], serde_json::json!([0, 1]));
    assert_eq!(injected[2]["text"], "turns 0-1");
    assert!(view.iter().all(|v| v["type"] != "reasoning"));
    let result = view.iter().find(|v| v["type"] == "tool_result").unwrap();
    assert_eq!(result["content"], "[compacted] grep: success");
    let call = view.iter().find(|v| v["type"] == "tool_call").unwrap();
    assert_eq!(call["arguments"]["q"], "2");
    // json is the same events as one array; text and openai render them.
    let array: Value = serde_json::from_str(
        &env.run(&["project", "chat", "--format", "json"])
            .ok()
            .stdout,
    )
    .unwrap();
    assert_eq!(array.as_array().unwrap(), &view);
    let text = env
        .run(&["project", "chat", "--format", "text"])
        .ok()
        .stdout;
    assert!(text.contains("[turn 0] assistant: turns 0-1"), "{text}");
    let openai: Value = serde_json::from_str(
        &env.run(&["project", "chat", "--format", "openai"])
            .ok()
            .stdout,
    )
    .unwrap();
    validate(openai.as_array().unwrap()).unwrap();
    // stats shows raw and projected tokens per kind.
    let stats = &env.run(&["stats", "chat", "--json"]).ok().lines()[0];
    assert!(
        stats["view_tokens"].as_u64() < stats["tokens"].as_u64(),
        "{stats}"
    );
    assert_eq!(stats["kinds"]["reasoning"]["view_events"], 0);
    assert_eq!(stats["kinds"]["reasoning"]["events"], 6);
    assert_eq!(stats["kinds"]["compaction"]["view_events"], 0);
}

#[test]
fn turns_filter_keeps_only_those_turns() {
    let env = seeded();
    let view = env
        .run(&["project", "chat", "--turns", "2..3"])
        .ok()
        .lines();
    assert!(!view.is_empty());
    assert!(view
        .iter()
        .all(|v| (2..=3).contains(&v["turn"].as_u64().unwrap())));
    env.run(&["project", "chat", "--turns", "5..2"]).usage();
}

/// `--as-of SEQ` equals projecting the prefix `0..=SEQ`.
#[test]
fn as_of_equals_projecting_the_prefix() {
    let env = seeded();
    env.run(&["compact", "chat", "--reasoning", "strip", "--to", "2"])
        .ok();
    env.run(&["append", "chat", "--turn", "--user", "later"])
        .ok();
    env.run(&[
        "compact",
        "chat",
        "--summary",
        "early",
        "--from",
        "1",
        "--to",
        "3",
    ])
    .ok();
    let log = env.run(&["log", "chat"]).ok().lines();
    let events: Vec<LogEvent> = log
        .iter()
        .map(|r| {
            let mut v = r.clone();
            let obj = v.as_object_mut().unwrap();
            let seq = obj.remove("seq").unwrap().as_u64().unwrap();
            let turn = obj.remove("turn").unwrap().as_u64().unwrap();
            obj.remove("address");
            let event = convstore_store::json::parse_event(
                &v.to_string(),
                convstore_store::Timestamp::now(),
            )
            .unwrap();
            LogEvent { seq, turn, event }
        })
        .collect();
    for k in 0..events.len() {
        let expected: Vec<Value> = project(&events[..=k])
            .iter()
            .map(|v| {
                let mut out = Vec::new();
                let mut o = ObjectWriter::begin(&mut out);
                o.u64("seq", v.seq);
                o.u64("turn", v.turn);
                if let Some((a, b)) = v.summary_of {
                    o.raw("summary_of", &format!("[{a},{b}]"));
                }
                write_event_fields(&v.event, &mut o);
                o.end();
                serde_json::from_slice(&out).unwrap()
            })
            .collect();
        let got = env
            .run(&["project", "chat", "--as-of", &k.to_string()])
            .ok()
            .lines();
        assert_eq!(got, expected, "as of {k}");
    }
    env.run(&["project", "chat", "--as-of", &events.len().to_string()])
        .fails();
}

#[test]
fn compact_resolves_every_bound_form() {
    let env = seeded();
    let cases: [(&[&str], (u64, u64)); 6] = [
        (&["--from", "1", "--to", "3"], (1, 3)),
        (&["--from", "-4", "--to", "-1"], (1, 4)),
        (&["--keep-last", "2"], (0, 3)),
        (&["--from", "last"], (4, 5)),
        // Turns started a minute apart on 2025-01-05: all started >1d ago.
        (&["--to", "1d"], (0, 5)),
        (&["--from", "1000d", "--to", "-5"], (0, 0)),
    ];
    for (flags, expected) in cases {
        let mut args = vec![
            "compact",
            "chat",
            "--reasoning",
            "strip",
            "--dry-run",
            "--json",
        ];
        args.extend_from_slice(flags);
        let out = env.run(&args).ok().lines();
        assert_eq!(
            (
                out[0]["from_turn"].as_u64().unwrap(),
                out[0]["to_turn"].as_u64().unwrap()
            ),
            expected,
            "{flags:?}"
        );
        // The last range is stripped already by then: nothing changes.
        let status = if flags == ["--from", "1000d", "--to", "-5"] {
            "noop"
        } else {
            "dry_run"
        };
        assert_eq!(out[0]["status"], status, "{flags:?}");
        if flags == ["--keep-last", "2"] {
            // Store it so that `last` below has something to follow.
            let mut stored = args.clone();
            stored.retain(|a| *a != "--dry-run");
            env.run(&stored).ok();
        }
    }
    assert_eq!(compactions(&env).len(), 1, "dry runs store nothing");
    let err = env
        .run(&["compact", "chat", "--reasoning", "strip", "--from", "1h"])
        .fails();
    assert!(err.stderr.contains("no turn started"), "{}", err.stderr);
}

#[test]
fn a_new_summary_widens_over_the_summaries_it_meets() {
    let env = seeded();
    env.run(&[
        "compact",
        "chat",
        "--summary",
        "a",
        "--from",
        "1",
        "--to",
        "2",
    ])
    .ok();
    env.run(&[
        "compact",
        "chat",
        "--summary",
        "b",
        "--from",
        "4",
        "--to",
        "5",
    ])
    .ok();
    let out = env
        .run(&[
            "compact",
            "chat",
            "--summary",
            "c",
            "--from",
            "2",
            "--to",
            "3",
            "--json",
        ])
        .ok()
        .lines();
    assert_eq!(out[0]["from_turn"], 1);
    assert_eq!(out[0]["to_turn"], 3);
    assert_eq!(out[0]["requested"], serde_json::json!([2, 3]));
    let stored = compactions(&env);
    assert_eq!(
        (
            stored[2]["from_turn"].as_u64(),
            stored[2]["to_turn"].as_u64()
        ),
        (Some(1), Some(3))
    );
    // Mechanical policies do not widen.
    let out = env
        .run(&[
            "compact",
            "chat",
            "--reasoning",
            "strip",
            "--from",
            "2",
            "--to",
            "3",
            "--json",
        ])
        .ok()
        .lines();
    assert_eq!(
        (out[0]["from_turn"].as_u64(), out[0]["to_turn"].as_u64()),
        (Some(2), Some(3))
    );
}

#[test]
fn compact_errors_store_nothing() {
    let env = seeded();
    for args in [
        &["compact", "chat"][..],
        &["compact", "chat", "--reasoning", "strip", "--from", "9"],
        &["compact", "chat", "--reasoning", "strip", "--to", "-7"],
    ] {
        env.run(args).fails();
    }
    // Inverted by its own numbers: a usage error.
    let run = env
        .run(&[
            "compact",
            "chat",
            "--reasoning",
            "strip",
            "--from",
            "4",
            "--to",
            "2",
        ])
        .usage();
    assert!(run.stderr.contains("inverted"), "{}", run.stderr);
    // A bound that does not parse is a usage error.
    env.run(&[
        "compact",
        "chat",
        "--reasoning",
        "strip",
        "--from",
        "yesterday",
    ])
    .usage();
    assert_eq!(
        env.run(&["compact", "chat", "--revert", "--reasoning", "strip"])
            .code,
        2
    );
    assert!(compactions(&env).is_empty());
}

#[test]
fn compact_reports_tokens_and_dry_run_shows_losses() {
    let env = seeded();
    let out = env
        .run(&["compact", "chat", "--tool-calls", "omit", "--dry-run"])
        .ok();
    assert!(out.stdout.contains("range: turns 0..5"), "{}", out.stdout);
    assert!(out.stdout.contains("tool_call    6 -> 0"), "{}", out.stdout);
    assert!(out.stdout.contains("tokens: "), "{}", out.stdout);
    let json = env
        .run(&["compact", "chat", "--tool-calls", "omit", "--json"])
        .ok()
        .lines();
    assert!(json[0]["tokens_after"].as_u64() < json[0]["tokens_before"].as_u64());
    let stored = compactions(&env);
    assert_eq!(stored[0]["tokens_before"], json[0]["tokens_before"]);
}

/// `--turns A..B` reads only those turns' records and places only the
/// summaries that meet them; what it prints is the whole view's events of
/// those turns, whatever the range cuts (a summary run, a stripped call and
/// its result), in every format and as of a past record.
#[test]
fn a_turn_range_is_the_whole_view_filtered() {
    let env = TestEnv::new();
    env.run(&[
        "gen",
        "g",
        "--events",
        "3000",
        "--compactions",
        "120",
        "--seed",
        "4",
    ])
    .ok();
    let whole = env.run(&["project", "g"]).ok().lines();
    let summaries = whole
        .iter()
        .filter(|v| v.get("summary_of").is_some())
        .count();
    assert!(summaries > 5, "{summaries}");
    let last = whole.last().unwrap()["turn"].as_u64().unwrap();
    let as_of = env.run(&["project", "g", "--as-of", "2000"]).ok().lines();
    let mut ranges = vec![
        (0, 0),
        (0, last),
        (last, last),
        (1, 3),
        (last - 2, last + 5),
    ];
    // Ranges starting inside, at and after summary runs.
    for v in whole.iter().filter_map(|v| v.get("summary_of")).step_by(3) {
        let (a, b) = (v[0].as_u64().unwrap(), v[1].as_u64().unwrap());
        ranges.extend([(a, b), (a + 1, b + 1), (b, b + 2), (a.saturating_sub(1), a)]);
    }
    for (a, b) in ranges {
        let range = format!("{a}..{b}");
        let expect = |view: &[Value]| -> Vec<Value> {
            view.iter()
                .filter(|v| (a..=b).contains(&v["turn"].as_u64().unwrap()))
                .cloned()
                .collect()
        };
        let got = env.run(&["project", "g", "--turns", &range]).ok().lines();
        assert_eq!(got, expect(&whole), "--turns {range}");
        let text = env
            .run(&["project", "g", "--turns", &range, "--format", "text"])
            .ok()
            .stdout;
        assert_eq!(text.lines().count(), got.len(), "--turns {range} text");
        if a <= as_of.last().unwrap()["turn"].as_u64().unwrap() {
            let got = env
                .run(&["project", "g", "--turns", &range, "--as-of", "2000"])
                .ok()
                .lines();
            assert_eq!(got, expect(&as_of), "--turns {range} --as-of 2000");
        }
    }

    // A stripped result is named by the latest call with its id, even one
    // after the range; a result without a call is "unknown".
    let events = [
        r#"{"type":"tool_call","id":"c1","name":"first","arguments":{}}"#,
        r#"{"type":"turn_start"}"#,
        r#"{"type":"tool_result","id":"c1","content":"one","is_error":false}"#,
        r#"{"type":"tool_result","id":"c9","content":"orphan","is_error":false}"#,
        r#"{"type":"turn_start"}"#,
        r#"{"type":"tool_call","id":"c1","name":"second","arguments":{}}"#,
        r#"{"type":"compaction","from_turn":0,"to_turn":2,"tool_calls":"strip"}"#,
    ];
    env.run_with_stdin(&["append", "calls"], &(events.join("\n") + "\n"))
        .ok();
    let whole = env.run(&["project", "calls"]).ok().lines();
    let turn_1: Vec<Value> = whole.iter().filter(|v| v["turn"] == 1).cloned().collect();
    assert_eq!(turn_1[1]["content"], "[compacted] second: success");
    assert_eq!(turn_1[2]["content"], "[compacted] unknown: success");
    let got = env.run(&["project", "calls", "--turns", "1"]).ok().lines();
    assert_eq!(got, turn_1);
}
