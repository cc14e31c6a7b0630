use crate::support::TestEnv;

const GOOD: [&str; 5] = [
    r#"{"type":"turn_start"}"#,
    r#"{"type":"user","text":"a"}"#,
    r#"{"type":"assistant","text":"b"}"#,
    r#"{"type":"tool_call","id":"1","name":"t","arguments":{}}"#,
    r#"{"type":"tool_result","id":"1","content":"ok","is_error":false}"#,
];

/// For every k, an input whose k-th line is bad stores nothing and names
/// line k.
#[test]
fn a_bad_kth_line_stores_nothing() {
    let bad = [
        r#"{"type":"user"}"#,
        r#"{"type":"nope"}"#,
        r#"{"type":"user","text":"x""#,
        "[1,2]",
        r#"{"type":"tool_result","id":"1","content":"x","is_error":"no"}"#,
    ];
    for k in 0..GOOD.len() {
        for bad_line in bad {
            let env = TestEnv::new();
            env.run(&["append", "c", "--user", "before"]).ok();
            let mut lines = GOOD.to_vec();
            lines[k] = bad_line;
            let run = env
                .run_with_stdin(&["append", "c"], &lines.join("\n"))
                .fails();
            assert!(
                run.stderr.contains(&format!("line {}", k + 1)),
                "{}",
                run.stderr
            );
            assert_eq!(env.run(&["log", "c"]).ok().lines().len(), 1);
            // Nor does a bad input create a conversation.
            env.run_with_stdin(&["append", "new"], &lines.join("\n"))
                .fails();
            env.run(&["log", "new"]).fails();
        }
    }
}

#[test]
fn errors_name_the_field() {
    let env = TestEnv::new();
    let run = env
        .run_with_stdin(
            &["append", "c"],
            r#"{"type":"tool_call","id":"1","name":"t","arguments":"x"}"#,
        )
        .fails();
    assert!(
        run.stderr
            .contains("line 1: field `arguments`: expected an object"),
        "{}",
        run.stderr
    );
    let run = env
        .run_with_stdin(
            &["append", "c"],
            r#"{"type":"compaction","from_turn":3,"to_turn":1,"reasoning":"strip"}"#,
        )
        .fails();
    assert!(run.stderr.contains("`to_turn`"), "{}", run.stderr);
}

#[test]
fn empty_input_is_an_error() {
    let env = TestEnv::new();
    let run = env.run_with_stdin(&["append", "c"], "\n\n").fails();
    assert!(run.stderr.contains("no events"), "{}", run.stderr);
}

#[test]
fn unknown_conversation_and_missing_database_are_errors() {
    let env = TestEnv::new();
    let run = env.run(&["log", "c"]).fails();
    assert!(run.stderr.contains("no database"), "{}", run.stderr);
    env.run(&["append", "c", "--user", "x"]).ok();
    let run = env.run(&["stats", "nope"]).fails();
    assert!(run.stderr.contains("nope"), "{}", run.stderr);
}

#[test]
fn invalid_names_and_expect_heads_are_errors() {
    let env = TestEnv::new();
    env.run(&["append", " padded", "--user", "x"]).fails();
    let run = env
        .run(&["append", "c", "--expect-head", "xyz", "--user", "x"])
        .fails();
    assert!(run.stderr.contains("--expect-head"), "{}", run.stderr);
}

#[test]
fn usage_errors_exit_2() {
    let env = TestEnv::new();
    assert_eq!(env.run(&["frobnicate"]).code, 2);
    assert_eq!(env.run(&["append"]).code, 2);
}

#[test]
fn a_newer_format_is_refused() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "x"]).ok();
    convstore_store::testing::set_format_version(&env.db(), 7).unwrap();
    let run = env.run(&["list"]).fails();
    assert!(run.stderr.contains("format version 7"), "{}", run.stderr);
}

#[test]
fn a_database_in_use_is_refused_at_once() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "x"]).ok();
    let _open = convstore_store::Store::open(env.db()).unwrap();
    let run = env.run(&["list"]).fails();
    assert!(run.stderr.contains("in use"), "{}", run.stderr);
}

#[test]
fn a_directory_that_is_not_a_convstore_database_is_refused() {
    let env = TestEnv::new();
    std::fs::write(env.path().join("file"), "x").unwrap();
    let run = env
        .run(&["--db", "file", "append", "c", "--user", "x"])
        .fails();
    assert!(run.stderr.contains("cannot open"), "{}", run.stderr);
}
