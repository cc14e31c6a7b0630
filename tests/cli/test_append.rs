use std::io::Write;

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

/// Texts of every length around blake3's block and chunk edges, some of
/// them multi-byte: `n` events of a conversation as NDJSON.
fn edge_texts(n: usize) -> String {
    const LENGTHS: [usize; 12] = [0, 1, 63, 64, 65, 127, 128, 500, 1023, 1024, 1025, 3000];
    let mut out = String::new();
    for i in 0..n {
        let len = LENGTHS[i % LENGTHS.len()] + i / LENGTHS.len() % 3;
        let text: String = (0..len)
            .map(|j| {
                if (i + j) % 17 == 0 {
                    'é'
                } else {
                    char::from(b'a' + ((i * 7 + j) % 26) as u8)
                }
            })
            .collect();
        let line = match i % 4 {
            0 => serde_json::json!({"type": "turn_start"}),
            1 => serde_json::json!({"type": "user", "text": text, "meta": {"i": i}}),
            2 => {
                serde_json::json!({"type": "tool_call", "id": format!("c{i}"), "name": "read", "arguments": {"t": text}})
            }
            _ => {
                serde_json::json!({"type": "tool_result", "id": format!("c{}", i - 1), "content": text, "is_error": false})
            }
        };
        let mut line = line;
        line["timestamp"] =
            format!("2025-01-05T04:{:02}:{:02}.{i:06}Z", i / 60 % 60, i % 60).into();
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

/// With `CONVSTORE_NO_LANES` set every hash is computed one by one with
/// the `blake3` crate: the log, its addresses and `verify`'s verdicts are
/// the same as with the texts hashed side by side in SIMD lanes, in a
/// long batch (encoded in parallel), in single events, and on damage.
#[test]
fn the_hashes_are_the_same_with_and_without_the_simd_lanes() {
    let input = edge_texts(3000);
    let run = |env: &TestEnv, lanes: bool, args: &[&str], stdin: &str| {
        let mut command = env.command(args);
        if !lanes {
            command.env("CONVSTORE_NO_LANES", "1");
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn convstore");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        let output = child.wait_with_output().expect("wait");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let envs = [TestEnv::new(), TestEnv::new()];
    for (env, lanes) in envs.iter().zip([true, false]) {
        let (code, _, stderr) = run(env, lanes, &["append", "c", "-q"], &input);
        assert_eq!(code, Some(0), "{stderr}");
        for line in edge_texts(40).lines().skip(4) {
            let (code, _, stderr) = run(env, lanes, &["append", "c", "-q"], line);
            assert_eq!(code, Some(0), "{stderr}");
        }
    }
    let log = |env: &TestEnv, lanes: bool| run(env, lanes, &["log", "c"], "");
    let reference = log(&envs[1], false);
    assert_eq!(reference.0, Some(0), "{}", reference.2);
    assert!(reference.1.lines().count() > 3000);
    for env in &envs {
        for lanes in [true, false] {
            assert!(
                log(env, lanes) == reference,
                "the logs differ (lanes: {lanes})"
            );
            let (code, _, stderr) = run(env, lanes, &["verify"], "");
            assert_eq!(code, Some(0), "{stderr}");
        }
    }
    // A flipped byte in a short text half way through the log: the same
    // verdict both ways.
    let line: serde_json::Value =
        serde_json::from_str(input.lines().nth(1505).expect("line")).expect("JSON");
    let text = line["text"].as_str().expect("a user text");
    assert!(text.len() > 100 && text.len() <= 1024, "{}", text.len());
    let segments = envs[0].db().join("segments");
    let mut damaged = false;
    for entry in std::fs::read_dir(&segments).expect("segments/") {
        let file = entry.expect("entry").path();
        let mut bytes = std::fs::read(&file).expect("read");
        if let Some(at) = bytes.windows(text.len()).position(|w| w == text.as_bytes()) {
            bytes[at + text.len() / 2] ^= 0x01;
            std::fs::write(&file, bytes).expect("write");
            damaged = true;
            break;
        }
    }
    assert!(damaged, "the text is in a segment file");
    let with = run(&envs[0], true, &["verify"], "");
    let without = run(&envs[0], false, &["verify"], "");
    assert_eq!(with.0, Some(1), "{}", with.2);
    assert_eq!(with, without);
}
