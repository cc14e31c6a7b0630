//! No input makes a command panic: long fields in every table and format,
//! odd text, and hostile NDJSON lines through every command that reads or
//! writes events. A panic exits with 101; every answer here is 0, 1 or 2.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use crate::support::TestEnv;

/// Runs `args` and checks it ended without a panic.
fn no_panic(env: &TestEnv, args: &[&str], stdin: &str) {
    let run = env.run_with_stdin(args, stdin);
    assert!(
        [0, 1, 2].contains(&run.code) && !run.stderr.contains("panicked"),
        "{args:?} exited {}: {}",
        run.code,
        run.stderr
    );
}

/// Every command that reads a conversation, in every format.
fn read_everything(env: &TestEnv, conversation: &str) {
    let c = conversation;
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["list"],
        vec!["list", "--json"],
        vec!["verify"],
        vec!["verify", "--json"],
        vec!["log", c],
        vec!["log", c, "--lineage"],
        vec!["head", c],
        vec!["stats", c],
        vec!["stats", c, "--json"],
        vec!["stats", c, "--tokenizer", "cl100k"],
        vec!["view", c, "--list"],
        vec!["view", c, "--list", "--json"],
        vec!["pin", c, "--list"],
        vec!["compact", c, "--dry-run"],
        vec!["compact", c, "--dry-run", "--json"],
        vec!["compact", c, "--profile", "heavy", "--dry-run"],
    ];
    for format in ["ndjson", "json", "openai", "text"] {
        commands.push(vec!["project", c, "--format", format]);
        commands.push(vec!["view", c, "--format", format]);
    }
    for format in ["ndjson", "jp", "openai"] {
        commands.push(vec!["export", c, "--format", format]);
        commands.push(vec!["export", c, "--format", format, "--projected"]);
    }
    for turn in ["0", "1", "2"] {
        commands.push(vec!["explain", c, "--turn", turn]);
        commands.push(vec!["explain", c, "--turn", turn, "--json"]);
    }
    for args in &commands {
        no_panic(env, args, "");
    }
}

#[test]
fn long_fields_in_every_table_and_format() {
    let env = TestEnv::new();
    let long = "é".repeat(35_000); // 70,000 bytes, 35,000 characters
    let wide = "w".repeat(70_000);
    let odd = "\u{202e}rtl\u{200b}zero-width\u{0301}combining 🦀\\u0000nul\\ttab";
    let events = [
        r#"{"type":"turn_start"}"#.to_owned(),
        format!(r#"{{"type":"user","text":"{wide}"}}"#),
        format!(
            r#"{{"type":"tool_call","id":"{wide}","name":"{long}","arguments":{{"{long}":[{{"deep":{{"er":[1,2.5,-0,12345678901234567890123]}}}}]}}}}"#
        ),
        format!(r#"{{"type":"tool_result","id":"{wide}","content":"{odd}","is_error":true}}"#),
        format!(
            r#"{{"type":"extension","name":"{long}","payload":"{odd}","meta":{{"{wide}":"{odd}"}}}}"#
        ),
        r#"{"type":"turn_start"}"#.to_owned(),
        format!(r#"{{"type":"assistant","text":"{odd}"}}"#),
        format!(r#"{{"type":"config","delta":{{"model":"{long}"}}}}"#),
        format!(
            r#"{{"type":"compaction","from_turn":0,"to_turn":0,"reasoning":"strip","profile":"{wide}","model":"{long}","tokens_before":18446744073709551615,"tokens_after":0}}"#
        ),
        format!(
            r#"{{"type":"compaction","from_turn":1,"to_turn":9,"summary":"{long}","tool_calls":{{"policy":"strip","request":true,"response":false,"tools":{{"{long}":{{"request":"keep","response":"strip"}}}}}}}}"#
        ),
        r#"{"type":"turn_start"}"#.to_owned(),
        format!(r#"{{"type":"reasoning","text":"{wide}"}}"#),
    ];
    env.run_with_stdin(&["append", "c"], &(events.join("\n") + "\n"))
        .ok();
    env.run(&["pin", "c", "--turns", "0..1"]).ok();
    env.run(&["fork", "c", "--at-turn", "1", "--name", &"f".repeat(200)])
        .ok();
    read_everything(&env, "c");
    read_everything(&env, &"f".repeat(200));
    // Names that cannot be stored are refused, not stored and then
    // choked on.
    for name in ["", " x", "a\nb", &"v".repeat(100_000)] {
        let run = env.run(&["view", "c", "--name", name]).usage();
        assert!(run.stderr.contains("invalid view name"), "{}", run.stderr);
    }
    no_panic(&env, &["view", "c", "--list"], "");
}

/// Lines a fuzzer or a careless producer would send.
const HOSTILE: &[&str] = &[
    "",
    "null",
    "[]",
    "\"user\"",
    "{}",
    r#"{"type":null}"#,
    r#"{"type":"user","text":null}"#,
    r#"{"type":"user","text":1e400}"#,
    r#"{"type":"tool_call","id":"a","name":"b","arguments":{"x":-1e999}}"#,
    r#"{"type":"user","text":"a","text":"b"}"#,
    r#"{"type":"compaction","from_turn":18446744073709551615,"to_turn":18446744073709551615,"reasoning":"strip"}"#,
    r#"{"type":"compaction","from_turn":-1,"to_turn":2,"reasoning":"strip"}"#,
    r#"{"type":"compaction","from_turn":0,"to_turn":1.5,"reasoning":"strip"}"#,
    r#"{"type":"compaction","from_turn":0,"to_turn":1,"tool_calls":{"policy":"strip","tools":{"x":{"request":"maybe"}}}}"#,
    r#"{"type":"user","text":"x","timestamp":"99999-01-01T00:00:00Z"}"#,
    r#"{"type":"user","text":"x","timestamp":"-0001-01-01T00:00:00Z"}"#,
    r#"{"type":"user","text":"x","timestamp":"2026-02-30T00:00:00Z"}"#,
    r#"{"type":"user","text":"x","meta":[]}"#,
    r#"{"type":"user","text":"\ud800"}"#,
    "{\"type\":\"user\",\"text\":\"\u{feff}bom\"}",
    r#"{"type":"extension","name":"x"}"#,
    "\u{feff}{\"type\":\"user\",\"text\":\"x\"}",
    "{\"type\":\"user\",\"text\":\"x\"}\r",
];

#[test]
fn hostile_lines_through_append_and_import() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--turn", "--user", "x"]).ok();
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let mut lines: Vec<String> = HOSTILE.iter().map(|s| (*s).to_owned()).collect();
    lines.push(deep.clone());
    lines.push(format!(
        r#"{{"type":"user","text":"x","meta":{{"a":{deep}}}}}"#
    ));
    for line in &lines {
        let input = format!("{line}\n");
        no_panic(&env, &["append", "c"], &input);
        no_panic(
            &env,
            &["import", "--format", "ndjson", "-", "--name", "i"],
            &input,
        );
        no_panic(
            &env,
            &["import", "--format", "jp", "-", "--name", "j"],
            &format!("[{line}]"),
        );
        no_panic(
            &env,
            &["import", "--format", "openai", "-", "--name", "o"],
            &format!("[{line}]"),
        );
        for bound in ["--from", "--to"] {
            no_panic(
                &env,
                &["compact", "c", "--reasoning", "strip", bound, line],
                "",
            );
        }
        no_panic(&env, &["project", "c", "--turns", line], "");
        no_panic(&env, &["project", "c", "--as-of", line], "");
    }
    read_everything(&env, "c");
}
