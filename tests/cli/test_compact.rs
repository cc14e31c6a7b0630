#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

//! Compaction strategies through the binary: configuration, profiles,
//! per-tool hints, summarizers (extractive, command, openai against a mock
//! server), provenance, noop and inflated, revert.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

use serde_json::Value;

use crate::support::server::Server;
use crate::support::TestEnv;
use crate::test_project::seeded;

fn write_config(env: &TestEnv, text: &str) {
    std::fs::write(env.path().join("convstore.toml"), text).unwrap();
}

fn compactions(env: &TestEnv) -> Vec<Value> {
    env.run(&["log", "chat"])
        .ok()
        .lines()
        .into_iter()
        .filter(|r| r["type"] == "compaction")
        .collect()
}

fn json_of(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap()
}

/// A conversation long enough that stripping and summaries shrink it.
fn verbose() -> TestEnv {
    let env = TestEnv::new();
    let mut lines = Vec::new();
    for turn in 0..8 {
        let long = "details ".repeat(40);
        lines.push(r#"{"type":"turn_start"}"#.to_owned());
        lines.push(format!(
            r#"{{"type":"user","text":"please fix file {turn}?"}}"#
        ));
        lines.push(format!(r#"{{"type":"reasoning","text":"{long}"}}"#));
        lines.push(format!(
            r#"{{"type":"tool_call","id":"r{turn}","name":"fs_read_file","arguments":{{"path":"src/f{turn}.rs"}}}}"#
        ));
        lines.push(format!(
            r#"{{"type":"tool_result","id":"r{turn}","content":"{long}","is_error":{}}}"#,
            turn == 3
        ));
        lines.push(format!(
            r#"{{"type":"tool_call","id":"g{turn}","name":"grep","arguments":{{"q":"{long}"}}}}"#
        ));
        lines.push(format!(
            r#"{{"type":"tool_result","id":"g{turn}","content":"{long}","is_error":false}}"#
        ));
        lines.push(format!(
            r#"{{"type":"assistant","text":"fixed {turn}. {long}"}}"#
        ));
    }
    env.run_with_stdin(&["append", "chat"], &lines.join("\n"))
        .ok();
    env
}

#[test]
fn invalid_configuration_names_the_key() {
    let env = verbose();
    for (text, key) in [
        (
            "[compaction]\ndefault_profle = \"light\"\n",
            "default_profle",
        ),
        ("[compaction.profiles.x]\nreasoning = \"shred\"\n", "shred"),
        ("[tools.grep.compaction]\nresponse = \"drop\"\n", "drop"),
        ("[compaction.auto]\ntrigger_ratio = 1.5\n", "trigger_ratio"),
        ("[compaction]\ndefault_profile = \"nope\"\n", "nope"),
        (
            "[compaction.profiles.x.summary]\nsummarizer = \"command\"\n",
            "command",
        ),
        ("[compaction\n", "convstore.toml"),
    ] {
        write_config(&env, text);
        let err = env.run(&["compact", "chat", "--dry-run"]).fails();
        assert!(err.stderr.contains("convstore.toml"), "{}", err.stderr);
        assert!(err.stderr.contains(key), "{text}: {}", err.stderr);
    }
    std::fs::remove_file(env.path().join("convstore.toml")).unwrap();
    let missing = env.path().join("missing.toml");
    env.run(&["--config", missing.to_str().unwrap(), "compact", "chat"])
        .fails();
    assert!(compactions(&env).is_empty());
}

#[test]
fn profiles_from_the_configuration_and_the_defaults() {
    let env = verbose();
    write_config(
        &env,
        "[compaction]\ndefault_profile = \"tidy\"\nkeep_last = 2\n\n\
         [compaction.profiles.tidy]\ntool_calls = \"omit\"\n",
    );
    // No policy flag: the default profile, and the default keep_last.
    let out = json_of(&env.run(&["compact", "chat", "--json"]).ok().stdout);
    assert_eq!(out["status"], "stored");
    assert_eq!(out["profile"], "tidy");
    assert_eq!(
        (out["from_turn"].as_u64(), out["to_turn"].as_u64()),
        (Some(0), Some(5))
    );
    let stored = &compactions(&env)[0];
    assert_eq!(stored["tool_calls"], "omit");
    assert_eq!(stored["profile"], "tidy");
    assert!(stored.get("reasoning").is_none());
    // A built-in profile by name; a flag overrides the profile's policy.
    // (keep_last applies when no --to is given.)
    env.run(&[
        "compact",
        "chat",
        "--profile",
        "light",
        "--from",
        "6",
        "--to",
        "7",
    ])
    .ok();
    env.run(&[
        "compact",
        "chat",
        "--profile",
        "default",
        "--tool-calls",
        "strip-requests",
        "--from",
        "7",
        "--to",
        "7",
    ])
    .ok();
    let all = compactions(&env);
    assert_eq!(all[1]["reasoning"], "strip");
    assert!(all[1].get("tool_calls").is_none());
    assert_eq!(all[2]["tool_calls"], "strip-requests");
    assert_eq!(all[2]["profile"], "default");
    env.run(&["compact", "chat", "--profile", "nope"]).fails();
}

#[test]
fn per_tool_hints_are_resolved_into_the_compaction() {
    let env = verbose();
    write_config(
        &env,
        "[tools.fs_read_file.compaction]\nrequest = \"keep\"\nresponse = \"keep\"\n",
    );
    env.run(&["compact", "chat", "--tool-calls", "strip"]).ok();
    let stored = &compactions(&env)[0];
    assert_eq!(stored["tool_calls"]["policy"], "strip");
    assert_eq!(
        stored["tool_calls"]["tools"]["fs_read_file"]["response"],
        "keep"
    );
    // The view keeps fs_read_file's results and strips grep's; it no longer
    // depends on the configuration.
    std::fs::remove_file(env.path().join("convstore.toml")).unwrap();
    let view = env.run(&["project", "chat"]).ok().lines();
    for e in view.iter().filter(|e| e["type"] == "tool_result") {
        let id = e["id"].as_str().unwrap();
        let stripped = e["content"].as_str().unwrap().starts_with("[compacted]");
        assert_eq!(stripped, id.starts_with('g'), "{e}");
    }
}

#[test]
fn noop_inflated_and_force() {
    let env = seeded();
    // Nothing to strip in turns without reasoning... every turn has some:
    // strip, then strip again is a noop.
    env.run(&["compact", "chat", "--reasoning", "strip"]).ok();
    let out = json_of(
        &env.run(&["compact", "chat", "--reasoning", "strip", "--json"])
            .ok()
            .stdout,
    );
    assert_eq!(out["status"], "noop");
    assert_eq!(compactions(&env).len(), 1);
    // Stripped results are longer than these short ones: inflated.
    let err = env
        .run(&["compact", "chat", "--tool-calls", "strip-responses"])
        .fails();
    assert!(err.stderr.contains("inflated"), "{}", err.stderr);
    assert_eq!(compactions(&env).len(), 1);
    let dry = json_of(
        &env.run(&[
            "compact",
            "chat",
            "--tool-calls",
            "strip-responses",
            "--dry-run",
            "--json",
        ])
        .ok()
        .stdout,
    );
    assert_eq!(dry["status"], "inflated");
    let forced = json_of(
        &env.run(&[
            "compact",
            "chat",
            "--tool-calls",
            "strip-responses",
            "--force",
            "--json",
        ])
        .ok()
        .stdout,
    );
    assert_eq!(forced["status"], "stored");
    assert!(forced["tokens_after"].as_u64() > forced["tokens_before"].as_u64());
    assert_eq!(compactions(&env).len(), 2);
}

#[test]
fn revert_restores_exactly_the_raw_view_of_its_range() {
    let env = verbose();
    env.run(&["compact", "chat", "--tool-calls", "omit", "--to", "4"])
        .ok();
    env.run(&[
        "compact",
        "chat",
        "--summary",
        "early",
        "--from",
        "1",
        "--to",
        "2",
    ])
    .ok();
    env.run(&["compact", "chat", "--reasoning", "strip"]).ok();
    env.run(&["compact", "chat", "--revert", "--from", "1", "--to", "5"])
        .ok();
    // The raw view: the same events without compactions, in another
    // conversation.
    let raw: Vec<String> = env
        .run(&["export", "chat", "--format", "ndjson"])
        .ok()
        .stdout
        .lines()
        .filter(|l| !l.contains("\"compaction\""))
        .map(str::to_owned)
        .collect();
    env.run_with_stdin(&["append", "raw"], &raw.join("\n")).ok();
    let turns = |conv: &str| {
        env.run(&["project", conv, "--turns", "1..5"])
            .ok()
            .lines()
            .into_iter()
            .map(|mut v| {
                // seqs differ (no compactions in `raw`); the rest must not.
                v.as_object_mut().unwrap().remove("seq");
                v
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(turns("chat"), turns("raw"));
    // Outside the range the older compactions still apply.
    let view = env.run(&["project", "chat", "--turns", "0"]).ok().lines();
    assert!(view
        .iter()
        .all(|e| e["type"] != "tool_call" && e["type"] != "reasoning"));
}

#[test]
fn extractive_summaries_and_provenance() {
    let env = verbose();
    let out = json_of(
        &env.run(&[
            "compact",
            "chat",
            "--summarize",
            "--from",
            "0",
            "--to",
            "5",
            "--json",
        ])
        .ok()
        .stdout,
    );
    assert_eq!(out["status"], "stored");
    let log = env.run(&["log", "chat"]).ok().lines();
    let stored = log.last().unwrap();
    let summary = stored["summary"].as_str().unwrap();
    for turn in 0..=5 {
        assert!(
            summary.contains(&format!("please fix file {turn}?")),
            "{summary}"
        );
        assert!(summary.contains(&format!("src/f{turn}.rs")), "{summary}");
    }
    assert!(!summary.contains("please fix file 6"), "{summary}");
    assert!(
        summary.contains("<errors>\n- fs_read_file: 1 error(s), latest: details"),
        "{summary}"
    );
    assert!(summary.contains("fs_read_file x6"), "{summary}");
    assert_eq!(stored["summarizer"], "extractive");
    assert_eq!(stored["created_by"], "manual");
    assert_eq!(stored["prompt_hash"].as_str().unwrap().len(), 16);
    assert_eq!(stored["first_address"], log[0]["address"]);
    let last_of_5 = log.iter().rfind(|r| r["turn"] == 5).unwrap();
    assert_eq!(stored["last_address"], last_of_5["address"]);
    assert!(stored["tokens_after"].as_u64() < stored["tokens_before"].as_u64());
    let stats = json_of(&env.run(&["stats", "chat", "--json"]).ok().stdout);
    assert_eq!(stats["compactions"][0]["summarizer"], "extractive");
    let text = env.run(&["stats", "chat"]).ok().stdout;
    assert!(text.contains("extractive"), "{text}");
}

/// A shell script as a summarizer.
fn script(env: &TestEnv, name: &str, body: &str) -> String {
    let path = env.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn command_summarizer_reads_raw_events_and_instructions() {
    let env = verbose();
    let ok = script(
        &env,
        "sum.sh",
        r#"n=$(grep -c '"seq"' ); printf 'events=%s; %s' "$n" "$CONVSTORE_INSTRUCTIONS""#,
    );
    write_config(
        &env,
        &format!(
            "[compaction.profiles.cmd.summary]\nsummarizer = \"command\"\ncommand = [\"{ok}\"]\n\
             instructions = \"be short\"\nmodel = \"local\"\n"
        ),
    );
    env.run(&[
        "compact",
        "chat",
        "--profile",
        "cmd",
        "--from",
        "2",
        "--to",
        "3",
        "--instructions",
        "name the files",
    ])
    .ok();
    let stored = compactions(&env).pop().unwrap();
    // Turns 2 and 3: eight raw events each.
    assert_eq!(stored["summary"], "events=16; be short\n\nname the files");
    assert_eq!(stored["summarizer"], "command");
    assert_eq!(stored["model"], "local");
    assert_eq!(stored["profile"], "cmd");

    // A later summary widens over it and is written from raw events again.
    env.run(&[
        "compact",
        "chat",
        "--profile",
        "cmd",
        "--from",
        "3",
        "--to",
        "4",
    ])
    .ok();
    let stored = compactions(&env).pop().unwrap();
    assert_eq!(
        (stored["from_turn"].as_u64(), stored["to_turn"].as_u64()),
        (Some(2), Some(4))
    );
    assert!(
        stored["summary"]
            .as_str()
            .unwrap()
            .starts_with("events=24;"),
        "{stored}"
    );

    let failing = script(&env, "fail.sh", "echo 'model unavailable' >&2; exit 3");
    let slow = script(&env, "slow.sh", "sleep 7.31; echo late");
    for (program, expected) in [
        (failing.as_str(), "model unavailable"),
        (slow.as_str(), "did not finish within 1 s"),
    ] {
        write_config(
            &env,
            &format!(
                "[compaction.profiles.cmd.summary]\nsummarizer = \"command\"\ncommand = [\"{program}\"]\ntimeout_secs = 1\n"
            ),
        );
        let before = compactions(&env).len();
        let err = env.run(&["compact", "chat", "--profile", "cmd"]).fails();
        assert!(err.stderr.contains(expected), "{}", err.stderr);
        assert_eq!(compactions(&env).len(), before);
    }
    // What the program started ended with it: no `sleep 7.31` is left.
    let left: Vec<_> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|cmdline| cmdline == b"sleep\x007.31\x00")
        .collect();
    assert!(left.is_empty(), "a summarizer's child outlived its timeout");
}

/// Serves `answers` in order, one connection each, and hands back each
/// request's headers and body.
fn mock_server(
    answers: Vec<(u16, String)>,
) -> (String, std::thread::JoinHandle<Vec<(String, Value)>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for (status, body) in answers {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut headers = String::new();
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                headers.push_str(&line);
            }
            let mut request = vec![0; length];
            reader.read_exact(&mut request).unwrap();
            seen.push((headers, serde_json::from_slice(&request).unwrap()));
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
        seen
    });
    (url, handle)
}

#[test]
fn openai_summarizer_against_a_mock_server() {
    let env = verbose();
    let answer = serde_json::json!({
        "choices": [{"message": {"role": "assistant", "content": "The user fixed files 0-3."}}]
    })
    .to_string();
    let (url, server) = mock_server(vec![
        (200, answer),
        (500, r#"{"error":"overloaded"}"#.to_owned()),
    ]);
    write_config(
        &env,
        &format!(
            "[compaction.profiles.llm.summary]\nsummarizer = \"openai\"\nbase_url = \"{url}\"\n\
             model = \"mock-1\"\napi_key_env = \"MOCK_KEY\"\ntimeout_secs = 10\n"
        ),
    );
    let run = env
        .command(&[
            "compact",
            "chat",
            "--profile",
            "llm",
            "--to",
            "3",
            "--instructions",
            "Mention every error.",
        ])
        .env("MOCK_KEY", "secret")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stored = compactions(&env).pop().unwrap();
    assert_eq!(stored["summary"], "The user fixed files 0-3.");
    assert_eq!(stored["summarizer"], "openai");
    assert_eq!(stored["model"], "mock-1");

    let err = env
        .run(&["compact", "chat", "--profile", "llm", "--from", "4"])
        .fails();
    assert!(err.stderr.contains("500"), "{}", err.stderr);
    assert_eq!(compactions(&env).len(), 1);

    let seen = server.join().unwrap();
    let (headers, request) = &seen[0];
    assert!(headers.contains("/v1/chat/completions"), "{headers}");
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("authorization: bearer secret"),
        "{headers}"
    );
    assert_eq!(request["model"], "mock-1");
    let system = request["messages"][0]["content"].as_str().unwrap();
    // The default prompt, with the instructions added, not replaced.
    assert!(system.contains("every file path touched"), "{system}");
    assert!(system.ends_with("Mention every error."), "{system}");
    let user = request["messages"][1]["content"].as_str().unwrap();
    assert!(
        user.contains("please fix file 3?") && !user.contains("please fix file 4?"),
        "{user}"
    );
}

#[test]
fn exact_tokenizers_count_tokens() {
    let env = verbose();
    let stats = |tokenizer: &str| {
        json_of(
            &env.run(&["stats", "chat", "--json", "--tokenizer", tokenizer])
                .ok()
                .stdout,
        )
    };
    let approx = stats("chars4");
    let cl100k = stats("cl100k");
    let o200k = stats("o200k");
    assert_eq!(cl100k["tokenizer"], "cl100k");
    // "details " repeated: one token per word in both encodings, far
    // fewer than one per four characters would be... within a factor.
    let (a, c, o) = (
        approx["tokens"].as_u64().unwrap(),
        cl100k["tokens"].as_u64().unwrap(),
        o200k["tokens"].as_u64().unwrap(),
    );
    assert!(c > 0 && o > 0 && c != a, "{a} {c} {o}");
    assert!(c * 3 > a && c < a * 3, "{a} {c}");
    // A known count: "hello world" is two tokens in cl100k_base.
    let env2 = TestEnv::new();
    env2.run(&["append", "w", "--user", "hello world"]).ok();
    let words = json_of(
        &env2
            .run(&["stats", "w", "--json", "--tokenizer", "cl100k"])
            .ok()
            .stdout,
    );
    assert_eq!(words["tokens"], 2);
    let out = json_of(
        &env.run(&[
            "compact",
            "chat",
            "--reasoning",
            "strip",
            "--tokenizer",
            "o200k",
            "--json",
        ])
        .ok()
        .stdout,
    );
    assert_eq!(out["tokens_before"], o200k["view_tokens"]);
    assert_eq!(compactions(&env)[0]["tokenizer"], "o200k");
    env.run(&["stats", "chat", "--tokenizer", "gpt2"]).usage();
}

#[test]
fn openai_summarizer_times_out() {
    let env = verbose();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    // Accepts, reads, never answers (until the test is done with it).
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        std::thread::sleep(std::time::Duration::from_secs(4));
        drop(stream);
    });
    write_config(
        &env,
        &format!(
            "[compaction.profiles.llm.summary]\nsummarizer = \"openai\"\nbase_url = \"{url}\"\ntimeout_secs = 1\n"
        ),
    );
    let err = env.run(&["compact", "chat", "--profile", "llm"]).fails();
    assert!(
        err.stderr.contains("openai summarizer failed"),
        "{}",
        err.stderr
    );
    assert!(err.stderr.contains("timed out"), "{}", err.stderr);
    assert!(compactions(&env).is_empty());
    server.join().unwrap();
}

/// `n` turns of a long question and a long answer in conversation `conv`.
fn plain_turns(env: &TestEnv, conv: &str, n: usize) {
    for i in 0..n {
        env.run(&[
            "append",
            conv,
            "--turn",
            "--user",
            &format!("question {i} {}", "words ".repeat(60)),
            "--assistant",
            &"an answer ".repeat(40),
        ])
        .ok();
    }
}

/// The automatic compaction `append --auto` makes of `a` with profile
/// `brief` in a small window.
const AUTO_BRIEF: &str = "[compaction.auto]\nenabled = true\ncontext_window = 600\nreserve_tokens = 0\ntoken_floor = 10\nkeep_last = 1\nprofile = \"brief\"\n";

/// `append --auto` says when its summarizer failed, and when the view is
/// over its trigger but the compaction it tried would change nothing.
#[test]
fn automatic_compaction_says_what_it_could_not_do() {
    let env = TestEnv::new();
    let failing = script(&env, "fail.sh", "echo 'model unavailable' >&2; exit 3");
    write_config(
        &env,
        &format!(
            "[compaction.profiles.brief.summary]\nsummarizer = \"command\"\ncommand = [\"{failing}\"]\n{AUTO_BRIEF}"
        ),
    );
    // Turns of plain messages: stripping reasoning and tool calls changes
    // nothing in them.
    plain_turns(&env, "a", 6);
    let run = env
        .run(&["append", "a", "--auto", "--turn", "--user", "trigger"])
        .ok();
    assert!(
        run.stderr.contains("the summarizer failed"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("model unavailable"), "{}", run.stderr);
    assert!(run.stderr.contains("nothing was stored"), "{}", run.stderr);
    let stats = json_of(&env.run(&["stats", "a", "--json"]).ok().stdout);
    assert_eq!(
        stats["compactions"].as_array().map_or(0, Vec::len),
        0,
        "{stats}"
    );
}

/// A command summarizer for profile `profile` (convstore.toml: `extra`,
/// then the profile) running `body` in sh, where `$input` holds the raw
/// events it was given, `$first` is `yes` on its first run only, and
/// `convstore` runs this binary on the database; which is then served, so
/// the script's commands and the test's go through the server. Gives the
/// server and a count of the summarizer's runs so far.
fn summarizer_beside_a_server(
    env: &TestEnv,
    profile: &str,
    body: &str,
    extra: &str,
) -> (Server, impl Fn() -> usize) {
    let calls = env.path().join("calls");
    let program = script(
        env,
        "summarize.sh",
        &format!(
            "input=$(cat)\n\
             first=yes; [ -e '{calls}' ] && first=no\n\
             echo x >> '{calls}'\n\
             convstore() {{ '{bin}' --db '{db}' \"$@\"; }}\n\
             {body}",
            calls = calls.display(),
            bin = env!("CARGO_BIN_EXE_convstore"),
            db = env.db().display(),
        ),
    );
    write_config(
        env,
        &format!(
            "{extra}[compaction.profiles.{profile}.summary]\nsummarizer = \"command\"\ncommand = [\"{program}\"]\n"
        ),
    );
    let server = Server::start(env.db(), &[]);
    let runs = move || std::fs::read_to_string(&calls).map_or(0, |c| c.lines().count());
    (server, runs)
}

/// Appends that land while a compaction is planned (here, from its own
/// summarizer, through the server that holds the database) make it plan
/// again from the new head, not fail with a conflict; the summary already
/// written is kept, since its raw events did not change.
#[test]
fn appends_during_a_compaction_make_it_plan_again() {
    let env = verbose();
    let (_server, runs) = summarizer_beside_a_server(
        &env,
        "racing",
        "echo '{\"type\":\"user\",\"text\":\"meanwhile\"}' | convstore append chat -q > /dev/null || exit 1\n\
         printf 'the files were fixed'",
        "",
    );
    let run = env
        .run(&[
            "compact",
            "chat",
            "--profile",
            "racing",
            "--from",
            "0",
            "--to",
            "3",
            "--json",
        ])
        .ok();
    let report = json_of(&run.stdout);
    assert_eq!(report["status"], "stored", "{report}");
    // One summary written; the append it made is in the log before the
    // compaction, which was planned from it.
    assert_eq!(runs(), 1);
    let log = env.run(&["log", "chat"]).ok().lines();
    let last = log.last().unwrap();
    assert_eq!(last["type"], "compaction");
    assert_eq!(last["summary"], "the files were fixed");
    assert_eq!(log[log.len() - 2]["text"], "meanwhile");
    assert_eq!(report["head"], last["address"]);
}

/// A redaction that lands while a summary is being written (here, made by
/// the summarizer itself, through the server) changes the raw events the
/// summary came from, not their addresses: the summary is written again
/// from the redacted events, never stored with the text redacted.
#[test]
fn a_redaction_during_a_compaction_has_its_summary_written_again() {
    let env = verbose();
    let (_server, runs) = summarizer_beside_a_server(
        &env,
        "redacting",
        "if [ $first = yes ]; then convstore redact chat 1 --reason leaked -q > /dev/null || exit 1; fi\n\
         case \"$input\" in *'please fix file 0?'*) printf 'saw the question';; *) printf 'saw no question';; esac",
        "",
    );
    env.run(&[
        "compact",
        "chat",
        "--profile",
        "redacting",
        "--from",
        "0",
        "--to",
        "3",
    ])
    .ok();
    assert_eq!(runs(), 2);
    let stored = compactions(&env).pop().unwrap();
    assert_eq!(stored["summary"], "saw no question", "{stored}");
    let view = env.run(&["project", "chat"]).ok().stdout;
    assert!(!view.contains("saw the question"), "{view}");
}

/// `append --auto` whose automatic compaction meets another client's
/// append (here, made by its own summarizer, through the server) plans
/// again from the new head rather than giving up with a warning, keeping
/// its decision and the summary written.
#[test]
fn automatic_compaction_plans_again_after_an_append_meanwhile() {
    let env = TestEnv::new();
    let (_server, runs) = summarizer_beside_a_server(
        &env,
        "brief",
        "if [ $first = yes ]; then convstore append a --user meanwhile -q > /dev/null || exit 1; fi\n\
         printf 'questions were asked'",
        AUTO_BRIEF,
    );
    plain_turns(&env, "a", 6);
    let run = env
        .run(&["append", "a", "--auto", "--turn", "--user", "trigger"])
        .ok();
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    assert_eq!(runs(), 1);
    let log = env.run(&["log", "a"]).ok().lines();
    let last = log.last().unwrap();
    assert_eq!(last["type"], "compaction", "{last}");
    assert_eq!(last["summary"], "questions were asked");
    assert!(log.iter().any(|r| r["text"] == "meanwhile"));
}

/// A range that moves with the head (`--keep-last`) is resolved once,
/// against the log the first plan saw: appends of new turns meanwhile
/// (here, by the summarizer itself, each time it runs) leave its summary
/// as written, so the compaction is stored rather than planned and
/// summarized again until it gives up.
#[test]
fn a_range_that_moves_with_the_head_is_resolved_once() {
    let env = verbose();
    let (_server, runs) = summarizer_beside_a_server(
        &env,
        "appending",
        "convstore append chat --turn --user meanwhile -q > /dev/null || exit 1\n\
         printf 'the files were fixed'",
        "",
    );
    let report = json_of(
        &env.run(&[
            "compact",
            "chat",
            "--profile",
            "appending",
            "--keep-last",
            "1",
            "--json",
        ])
        .ok()
        .stdout,
    );
    assert_eq!(report["status"], "stored", "{report}");
    // Eight turns, 0..7: all but the last, as the first plan saw them.
    assert_eq!(
        (report["from_turn"].as_u64(), report["to_turn"].as_u64()),
        (Some(0), Some(6))
    );
    assert_eq!(runs(), 1);
}
