//! `convstore gc`: the covered payloads go and the view stays; killed
//! part-way, each record is whole or dropped, never half; the policy from
//! convstore.toml, after compactions; bad policies refused.

use std::fmt::Write as _;
use std::time::Duration;

use crate::support::TestEnv;

/// `turns` turns of a question, reasoning, a call and its result (unique
/// texts marked with `tag`), and an answer, as NDJSON.
fn turns(tag: &str, turns: usize) -> String {
    let pad = "pad ".repeat(100);
    let mut text = String::new();
    for t in 0..turns {
        for line in [
            r#"{"type":"turn_start"}"#.to_owned(),
            format!(r#"{{"type":"user","text":"ASK-{tag}-{t}"}}"#),
            format!(r#"{{"type":"reasoning","text":"THINK-{tag}-{t} {pad}"}}"#),
            format!(
                r#"{{"type":"tool_call","id":"c{t}","name":"fs_read","arguments":{{"path":"ARG-{tag}-{t}"}}}}"#
            ),
            format!(
                r#"{{"type":"tool_result","id":"c{t}","content":"RES-{tag}-{t}# {pad}","is_error":false}}"#
            ),
            format!(r#"{{"type":"assistant","text":"SAY-{tag}-{t}"}}"#),
        ] {
            writeln!(text, "{line}").expect("a String takes every write");
        }
    }
    text
}

#[test]
fn gc_drops_what_the_view_no_longer_shows_and_the_view_stays() {
    let env = TestEnv::new();
    env.run_with_stdin(&["append", "c"], &turns("c", 120)).ok();
    env.run(&["compact", "c", "--to", "99"]).ok();
    env.run(&["view", "c", "--name", "v"]).ok();
    let view = env.run(&["project", "c"]).ok().stdout;
    let log = env.run(&["log", "c"]).ok().stdout;

    let dry = env.run(&["gc", "--dry-run", "--json"]).ok().lines();
    // Reasoning, call and result of turns 0..=99.
    assert_eq!(dry[0]["records"], 300, "{}", dry[0]);
    assert_eq!(dry[0]["dry_run"], true);
    assert_eq!(
        env.run(&["log", "c"]).ok().stdout,
        log,
        "a dry run stores nothing"
    );

    let done = env.run(&["gc", "c"]).ok().stdout;
    assert!(done.contains("dropped 300 payloads"), "{done}");
    assert_eq!(env.run(&["project", "c"]).ok().stdout, view);
    let stored = env.run(&["view", "c", "--name", "v"]).ok().stdout;
    assert_eq!(stored, view);
    let records = env.run(&["log", "c"]).ok().lines();
    assert_eq!(records.len(), 721, "no event appended after the compaction");
    assert_eq!(records[4]["content"], "[redacted]");
    // Told from a text that reads so: when and why it was dropped.
    let reason = records[4]["redacted"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("retention: covered"), "{}", records[4]);
    assert!(records[4]["redacted"]["at"].is_string(), "{}", records[4]);
    assert_eq!(records[1]["text"], "ASK-c-0");
    assert!(records[1].get("redacted").is_none(), "{}", records[1]);
    assert!(records[600 + 4]["content"]
        .as_str()
        .unwrap()
        .starts_with("RES-c-100#"));
    assert!(!env.segments_hold("RES-c-7#"));
    assert!(env.segments_hold("RES-c-107#"));

    let verified = env.run(&["verify"]).ok().stdout;
    assert!(
        verified.contains("redacted in c: 300 records (between seqs 2 and 598)"),
        "{verified}"
    );
    assert!(
        verified.contains("retention: covered by a compaction"),
        "{verified}"
    );
    let recalled = env
        .run(&["recall", "c", "4", "--format", "text"])
        .ok()
        .stdout;
    assert!(
        recalled.contains("redacted") && recalled.contains("retention: covered by a compaction"),
        "{recalled}"
    );
    // Nothing more to drop.
    let again = env.run(&["gc", "--json"]).ok().lines();
    assert_eq!(again[0]["records"], 0);
}

#[test]
fn a_killed_gc_leaves_each_record_whole_or_dropped() {
    let env = TestEnv::new();
    let mut outcomes = [0, 0, 0];
    for round in 0..14u64 {
        let name = format!("c{round}");
        let tag = format!("r{round}");
        env.run_with_stdin(&["append", &name], &turns(&tag, 1500))
            .ok();
        env.run(&["compact", &name]).ok();
        let view = env.run(&["project", &name]).ok().stdout;
        env.run_killed_after(&["gc", &name], Duration::from_millis(round * 6));
        // The next command finishes what the killed one left.
        env.run(&["verify"]).ok();
        assert_eq!(
            env.run(&["project", &name]).ok().stdout,
            view,
            "round {round}"
        );
        let log = env.run(&["log", &name]).ok().lines();
        assert_eq!(log.len(), 1500 * 6 + 1, "round {round}");
        let mut dropped = 0;
        for (t, result) in log.iter().skip(4).step_by(6).take(1500).enumerate() {
            match result["content"].as_str() {
                Some("[redacted]") => {
                    dropped += 1;
                    let text = format!("RES-{tag}-{t}#");
                    if t % 100 == 0 {
                        assert!(!env.segments_hold(&text), "round {round}: {text}");
                    }
                }
                Some(text) => assert!(
                    text.starts_with(&format!("RES-{tag}-{t}# ")),
                    "round {round}: {text}"
                ),
                None => panic!("round {round}: {result}"),
            }
        }
        outcomes[match dropped {
            0 => 0,
            1500 => 2,
            _ => 1,
        }] += 1;
    }
    eprintln!("none, some, all dropped: {outcomes:?}");
}

#[test]
fn the_policy_comes_from_convstore_toml_and_runs_after_compactions() {
    let env = TestEnv::new();
    let config = env.path().join("convstore.toml");
    std::fs::write(&config, "[retention]\nafter_compaction = true\n").unwrap();
    env.run_with_stdin(&["append", "c"], &turns("c", 4)).ok();
    let view_before = env.run(&["project", "c"]).ok().stdout;
    env.run(&["compact", "c", "--to", "1"]).ok();
    let log = env.run(&["log", "c"]).ok().lines();
    assert_eq!(
        log[4]["content"], "[redacted]",
        "dropped after the compaction"
    );
    assert_eq!(log[2]["text"], "[redacted]");
    assert!(log[6 + 6 + 4]["content"]
        .as_str()
        .unwrap()
        .starts_with("RES-c-2#"));
    assert_ne!(env.run(&["project", "c"]).ok().stdout, view_before);
    // An appended compaction event runs it too.
    env.run_with_stdin(
        &["append", "c"],
        "{\"type\":\"compaction\",\"from_turn\":2,\"to_turn\":2,\"reasoning\":\"strip\"}\n",
    )
    .ok();
    let log = env.run(&["log", "c"]).ok().lines();
    assert_eq!(log[12 + 2]["text"], "[redacted]");

    // An age in the file; the command line replaces it.
    std::fs::write(&config, "[retention]\nolder_than = \"30d\"\n").unwrap();
    let dry = env.run(&["gc", "--dry-run", "--json"]).ok().lines();
    assert_eq!(dry[0]["records"], 0, "nothing is 30 days old");
    assert!(dry[0]["reason"]
        .as_str()
        .unwrap()
        .contains("older than 30d"));
    let dry = env
        .run(&[
            "gc",
            "--dry-run",
            "--json",
            "--older-than",
            "0s",
            "--all-payloads",
        ])
        .ok()
        .lines();
    assert!(dry[0]["records"].as_u64().unwrap() > 10, "{}", dry[0]);

    // Bad policies: one line, exit 1; a bad file is named.
    std::fs::write(&config, "").unwrap();
    let refused = env.run(&["gc", "--all-payloads"]).fails();
    assert!(
        refused.stderr.contains("needs an age"),
        "{}",
        refused.stderr
    );
    let refused = env.run(&["gc", "--older-than", "5x"]).usage();
    assert!(
        refused.stderr.contains("not a duration"),
        "{}",
        refused.stderr
    );
    std::fs::write(&config, "[retention]\nolder_than = \"soon\"\n").unwrap();
    let refused = env.run(&["gc"]).fails();
    assert!(
        refused.stderr.contains("retention.older_than"),
        "{}",
        refused.stderr
    );
    std::fs::write(&config, "[retention]\nonly_compacted = false\n").unwrap();
    env.run(&["gc"]).fails();
    env.run(&["gc", "nope"]).fails();
    env.run(&["verify"]).ok();
}

/// A dry run over every conversation counts a long text several of them
/// drop once, with the last that drops it, as the real pass removes it;
/// a text a conversation not cleaned keeps is not counted.
#[test]
fn a_dry_run_counts_long_texts_conversations_share_as_the_pass_removes_them() {
    let env = TestEnv::new();
    let long = "shared ".repeat(300);
    let mut text = String::new();
    for t in 0..10 {
        for line in [
            r#"{"type":"turn_start"}"#.to_owned(),
            format!(r#"{{"type":"user","text":"ASK-{t}"}}"#),
            format!(r#"{{"type":"reasoning","text":"THINK-{t} {long}"}}"#),
            format!(r#"{{"type":"assistant","text":"SAY-{t}"}}"#),
        ] {
            writeln!(text, "{line}").unwrap();
        }
    }
    // a, b and c hold the same ten long texts; c keeps them (never
    // compacted) while only its first five turns are asked of the others,
    // so a and b share five texts no one keeps.
    for name in ["a", "b"] {
        env.run_with_stdin(&["append", name], &text).ok();
        env.run(&["compact", name, "--reasoning", "strip", "--to", "9"])
            .ok();
    }
    let kept = text.lines().take(20).fold(String::new(), |mut kept, l| {
        writeln!(kept, "{l}").unwrap();
        kept
    });
    env.run_with_stdin(&["append", "c"], &kept).ok();

    let dry = env.run(&["gc", "--dry-run", "--json"]).ok().lines();
    let real = env.run(&["gc", "--json"]).ok().lines();
    let per = |report: &serde_json::Value| -> Vec<(String, u64)> {
        report["conversations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_owned(),
                    c["blobs_removed"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    // The passes run in the database's order of conversations.
    let mut counts: Vec<u64> = per(&real[0]).iter().map(|c| c.1).collect();
    counts.sort_unstable();
    assert_eq!(counts, [0, 5], "{}", real[0]);
    assert_eq!(per(&dry[0]), per(&real[0]), "{} / {}", dry[0], real[0]);
    assert_eq!(dry[0]["blobs_removed"], 5);
}
