#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

//! Recall, search, reindex and diff through the binary: on a real JP
//! conversation, and the search index's failures (a lost, damaged or stale
//! index never fails a write, `verify` finds it, `reindex` rebuilds it).

use serde_json::Value;

use crate::support::{jp_files, TestEnv};

fn json_of(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap()
}

/// `(recall N)` at the end of a view event's text, as a seq.
fn handle_seq(text: &str) -> Option<u64> {
    let rest = text.strip_suffix(')')?;
    let at = rest.rfind(" (recall ")?;
    rest[at + " (recall ".len()..].parse().ok()
}

/// A small conversation: two turns, a long tool result with a rare word.
fn small() -> TestEnv {
    let env = TestEnv::new();
    let long = "zebrafinch telemetry ".repeat(30);
    let lines = [
        r#"{"type":"turn_start"}"#.to_owned(),
        r#"{"type":"user","text":"read the telemetry file"}"#.to_owned(),
        r#"{"type":"tool_call","id":"c1","name":"fs_read_file","arguments":{"path":"t.log"}}"#
            .to_owned(),
        format!(r#"{{"type":"tool_result","id":"c1","content":"{long}","is_error":false}}"#),
        r#"{"type":"assistant","text":"it is telemetry from the aviary"}"#.to_owned(),
        r#"{"type":"turn_start"}"#.to_owned(),
        r#"{"type":"user","text":"and the weather?"}"#.to_owned(),
        r#"{"type":"assistant","text":"sunny with light wind"}"#.to_owned(),
    ];
    env.run_with_stdin(&["append", "chat"], &lines.join("\n"))
        .ok();
    env
}

#[test]
fn recall_through_the_binary_gives_back_stripped_results_of_a_real_conversation() {
    let Some(files) = jp_files() else {
        return;
    };
    // The largest of the real conversations.
    let file = files
        .iter()
        .max_by_key(|f| std::fs::metadata(f).unwrap().len())
        .unwrap();
    let env = TestEnv::new();
    env.run(&[
        "import",
        "--format",
        "jp",
        file.to_str().unwrap(),
        "--name",
        "chat",
    ])
    .ok();
    let log = env.run(&["log", "chat"]).ok().lines();
    env.run(&["compact", "chat", "--tool-calls", "strip", "--recall-hints"])
        .ok();
    let view = env.run(&["project", "chat"]).ok().lines();
    let mut recalled = 0;
    for event in &view {
        let Some(seq) = event["content"].as_str().and_then(handle_seq) else {
            continue;
        };
        let back = env.run(&["recall", "chat", &seq.to_string()]).ok().lines();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0], log[seq as usize], "recall {seq}");
        assert_eq!(back[0]["type"], "tool_result");
        recalled += 1;
    }
    assert!(
        recalled > 10,
        "only {recalled} stripped results had a handle"
    );

    // A model's tool call, answered within a budget that cuts it.
    let seq = view
        .iter()
        .filter_map(|e| e["content"].as_str().and_then(handle_seq))
        .max_by_key(|&s| log[s as usize]["content"].as_str().unwrap().len())
        .unwrap();
    let call =
        format!(r#"{{"type":"tool_use","id":"t1","name":"recall","input":{{"handle":"{seq}"}}}}"#);
    let answer = json_of(
        &env.run(&[
            "recall",
            "chat",
            "--tool-call",
            &call,
            "--max-tokens",
            "150",
        ])
        .ok()
        .stdout,
    );
    assert_eq!(answer["tool_use_id"], "t1");
    assert!(
        answer["content"]
            .as_str()
            .unwrap()
            .contains("cut at the budget of 150 tokens"),
        "{answer}"
    );
    // A budget under the least an answer takes is raised to it, and the
    // note names the budget the answer had.
    let answer = json_of(
        &env.run(&["recall", "chat", "--tool-call", &call, "--max-tokens", "1"])
            .ok()
            .stdout,
    );
    let content = answer["content"].as_str().unwrap();
    assert!(
        content.contains("cut at the budget of 120 tokens"),
        "{answer}"
    );
    assert!(content.chars().count() <= 120 * 4, "{answer}");
}

#[test]
fn search_ranks_hits_and_says_what_the_view_did_with_them() {
    let env = small();
    let hits = json_of(&env.run(&["search", "zebrafinch", "--json"]).ok().stdout);
    assert_eq!(hits.as_array().unwrap().len(), 1, "{hits}");
    assert_eq!(hits[0]["seq"], 3);
    assert_eq!(hits[0]["turn"], 0);
    assert_eq!(hits[0]["kind"], "tool_result");
    assert_eq!(hits[0]["view"], "visible");

    env.run(&[
        "compact",
        "chat",
        "--tool-calls",
        "strip",
        "--recall-hints",
        "--from",
        "0",
        "--to",
        "1",
    ])
    .ok();
    let hits = json_of(&env.run(&["search", "zebrafinch", "--json"]).ok().stdout);
    assert_eq!(hits[0]["view"], "stripped", "{hits}");
    env.run(&[
        "compact",
        "chat",
        "--summary",
        "about telemetry",
        "--from",
        "0",
        "--to",
        "0",
    ])
    .ok();
    let hits = json_of(&env.run(&["search", "aviary", "--json"]).ok().stdout);
    assert_eq!(hits[0]["view"], "summarized", "{hits}");
    assert_eq!(hits[0]["summarized_turns"], serde_json::json!([0, 0]));

    // Ranked: the record that says it most comes first; filters narrow.
    let hits = json_of(&env.run(&["search", "telemetry", "--json"]).ok().stdout);
    assert_eq!(hits[0]["seq"], 3, "{hits}");
    let users = json_of(
        &env.run(&["search", "telemetry", "--kind", "user", "--json"])
            .ok()
            .stdout,
    );
    let seqs: Vec<_> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["seq"])
        .collect();
    assert_eq!(seqs, [1]);
    let run = env.run(&["search", "weather", "--stats"]).ok();
    assert!(
        run.stdout.contains("seq 6") && run.stdout.contains("**weather**"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.starts_with("1 hit in "), "{}", run.stderr);
    let none = json_of(
        &env.run(&[
            "search",
            "telemetry",
            "--since",
            "2099-01-01T00:00:00Z",
            "--json",
        ])
        .ok()
        .stdout,
    );
    assert_eq!(none, serde_json::json!([]));
}

#[test]
fn every_write_is_searchable_at_once() {
    let env = small();
    env.run(&["search", "zebrafinch"]).ok();
    env.run(&[
        "append",
        "chat",
        "--turn",
        "--user",
        "what about the kestrel?",
    ])
    .ok();
    let hits = json_of(&env.run(&["search", "kestrel", "--json"]).ok().stdout);
    assert_eq!(hits[0]["seq"], 9, "{hits}");
    env.run(&["fork", "chat", "--at-turn", "0", "--name", "retry"])
        .ok();
    env.run(&["append", "retry", "--turn", "--user", "the kestrel again"])
        .ok();
    let hits = json_of(
        &env.run(&["search", "kestrel", "--conv", "retry", "--json"])
            .ok()
            .stdout,
    );
    let names: Vec<_> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["name"])
        .collect();
    assert_eq!(names, ["retry"], "{hits}");
    // The fork shares its parent's records before the fork point.
    let hits = json_of(
        &env.run(&["search", "zebrafinch", "--conv", "retry", "--json"])
            .ok()
            .stdout,
    );
    assert_eq!(hits.as_array().unwrap().len(), 1, "{hits}");
    let verified = env.run(&["verify"]).ok().stdout;
    assert!(verified.contains("search document"), "{verified}");
}

#[test]
fn a_lost_or_damaged_index_never_fails_a_write_and_reindex_rebuilds_it() {
    let env = small();
    env.run(&["search", "zebrafinch"]).ok();
    let index = env.db().join("search");
    assert!(index.join("meta.json").is_file());

    // Lost: the next search builds it from the logs.
    std::fs::remove_dir_all(&index).unwrap();
    let hits = json_of(&env.run(&["search", "zebrafinch", "--json"]).ok().stdout);
    assert_eq!(hits[0]["seq"], 3);

    // Damaged: writes still succeed (with a warning), search and verify
    // fail with one line naming reindex, reindex repairs it.
    std::fs::write(index.join("meta.json"), "{ not json").unwrap();
    let appended = env.run(&["append", "chat", "--turn", "--user", "osprey sighting"]);
    let appended = appended.ok();
    assert!(
        appended.stderr.contains("search index"),
        "{}",
        appended.stderr
    );
    assert_eq!(env.run(&["log", "chat"]).ok().lines().len(), 10);
    let failed = env.run(&["search", "osprey"]).fails();
    assert!(failed.stderr.contains("reindex"), "{}", failed.stderr);
    let failed = env.run(&["verify"]).fails();
    assert!(failed.stderr.contains("reindex"), "{}", failed.stderr);
    let rebuilt = json_of(&env.run(&["reindex", "--json"]).ok().stdout);
    assert_eq!(rebuilt["conversations"], 1);
    assert_eq!(rebuilt["records"], 10);
    env.run(&["verify"]).ok();
    let hits = json_of(&env.run(&["search", "osprey", "--json"]).ok().stdout);
    assert_eq!(hits[0]["seq"], 9, "{hits}");
}

#[test]
fn an_index_that_disagrees_with_the_log_fails_verify() {
    // Two databases with the same conversation name but different text:
    // the index of one under the other's log.
    let a = small();
    a.run(&["search", "zebrafinch"]).ok();
    let b = TestEnv::new();
    b.run_with_stdin(
        &["append", "chat"],
        "{\"type\":\"turn_start\"}\n{\"type\":\"user\",\"text\":\"other\"}",
    )
    .ok();
    b.run(&["search", "other"]).ok();
    let b_index = b.db().join("search");
    std::fs::remove_dir_all(&b_index).unwrap();
    copy_dir(&a.db().join("search"), &b_index);
    let failed = b.run(&["verify"]).fails();
    assert!(
        failed.stderr.contains("search index") && failed.stderr.contains("reindex"),
        "{}",
        failed.stderr
    );
    b.run(&["reindex"]).ok();
    b.run(&["verify"]).ok();
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn search_refuses_bad_input_in_one_line() {
    let env = small();
    // Text outside the query syntax is searched as words; a query with
    // none is refused.
    env.run(&["search", "nosuchfield:x"]).ok();
    env.run(&["search", "[]"]).fails();
    env.run(&["search", "x", "--conv", "nosuch"]).fails();
    env.run(&["search", "x", "--limit", "0"]).usage();
    env.run(&["search", "x", "--kind", "nonsense"]).usage();
    env.run(&["search", "x", "--since", "yesterday-ish"])
        .usage();
    env.run(&["recall", "chat", "999"]).fails();
    env.run(&["recall", "chat", "5..2"]).fails();
    env.run(&["recall", "chat", "abc"]).usage();
    env.run(&["recall", "chat", "--tool-call", "not json"])
        .fails();
    // A call the model got wrong is answered, for the model to read.
    let answer = json_of(
        &env.run(&["recall", "chat", "--tool-call", "{}"])
            .ok()
            .stdout,
    );
    assert_eq!(answer["is_error"], true, "{answer}");
    env.run(&["diff", "chat"]).usage();
    env.run(&["diff", "chat@nope", "chat"]).usage();
}

#[test]
fn diff_shows_what_a_compaction_did() {
    let env = small();
    env.run(&[
        "compact",
        "chat",
        "--tool-calls",
        "strip",
        "--from",
        "0",
        "--to",
        "1",
    ])
    .ok();
    let diff = json_of(&env.run(&["diff", "chat@7", "chat", "--json"]).ok().stdout);
    assert_eq!(diff["shared_records"], 8);
    assert!(diff["token_change"].as_i64().unwrap() < 0, "{diff}");
    let changes = &diff["turns"][0]["changes"];
    let result = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "tool_result")
        .unwrap();
    assert_eq!(result["a"], "shown");
    assert_eq!(result["b"], "stripped");
    assert_eq!(result["seqs"], serde_json::json!([3]));

    // A profile against the log's own compactions.
    let text = env
        .run(&["diff", "chat", "chat", "--profile", "heavy"])
        .ok()
        .stdout;
    assert!(text.contains("summarized"), "{text}");
    // A view against itself: nothing differs.
    let same = json_of(&env.run(&["diff", "chat", "chat", "--json"]).ok().stdout);
    assert_eq!(same["turns"], serde_json::json!([]));
}

#[test]
fn tools_prints_the_recall_tool_for_each_api() {
    let env = TestEnv::new();
    let openai = json_of(&env.run(&["tools", "--format", "openai"]).ok().stdout);
    assert_eq!(openai[0]["function"]["name"], "recall");
    let anthropic = json_of(&env.run(&["tools", "--format", "anthropic"]).ok().stdout);
    assert_eq!(anthropic[0]["name"], "recall");
    assert!(anthropic[0]["input_schema"]["properties"]["handle"].is_object());
}
