//! Import and export: JP's real conversations, OpenAI message lists and
//! NDJSON, through the CLI.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{json, Value};
use support::{gen, TestEnv};

fn write(env: &TestEnv, name: &str, text: &str) -> String {
    let path = env.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn conversations(env: &TestEnv) -> Vec<Value> {
    if !env.db().exists() {
        return Vec::new();
    }
    let list = env.run(&["list", "--json"]).ok().lines();
    list[0].as_array().unwrap().clone()
}

/// All 21 real conversations: import, then export as JP, gives back the
/// original events field for field; `stats` counts what the file holds.
#[test]
fn real_jp_conversations_round_trip_and_count() {
    let Some(files) = support::jp_files() else {
        return;
    };
    let env = TestEnv::new();
    for (i, path) in files.iter().enumerate() {
        let name = format!("c{i}");
        let file = path.to_string_lossy();
        env.run(&["import", "--format", "jp", &file, "--name", &name])
            .ok();
        let original: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let exported: Value =
            serde_json::from_str(&env.run(&["export", &name, "--format", "jp"]).ok().stdout)
                .unwrap();
        assert!(
            exported == original,
            "{file}: export differs from the original"
        );

        let mut by_type: HashMap<&str, u64> = HashMap::new();
        for event in original.as_array().unwrap() {
            *by_type.entry(event["type"].as_str().unwrap()).or_default() += 1;
        }
        let count = |t: &str| by_type.get(t).copied().unwrap_or(0);
        let stats = &env.run(&["stats", &name, "--json"]).ok().lines()[0];
        let kind = |k: &str| stats["kinds"][k]["events"].as_u64().unwrap();
        assert_eq!(
            stats["events"].as_u64().unwrap(),
            original.as_array().unwrap().len() as u64
        );
        assert_eq!(kind("turn_start"), count("turn_start"), "{file}");
        assert_eq!(kind("user"), count("chat_request"), "{file}");
        assert_eq!(
            kind("assistant") + kind("reasoning"),
            count("chat_response"),
            "{file}"
        );
        assert_eq!(kind("tool_call"), count("tool_call_request"), "{file}");
        assert_eq!(kind("tool_result"), count("tool_call_response"), "{file}");
        assert_eq!(kind("config"), count("config_delta"), "{file}");
        assert_eq!(
            kind("extension"),
            count("inquiry_request") + count("inquiry_response"),
            "{file}"
        );
    }
    env.run(&["verify"]).ok();
}

fn openai_cases() -> Vec<Value> {
    vec![
        json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
        ]),
        json!([
            {"role": "developer", "content": "follow the style guide"},
            {"role": "user", "content": "what is in a.rs?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.rs\"}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "fn main() {}"},
            {"role": "assistant", "content": "An empty main."},
        ]),
        // Parallel tool calls, with text beside them.
        json!([
            {"role": "user", "content": "compare a.rs and b.rs"},
            {"role": "assistant", "content": "Reading both.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.rs\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"b.rs\"}"}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "A"},
            {"role": "tool", "tool_call_id": "c2", "content": "B"},
            {"role": "assistant", "content": "They differ."},
        ]),
        // Multi-part content.
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}},
            ]},
            {"role": "assistant", "content": "A cat."},
        ]),
    ]
}

#[test]
fn openai_message_lists_round_trip() {
    for (i, case) in openai_cases().into_iter().enumerate() {
        let env = TestEnv::new();
        let file = write(&env, "m.json", &case.to_string());
        env.run(&["import", "--format", "openai", &file, "--name", "c"])
            .ok();
        let exported: Value =
            serde_json::from_str(&env.run(&["export", "c", "--format", "openai"]).ok().stdout)
                .unwrap();
        assert_eq!(exported, case, "case {i}");
        convstore_projection::openai::validate(exported.as_array().unwrap()).unwrap();
    }
}

#[test]
fn openai_object_form_and_unparsable_arguments_are_reported() {
    let env = TestEnv::new();
    let doc = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "x", "name": "ann"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]});
    let file = write(&env, "m.json", &doc.to_string());
    let run = env
        .run(&[
            "import", "--format", "openai", &file, "--name", "c", "--json",
        ])
        .ok();
    let report = &run.lines()[0];
    let kept = report["kept_in_meta"].as_object().unwrap();
    assert!(kept.keys().any(|k| k.contains("model")), "{report}");
    assert!(kept.keys().any(|k| k.contains("user.name")), "{report}");
    assert!(kept.keys().any(|k| k.contains("arguments")), "{report}");
    let exported: Value =
        serde_json::from_str(&env.run(&["export", "c", "--format", "openai"]).ok().stdout).unwrap();
    assert_eq!(exported, doc["messages"]);
}

/// Content given as parts: the text parts make the event's text, and a
/// part with no place in an event (an image) is kept in meta and reported,
/// so the import says what a view will not show.
/// Bytes that are not UTF-8 are said to be so in every format, with
/// where they are, and nothing is stored.
#[test]
fn input_that_is_not_utf8_is_said_to_be_so_in_every_format() {
    let env = TestEnv::new();
    let cases: [(&str, &[u8], &str); 3] = [
        (
            "ndjson",
            b"{\"type\":\"user\",\"text\":\"h\xffi\"}\n",
            "line 1: not UTF-8",
        ),
        (
            "jp",
            b"[{\"type\":\"x\",\"content\":\"h\xffi\"}]",
            "not UTF-8 at line 1 column 26",
        ),
        (
            "openai",
            b"[{\"role\":\"user\",\"content\":\"h\xffi\"}]",
            "not UTF-8 at line 1 column 29",
        ),
    ];
    for (format, bytes, message) in cases {
        let file = env.path().join(format!("bad.{format}"));
        std::fs::write(&file, bytes).unwrap();
        let file = file.to_str().unwrap();
        let run = env.run(&["import", "--format", format, file]).fails();
        assert_eq!(
            run.stderr,
            format!("error: {file}: {message}\n"),
            "{format}"
        );
    }
    // A UTF-16 or UTF-32 byte order mark is said to be one; a UTF-8 one
    // is skipped, in every format.
    let marks: [(&str, &[u8], &str); 2] = [
        (
            "jp",
            b"\xFF\xFE[\x00]\x00",
            "not UTF-8: the input starts with a UTF-16 byte order mark",
        ),
        (
            "openai",
            b"\xFF\xFE\x00\x00[\x00\x00\x00",
            "a UTF-32 byte order mark",
        ),
    ];
    for (format, bytes, message) in marks {
        let file = env.path().join(format!("marked.{format}"));
        std::fs::write(&file, bytes).unwrap();
        let run = env
            .run(&["import", "--format", format, file.to_str().unwrap()])
            .fails();
        assert!(run.stderr.contains(message), "{}", run.stderr);
    }
    assert!(conversations(&env).is_empty());
    let file = env.path().join("bom.json");
    std::fs::write(
        &file,
        b"\xEF\xBB\xBF[{\"role\":\"user\",\"content\":\"hi\"}]",
    )
    .unwrap();
    env.run(&["import", "--format", "openai", file.to_str().unwrap()])
        .ok();
    assert_eq!(conversations(&env).len(), 1);
}

#[test]
fn openai_content_parts_other_than_text_are_reported() {
    let env = TestEnv::new();
    let doc = json!([
        {"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "be brief"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a cat"}]},
    ]);
    let file = write(&env, "parts.json", &doc.to_string());
    let run = env
        .run(&[
            "import", "--format", "openai", &file, "--name", "p", "--json",
        ])
        .ok();
    let report = &run.lines()[0];
    let kept = report["kept_in_meta"].as_object().unwrap();
    assert_eq!(kept.len(), 1, "{report}");
    assert_eq!(kept["user.content[image_url]"], 1, "{report}");
    let text = env
        .run(&["import", "--format", "openai", &file, "--name", "q"])
        .ok();
    assert!(
        text.stderr
            .contains("kept in meta (no event field for it): user.content[image_url] ×1"),
        "{}",
        text.stderr
    );
    let view = env.run(&["project", "p", "--format", "text"]).ok().stdout;
    assert!(view.contains("user: what is this? ⏎ be brief"), "{view}");
    let exported: Value =
        serde_json::from_str(&env.run(&["export", "p", "--format", "openai"]).ok().stdout).unwrap();
    assert_eq!(exported, doc);
}

#[test]
fn malformed_inputs_name_the_position_and_store_nothing() {
    let cases: [(&str, &str, &str); 9] = [
        (
            "jp",
            r#"[{"type":"turn_start","timestamp":"2026-01-01 00:00:00.0"},"#,
            "EOF",
        ),
        (
            "jp",
            r#"[{"type":"turn_start","timestamp":"2026-01-01 00:00:00.0"}, {"type":"tool_call_request","timestamp":"2026-01-01 00:00:00.0","name":"x","arguments":{}}]"#,
            "event 1: field `id`: missing",
        ),
        (
            "jp",
            r#"[{"type":"chat_request","timestamp":"2026-01-01 00:00:00.0","content":5}]"#,
            "event 0: field `content`",
        ),
        (
            "jp",
            r#"[{"type":"chat_request","timestamp":"yesterday","content":"x"}]"#,
            "event 0: field `timestamp`",
        ),
        ("jp", r#"{"type":"turn_start"}"#, "array"),
        (
            "ndjson",
            "{\"type\":\"turn_start\"}\n{\"type\":\"user\",\"text\":1}\n",
            "line 2: field `text`",
        ),
        (
            "ndjson",
            "{\"type\":\"turn_start\"}\n{\"type\":\"user\",\"te",
            "line 2",
        ),
        (
            "openai",
            r#"[{"role":"user","content":"x"},{"role":"tool","content":"y"}]"#,
            "message 1",
        ),
        ("openai", r#"[{"role":"user","content":"x"}"#, "EOF"),
    ];
    for (format, text, expected) in cases {
        let env = TestEnv::new();
        let file = write(&env, "input", text);
        let run = env
            .run(&["import", "--format", format, &file, "--name", "c"])
            .fails();
        assert!(
            run.stderr.contains(expected),
            "{format} {text}: {}",
            run.stderr
        );
        assert!(!env.db().exists(), "{format} {text}: a database was left");
        // An empty directory given for the database is left empty.
        std::fs::create_dir(env.db()).unwrap();
        env.run(&["import", "--format", format, &file, "--name", "c"])
            .fails();
        assert_eq!(
            std::fs::read_dir(env.db()).unwrap().count(),
            0,
            "{format} {text}: files were left"
        );
        // Into a database that exists: it stays, without the conversation.
        env.run(&["append", "other", "--user", "x", "-q"]).ok();
        env.run(&["import", "--format", format, &file, "--name", "c"])
            .fails();
        let names: Vec<_> = conversations(&env)
            .iter()
            .map(|c| c["name"].clone())
            .collect();
        assert_eq!(names, ["other"], "{format} {text}");
    }
}

#[test]
fn stdin_imports_and_projected_export_writes_a_file() {
    let env = TestEnv::new();
    let input = "{\"type\":\"turn_start\"}\n{\"type\":\"reasoning\",\"text\":\"r\"}\n{\"type\":\"user\",\"text\":\"u\"}\n\
                 {\"type\":\"compaction\",\"from_turn\":0,\"to_turn\":0,\"reasoning\":\"strip\"}\n";
    let run = env
        .run_with_stdin(&["import", "--format", "ndjson", "-", "--name", "s"], input)
        .ok();
    assert!(
        run.stdout.contains("imported 4 events in 1 turn into"),
        "{}",
        run.stdout
    );
    env.run(&[
        "export",
        "s",
        "--format",
        "ndjson",
        "--projected",
        "--output",
        "view.ndjson",
    ])
    .ok();
    let view = std::fs::read_to_string(env.path().join("view.ndjson")).unwrap();
    let types: Vec<String> = view
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(types, ["turn_start", "user"]);
    let raw = env
        .run(&["export", "s", "--format", "ndjson", "--as-of", "1"])
        .ok();
    assert_eq!(raw.stdout.lines().count(), 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// NDJSON export of any log re-imports to the same log: same head.
    #[test]
    fn ndjson_export_reimports_to_the_same_head(events in gen::events(30)) {
        let env = TestEnv::new();
        let lines: Vec<String> = events.iter().map(convstore_store::json::event_to_string).collect();
        env.run_with_stdin(&["append", "a"], &lines.join("\n")).ok();
        let exported = env.run(&["export", "a", "--format", "ndjson"]).ok().stdout;
        let file = write(&env, "a.ndjson", &exported);
        env.run(&["import", "--format", "ndjson", &file, "--name", "b"]).ok();
        let list = conversations(&env);
        prop_assert_eq!(list.len(), 2);
        prop_assert_eq!(&list[0]["head"], &list[1]["head"]);
        prop_assert_eq!(&list[0]["events"], &list[1]["events"]);
    }
}
