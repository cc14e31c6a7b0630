//! Audit replay by time, `explain`, forks and materialized views, through
//! the binary.

use serde_json::Value;

use crate::support::TestEnv;
use crate::test_project::seeded;

/// Records of `log CONV` without their addresses.
fn log_of(env: &TestEnv, conv: &str) -> Vec<Value> {
    env.run(&["log", conv]).ok().lines()
}

/// A log whose records all carry timestamps a minute apart, compactions
/// included.
fn timed() -> TestEnv {
    let env = TestEnv::new();
    let mut lines = Vec::new();
    for minute in 0..30u32 {
        let ts = format!("2025-03-01T10:{minute:02}:00Z");
        let line = match minute % 6 {
            0 => format!(r#"{{"type":"turn_start","timestamp":"{ts}"}}"#),
            1 => format!(r#"{{"type":"user","text":"q{minute}","timestamp":"{ts}"}}"#),
            2 => format!(r#"{{"type":"reasoning","text":"r{minute}","timestamp":"{ts}"}}"#),
            3 => format!(
                r#"{{"type":"compaction","from_turn":0,"to_turn":{},"reasoning":"strip","timestamp":"{ts}"}}"#,
                minute / 12
            ),
            4 => format!(
                r#"{{"type":"compaction","from_turn":0,"to_turn":0,"summary":"s{minute}","timestamp":"{ts}"}}"#
            ),
            _ => format!(r#"{{"type":"assistant","text":"a{minute}","timestamp":"{ts}"}}"#),
        };
        lines.push(line);
    }
    env.run_with_stdin(&["append", "chat"], &lines.join("\n"))
        .ok();
    env
}

#[test]
fn as_of_a_time_is_as_of_the_newest_record_at_or_before_it() {
    let env = timed();
    for seq in 0..30u32 {
        let exact = format!("2025-03-01T10:{seq:02}:00Z");
        let between = format!("2025-03-01T10:{seq:02}:30Z");
        let by_seq = env
            .run(&["project", "chat", "--as-of", &seq.to_string()])
            .ok()
            .stdout;
        for time in [&exact, &between] {
            let by_time = env.run(&["project", "chat", "--as-of", time]).ok().stdout;
            assert_eq!(by_time, by_seq, "--as-of {time}");
        }
        // An offset names the same instant.
        let shifted = format!("2025-03-01T11:{seq:02}:00+01:00");
        assert_eq!(
            env.run(&["project", "chat", "--as-of", &shifted])
                .ok()
                .stdout,
            by_seq
        );
        let log = env.run(&["log", "chat", "--as-of", &exact]).ok().lines();
        assert_eq!(log.len() as u32, seq + 1);
        assert_eq!(log, log_of(&env, "chat")[..=seq as usize]);
    }
    let err = env
        .run(&["project", "chat", "--as-of", "2025-03-01T09:59:59Z"])
        .fails();
    assert!(
        err.stderr.contains("no record is at or before"),
        "{}",
        err.stderr
    );
    let err = env.run(&["log", "chat", "--as-of", "yesterday"]);
    assert_eq!(err.code, 2, "{}", err.stderr);
    assert!(err.stderr.contains("RFC 3339"), "{}", err.stderr);
}

#[test]
fn as_of_a_time_picks_the_newest_timestamp_when_records_are_out_of_order() {
    let env = TestEnv::new();
    let lines = [
        r#"{"type":"user","text":"a","timestamp":"2025-01-01T10:00:00Z"}"#,
        r#"{"type":"user","text":"b","timestamp":"2025-01-01T12:00:00Z"}"#,
        r#"{"type":"user","text":"c","timestamp":"2025-01-01T11:00:00Z"}"#,
        r#"{"type":"user","text":"d","timestamp":"2025-01-01T11:00:00Z"}"#,
    ];
    env.run_with_stdin(&["append", "chat"], &lines.join("\n"))
        .ok();
    let count = |time: &str| {
        env.run(&["log", "chat", "--as-of", time])
            .ok()
            .lines()
            .len()
    };
    // 10:30: only `a` is at or before it.
    assert_eq!(count("2025-01-01T10:30:00Z"), 1);
    // 11:30: `c` and `d` (11:00) are the newest; among equals, the later.
    assert_eq!(count("2025-01-01T11:30:00Z"), 4);
    // 12:00: `b`.
    assert_eq!(count("2025-01-01T12:00:00Z"), 2);
}

#[test]
fn explain_names_the_winner_of_each_content_type() {
    let env = seeded();
    env.run(&[
        "compact",
        "chat",
        "--reasoning",
        "strip",
        "--from",
        "0",
        "--to",
        "3",
    ])
    .ok();
    env.run(&[
        "compact",
        "chat",
        "--tool-calls",
        "omit",
        "--from",
        "2",
        "--to",
        "5",
    ])
    .ok();
    env.run(&[
        "compact",
        "chat",
        "--reasoning",
        "keep",
        "--from",
        "3",
        "--to",
        "9",
    ])
    .ok();
    let seqs: Vec<u64> = log_of(&env, "chat")
        .iter()
        .filter(|r| r["type"] == "compaction")
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    let explain = |turn: &str| -> Value {
        serde_json::from_str(
            &env.run(&["explain", "chat", "--turn", turn, "--json"])
                .ok()
                .stdout,
        )
        .unwrap()
    };
    let two = explain("2");
    assert_eq!(two["winners"]["reasoning"], seqs[0]);
    assert_eq!(two["winners"]["tool_calls"], seqs[1]);
    assert_eq!(two["winners"]["summary"], Value::Null);
    assert_eq!(two["covering"].as_array().unwrap().len(), 2);
    let three = explain("3");
    assert_eq!(three["winners"]["reasoning"], seqs[2]);
    assert_eq!(three["covering"].as_array().unwrap().len(), 3);
    let zero = explain("0");
    assert_eq!(zero["winners"]["tool_calls"], Value::Null);
    // Before the second compaction existed, turn 2 had no tool policy.
    let then: Value = serde_json::from_str(
        &env.run(&[
            "explain",
            "chat",
            "--turn",
            "2",
            "--as-of",
            &seqs[0].to_string(),
            "--json",
        ])
        .ok()
        .stdout,
    )
    .unwrap();
    assert_eq!(then["winners"]["tool_calls"], Value::Null);
    let text = env.run(&["explain", "chat", "--turn", "2"]).ok().stdout;
    assert!(text.contains("omit"), "{text}");
    env.run(&["explain", "chat", "--turn", "6"]).fails();
}

#[test]
fn a_fork_shares_the_prefix_and_takes_its_own_appends() {
    let env = seeded();
    let parent = log_of(&env, "chat");
    env.run(&["fork", "chat", "--at-turn", "2", "--name", "alt"])
        .ok();
    let fork = log_of(&env, "alt");
    // Turns 0..=2 and nothing after, addresses included.
    let shared: Vec<Value> = parent
        .iter()
        .filter(|r| r["turn"].as_u64().unwrap() <= 2)
        .cloned()
        .collect();
    assert_eq!(fork, shared);

    env.run(&["append", "alt", "--turn", "--user", "another way"])
        .ok();
    env.run(&["compact", "chat", "--tool-calls", "omit"]).ok();
    let fork = log_of(&env, "alt");
    assert_eq!(fork.len(), shared.len() + 2);
    assert_eq!(fork[shared.len() + 1]["text"], "another way");
    assert_eq!(fork[shared.len()]["turn"], 3);
    // The parent's later compaction does not apply to the fork.
    let view = env.run(&["project", "alt"]).ok().lines();
    assert!(view.iter().any(|e| e["type"] == "tool_call"));
    assert_eq!(log_of(&env, "chat").len(), parent.len() + 1);

    let lineage = env.run(&["log", "alt", "--lineage"]).ok().lines();
    assert_eq!(lineage.len(), 2);
    assert_eq!(lineage[0]["name"], "alt");
    assert_eq!(lineage[0]["shared"], shared.len());
    assert_eq!(lineage[0]["fork_head"], shared.last().unwrap()["address"]);
    assert_eq!(lineage[1]["name"], "chat");
    assert_eq!(lineage[1]["parent"], Value::Null);
    let stats: Value =
        serde_json::from_str(&env.run(&["stats", "alt", "--json"]).ok().stdout).unwrap();
    assert_eq!(stats["fork"]["shared"], shared.len());
    assert_eq!(stats["kinds"]["user"]["events"], 4);
    let verified: Value =
        serde_json::from_str(&env.run(&["verify", "alt", "--json"]).ok().stdout).unwrap();
    assert_eq!(verified["records"], shared.len() + 2);
    env.run(&["verify"]).ok();
}

#[test]
fn fork_points_and_compaction() {
    let env = seeded();
    let parent = log_of(&env, "chat");
    let run = env.run(&["fork", "chat", "--at-seq", "4", "--json"]).ok();
    let forked: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(forked["at"], 5);
    assert_eq!(forked["head"], parent[4]["address"]);
    // A fork of a fork.
    let id = forked["id"].as_str().unwrap().to_owned();
    env.run(&["fork", &id, "--name", "grandchild"]).ok();
    assert_eq!(log_of(&env, "grandchild"), parent[..5]);
    assert_eq!(
        env.run(&["log", "grandchild", "--lineage"])
            .ok()
            .lines()
            .len(),
        3
    );
    // The whole log by default, compacted with a profile on request.
    env.run(&["fork", "chat", "--name", "light", "--compact=light"])
        .ok();
    let light = log_of(&env, "light");
    assert_eq!(light.len(), parent.len() + 1);
    let compaction = &light[parent.len()];
    assert_eq!(compaction["type"], "compaction");
    assert_eq!(compaction["reasoning"], "strip");
    assert_eq!(compaction["profile"], "light");
    let view = env.run(&["project", "light"]).ok().lines();
    assert!(view.iter().all(|e| e["type"] != "reasoning"));
    // heavy: a summary by the built-in extractive summarizer.
    env.run(&["fork", "chat", "--name", "heavy", "--compact=heavy"])
        .ok();
    let heavy = log_of(&env, "heavy");
    let summary = heavy.last().unwrap()["summary"].as_str().unwrap();
    assert!(summary.starts_with("<state_snapshot>"), "{summary}");
    assert!(summary.contains("question 5"), "{summary}");

    let before = env.run(&["list", "--json"]).ok().stdout;
    env.run(&["fork", "chat", "--at-seq", "999"]).fails();
    env.run(&["fork", "chat", "--at-turn", "6"]).fails();
    env.run(&["fork", "chat", "--compact=nope"]).fails();
    env.run(&["fork", "chat", "--name", "light"]).fails();
    assert_eq!(env.run(&["list", "--json"]).ok().stdout, before);
}

#[test]
fn a_view_reads_what_project_prints_and_stays_current() {
    let env = seeded();
    let same = |env: &TestEnv| {
        let view = env.run(&["view", "chat", "-q"]).ok().stdout;
        assert_eq!(view, env.run(&["project", "chat"]).ok().stdout);
    };
    same(&env);
    env.run(&["append", "chat", "--turn", "--user", "more"])
        .ok();
    same(&env);
    env.run(&["compact", "chat", "--summary", "early", "--to", "2"])
        .ok();
    same(&env);
    let run = env.run(&["view", "chat"]).ok();
    assert!(run.stderr.contains("is current"), "{}", run.stderr);
    for format in ["json", "openai", "text"] {
        assert_eq!(
            env.run(&["view", "chat", "-q", "--format", format])
                .ok()
                .stdout,
            env.run(&["project", "chat", "--format", format])
                .ok()
                .stdout,
            "{format}"
        );
    }
    // Written atomically to a file.
    let file = env.path().join("out").join("view.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    env.run(&[
        "view",
        "chat",
        "--format",
        "json",
        "--out",
        file.to_str().unwrap(),
    ])
    .ok();
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        env.run(&["project", "chat", "--format", "json"])
            .ok()
            .stdout
    );
    let verified: Value =
        serde_json::from_str(&env.run(&["verify", "--json"]).ok().stdout).unwrap();
    assert_eq!(verified["views"], 1);
}

#[test]
fn named_views_with_profiles() {
    let env = seeded();
    // A profile view of a log without compactions is the log compacted
    // with that profile.
    env.run(&["fork", "chat", "--name", "light", "--compact=light"])
        .ok();
    let light = env
        .run(&[
            "view",
            "chat",
            "--name",
            "small",
            "--profile",
            "light",
            "-q",
        ])
        .ok()
        .stdout;
    assert_eq!(light, env.run(&["project", "light"]).ok().stdout);
    assert_ne!(light, env.run(&["project", "chat"]).ok().stdout);
    // The log's own overlays rank above the profile: keep wins. (Over a
    // strip, so that the keep changes the log's view and is stored.)
    env.run(&["compact", "chat", "--reasoning", "strip"]).ok();
    env.run(&[
        "compact",
        "chat",
        "--reasoning",
        "keep",
        "--from",
        "1",
        "--to",
        "1",
    ])
    .ok();
    let view = env
        .run(&["view", "chat", "--name", "small", "-q"])
        .ok()
        .lines();
    let reasoning: Vec<u64> = view
        .iter()
        .filter(|e| e["type"] == "reasoning")
        .map(|e| e["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(reasoning, [1]);

    env.run(&["view", "chat", "-q"]).ok();
    let list = env.run(&["view", "chat", "--list"]).ok().stdout;
    assert!(list.contains("small") && list.contains("light"), "{list}");
    assert!(list.contains("default"), "{list}");
    let err = env
        .run(&["view", "chat", "--name", "small", "--profile", "default"])
        .fails();
    assert!(err.stderr.contains("--drop"), "{}", err.stderr);
    env.run(&["view", "chat", "--name", "x", "--profile", "heavy"])
        .fails();
    env.run(&["view", "chat", "--name", "small", "--drop"]).ok();
    env.run(&["view", "chat", "--name", "small", "--drop"])
        .fails();
    assert!(!env
        .run(&["view", "chat", "--list"])
        .ok()
        .stdout
        .contains("small"));
    env.run(&["verify"]).ok();
}
