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

/// An empty conversation exports as no lines (NDJSON) or an empty array
/// (JP, OpenAI); each imports back as an empty conversation.
#[test]
fn an_empty_conversation_exports_and_imports_back() {
    let env = TestEnv::new();
    env.run_with_stdin(&["import", "--name", "e", "-", "--format", "ndjson"], "")
        .ok();
    for format in ["ndjson", "jp", "openai"] {
        let exported = env.run(&["export", "e", "--format", format]).ok().stdout;
        let name = format!("e-{format}");
        env.run_with_stdin(
            &["import", "--name", &name, "-", "--format", format],
            &exported,
        )
        .ok();
        let info = env.run(&["head", &name]).ok().stdout;
        assert_eq!(info.trim(), "0".repeat(64), "{format}: {exported:?}");
        assert_eq!(env.run(&["log", &name]).ok().stdout, "");
    }
    // Not JSON at all is still an error, and stores nothing.
    let run = env
        .run_with_stdin(&["import", "--name", "x", "-", "--format", "jp"], "")
        .fails();
    assert!(run.stderr.contains("invalid JSON"), "{}", run.stderr);
    env.run(&["head", "x"]).fails();
    env.run(&["verify"]).ok();
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
    env.run(&["append", " padded", "--user", "x"]).usage();
    let run = env
        .run(&["append", "c", "--expect-head", "xyz", "--user", "x"])
        .usage();
    assert!(run.stderr.contains("--expect-head"), "{}", run.stderr);
}

#[test]
fn usage_errors_exit_2() {
    let env = TestEnv::new();
    assert_eq!(env.run(&["frobnicate"]).code, 2);
    assert_eq!(env.run(&["append"]).code, 2);
    // No command, with a global option or $CONVSTORE_DB: the help.
    for args in [&[][..], &["-q"]] {
        let run = env.run(args);
        assert_eq!(run.code, 2);
        assert!(
            run.stderr.contains("\nCommands:\n"),
            "{args:?}: {}",
            run.stderr
        );
    }
    // A turn range that starts with `-` is read as one, not as a flag.
    env.run(&["append", "c", "--user", "hi"]).ok();
    for args in [
        &["project", "c", "--turns", "-1"][..],
        &["pin", "c", "--turns", "-1..3"],
    ] {
        let run = env.run(args).usage();
        assert!(
            run.stderr.contains("\"-1\" is not a turn number"),
            "{}",
            run.stderr
        );
    }
    // A negative number given to an option that takes a number is refused
    // as that option's value, not read as an unknown option.
    for (args, option) in [
        (&["explain", "c", "--turn", "-1"][..], "--turn <T>"),
        (&["fork", "c", "--at-turn", "-1"], "--at-turn <T>"),
        (
            &["append", "c", "--max-event-bytes", "-5", "--user", "x"],
            "--max-event-bytes <BYTES>",
        ),
        (&["explain", "c", "--turn", "x"], "--turn <T>"),
    ] {
        let run = env.run(args).usage();
        assert!(
            run.stderr.starts_with("error: invalid value '")
                && run.stderr.contains(&format!("for '{option}': "))
                && run.stderr.contains("not a whole number"),
            "{args:?}: {}",
            run.stderr
        );
    }
    // The server's limits are at least 1: 0 would refuse every request.
    for option in [
        "--max-body-bytes",
        "--max-event-bytes",
        "--max-connections",
        "--max-in-flight",
        "--follow-behind",
    ] {
        let run = env.run(&["serve", option, "0"]).usage();
        assert!(
            run.stderr.contains("is not a whole number of at least 1"),
            "{option}: {}",
            run.stderr
        );
    }
    let run = env.run(&["serve", "--request-timeout", "0"]).usage();
    assert!(run.stderr.contains("0.01 or more"), "{}", run.stderr);
}

#[test]
fn a_missing_conversation_is_named_as_it_was_asked_for() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "x"]).ok();
    for (query, message) in [
        ("nope", "error: no conversation named \"nope\"\n"),
        (
            "id:0123",
            "error: no conversation's id starts with \"0123\"\n",
        ),
        (
            "0123456789abcdef0123456789abcdef",
            "error: no conversation has the id 0123456789abcdef0123456789abcdef\n",
        ),
    ] {
        let run = env.run(&["project", query]).fails();
        assert_eq!(run.stderr, message);
    }
}

#[test]
fn a_newer_format_is_refused() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "x"]).ok();
    convstore_store::testing::set_format_version(&env.db(), convstore_store::FORMAT_VERSION + 1)
        .unwrap();
    let run = env.run(&["list"]).fails();
    assert!(
        run.stderr.contains(&format!(
            "format version {}",
            convstore_store::FORMAT_VERSION + 1
        )),
        "{}",
        run.stderr
    );
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
    assert!(
        run.stderr.contains("file is not a convstore database"),
        "{}",
        run.stderr
    );
}

#[test]
fn wait_retries_a_database_in_use_until_it_is_free() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "x"]).ok();
    let holder = convstore_store::Store::open(env.db()).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(700));
        drop(holder);
    });
    let started = std::time::Instant::now();
    env.run(&["--wait", "20", "list"]).ok();
    assert!(started.elapsed() >= std::time::Duration::from_millis(500));
    release.join().unwrap();
    assert_eq!(env.run(&["--wait", "x", "list"]).code, 2);
}

/// NDJSON is parsed a block at a time on several threads; the error still
/// names the first bad line, in a later block or before a line that cannot
/// be read.
#[test]
fn the_first_bad_ndjson_line_is_named_wherever_it_falls() {
    let env = TestEnv::new();
    let good = format!(r#"{{"type":"user","text":"{}"}}"#, "x".repeat(200));
    let mut lines: Vec<String> = vec![good; 40_000];
    lines[30_000] = r#"{"type":"user"}"#.to_owned();
    lines[35_000] = r#"{"type":"nope"}"#.to_owned();
    lines[35_500] = "y".repeat(2000);
    let file = env.path().join("in.ndjson");
    let import = |lines: &[String]| {
        std::fs::write(&file, lines.join("\n")).unwrap();
        let args = ["import", "--max-event-bytes", "1000", "--format", "ndjson"];
        let mut args = args.to_vec();
        args.push(file.to_str().unwrap());
        env.run(&args).fails().stderr
    };
    let stderr = import(&lines);
    assert!(stderr.contains("line 30001:"), "{stderr}");
    lines[30_000] = lines[0].clone();
    let stderr = import(&lines);
    assert!(stderr.contains("line 35001:"), "{stderr}");
    lines[35_000] = lines[0].clone();
    let stderr = import(&lines);
    assert!(
        stderr.contains("line 35501: longer than the limit"),
        "{stderr}"
    );
    // Nothing was stored: not even a database was created.
    assert!(!env.db().exists());
}

#[test]
fn events_over_the_size_limit_are_refused_and_nothing_is_stored() {
    let env = TestEnv::new();
    let big = format!(r#"{{"type":"user","text":"{}"}}"#, "x".repeat(5000));
    let input = format!("{{\"type\":\"turn_start\"}}\n{big}\n");
    let run = env
        .run_with_stdin(&["append", "c", "--max-event-bytes", "1000"], &input)
        .fails();
    assert!(
        run.stderr
            .contains("line 2: longer than the limit of 1000 bytes"),
        "{}",
        run.stderr
    );
    let file = env.path().join("in.ndjson");
    std::fs::write(&file, &input).unwrap();
    let run = env
        .run(&[
            "import",
            "--max-event-bytes",
            "1000",
            "--format",
            "ndjson",
            file.to_str().unwrap(),
        ])
        .fails();
    assert!(run.stderr.contains("line 2"), "{}", run.stderr);
    // The store's own check covers every path: a JP event whose text is
    // over the limit once decoded.
    let jp = format!(
        r#"[{{"type":"chat_request","timestamp":"2026-01-01 00:00:00.0","content":"{}"}}]"#,
        "y".repeat(3000)
    );
    std::fs::write(&file, &jp).unwrap();
    let run = env
        .run(&[
            "import",
            "--max-event-bytes",
            "1000",
            "--format",
            "jp",
            file.to_str().unwrap(),
        ])
        .fails();
    assert!(
        run.stderr.contains("more than the limit of 1000 bytes"),
        "{}",
        run.stderr
    );
    assert!(
        !env.db().exists()
            || env.run(&["list", "--json"]).ok().lines()[0]
                .as_array()
                .unwrap()
                .is_empty()
    );
    // Under the default limit the same input is fine.
    env.run_with_stdin(&["append", "c"], &input).ok();
}

#[test]
fn deeply_nested_json_is_refused_without_overflowing_the_stack() {
    let env = TestEnv::new();
    let deep = format!(
        r#"{{"type":"extension","name":"x","payload":{}1{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let run = env.run_with_stdin(&["append", "c"], &deep).fails();
    assert!(
        run.stderr.contains("line 1") && run.stderr.contains("recursion limit"),
        "{}",
        run.stderr
    );
}

/// A write that runs into a file size limit (what a full disk looks like
/// to convstore) fails with a clear error; the database still opens, the
/// log holds what was acknowledged before and verifies, and appends work
/// again once there is room.
#[test]
fn a_full_disk_is_a_clear_error_and_the_log_survives() {
    let env = TestEnv::new();
    let head = env
        .run(&["append", "chat", "--turn", "--user", "before", "-q"])
        .ok()
        .stdout;
    let mut input = String::new();
    for i in 0..8_000 {
        input.push_str(r#"{"type":"user","text":""#);
        input.push_str(&"x".repeat(4_000));
        input.push_str(&i.to_string());
        input.push_str("\"}\n");
    }
    let input_path = env.path().join("big.ndjson");
    std::fs::write(&input_path, input).unwrap();
    // 8 MiB at most per file (`ulimit -f` counts 512-byte blocks in sh);
    // convstore catches SIGXFSZ, so a write past it fails with EFBIG.
    let script = format!(
        "ulimit -f 16384; exec '{}' append chat < '{}'",
        env!("CARGO_BIN_EXE_convstore"),
        input_path.display()
    );
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(env.path())
        .env("CONVSTORE_DB", env.db())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: I/O error on the database: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let log = env.run(&["log", "chat"]).ok().lines();
    assert_eq!(log.len(), 2);
    assert_eq!(log[1]["address"].as_str().unwrap(), head.trim());
    env.run(&["verify"]).ok();
    env.run(&["append", "chat", "--user", "after"]).ok();
    assert_eq!(env.run(&["log", "chat"]).ok().lines().len(), 3);
    env.run(&["verify"]).ok();
}

/// Bytes of sled's files changed on disk: every command either works (the
/// damage hit space sled no longer uses) or fails with one `error:` line;
/// none panics. With `verify`, what does open is checked record by record.
#[test]
fn a_corrupted_database_file_is_an_error_not_a_panic() {
    let env = TestEnv::new();
    env.run(&["demo", "-q"]).ok();
    // The whole directory, to put back at the end: an open of a damaged
    // `db` that works may write sled's other files (a snapshot), which
    // then no longer go with the original `db` alone.
    let whole = env.path().join("whole");
    crate::test_salvage::copy_dir(&env.db(), &whole);
    let original = std::fs::read(env.db().join("db")).unwrap();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut refused = 0;
    for trial in 0..40 {
        let mut bytes = original.clone();
        for _ in 0..[1, 8, 64][trial % 3] {
            let i = (next() % bytes.len() as u64) as usize;
            bytes[i] ^= (next() % 255 + 1) as u8;
        }
        std::fs::write(env.db().join("db"), &bytes).unwrap();
        for args in [
            &["verify"][..],
            &["log", "demo"][..],
            &["project", "demo"][..],
        ] {
            let run = env.run(args);
            match run.code {
                0 => {}
                1 => {
                    refused += 1;
                    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
                    assert!(run.stderr.starts_with("error: "), "{}", run.stderr);
                }
                other => panic!("trial {trial}, {args:?}: exit {other}: {}", run.stderr),
            }
        }
    }
    std::fs::remove_dir_all(env.db()).unwrap();
    crate::test_salvage::copy_dir(&whole, &env.db());
    env.run(&["verify"]).ok();
    // Some damage is found: the test does exercise the error path.
    assert!(refused > 0);
}

#[test]
fn an_unfinished_snapshot_left_by_a_crash_is_moved_away() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "x"]).ok();
    // What a kill while sled writes a snapshot leaves: sled would take it
    // for its latest snapshot and refuse to open.
    let torn = env.db().join("snap.FFFFFFFFFFFFFFFF.generating");
    std::fs::write(&torn, b"torn").unwrap();
    let run = env.run(&["log", "c"]).ok();
    assert!(
        run.stderr.contains("unfinished sled snapshot"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stdout.lines().count(), 1);
    assert!(!torn.exists());
    let moved: Vec<_> = std::fs::read_dir(env.db().join("discarded"))
        .unwrap()
        .collect();
    assert_eq!(moved.len(), 1);
    env.run(&["verify"]).ok();
    let run = env.run(&["log", "c"]).ok();
    assert!(run.stderr.is_empty(), "{}", run.stderr);
}

/// An error whose message already names its cause says it once.
#[test]
fn each_cause_is_said_once() {
    let env = TestEnv::new();
    let missing = env.run(&["--config", "nosuch.toml", "list"]).fails();
    assert_eq!(
        missing.stderr.matches("No such file or directory").count(),
        1,
        "{}",
        missing.stderr
    );
    let directory = env.run(&["--config", "/tmp", "list"]).fails();
    assert_eq!(
        directory.stderr.matches("Is a directory").count(),
        1,
        "{}",
        directory.stderr
    );
    std::fs::write(env.path().join("bad.toml"), "[compaction.auto\n").unwrap();
    let bad = env.path().join("bad.toml");
    let toml = env
        .run(&[
            "--config",
            bad.to_str().unwrap(),
            "append",
            "c",
            "--auto",
            "--user",
            "x",
        ])
        .fails();
    assert_eq!(
        toml.stderr.matches("TOML parse error").count(),
        1,
        "{}",
        toml.stderr
    );
    assert_eq!(toml.stderr.lines().count(), 1);
}

/// Only the commands that use the configuration read `convstore.toml`:
/// a plain fork does not, a compacting one does.
#[test]
fn a_plain_fork_does_not_read_the_configuration() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "hello"]).ok();
    std::fs::write(env.path().join("convstore.toml"), "[compaction\n").unwrap();
    env.run(&["fork", "c", "--name", "plain"]).ok();
    env.run(&["fork", "c", "--name", "compacted", "--compact"])
        .fails();
    assert!(env
        .run(&["log", "compacted"])
        .fails()
        .stderr
        .contains("no conversation"));
}
