#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns
//! What a new user meets: where data goes, where databases are created,
//! failures that store nothing, and the rough edges around them. One test
//! (or more) per item of the new-user review, through the binary.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use crate::support::TestEnv;

fn conversations(env: &TestEnv) -> Vec<serde_json::Value> {
    env.run(&["list", "--json"]).ok().lines()[0]
        .as_array()
        .unwrap()
        .clone()
}

fn events(env: &TestEnv, conversation: &str) -> u64 {
    conversations(env)
        .iter()
        .find(|c| c["name"] == conversation || c["id"] == conversation)
        .map_or(0, |c| c["events"].as_u64().unwrap())
}

/// A conversation `chat` of `turns` turns, each a user message and an
/// answer.
fn chat(env: &TestEnv, turns: usize) {
    for i in 0..turns {
        env.run(&[
            "append",
            "chat",
            "--turn",
            "--user",
            &format!("question {i}"),
            "--assistant",
            &format!("answer {i}, with enough words to be worth compacting"),
        ])
        .ok();
    }
}

// 1. Data never goes to a conversation the user did not name.

#[test]
fn append_to_a_hex_looking_name_never_falls_back_to_an_id_prefix() {
    let env = TestEnv::new();
    env.run(&["append", "first", "--user", "x"]).ok();
    let id = conversations(&env)[0]["id"].as_str().unwrap().to_owned();
    let prefix = &id[..6];
    // A name that happens to be a prefix of first's id creates its own
    // conversation.
    env.run(&["append", prefix, "--user", "y"]).ok();
    assert_eq!(events(&env, "first"), 1);
    assert_eq!(events(&env, prefix), 1);
    // id:PREFIX and the full id name first, on every command.
    env.run(&["append", &format!("id:{}", &id[..5]), "--user", "z"])
        .ok();
    env.run(&["append", &id, "--user", "z"]).ok();
    assert_eq!(events(&env, "first"), 3);
    // A bare prefix works where a command only reads...
    let log = env.run(&["log", &id[..7]]).ok();
    assert_eq!(log.lines().len(), 3);
    // ... and is refused, with a hint, where a command writes.
    let run = env
        .run(&["compact", &id[..7], "--reasoning", "strip"])
        .fails();
    assert!(
        run.stderr.contains(&format!("id:{}", &id[..7])),
        "{}",
        run.stderr
    );
    env.run(&["pin", &id[..7], "--turns", "0"]).fails();
    // An id: that names nothing, or a full id that names nothing, is never
    // created.
    let run = env.run(&["append", "id:abcd0000", "--user", "x"]).fails();
    assert!(run.stderr.contains("no conversation"), "{}", run.stderr);
    env.run(&["append", &"0".repeat(32), "--user", "x"]).fails();
    assert_eq!(conversations(&env).len(), 2);
    // Names that would read as ids cannot be created.
    let run = env
        .run_with_stdin(
            &["import", "--format", "ndjson", "-", "--name", "id:x"],
            "{\"type\":\"user\",\"text\":\"x\"}\n",
        )
        .usage();
    assert!(
        run.stderr.contains("invalid conversation name"),
        "{}",
        run.stderr
    );
    // Nor names a URL path or a listing would misread.
    for (name, why) in [
        (".", "a URL path reads it as a step"),
        ("..", "a URL path reads it as a step"),
        (
            "-",
            "- stands for stdin or stdout, and for no name in listings",
        ),
    ] {
        let run = env.run(&["append", name, "--user", "x"]).usage();
        assert!(
            run.stderr.contains("invalid conversation name") && run.stderr.contains(why),
            "{name}: {}",
            run.stderr
        );
    }
    assert_eq!(conversations(&env).len(), 2);
}

// 2. Databases are created only by commands that create, only where
// nothing is.

fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_directory_that_is_not_a_database_is_refused_and_left_untouched() {
    let env = TestEnv::new();
    for (name, files) in [
        ("notes", vec!["a.txt"]),
        ("repo", vec![".git"]),
        ("empty", vec![]),
    ] {
        let dir = env.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        for file in &files {
            std::fs::write(dir.join(file), "x").unwrap();
        }
        let before = listing(&dir);
        for args in [
            vec!["verify"],
            vec!["list"],
            vec!["log", "chat"],
            vec!["project", "chat"],
        ] {
            let mut argv = vec!["--db", name];
            argv.extend(args);
            let run = env.run(&argv).fails();
            let expected = if files.is_empty() {
                format!("no database at {name}")
            } else {
                format!("{name} is not a convstore database")
            };
            assert!(run.stderr.contains(&expected), "{argv:?}: {}", run.stderr);
            assert_eq!(listing(&dir), before, "{argv:?} wrote into {name}");
        }
        let run = env.run(&["--db", name, "append", "chat", "--user", "x"]);
        if files.is_empty() {
            // An empty directory it was pointed at: a command that
            // creates makes the database there.
            run.ok();
            env.run(&["--db", name, "verify"]).ok();
        } else {
            assert!(run.stderr.contains("is not a convstore database"));
            assert_eq!(listing(&dir), before);
        }
    }
}

#[test]
fn read_commands_create_nothing_and_urls_are_not_paths() {
    let env = TestEnv::new();
    for args in [
        vec!["list"],
        vec!["verify"],
        vec!["log", "c"],
        vec!["stats", "c"],
    ] {
        let run = env.run(&args).fails();
        assert!(run.stderr.contains("no database at"), "{}", run.stderr);
        assert!(!env.db().exists());
    }
    let run = env
        .run(&["--db", "mysql://me@host/db", "append", "c", "--user", "x"])
        .fails();
    assert!(
        run.stderr.contains("a URL, not a directory"),
        "{}",
        run.stderr
    );
    assert!(listing(env.path()).is_empty(), "{:?}", listing(env.path()));
    // A PostgreSQL URL is a database server, never a directory: one that
    // cannot be reached is an error naming it.
    let run = env
        .run(&[
            "--db",
            "postgres://me@no-such-host.invalid/db",
            "append",
            "c",
            "--user",
            "x",
        ])
        .fails();
    assert!(
        run.stderr
            .contains("cannot open the database at postgres://me@no-such-host.invalid/db"),
        "{}",
        run.stderr
    );
    assert!(listing(env.path()).is_empty(), "{:?}", listing(env.path()));
    // A path whose parent does not exist is not created either.
    let run = env
        .run(&["--db", "no/such/dir", "append", "c", "--user", "x"])
        .fails();
    assert!(run.stderr.contains("does not exist"), "{}", run.stderr);
    assert!(listing(env.path()).is_empty());
}

// 3. Everything is checked before the first write.

#[test]
fn a_bad_configuration_fails_append_auto_before_it_stores() {
    let env = TestEnv::new();
    chat(&env, 1);
    std::fs::write(
        env.path().join("bad.toml"),
        "[compaction.auto]\nenabld = true\n",
    )
    .unwrap();
    let run = env
        .run(&[
            "--config", "bad.toml", "append", "chat", "--auto", "--user", "x",
        ])
        .fails();
    assert!(run.stderr.contains("enabld"), "{}", run.stderr);
    assert_eq!(events(&env, "chat"), 3);
    // The configuration beside the database counts the same.
    std::fs::write(
        env.path().join("convstore.toml"),
        "[compaction]\nkeep_lst = 1\n",
    )
    .unwrap();
    env.run(&["append", "chat", "--auto", "--user", "x"])
        .fails();
    assert_eq!(events(&env, "chat"), 3);
}

#[test]
fn a_view_written_to_a_missing_directory_is_not_stored() {
    let env = TestEnv::new();
    chat(&env, 2);
    let run = env
        .run(&["view", "chat", "--output", "/no/such/dir/x.json"])
        .fails();
    assert!(run.stderr.contains("/no/such/dir"), "{}", run.stderr);
    let list = env.run(&["view", "chat", "--list", "--json"]).ok();
    assert_eq!(list.lines()[0], serde_json::json!([]));
}

// 4. A compaction never covers turns appended after it.

#[test]
fn compact_past_the_last_turn_stores_the_turns_that_exist() {
    let env = TestEnv::new();
    chat(&env, 5);
    let dry = env
        .run(&[
            "compact",
            "chat",
            "--reasoning",
            "strip",
            "--to",
            "99",
            "--force",
            "--dry-run",
            "--json",
        ])
        .ok();
    assert_eq!(dry.lines()[0]["to_turn"], 4);
    env.run(&["compact", "chat", "--summary", "s", "--to", "99"])
        .ok();
    let log = env.run(&["log", "chat"]).ok().lines();
    let compaction = log.last().unwrap();
    assert_eq!(compaction["type"], "compaction");
    assert_eq!(compaction["to_turn"], 4);
    let run = env
        .run(&[
            "compact",
            "chat",
            "--keep-last",
            "9",
            "--reasoning",
            "strip",
        ])
        .fails();
    assert!(
        run.stderr.contains(
            "--keep-last 9 leaves no turn to compact (the conversation has 5 turns, 0..4)"
        ),
        "{}",
        run.stderr
    );
}

// 5. Two inputs at once are refused.

#[test]
fn stdin_and_event_flags_together_are_an_error() {
    let env = TestEnv::new();
    let run = env
        .run_with_stdin(
            &["append", "chat", "--user", "x"],
            "{\"type\":\"user\",\"text\":\"from stdin\"}\n",
        )
        .usage();
    assert!(
        run.stderr.contains("give one or the other"),
        "{}",
        run.stderr
    );
    assert!(!env.db().exists());
    // An empty stdin is no second input.
    env.run_with_stdin(&["append", "chat", "--user", "x"], "")
        .ok();
}

// 6. A closed stdout ends a command quietly.

#[test]
fn a_reader_that_stops_early_is_not_an_error_in_any_format() {
    let env = TestEnv::new();
    env.run(&["gen", "big", "--events", "20000", "--seed", "3"])
        .ok();
    for args in [
        vec!["project", "big", "--format", "openai"],
        vec!["project", "big", "--format", "json"],
        vec!["project", "big", "--format", "text"],
        vec!["export", "big", "--format", "jp"],
        vec!["export", "big", "--format", "openai"],
        vec!["view", "big", "--format", "openai"],
        vec!["log", "big"],
    ] {
        let mut child = env
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 100];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // The reader is gone (dropped above).
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("error"), "{args:?}: {stderr}");
    }
}

// 7. An explicit configuration file must exist, for every command.

#[test]
fn a_missing_config_file_is_an_error_everywhere() {
    let env = TestEnv::new();
    chat(&env, 1);
    for args in [
        vec!["list"],
        vec!["log", "chat"],
        vec!["project", "chat"],
        vec!["view", "chat"],
        vec!["append", "chat", "--user", "x"],
    ] {
        let mut argv = vec!["--config", "nosuch.toml"];
        argv.extend(args.iter().copied());
        let run = env.run(&argv).fails();
        assert!(
            run.stderr.contains("nosuch.toml"),
            "{args:?}: {}",
            run.stderr
        );
    }
    assert_eq!(events(&env, "chat"), 3);
}

// 8. Ranges that name no turn are refused; pins can be removed.

#[test]
fn turn_ranges_must_name_a_turn_and_pins_can_be_listed_and_removed() {
    let env = TestEnv::new();
    chat(&env, 6);
    let run = env.run(&["pin", "chat", "--turns", "99"]).fails();
    assert!(
        run.stderr
            .contains("--turns 99: names no turn (the conversation has 6 turns, 0..5)"),
        "{}",
        run.stderr
    );
    let run = env.run(&["project", "chat", "--turns", "50..60"]).fails();
    assert!(run.stderr.contains("names no turn"), "{}", run.stderr);
    // A range that reaches past the end names the turns that exist.
    let view = env.run(&["project", "chat", "--turns", "4..60"]).ok();
    assert!(!view.lines().is_empty());
    env.run(&["pin", "chat", "--turns", "1..3"]).ok();
    env.run(&["pin", "chat", "--turns", "5.."]).ok();
    let pins = env.run(&["pin", "chat", "--list", "--json"]).ok();
    assert_eq!(pins.lines()[0], serde_json::json!([[1, 3], [5, null]]));
    let after = env.run(&["unpin", "chat", "--turns", "2"]).ok();
    assert_eq!(after.stdout, "1\n3\n5..\n");
    env.run(&["unpin", "chat", "--all"]).ok();
    let pins = env.run(&["pin", "chat", "--list", "--json"]).ok();
    assert_eq!(pins.lines()[0], serde_json::json!([]));
}

// 9. Exit codes: 0 success, 1 failure, 2 usage.

#[test]
fn exit_codes_are_two_for_usage_and_one_for_failures() {
    let env = TestEnv::new();
    assert_eq!(env.run(&[]).code, 2);
    assert_eq!(env.run(&["list", "--bogus"]).code, 2);
    assert_eq!(env.run(&["project"]).code, 2);
    assert_eq!(env.run(&["project", "x", "--as-of", "yesterday"]).code, 2);
    assert_eq!(env.run(&["list"]).code, 1);
    chat(&env, 1);
    assert_eq!(env.run(&["project", "nope"]).code, 1);
    assert_eq!(env.run(&["--url", "ftp://x", "list"]).code, 2);
    assert_eq!(env.run(&["append", "id:zz", "--user", "x"]).code, 2);
    assert_eq!(env.run(&["diff", "chat"]).code, 2);
    assert_eq!(env.run(&["diff", "chat", "chat", "chat"]).code, 2);
    assert_eq!(env.run(&["--help"]).code, 0);
    assert_eq!(env.run(&["--version"]).code, 0);
}

// 10. A database in use says how to wait, and how long it waited.

#[test]
fn a_database_in_use_says_how_to_wait_and_how_long_it_did() {
    let env = TestEnv::new();
    chat(&env, 1);
    let _held = convstore_store::Store::open(env.db()).unwrap();
    let run = env.run(&["list"]).fails();
    assert!(
        run.stderr
            .contains("in use by another process (--wait SECS waits for it)"),
        "{}",
        run.stderr
    );
    let run = env.run(&["--wait", "0.5", "list"]).fails();
    assert!(
        run.stderr
            .contains("still in use by another process after 0.5 s"),
        "{}",
        run.stderr
    );
}

// 12. Progress bars on a terminal only.

#[test]
fn progress_shows_on_a_terminal_and_never_in_a_pipe() {
    let env = TestEnv::new();
    let piped = env.run(&["gen", "big", "--events", "200000"]).ok();
    assert!(!piped.stderr.contains("records/s"), "{}", piped.stderr);
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipping the terminal half: `script` (util-linux) is absent");
        return;
    }
    // `script` gives the command a terminal.
    let command = format!(
        "CONVSTORE_DB={} {} verify",
        env.db().display(),
        env!("CARGO_BIN_EXE_convstore")
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("verifying"), "{shown}");
    let quiet = Command::new("script")
        .args(["-qec", &format!("{command} --quiet"), "/dev/null"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&quiet.stdout).contains("verifying"));
}

// 13. One flag for one idea; --json wherever a table is printed.

#[test]
fn output_flags_and_json_tables() {
    let env = TestEnv::new();
    chat(&env, 3);
    env.run(&["view", "chat", "--out", "a.ndjson"]).ok();
    env.run(&["view", "chat", "-o", "b.ndjson"]).ok();
    env.run(&[
        "export", "chat", "--format", "ndjson", "--output", "c.ndjson",
    ])
    .ok();
    for file in ["a.ndjson", "b.ndjson", "c.ndjson"] {
        assert!(env.path().join(file).is_file(), "{file}");
    }
    let views = env.run(&["view", "chat", "--list", "--json"]).ok().lines();
    assert_eq!(views[0][0]["name"], "default");
    env.run(&["explain", "chat", "--turn", "0", "--json"])
        .ok()
        .lines();
    env.run(&["compact", "chat", "--dry-run", "--json", "--force"])
        .ok()
        .lines();
    env.run(&["pin", "chat", "--list", "--json"]).ok().lines();
    env.run(&["head", "chat", "--json"]).ok().lines();
}

// 14. --help: global options apart, examples everywhere.

#[test]
fn help_has_global_options_apart_and_examples_for_every_command() {
    let env = TestEnv::new();
    let top = env.run(&["--help"]).ok().stdout;
    assert!(top.contains("Global options:"), "{top}");
    let commands = [
        "demo",
        "append",
        "project",
        "compact",
        "import",
        "export",
        "gen",
        "log",
        "head",
        "fork",
        "view",
        "pin",
        "unpin",
        "explain",
        "verify",
        "list",
        "stats",
        "completions",
    ];
    for command in commands {
        let help = env.run(&[command, "--help"]).ok().stdout;
        assert!(
            help.contains("Examples:"),
            "{command} --help has no examples"
        );
        assert_eq!(
            help.contains("--max-event-bytes"),
            command == "append" || command == "import",
            "{command}"
        );
        // Environment variables are named, their values never shown.
        assert!(
            help.contains("[env: CONVSTORE_URL]") && !help.contains("CONVSTORE_URL="),
            "{command}"
        );
        // Defaults are said once: in the text or in brackets.
        let wait = help
            .lines()
            .find(|l| l.contains("--wait"))
            .unwrap_or_default();
        assert!(!wait.contains("[default"), "{command}: {wait}");
    }
}

// 15. Output files: the umask, an existing file's mode, symbolic links.

#[test]
fn output_files_respect_modes_and_links() {
    let env = TestEnv::new();
    chat(&env, 1);
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let export = |target: &str, umask: &str| {
        let command = format!(
            "umask {umask} && exec {} export chat --format ndjson --output {target}",
            env!("CARGO_BIN_EXE_convstore")
        );
        let out = Command::new("sh")
            .args(["-c", &command])
            .current_dir(env.path())
            .env("CONVSTORE_DB", env.db())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    export("new.ndjson", "022");
    assert_eq!(mode(&env.path().join("new.ndjson")), 0o644);
    export("private.ndjson", "077");
    assert_eq!(mode(&env.path().join("private.ndjson")), 0o600);
    // An existing file keeps its mode.
    std::fs::set_permissions(
        env.path().join("new.ndjson"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    export("new.ndjson", "022");
    assert_eq!(mode(&env.path().join("new.ndjson")), 0o640);
    // A link is followed: the target is written, the link stays a link.
    std::fs::create_dir(env.path().join("out")).unwrap();
    std::os::unix::fs::symlink("out/target.ndjson", env.path().join("link.ndjson")).unwrap();
    export("link.ndjson", "022");
    assert!(std::fs::symlink_metadata(env.path().join("link.ndjson"))
        .unwrap()
        .file_type()
        .is_symlink());
    let written = std::fs::read_to_string(env.path().join("out/target.ndjson")).unwrap();
    assert_eq!(written.lines().count(), 3);
    // No temporary file is left behind.
    assert_eq!(listing(&env.path().join("out")), vec!["target.ndjson"]);
    // A directory is named in the error.
    let run = env
        .run(&["export", "chat", "--format", "ndjson", "--output", "out"])
        .fails();
    assert!(
        run.stderr.contains("cannot write out: it is a directory"),
        "{}",
        run.stderr
    );
}

// 16. Messages name what they are about.

#[test]
fn messages_name_the_file_and_count_in_words() {
    let env = TestEnv::new();
    std::fs::write(
        env.path().join("in.ndjson"),
        "{\"type\":\"user\",\"text\":\"a\"}\n{\"type\":\"usr\"}\n",
    )
    .unwrap();
    let run = env
        .run(&["import", "--format", "ndjson", "in.ndjson"])
        .fails();
    assert!(
        run.stderr.contains("error: in.ndjson: line 2:"),
        "{}",
        run.stderr
    );
    std::fs::write(
        env.path().join("one.ndjson"),
        "{\"type\":\"user\",\"text\":\"a\"}\n",
    )
    .unwrap();
    let run = env
        .run(&["import", "--format", "ndjson", "one.ndjson"])
        .ok();
    assert!(
        run.stdout.contains("imported 1 event in 1 turn"),
        "{}",
        run.stdout
    );
    let run = env.run(&["verify"]).ok();
    assert!(
        run.stdout
            .contains("1 conversation, 1 record, 0 blobs, 0 views"),
        "{}",
        run.stdout
    );
    let run = env.run(&["append", "one", "--auto", "--user", "b"]).ok();
    assert!(
        run.stderr
            .contains("set `[compaction.auto] enabled = true`"),
        "{}",
        run.stderr
    );
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/bad-input.md")).unwrap();
    assert!(!doc.contains("versions 1 to 2 only"));
}

// 18. Warnings about call ids.

#[test]
fn results_without_a_call_and_reused_call_ids_are_warned_about() {
    let env = TestEnv::new();
    let call = |id: &str| {
        format!("{{\"type\":\"tool_call\",\"id\":\"{id}\",\"name\":\"t\",\"arguments\":{{}}}}\n")
    };
    let result = |id: &str| {
        format!(
            "{{\"type\":\"tool_result\",\"id\":\"{id}\",\"content\":\"ok\",\"is_error\":false}}\n"
        )
    };
    let run = env
        .run_with_stdin(&["append", "chat"], &(call("a") + &result("a")))
        .ok();
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    // A result for a call in an earlier append is fine; one for no call,
    // and a call that reuses an id of the log, are warned about (and
    // stored).
    let run = env
        .run_with_stdin(
            &["append", "chat"],
            &(result("a") + &result("zz") + &call("a")),
        )
        .ok();
    assert!(
        run.stderr
            .contains("warning: line 2: tool_result for call id \"zz\""),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("warning: line 3: tool_call reuses the call id \"a\""),
        "{}",
        run.stderr
    );
    assert_eq!(events(&env, "chat"), 5);
    let run = env
        .run_with_stdin(
            &["import", "--format", "ndjson", "-", "--name", "i"],
            &result("q"),
        )
        .ok();
    assert!(
        run.stderr.contains("tool_result for call id \"q\""),
        "{}",
        run.stderr
    );
}

// 19. Completions complete conversation names.

#[test]
fn completions_complete_conversation_names() {
    let env = TestEnv::new();
    chat(&env, 1);
    env.run(&["append", "other-chat", "--user", "x"]).ok();
    let script = env.run(&["completions", "bash"]).ok().stdout;
    let program = format!(
        "{script}\nCOMP_WORDS=(convstore project ''); COMP_CWORD=2; COMP_TYPE=9\n\
         _clap_complete_convstore convstore '' project\nprintf '%s\\n' \"${{COMPREPLY[@]}}\""
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .env("CONVSTORE_DB", env.db())
        .output()
        .unwrap();
    let offered = String::from_utf8_lossy(&out.stdout);
    assert!(offered.lines().any(|l| l == "chat"), "{offered}");
    assert!(offered.lines().any(|l| l == "other-chat"), "{offered}");
}

// 20. The head, fast.

#[test]
fn head_prints_the_last_records_address() {
    let env = TestEnv::new();
    chat(&env, 3);
    let head = env.run(&["head", "chat"]).ok().stdout;
    let log = env.run(&["log", "chat"]).ok().lines();
    assert_eq!(head.trim(), log.last().unwrap()["address"]);
    env.run(&[
        "append",
        "chat",
        "--expect-head",
        head.trim(),
        "--user",
        "x",
    ])
    .ok();
    env.run(&[
        "append",
        "chat",
        "--expect-head",
        head.trim(),
        "--user",
        "x",
    ])
    .fails();
}

// A second new-user run.

#[test]
fn an_interrupted_gen_stores_nothing_and_the_retry_succeeds() {
    let env = TestEnv::new();
    env.run(&["append", "other", "--user", "x"]).ok();
    let mut child = env
        .command(&["gen", "big", "--events", "3000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    child.kill().unwrap();
    if child.wait().unwrap().success() {
        // Finished before the kill (a fast machine): whole.
        assert_eq!(conversations(&env).len(), 2, "{:?}", conversations(&env));
        return;
    }
    assert_eq!(conversations(&env).len(), 1, "{:?}", conversations(&env));
    env.run(&["gen", "big", "--events", "1000"]).ok();
    env.run(&["verify"]).ok();
}

#[test]
fn urls_without_slashes_and_dash_outputs() {
    let env = TestEnv::new();
    for url in ["sqlite:conv.db", "http:x"] {
        let run = env
            .run(&["--db", url, "append", "x", "--user", "hi"])
            .fails();
        assert!(
            run.stderr.contains("a URL, not a directory"),
            "{}",
            run.stderr
        );
    }
    let run = env
        .run(&["--db", "postgres:mydb", "append", "x", "--user", "hi"])
        .fails();
    assert!(run.stderr.contains("postgres:///mydb"), "{}", run.stderr);
    assert!(listing(env.path()).is_empty());
    chat(&env, 2);
    // `-` is stdout for every --output.
    for args in [
        vec!["view", "chat", "-o", "-"],
        vec!["project", "chat", "-o", "-"],
        vec!["export", "chat", "--format", "ndjson", "-o", "-"],
    ] {
        let run = env.run(&args).ok();
        assert!(
            run.stdout.contains("\"turn\"") || run.stdout.contains("\"type\""),
            "{args:?}"
        );
    }
    assert!(!env.path().join("-").exists());
    // A pipe behind /dev/stdout is written in place.
    let out = Command::new("sh")
        .args([
            "-c",
            &format!(
                "{} export chat --format ndjson -o /dev/stdout | wc -l",
                env!("CARGO_BIN_EXE_convstore")
            ),
        ])
        .env("CONVSTORE_DB", env.db())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "6");
    env.run(&["project", "chat", "--output", "view.ndjson"])
        .ok();
    assert!(env.path().join("view.ndjson").is_file());
}

#[test]
fn an_interrupted_export_leaves_no_temporary_file() {
    let env = TestEnv::new();
    env.run(&["gen", "big", "--events", "300000"]).ok();
    let mut child = env
        .command(&["export", "big", "--format", "jp", "-o", "big.json"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Interrupted once its temporary file is there.
    let started = std::time::Instant::now();
    while !listing(env.path())
        .iter()
        .any(|f| f.contains("convstore-tmp"))
    {
        assert!(
            started.elapsed().as_secs() < 30,
            "no temporary file appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let pid = child.id().to_string();
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let left: Vec<String> = listing(env.path())
        .into_iter()
        .filter(|f| f.contains("convstore-tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn usage_errors_are_one_line_and_exit_two() {
    let env = TestEnv::new();
    chat(&env, 1);
    for args in [
        vec!["pin", "chat"],
        vec!["project", "chat", "--turns", "x"],
        vec!["compact", "chat", "--from", "x"],
        vec!["stats", "chat", "--tokenizer", "gpt2"],
        vec!["append", "chat", "--expect-head", "abc", "--user", "x"],
        vec!["--wait", "inf", "list"],
        vec!["--wait=-5", "list"],
        vec!["--wait", "NaN", "list"],
        vec!["export", "chat", "--format", "ndjson", "-o", ""],
        vec!["compact", "chat", "--summary", ""],
        vec!["list", "--bogus"],
    ] {
        env.run(&args).usage();
    }
    let bare = env.command(&[]).output().unwrap();
    assert_eq!(bare.status.code(), Some(2));
    // An empty CONVSTORE_DB is as if unset.
    let out = env
        .command(&["list"])
        .env("CONVSTORE_DB", "")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("no database at convstore.db"));
}

#[test]
fn pins_end_at_the_last_turn_unless_open() {
    let env = TestEnv::new();
    chat(&env, 6);
    let run = env.run(&["pin", "chat", "--turns", "3..99"]).ok();
    assert_eq!(run.stdout, "3..5\n");
    chat(&env, 1);
    let pins = env.run(&["pin", "chat", "--list", "--json"]).ok();
    assert_eq!(pins.lines()[0], serde_json::json!([[3, 5]]));
}

#[test]
fn view_names_starting_with_a_dot_are_convstores() {
    let env = TestEnv::new();
    chat(&env, 2);
    let thinking =
        "{\"type\":\"reasoning\",\"text\":\"a long chain of thought about the question\"}\n";
    env.run_with_stdin(&["append", "chat"], &thinking.repeat(4))
        .ok();
    let run = env.run(&["view", "chat", "--name", ".auto"]).fails();
    assert!(run.stderr.contains("convstore's own"), "{}", run.stderr);
    // Nor can a view be named as listings say "none".
    let run = env.run(&["view", "chat", "--name", "-"]).usage();
    assert!(
        run.stderr.contains("no profile in listings"),
        "{}",
        run.stderr
    );
    // A user view named auto no longer steers automatic compaction.
    env.run(&["view", "chat", "--name", "auto", "--profile", "light"])
        .ok();
    std::fs::write(
        env.path().join("convstore.toml"),
        "[compaction.auto]\nenabled = true\ncontext_window = 40\ntoken_floor = 1\n",
    )
    .unwrap();
    let run = env
        .run(&["append", "chat", "--auto", "--turn", "--user", "more"])
        .ok();
    assert!(run.stderr.contains("auto-compaction"), "{}", run.stderr);
    // And what it stored says what it did to the view.
    let stats = env.run(&["stats", "chat", "--json"]).ok().lines();
    let compaction = stats[0]["compactions"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        compaction["tokens_after"].as_u64().is_some(),
        "{compaction}"
    );
}

#[test]
fn import_errors_name_the_file_and_the_event() {
    let env = TestEnv::new();
    chat(&env, 3);
    env.run(&["export", "chat", "--format", "jp", "-o", "chat.json"])
        .ok();
    let run = env
        .run(&[
            "import",
            "--format",
            "jp",
            "chat.json",
            "--max-event-bytes",
            "50",
            "--name",
            "x",
        ])
        .fails();
    assert!(
        run.stderr.starts_with("error: chat.json: event ")
            && run.stderr.contains("more than the limit of 50 bytes"),
        "{}",
        run.stderr
    );
    std::fs::copy(env.path().join("chat.json"), env.path().join("id:x.json")).unwrap();
    let run = env.run(&["import", "--format", "jp", "id:x.json"]).fails();
    assert!(
        run.stderr.contains("choose one with --name"),
        "{}",
        run.stderr
    );
}

#[test]
fn names_that_look_alike_are_one_or_refused() {
    let env = TestEnv::new();
    env.run(&["append", "caf\u{e9}", "--user", "x"]).ok();
    // The decomposed spelling names the same conversation.
    env.run(&["append", "cafe\u{301}", "--user", "y"]).ok();
    assert_eq!(conversations(&env).len(), 1);
    assert_eq!(events(&env, "caf\u{e9}"), 2);
    let run = env.run(&["append", "a\u{200b}b", "--user", "x"]).usage();
    assert!(run.stderr.contains("invisible"), "{}", run.stderr);
    // A joiner between two letters prints as nothing; between two emoji it
    // is how the emoji is written, and the name is kept as typed.
    let run = env.run(&["append", "a\u{200d}b", "--user", "x"]).usage();
    assert!(run.stderr.contains("a\\u{200d}b"), "{}", run.stderr);
    let technologist = "\u{1f469}\u{200d}\u{1f4bb} notes";
    env.run(&["append", technologist, "--user", "x"]).ok();
    assert_eq!(events(&env, technologist), 1);
    let list = env.run(&["list"]).ok().stdout;
    assert!(list.contains(technologist), "{list}");
    let missing = env.run(&["project", &format!("{technologist}!")]).fails();
    assert!(missing.stderr.contains(technologist), "{}", missing.stderr);
    env.run(&["delete", technologist]).ok();
    for separator in ["a\u{2028}b", "a\u{2029}b"] {
        let run = env.run(&["append", separator, "--user", "x"]).usage();
        assert!(
            run.stderr.contains("line or paragraph separator"),
            "{}",
            run.stderr
        );
        assert!(
            !run.stderr.contains(['\u{2028}', '\u{2029}']),
            "{}",
            run.stderr
        );
    }
    assert_eq!(conversations(&env).len(), 1);
}

#[test]
fn tables_line_up_by_display_width() {
    let env = TestEnv::new();
    for name in ["wide😀", "plain", "e\u{301}x"] {
        env.run(&["append", name, "--user", "x"]).ok();
    }
    let list = env.run(&["list"]).ok().stdout;
    let columns: Vec<usize> = list
        .lines()
        .map(|l| {
            let head = &l[..l.find("  ").unwrap()];
            let name_start = head.len() + l[head.len()..].find(|c: char| c != ' ').unwrap();
            let name_end = name_start + l[name_start..].find("  ").unwrap();
            let after = &l[name_end..];
            unicode_width::UnicodeWidthStr::width(&l[..name_end]) + after.len()
                - after.trim_start().len()
        })
        .collect();
    assert!(columns.windows(2).all(|w| w[0] == w[1]), "{list}");
}

#[test]
fn explain_fork_and_as_of_speak_plainly() {
    let env = TestEnv::new();
    chat(&env, 3);
    env.run(&[
        "compact",
        "chat",
        "--summary",
        "line one\nline two",
        "--to",
        "0",
    ])
    .ok();
    let explain = env.run(&["explain", "chat", "--turn", "0"]).ok().stdout;
    assert!(explain.contains("line one ⏎ line two"), "{explain}");
    let fork = env
        .run(&["fork", "chat", "--at-seq", "3", "--name", "f", "--json"])
        .ok()
        .lines();
    assert_eq!(fork[0]["shared"], 4);
    assert_eq!(fork[0]["after_seq"], 3);
    // The times JP's events.json writes are times --as-of takes.
    let jp = env.run(&["export", "chat", "--format", "jp"]).ok().stdout;
    let events: serde_json::Value = serde_json::from_str(&jp).unwrap();
    let time = events[1]["timestamp"].as_str().unwrap();
    env.run(&["project", "chat", "--as-of", time]).ok();
    let run = env
        .run(&["compact", "chat", "--reasoning", "strip", "--from", "99"])
        .fails();
    assert!(
        run.stderr.contains("--from 99: names no turn"),
        "{}",
        run.stderr
    );
}

#[test]
fn openai_output_says_what_it_leaves_out() {
    let env = TestEnv::new();
    env.run_with_stdin(
        &["append", "chat"],
        "{\"type\":\"user\",\"text\":\"q\"}\n{\"type\":\"reasoning\",\"text\":\"r\"}\n{\"type\":\"assistant\",\"text\":\"a\"}\n",
    )
    .ok();
    let run = env.run(&["export", "chat", "--format", "openai"]).ok();
    assert!(
        run.stderr.contains("left out 1 event (reasoning"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_relative_summarizer_program_is_found_beside_the_configuration() {
    let env = TestEnv::new();
    chat(&env, 3);
    let conf = env.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    std::fs::write(
        conf.join("sum.sh"),
        "#!/bin/sh\ncat >/dev/null\necho short\n",
    )
    .unwrap();
    std::fs::set_permissions(conf.join("sum.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        conf.join("c.toml"),
        "[compaction.profiles.brief.summary]\nsummarizer = \"command\"\ncommand = [\"./sum.sh\"]\n",
    )
    .unwrap();
    let run = env
        .run(&[
            "--config",
            "conf/c.toml",
            "compact",
            "chat",
            "--profile",
            "brief",
        ])
        .ok();
    assert!(run.stdout.contains("status: stored"), "{}", run.stdout);
}

/// What a second new-user run found: each fixed through the binary.
#[test]
fn second_round_of_rough_edges() {
    let env = TestEnv::new();
    // A byte order mark before the first NDJSON line is not part of it.
    env.run_with_stdin(
        &["append", "bom"],
        "\u{feff}{\"type\":\"user\",\"text\":\"marked\"}\n",
    )
    .ok();
    assert_eq!(events(&env, "bom"), 1);
    // A server URL given as --db says how servers are named.
    let run = env.run(&["--db", "http://127.0.0.1:9/", "list"]).fails();
    assert!(run.stderr.contains("--url"), "{}", run.stderr);
    // `export --out` as `view --out`.
    let out = env.path().join("out.ndjson");
    env.run(&[
        "export",
        "bom",
        "--format",
        "ndjson",
        "--out",
        out.to_str().unwrap(),
    ])
    .ok();
    assert!(std::fs::read_to_string(&out).unwrap().contains("marked"));
    // A fork says which records it shares, both ends included.
    env.run(&["append", "bom", "--assistant", "two"]).ok();
    env.run(&["fork", "bom", "--name", "f"]).ok();
    let run = env.run(&["log", "f"]).ok();
    assert!(
        run.stderr.contains("records 0..1 are shared"),
        "{}",
        run.stderr
    );
    // Control characters in a name are shown escaped, on one line.
    let run = env.run(&["append", "a\u{1}b", "--user", "x"]).usage();
    assert!(run.stderr.contains("a\\u{1}b"), "{}", run.stderr);
    // Counts in words.
    env.run(&["append", "one", "--turn", "--user", "x"]).ok();
    let run = env.run(&["compact", "one", "--to", "-1"]).fails();
    assert!(
        run.stderr.contains("1 turn before the last"),
        "{}",
        run.stderr
    );
    let run = env.run(&["recall", "bom", "5"]).fails();
    assert!(run.stderr.contains("has 2 records"), "{}", run.stderr);
}
