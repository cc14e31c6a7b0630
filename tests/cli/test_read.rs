use crate::support::{Run, TestEnv};

fn seeded() -> TestEnv {
    let env = TestEnv::new();
    let input = [
        r#"{"type":"turn_start"}"#.to_owned(),
        r#"{"type":"user","text":"read a.rs"}"#.to_owned(),
        r#"{"type":"reasoning","text":"let me look"}"#.to_owned(),
        r#"{"type":"tool_call","id":"1","name":"fs_read_file","arguments":{"path":"a.rs"}}"#
            .to_owned(),
        format!(
            r#"{{"type":"tool_result","id":"1","content":"{}","is_error":false}}"#,
            "x".repeat(5000)
        ),
        r#"{"type":"turn_start"}"#.to_owned(),
        r#"{"type":"assistant","text":"done"}"#.to_owned(),
    ]
    .join("\n");
    env.run_with_stdin(&["append", "chat"], &input).ok();
    env
}

#[test]
fn verify_reports_what_it_checked() {
    let env = seeded();
    let run = env.run(&["verify"]).ok();
    assert!(
        run.stdout.contains("1 conversation, 7 records, 1 blob"),
        "{}",
        run.stdout
    );
    let json = env.run(&["verify", "chat", "--json"]).ok().lines();
    assert_eq!(json[0]["ok"], true);
    assert_eq!(json[0]["records"], 7);
}

#[test]
fn verify_names_the_first_bad_record() {
    let env = seeded();
    {
        let store = convstore_store::Store::open(env.db()).unwrap();
        let id = store.resolve("chat").unwrap();
        convstore_store::testing::flip_record_byte(&store, &id, 3, 5, 0x40).unwrap();
    }
    let run = env.run(&["verify"]).fails();
    assert!(run.stderr.contains("record 3"), "{}", run.stderr);
    let run = env.run(&["verify", "chat", "--json"]);
    assert_eq!(run.code, 1);
    assert_eq!(run.lines()[0]["seq"], 3);
}

#[test]
fn list_and_stats_count_events_turns_and_bytes() {
    let env = seeded();
    let list = env.run(&["list", "--json"]).ok().lines();
    let item = &list[0][0];
    assert_eq!(item["name"], "chat");
    assert_eq!(item["events"], 7);
    assert_eq!(item["turns"], 2);
    let text = env.run(&["list"]).ok().stdout;
    assert!(text.starts_with("ID"), "{text}");
    assert!(text.contains("chat"));

    let stats = &env.run(&["stats", "chat", "--json"]).ok().lines()[0];
    assert_eq!(stats["events"], 7);
    assert_eq!(stats["turns"], 2);
    assert_eq!(stats["kinds"]["turn_start"]["events"], 2);
    assert_eq!(stats["kinds"]["tool_result"]["events"], 1);
    assert!(stats["kinds"]["tool_result"]["bytes"].as_u64().unwrap() > 5000);
    assert_eq!(stats["kinds"]["system"]["events"], 0);
    let text = env.run(&["stats", "chat"]).ok().stdout;
    assert!(text.contains("tool_result"), "{text}");
}

#[test]
fn conversations_resolve_by_id_prefix() {
    let env = seeded();
    let list = env.run(&["list", "--json"]).ok().lines();
    let id = list[0][0]["id"].as_str().unwrap().to_owned();
    let log = env.run(&["log", &id[..8]]).ok().lines();
    assert_eq!(log.len(), 7);
}

#[test]
fn log_output_piped_to_a_closed_reader_is_not_an_error() {
    let env = seeded();
    let mut child = env
        .command(&["log", "chat"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success() || output.status.code() == Some(0),
        "{output:?}"
    );
}

#[test]
fn completions_are_generated() {
    let env = TestEnv::new();
    let run = env.run(&["completions", "bash"]).ok();
    assert!(run.stdout.contains("convstore"));
}

#[test]
fn help_has_examples() {
    let env = TestEnv::new();
    let run = env.run(&["--help"]).ok();
    assert!(run.stdout.contains("Examples:"), "{}", run.stdout);
}

#[test]
fn demo_stores_compacts_and_projects_the_sample() {
    let env = TestEnv::new();
    let run = env.run(&["demo"]).ok();
    assert!(
        run.stdout.contains("[compacted] fs_read_file: success"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("verify: ok"), "{}", run.stdout);
    let saved = run
        .stdout
        .lines()
        .find(|l| l.starts_with("tokens"))
        .unwrap();
    assert!(saved.contains("saved"), "{saved}");
    // A second demo does not collide with the first.
    env.run(&["demo"]).ok();
    let list = env.run(&["list", "--json"]).ok().lines();
    assert_eq!(list[0].as_array().unwrap().len(), 2);
    // The raw log still holds the reasoning the view strips.
    let log = env.run(&["log", "demo"]).ok().lines();
    assert!(log.iter().any(|r| r["type"] == "reasoning"));
    assert_eq!(log.last().unwrap()["type"], "compaction");
}

/// `convstore gen NAME --events 3000 --compactions 400 --seed SEED`, with
/// `extra` arguments.
fn gen(env: &TestEnv, name: &str, seed: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "gen",
        name,
        "--events",
        "3000",
        "--compactions",
        "400",
        "--seed",
        seed,
    ];
    args.extend_from_slice(extra);
    env.run(&args).ok()
}

#[test]
fn gen_is_deterministic_and_writes_what_it_was_asked() {
    let env = TestEnv::new();
    // 400 compactions among 3,000 events: their positions collide unless
    // drawn without repetition.
    let a = gen(&env, "a", "7", &[]);
    let b = gen(&env, "b", "7", &[]);
    let c = gen(&env, "c", "8", &[]);
    assert_eq!(a.stdout, b.stdout, "same seed, same head");
    assert_ne!(a.stdout, c.stdout);
    let stats = &env.run(&["stats", "a", "--json"]).ok().lines()[0];
    assert_eq!(stats["events"], 3000);
    assert_eq!(stats["kinds"]["compaction"]["events"], 400);
    assert!(stats["turns"].as_u64().unwrap() > 250);
    env.run(&["verify"]).ok();
    // The view of a generated conversation is a valid projection.
    let view = env.run(&["project", "a"]).ok().lines();
    assert!(!view.is_empty() && view.len() < 3000);
    env.run(&["gen", "a", "--events", "10"]).fails();
    // Appended an event at a time: the same conversation.
    let d = gen(&env, "d", "7", &["--batch", "1"]);
    assert_eq!(d.stdout, a.stdout, "same seed, same head, any batch size");
    let run = env.run(&["gen", "e", "--batch", "0"]).usage();
    assert!(run.stderr.contains("--batch"), "{}", run.stderr);
    assert!(env.run(&["stats", "e"]).fails().stderr.contains('e'));
}

/// `log` and `export` of a log damaged half way print every record before
/// the damaged chunk, then one `error:` line, exit 1: the same bytes at
/// every run, however the chunks fall into the windows read side by side.
#[test]
fn a_damaged_log_prints_every_record_before_the_damage() {
    const EVENTS: usize = 40_000;
    const DAMAGED: usize = 30_000;
    let env = TestEnv::new();
    let text = |i: usize| format!("record {i:06} {}", "pad ".repeat(40));
    let input: String = (0..EVENTS)
        .map(|i| serde_json::json!({"type": "user", "text": text(i)}).to_string() + "\n")
        .collect();
    env.run_with_stdin(&["append", "c", "-q"], &input).ok();
    let target = text(DAMAGED);
    let mut damaged = false;
    for entry in std::fs::read_dir(env.db().join("segments")).unwrap() {
        let file = entry.unwrap().path();
        let mut bytes = std::fs::read(&file).unwrap();
        if let Some(at) = bytes
            .windows(target.len())
            .position(|w| w == target.as_bytes())
        {
            bytes[at + 3] ^= 0x01;
            std::fs::write(&file, bytes).unwrap();
            damaged = true;
        }
    }
    assert!(damaged, "the text is in a segment file");
    for args in [["log", "c", "", ""], ["export", "c", "--format", "ndjson"]] {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let first = env.run(&args).fails();
        assert_eq!(first.stderr.lines().count(), 1, "{}", first.stderr);
        assert!(first.stderr.starts_with("error: "), "{}", first.stderr);
        let printed = first.stdout.lines().count();
        // A chunk holds at most 1,024 records; the damaged one is not
        // printed, every one before it is.
        assert!(
            printed <= DAMAGED && printed + 1024 > DAMAGED,
            "{args:?}: {printed} records printed"
        );
        let last = first.stdout.lines().last().unwrap();
        assert!(
            last.contains(&format!("record {:06} ", printed - 1)),
            "{args:?}: {last}"
        );
        for _ in 0..3 {
            let again = env.run(&args).fails();
            assert_eq!(again.stdout, first.stdout, "{args:?}");
            assert_eq!(again.stderr, first.stderr, "{args:?}");
        }
    }
}
