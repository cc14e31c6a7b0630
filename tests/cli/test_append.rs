use crate::support::TestEnv;

#[test]
fn append_flags_create_the_conversation_and_print_the_head() {
    let env = TestEnv::new();
    let run = env
        .run(&[
            "append",
            "chat",
            "--turn",
            "--user",
            "hi",
            "--assistant",
            "hello",
        ])
        .ok();
    let head = run.stdout.trim();
    assert_eq!(head.len(), 64, "{head}");
    assert!(
        run.stderr.contains("created conversation chat"),
        "{}",
        run.stderr
    );
    let log = env.run(&["log", "chat"]).ok().lines();
    let types: Vec<&str> = log.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["turn_start", "user", "assistant"]);
    assert_eq!(log[2]["address"], head);
    assert_eq!(log[1]["text"], "hi");
    // A second append does not announce a creation.
    let run = env.run(&["append", "chat", "--user", "again"]).ok();
    assert!(run.stderr.is_empty(), "{}", run.stderr);
}

#[test]
fn quiet_silences_notes() {
    let env = TestEnv::new();
    let run = env.run(&["--quiet", "append", "chat", "--user", "hi"]).ok();
    assert!(run.stderr.is_empty());
}

#[test]
fn append_reads_ndjson_from_stdin() {
    let env = TestEnv::new();
    let input = concat!(
        r#"{"type":"system","text":"be brief","timestamp":"2025-01-05T04:00:00Z"}"#,
        "\n",
        r#"{"type":"turn_start","timestamp":"2025-01-05T04:00:00Z"}"#,
        "\n",
        "\n",
        r#"{"type":"tool_call","id":"1","name":"fs_read_file","arguments":{"path":"a.rs"},"timestamp":"2025-01-05T04:00:01Z"}"#,
        "\n",
        r#"{"type":"tool_result","id":"1","content":"fn main() {}","is_error":false,"timestamp":"2025-01-05T04:00:02Z"}"#,
        "\n",
    );
    env.run_with_stdin(&["append", "c"], input).ok();
    let log = env.run(&["log", "c"]).ok().lines();
    assert_eq!(log.len(), 4);
    assert_eq!(log[0]["timestamp"], "2025-01-05T04:00:00.000000Z");
    assert_eq!(log[2]["arguments"]["path"], "a.rs");
    assert_eq!(
        log.iter()
            .map(|r| r["seq"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(
        log.iter()
            .map(|r| r["turn"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [0, 0, 0, 0]
    );
}

#[test]
fn same_events_same_head_in_one_call_or_many() {
    let env = TestEnv::new();
    let lines = [
        r#"{"type":"turn_start","timestamp":"2025-01-05T04:00:00Z"}"#,
        r#"{"type":"user","text":"a","timestamp":"2025-01-05T04:00:01Z"}"#,
        r#"{"type":"assistant","text":"b","timestamp":"2025-01-05T04:00:02Z"}"#,
    ];
    let whole = env
        .run_with_stdin(&["append", "one"], &(lines.join("\n") + "\n"))
        .ok();
    let mut last = String::new();
    for line in lines {
        last = env.run_with_stdin(&["append", "many"], line).ok().stdout;
    }
    assert_eq!(whole.stdout, last);
}

#[test]
fn expect_head_conflicts_store_nothing() {
    let env = TestEnv::new();
    let head = env
        .run(&["append", "c", "--user", "a"])
        .ok()
        .stdout
        .trim()
        .to_owned();
    let root = "0".repeat(64);
    let run = env
        .run(&["append", "c", "--expect-head", &root, "--user", "b"])
        .fails();
    assert!(run.stderr.contains("conflict"), "{}", run.stderr);
    let next = env
        .run(&["append", "c", "--expect-head", &head, "--user", "b"])
        .ok();
    assert_ne!(next.stdout.trim(), head);
    assert_eq!(env.run(&["log", "c"]).ok().lines().len(), 2);
}

#[test]
fn expect_root_creates_only_an_empty_conversation() {
    let env = TestEnv::new();
    let root = "0".repeat(64);
    env.run(&["append", "fresh", "--expect-head", &root, "--user", "a"])
        .ok();
    env.run(&[
        "append",
        "other",
        "--expect-head",
        &"1".repeat(64),
        "--user",
        "a",
    ])
    .fails();
    let list = env.run(&["list", "--json"]).ok().lines();
    assert_eq!(list[0].as_array().unwrap().len(), 1);
}

#[test]
fn no_sync_still_stores() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--no-sync", "--user", "a"]).ok();
    env.run(&["verify", "c"]).ok();
}
