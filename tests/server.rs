//! `convstore serve` over real sockets: the binary starts on an ephemeral
//! port and these tests talk HTTP to it (ureq), and run the CLI through it.
#![allow(clippy::format_collect)]

mod support;

use std::io::{BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::server::{
    agent, answer, cli, cli_bytes, get_text, output, post, sse_events, unsafe_free_kill, Server,
    BIN,
};

const TURN: &str = "{\"type\":\"turn_start\"}\n{\"type\":\"user\",\"text\":\"hello\"}\n{\"type\":\"reasoning\",\"text\":\"thinking about it\"}\n{\"type\":\"assistant\",\"text\":\"hi\"}\n";

#[test]
fn appends_reads_views_and_conflicts_over_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path().join("db"), &[]);
    let base = format!("{}/v1/conversations", server.url);

    // Created on first append (201), then appended to (200).
    let (status, body) = post(&format!("{base}/chat/events"), TURN);
    assert_eq!(
        (status, body["created"].clone()),
        (201, json!(true)),
        "{body}"
    );
    assert_eq!(body["events"], 4);
    let (status, body) = answer(
        agent()
            .post(&format!("{base}/chat/events?expected_seq=4"))
            .send_json(json!([{"type": "assistant", "text": "more"}])),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["first_seq"], 4);
    let head = body["head"].as_str().expect("head").to_owned();

    // A stale expected_seq or If-Match: 409 with the head and length;
    // nothing stored.
    let (status, body) = post(&format!("{base}/chat/events?expected_seq=4"), TURN);
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "conflict");
    assert_eq!(body["error"]["head"], json!(head));
    assert_eq!(body["error"]["events"], 5);
    let (status, body) = answer(
        agent()
            .post(&format!("{base}/chat/events"))
            .set("If-Match", &format!("\"{}\"", "0".repeat(64)))
            .send_string(TURN),
    );
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .expect("message")
        .starts_with("conflict: the head is"));

    // The raw log, whole and paginated; the same lines as `convstore log`.
    let log = get_text(&format!("{base}/chat/events"));
    assert_eq!(log.lines().count(), 5);
    let page = agent()
        .get(&format!("{base}/chat/events?from=1&limit=2"))
        .call()
        .expect("200");
    assert_eq!(page.header("convstore-next-seq"), Some("3"));
    let page = page.into_string().expect("text");
    assert_eq!(page.lines().count(), 2);
    assert!(page.starts_with("{\"seq\":1,"));

    // Views: projected with a profile, as of a seq, a turn range; stored.
    let view = get_text(&format!("{base}/chat/view?format=text&profile=light"));
    assert!(!view.contains("reasoning:"), "{view}");
    let as_of = get_text(&format!("{base}/chat/view?as_of=1"));
    assert_eq!(as_of.lines().count(), 2);
    let openai: Value =
        serde_json::from_str(&get_text(&format!("{base}/chat/view?format=openai"))).expect("json");
    assert_eq!(openai[0]["role"], "user");
    let stored = agent()
        .get(&format!(
            "{base}/chat/views/small?profile=default&format=json"
        ))
        .call()
        .expect("200");
    assert_eq!(stored.header("convstore-view-refresh"), Some("built"));
    let events: Value = serde_json::from_str(&stored.into_string().expect("text")).expect("json");
    assert_eq!(events.as_array().map(Vec::len), Some(4));

    // Compaction (dry run with its token table), explain, verify, fork.
    let (status, report) = answer(
        agent()
            .post(&format!("{base}/chat/compact"))
            .send_json(json!({"reasoning": "strip", "dry_run": true})),
    );
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["status"], "dry_run");
    assert_eq!(report["kinds"]["reasoning"]["events_after"], 0);
    let (status, report) = answer(
        agent()
            .post(&format!("{base}/chat/compact"))
            .send_json(json!({"reasoning": "strip"})),
    );
    assert_eq!((status, report["status"].clone()), (200, json!("stored")));
    let (_, explained) = answer(agent().get(&format!("{base}/chat/explain?turn=0")).call());
    assert_eq!(explained["winners"]["reasoning"], 5);
    let (_, verified) = answer(agent().get(&format!("{}/v1/verify", server.url)).call());
    assert_eq!(verified["ok"], true, "{verified}");
    let (status, forked) = answer(
        agent()
            .post(&format!("{base}/chat/fork"))
            .send_json(json!({"at_seq": 1, "name": "retry"})),
    );
    assert_eq!(
        (status, forked["shared"].clone()),
        (201, json!(2)),
        "{forked}"
    );
    let (_, list) = answer(agent().get(&format!("{base}?prefix=re")).call());
    assert_eq!(list["conversations"][0]["name"], "retry");
    let (_, info) = answer(agent().get(&format!("{base}/retry")).call());
    assert_eq!(info["lineage"][1]["name"], "chat");

    // Bad requests: structured errors, the CLI's words.
    for (url, code) in [
        (format!("{base}/nope/events"), "not_found"),
        (format!("{base}/chat/view?format=xml"), "bad_request"),
        (format!("{base}/chat/view?bogus=1"), "bad_request"),
        (format!("{base}/chat/view?as_of=99"), "no_such_record"),
        (format!("{base}/chat/view?turns=9"), "bad_range"),
        (format!("{}/v1/nowhere", server.url), "no_route"),
    ] {
        let (status, body) = answer(agent().get(&url).call());
        assert!(status >= 400, "{url}");
        assert_eq!(body["error"]["code"], code, "{url}: {body}");
    }
    let (status, body) = post(&format!("{base}/chat/events"), "{\"type\":\"user\"}\n");
    assert_eq!(status, 400);
    assert_eq!(body["error"]["message"], "line 1: field `text`: missing");
    let (status, body) = answer(
        agent()
            .post(&format!("{base}/chat/events"))
            .send_json(json!([{"type": "user", "text": "ok"}, {"type": "bogus"}])),
    );
    assert_eq!(status, 400);
    assert!(body["error"]["message"]
        .as_str()
        .expect("message")
        .starts_with("event 1: "));
    assert_eq!(
        get_text(&format!("{base}/chat/events")).lines().count(),
        6,
        "failed appends stored nothing"
    );

    // SIGTERM: exit 0, the discovery file removed.
    assert!(server.db.join("convstore.server").exists());
    let db = server.db.clone();
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
    assert!(!db.join("convstore.server").exists());
}

#[test]
fn idempotency_keys_store_an_append_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path().join("db"), &[]);
    let url = format!("{}/v1/conversations/chat/events", server.url);
    let send = |key: &str, body: &str| {
        answer(
            agent()
                .post(&url)
                .set("Idempotency-Key", key)
                .set("Content-Type", "application/x-ndjson")
                .send_string(body),
        )
    };
    let (s1, first) = send("k1", TURN);
    let (s2, again) = send("k1", TURN);
    assert_eq!((s1, s2), (201, 201));
    assert_eq!(first, again);
    let (status, body) = send("k1", "{\"type\":\"user\",\"text\":\"other\"}\n");
    assert_eq!(status, 422);
    assert_eq!(body["error"]["code"], "idempotency_key_reused");
    assert_eq!(get_text(&url).lines().count(), 4);
}

#[test]
fn concurrent_appends_with_expected_seq_lose_nothing_and_conflict_with_409() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path().join("db"), &[]);
    let url = format!("{}/v1/conversations/race/events", server.url);
    post(&url, "{\"type\":\"turn_start\"}\n");
    let (mut stored, mut conflicts) = (0, 0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|w| {
                let url = url.clone();
                scope.spawn(move || {
                    let (mut ok, mut lost) = (0, 0);
                    for i in 0..25 {
                        // Read the length, append expecting it.
                        let info: Value = agent()
                            .get(&url.replace("/events", ""))
                            .call()
                            .expect("info")
                            .into_json()
                            .expect("json");
                        let seq = info["events"].as_u64().expect("events");
                        let body = format!("{{\"type\":\"user\",\"text\":\"w{w} i{i}\"}}\n");
                        match post(&format!("{url}?expected_seq={seq}"), &body) {
                            (200, _) => ok += 1,
                            (409, e) => {
                                assert_eq!(e["error"]["code"], "conflict");
                                lost += 1;
                            }
                            other => panic!("{other:?}"),
                        }
                    }
                    (ok, lost)
                })
            })
            .collect();
        for worker in workers {
            let (ok, lost) = worker.join().expect("worker");
            stored += ok;
            conflicts += lost;
        }
    });
    assert_eq!(stored + conflicts, 200);
    let log = get_text(&url);
    assert_eq!(
        log.lines().count(),
        1 + stored,
        "every 200 is in the log, once"
    );
    let (_, verified) = answer(agent().get(&format!("{}/v1/verify", server.url)).call());
    assert_eq!(verified["ok"], true);
}

#[test]
fn follow_streams_the_log_and_the_view_and_resumes_from_last_event_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path().join("db"), &[]);
    let base = format!("{}/v1/conversations/live", server.url);
    post(&format!("{base}/events"), TURN);
    let stream = agent()
        .get(&format!("{base}/follow?from=2"))
        .call()
        .expect("200");
    assert_eq!(stream.header("content-type"), Some("text/event-stream"));
    let mut reader = BufReader::new(stream.into_reader());
    let first = sse_events(&mut reader, 2);
    assert_eq!(
        first.iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![Some(2), Some(3)]
    );
    let views = agent()
        .get(&format!("{base}/views/default/follow"))
        .call()
        .expect("200");
    let mut view_reader = BufReader::new(views.into_reader());
    let whole = sse_events(&mut view_reader, 1);
    assert_eq!(whole[0].1, "view");
    let data: Value = serde_json::from_str(&whole[0].2).expect("json");
    assert_eq!(data["from_turn"], 0);
    assert_eq!(data["events"].as_array().map(Vec::len), Some(4));

    // An append reaches the follower, with id = its seq.
    let started = Instant::now();
    post(
        &format!("{base}/events"),
        "{\"type\":\"user\",\"text\":\"live one\"}\n",
    );
    let next = sse_events(&mut reader, 1);
    assert_eq!(next[0].0, Some(4));
    assert!(next[0].2.contains("live one"));
    assert!(started.elapsed() < Duration::from_secs(5));
    let changed = sse_events(&mut view_reader, 1);
    let data: Value = serde_json::from_str(&changed[0].2).expect("json");
    assert_eq!(changed[0].0, Some(4));
    assert!(data["events"].to_string().contains("live one"));

    // Resuming: Last-Event-ID 1 sends 2 onwards.
    let resumed = agent()
        .get(&format!("{base}/follow"))
        .set("Last-Event-ID", "1")
        .call()
        .expect("200");
    let mut reader = BufReader::new(resumed.into_reader());
    let ids: Vec<_> = sse_events(&mut reader, 3).iter().map(|e| e.0).collect();
    assert_eq!(ids, vec![Some(2), Some(3), Some(4)]);
}

#[test]
fn a_follower_that_falls_behind_is_told_and_misses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path().join("db"), &["--follow-behind", "100"]);
    let base = format!("{}/v1/conversations/slow", server.url);
    post(&format!("{base}/events"), "{\"type\":\"turn_start\"}\n");
    let stream = agent()
        .get(&format!("{base}/follow?from=0"))
        .call()
        .expect("200");
    // The follower reads nothing while 3,000 events are appended.
    let big: String = (0..1000)
        .map(|i| {
            format!(
                "{{\"type\":\"user\",\"text\":\"{i} {}\"}}\n",
                "x".repeat(400)
            )
        })
        .collect();
    for _ in 0..3 {
        assert_eq!(post(&format!("{base}/events"), &big).0, 200);
    }
    let mut reader = BufReader::new(stream.into_reader());
    let events = sse_events(&mut reader, 3001);
    let behind: Vec<_> = events.iter().filter(|e| e.1 == "behind").collect();
    assert!(!behind.is_empty(), "told it fell behind");
    let ids: Vec<u64> = events.iter().filter_map(|e| e.0).collect();
    assert_eq!(ids, (0..3001).collect::<Vec<_>>(), "every record, in order");
}

#[test]
fn tokens_scopes_and_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "# test tokens\nread-only reader-token-0123456789\nread-write writer-token-0123456789\n",
    )
    .expect("token file");
    let server = Server::start(
        dir.path().join("db"),
        &[
            "--token-file",
            tokens.to_str().expect("utf-8"),
            "--max-body-bytes",
            "4096",
            "--max-event-bytes",
            "1024",
        ],
    );
    let url = format!("{}/v1/conversations/t/events", server.url);
    let with = |token: &str| {
        agent()
            .post(&url)
            .set("Authorization", &format!("Bearer {token}"))
            .set("Content-Type", "application/x-ndjson")
    };
    let (status, body) = answer(agent().post(&url).send_string(TURN));
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (401, json!("unauthorized"))
    );
    let (status, _) = answer(with("wrong-token-000000000000").send_string(TURN));
    assert_eq!(status, 401);
    let (status, body) = answer(with("reader-token-0123456789").send_string(TURN));
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("forbidden"))
    );
    assert_eq!(
        answer(with("writer-token-0123456789").send_string(TURN)).0,
        201
    );
    // The scheme's name is case-insensitive (RFC 7235).
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let (status, _) = answer(
            agent()
                .get(&url)
                .set(
                    "Authorization",
                    &format!("{scheme} reader-token-0123456789"),
                )
                .call(),
        );
        assert_eq!(status, 200, "{scheme}");
    }
    // /healthz needs no token; /metrics does.
    assert_eq!(
        answer(agent().get(&format!("{}/healthz", server.url)).call()).0,
        200
    );
    assert_eq!(
        answer(agent().get(&format!("{}/metrics", server.url)).call()).0,
        401
    );
    // Limits: a body over --max-body-bytes, an event over --max-event-bytes.
    let (status, body) = answer(with("writer-token-0123456789").send_string(&"x".repeat(5000)));
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (413, json!("body_too_large"))
    );
    let event = format!("{{\"type\":\"user\",\"text\":\"{}\"}}\n", "y".repeat(2000));
    let (status, body) = answer(with("writer-token-0123456789").send_string(&event));
    assert_eq!(status, 413, "{body}");
    let log = agent()
        .get(&url)
        .set("Authorization", "Bearer writer-token-0123456789")
        .call()
        .expect("200")
        .into_string()
        .expect("text");
    assert_eq!(log.lines().count(), 4, "refused requests stored nothing");

    // Beyond loopback only with a token file.
    let (code, _, err) = cli(
        dir.path().join("db2"),
        &["serve", "--listen", "0.0.0.0:0"],
        None,
    );
    assert_eq!(code, 1);
    assert!(err.contains("not a loopback address"), "{err}");
}

#[test]
fn the_cli_goes_through_the_server_that_holds_the_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let server = Server::start(&db, &[]);
    // An agent appends, a tool reads: both through the server.
    let (code, head, err) = cli(&db, &["append", "chat", "--turn", "--user", "hi"], None);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("created conversation chat"), "{err}");
    let (code, out, _) = cli(
        &db,
        &["append", "chat"],
        Some("{\"type\":\"assistant\",\"text\":\"hello\"}\n"),
    );
    assert_eq!(code, 0);
    assert_ne!(out, head);
    let (code, out, _) = cli(&db, &["project", "chat", "--format", "text"], None);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "[turn 0] ── turn start ──\n[turn 0] user: hi\n[turn 0] assistant: hello\n"
    );
    let (_, through, _) = cli(&db, &["log", "chat"], None);
    let (code, via_url, ()) = {
        let out = Command::new(BIN)
            .args(["--url", &server.url, "log", "chat"])
            .output()
            .expect("runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            (),
        )
    };
    assert_eq!(code, 0);
    assert_eq!(through, via_url);
    // Errors are the CLI's one line.
    let (code, _, err) = cli(&db, &["log", "nope"], None);
    assert_eq!(
        (code, err.as_str()),
        (1, "error: no conversation named \"nope\"\n")
    );
    // A second server on the same database: refused, naming the first.
    let (code, _, err) = cli(&db, &["serve", "--listen", "127.0.0.1:0"], None);
    assert_eq!(code, 1);
    assert!(err.contains("in use by another process"), "{err}");
    assert!(err.contains(&server.url), "{err}");
    // After the server stops, the same commands open the database.
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
    let (code, local, _) = cli(&db, &["log", "chat"], None);
    assert_eq!(code, 0);
    assert_eq!(local, through, "the server prints what the CLI prints");
}

#[test]
fn kill_9_keeps_every_acknowledged_append_and_a_stale_discovery_file_is_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let server = Server::start(&db, &[]);
    let url = format!("{}/v1/conversations/k/events", server.url);
    let mut acknowledged = 0;
    for i in 0..50 {
        let (status, _) = post(&url, &format!("{{\"type\":\"user\",\"text\":\"{i}\"}}\n"));
        assert!(status == 200 || status == 201);
        acknowledged += 1;
    }
    let pid = server.pid();
    assert!(pid > 0);
    server.kill9();
    assert!(
        db.join("convstore.server").exists(),
        "left behind by kill -9"
    );
    let (code, out, err) = cli(&db, &["log", "k"], None);
    assert_eq!(code, 0, "the stale file is ignored: {err}");
    assert_eq!(out.lines().count(), acknowledged);
}

#[test]
fn the_curl_examples_of_docs_server_md_run_as_written() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/server.md"))
        .expect("docs/server.md");
    let examples = doc
        .split("## Endpoints, with curl")
        .nth(1)
        .expect("the examples section");
    let mut script = String::from("set -e\n");
    let mut inside = false;
    for line in examples.lines() {
        match line {
            "```sh" => inside = true,
            "```" => inside = false,
            _ if inside => {
                script.push_str(line);
                script.push('\n');
            }
            _ => {}
        }
    }
    assert!(script.lines().count() > 30, "{script}");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path().join("db"), &[]);
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("URL", &server.url)
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "\"created\":true",
        "\"code\":\"conflict\"",
        "convstore-next-seq: 4",
        "[turn 0] user: Why does src/main.rs panic?",
        "\"status\":\"dry_run\"",
        "\"ok\":true",
        "\"code\":\"not_found\"",
        "event 0: field `text`: missing",
        "id: 6",
    ] {
        assert!(stdout.contains(expected), "{expected:?} not in:\n{stdout}");
    }
    let log = get_text(&format!("{}/v1/conversations/chat/events", server.url));
    assert_eq!(log.matches("Thanks!").count(), 1, "stored once");
}

#[test]
fn every_path_of_the_openapi_document_is_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path().join("db"), &[]);
    post(
        &format!("{}/v1/conversations/chat/events", server.url),
        TURN,
    );
    let served: Value = agent()
        .get(&format!("{}/v1/openapi.json", server.url))
        .call()
        .expect("200")
        .into_json()
        .expect("json");
    let checked_in: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/server/openapi.json"))
            .expect("server/openapi.json"),
    )
    .expect("json");
    assert_eq!(
        served, checked_in,
        "the served document is the checked-in one"
    );
    let paths = served["paths"].as_object().expect("paths");
    assert!(paths.len() >= 15);
    for (path, methods) in paths {
        let concrete = path.replace("{conv}", "chat").replace("{name}", "default");
        for method in methods.as_object().expect("methods").keys() {
            let request = agent().request(
                &method.to_ascii_uppercase(),
                &format!("{}{concrete}", server.url),
            );
            let result = if method == "post" {
                request.send_string("{}")
            } else {
                request.call()
            };
            // Follow streams answer at once and stay open: only the status
            // is read.
            let status = match result {
                Ok(r) => r.status(),
                Err(ureq::Error::Status(status, r)) => {
                    let body: Value = r.into_json().expect("a JSON error");
                    assert!(
                        !matches!(
                            body["error"]["code"].as_str(),
                            Some("no_route" | "method_not_allowed")
                        ),
                        "{method} {path}: not served ({body})"
                    );
                    status
                }
                Err(e) => panic!("{method} {path}: {e}"),
            };
            assert!(status < 500, "{method} {path}: {status}");
        }
    }
}

/// A read-only token reads stored views (kept current, as any read), but
/// does not create one: that would store data.
#[test]
fn a_read_only_token_creates_no_view() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "read-only reader-token-0123456789\nread-write writer-token-0123456789\n",
    )
    .expect("token file");
    let server = Server::start(
        dir.path().join("db"),
        &["--token-file", tokens.to_str().expect("utf-8")],
    );
    let base = format!("{}/v1/conversations/t", server.url);
    let call = |method: &str, path: &str, token: &str| {
        answer(
            agent()
                .request(method, &format!("{base}{path}"))
                .set("Authorization", &format!("Bearer {token}"))
                .set("Content-Type", "application/x-ndjson")
                .send_string(TURN),
        )
    };
    assert_eq!(call("POST", "/events", "writer-token-0123456789").0, 201);
    let (status, body) = call("GET", "/views/made-by-reader", "reader-token-0123456789");
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("forbidden")),
        "{body}"
    );
    assert_eq!(
        call("GET", "/views/shared", "writer-token-0123456789").0,
        200
    );
    assert_eq!(
        call("GET", "/views/shared", "reader-token-0123456789").0,
        200
    );
    let (_, views) = call("GET", "/views", "reader-token-0123456789");
    let names: Vec<&str> = views
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(names, ["shared"]);
}

/// `If-Match: *` appends to a conversation that exists, and stores
/// nothing (412) where none does; a malformed If-Match says so once.
#[test]
fn if_match_star_needs_the_conversation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path().join("db"), &[]);
    let events = |conv: &str, if_match: &str| {
        answer(
            agent()
                .post(&format!("{}/v1/conversations/{conv}/events", server.url))
                .set("If-Match", if_match)
                .set("Content-Type", "application/x-ndjson")
                .send_string(TURN),
        )
    };
    let (status, body) = events("new", "*");
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (412, json!("precondition_failed"))
    );
    assert_eq!(
        post(&format!("{}/v1/conversations/new/events", server.url), TURN).0,
        201
    );
    assert_eq!(events("new", "*").0, 200);
    let (status, body) = events("new", "\"abc\"");
    assert_eq!(status, 400);
    let message = body["error"]["message"].as_str().expect("message");
    assert!(!message.contains("\"\""), "{message}");
}

/// Every error code the server's source can answer with is documented,
/// in the OpenAPI document and in docs/server.md.
#[test]
fn every_error_code_is_documented() {
    let root = env!("CARGO_MANIFEST_DIR");
    let openapi: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}/server/openapi.json")).expect("openapi.json"),
    )
    .expect("JSON");
    let documented: Vec<&str> = openapi["components"]["schemas"]["Error"]["properties"]["error"]
        ["properties"]["code"]["enum"]
        .as_array()
        .expect("an enum of codes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let guide = std::fs::read_to_string(format!("{root}/docs/server.md")).expect("server.md");
    // The list of codes in "Errors", not a mention elsewhere.
    let guide = guide
        .split_once("Codes: ")
        .and_then(|(_, rest)| rest.split_once(". A request"))
        .map(|(codes, _)| codes.to_owned())
        .expect("the list of codes in docs/server.md");
    let mut found = 0;
    for entry in std::fs::read_dir(format!("{root}/server/src")).expect("server/src") {
        let source = std::fs::read_to_string(entry.expect("entry").path()).expect("source");
        // `StatusCode::X, "code"` (on one line, or the next).
        for piece in source.split("StatusCode::").skip(1) {
            let after = piece
                .split_once(',')
                .map_or("", |(_, rest)| rest)
                .trim_start();
            let Some(code) = after
                .strip_prefix('"')
                .and_then(|rest| rest.split_once('"'))
                .map(|(code, _)| code)
            else {
                continue;
            };
            if code.is_empty() || !code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                continue;
            }
            found += 1;
            assert!(documented.contains(&code), "{code} is not in openapi.json");
            assert!(
                guide.contains(&format!("`{code}`")),
                "{code} is not in docs/server.md"
            );
        }
    }
    assert!(found > 20, "the scan found {found} codes");
}

/// Every command that reads prints the same through a server as it does
/// on the database itself, and the commands that write do through it
/// what they do locally (the database held by the server all along).
#[test]
fn every_command_prints_the_same_through_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let long = "x".repeat(3000);
    let setup: [(&[&str], Option<&str>); 5] = [
        (&["append", "chat"], Some(TURN)),
        (&["append", "chat", "--turn", "--user", "and the tests?"], None),
        (
            &["append", "chat"],
            Some("{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"cargo_test\",\"arguments\":{}}\n{\"type\":\"tool_result\",\"id\":\"c1\",\"content\":\"ok\",\"is_error\":false}\n"),
        ),
        (&["compact", "chat", "--tool-calls", "strip", "--recall-hints", "--force"], None),
        (&["append", "other", "--user", &long], None),
    ];
    for (args, stdin) in setup {
        let (code, _, err) = cli(&db, args, stdin);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    let reads: &[&[&str]] = &[
        &["stats", "chat"],
        &["stats", "chat", "--json"],
        &["recall", "chat", "7"],
        &["recall", "chat", "7", "--format", "text"],
        &["recall", "chat", "--call", "c1"],
        &["search", "tests", "--json"],
        &["search", "hello"],
        &["diff", "chat@4", "chat", "--json"],
        &["diff", "chat", "chat", "--profile", "light"],
        &["export", "chat", "--format", "jp"],
        &["export", "chat", "--format", "openai", "--projected"],
        &["export", "chat", "--format", "ndjson"],
        &["pin", "chat", "--list", "--json"],
    ];
    let local: Vec<String> = reads
        .iter()
        .map(|args| {
            let (code, out, err) = cli(&db, args, None);
            assert_eq!(code, 0, "{args:?}: {err}");
            out
        })
        .collect();
    let server = Server::start(&db, &[]);
    for (args, expected) in reads.iter().zip(&local) {
        let (code, out, err) = cli(&db, args, None);
        assert_eq!(code, 0, "{args:?} through the server: {err}");
        assert_eq!(&out, expected, "{args:?} through the server");
    }
    // Writes through the server.
    let (code, out, err) = cli(&db, &["pin", "chat", "--turns", "0", "--json"], None);
    assert_eq!((code, out.as_str()), (0, "[[0,0]]\n"), "{err}");
    let (code, out, _) = cli(&db, &["unpin", "chat", "--all"], None);
    assert_eq!((code, out.as_str()), (0, ""));
    let file = dir.path().join("in.ndjson");
    std::fs::write(&file, "{\"type\":\"user\",\"text\":\"imported\"}\n").expect("input");
    let imported = [
        "import",
        "--format",
        "ndjson",
        file.to_str().expect("utf-8"),
        "--name",
        "imp",
    ];
    let (code, out, err) = cli(&db, &imported, None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("imported 1 event in 1 turn into imp"),
        "{out}"
    );
    // The name taken: the error line the command prints without a server.
    let (code, _, err) = cli(&db, &imported, None);
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            "error: a conversation named \"imp\" already exists (choose another with --name)\n"
        )
    );
    let (code, out, err) = cli(&db, &["reindex", "--json"], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("{\"conversations\":3,\"records\":"),
        "{out}"
    );
    let copy = dir.path().join("copy.db");
    let (code, out, err) = cli(&db, &["backup", copy.to_str().expect("utf-8")], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("backed up 3 conversations"), "{out}");
    let (code, _, err) = cli(&db, &["gen", "g", "--events", "10"], None);
    assert_eq!(code, 1);
    assert!(err.contains("does not run through a server"), "{err}");
    drop(server);
    let (code, out, _) = cli(&copy, &["list"], None);
    assert_eq!(code, 0);
    assert!(out.contains("imp"), "{out}");
}

/// Warnings and refusals name the place in the input the same way with or
/// without a server: NDJSON lines from 1 (a blank line counts), JSON
/// array elements from 0.
#[test]
fn warnings_name_the_same_place_through_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let input = "{\"type\":\"user\",\"text\":\"hi\"}\n\n{\"type\":\"tool_result\",\"id\":\"zz\",\"content\":\"x\",\"is_error\":false}\n";
    let file = dir.path().join("in.ndjson");
    std::fs::write(&file, input).expect("input");
    let file = file.to_str().expect("utf-8");
    let warning = "warning: line 3: tool_result for call id \"zz\", which no tool_call has\n";
    let runs = |suffix: &str| {
        let append = cli(&db, &["append", &format!("a{suffix}")], Some(input));
        let name = format!("i{suffix}");
        let import = cli(
            &db,
            &["import", "--format", "ndjson", file, "--name", &name],
            None,
        );
        [append, import]
    };
    let alone = runs("1");
    let server = Server::start(&db, &[]);
    let through = runs("2");
    for (run, label) in alone.iter().chain(&through).zip([
        "append",
        "import",
        "append via server",
        "import via server",
    ]) {
        assert_eq!(run.0, 0, "{label}: {}", run.2);
        assert!(run.2.starts_with(warning), "{label}: {}", run.2);
    }
    let (status, body) = answer(
        agent()
            .post(&format!("{}/v1/conversations/a2/events", server.url))
            .send_json(json!([{"type": "user", "text": "ok"}, {"type": "tool_result", "id": "yy", "content": "x", "is_error": false}])),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["warnings"],
        json!(["event 1: tool_result for call id \"yy\", which no tool_call has"])
    );
}

/// What a command says on stderr, and its exit code, are the same through
/// a server as without one, for notes and refusals as well as answers:
/// what an openai array left out, an inflated compaction's token table,
/// an inverted range (a usage error), a view's profile, a tool call that
/// does not parse, a file name that cannot be a name, a dry run's words.
#[test]
fn notes_and_refusals_read_the_same_through_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let events = "{\"type\":\"turn_start\"}\n{\"type\":\"user\",\"text\":\"hi\"}\n{\"type\":\"reasoning\",\"text\":\"hmm\"}\n{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"ls\",\"arguments\":{}}\n{\"type\":\"assistant\",\"text\":\"hello there\"}\n{\"type\":\"turn_start\"}\n{\"type\":\"user\",\"text\":\"more\"}\n{\"type\":\"assistant\",\"text\":\"ok\"}\n";
    for (args, stdin) in [
        (&["append", "chat"][..], Some(events)),
        (
            &["view", "chat", "--name", "v1", "--profile", "light"],
            None,
        ),
    ] {
        let (code, _, err) = cli(&db, args, stdin);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    let empty_name = dir.path().join(".ndjson");
    std::fs::write(&empty_name, "{\"type\":\"user\",\"text\":\"x\"}\n").expect("input");
    let empty_name = empty_name.to_str().expect("utf-8");
    let copy = dir.path().join("copy");
    assert!(Command::new("cp")
        .args(["-r"])
        .arg(&db)
        .arg(&copy)
        .status()
        .expect("cp")
        .success());
    let commands: Vec<Vec<&str>> = vec![
        vec!["project", "chat", "--format", "openai"],
        vec!["export", "chat", "--format", "openai"],
        vec!["view", "chat", "--name", "v1", "--format", "openai"],
        vec![
            "compact",
            "chat",
            "--profile",
            "heavy",
            "--from",
            "0",
            "--to",
            "1",
        ],
        vec![
            "compact",
            "chat",
            "--from",
            "3",
            "--to",
            "1",
            "--reasoning",
            "strip",
        ],
        vec!["view", "chat", "--name", "v1", "--profile", "default"],
        vec!["recall", "chat", "--tool-call", "nope"],
        vec!["import", "--format", "ndjson", empty_name],
        vec!["gc", "--all-payloads", "--older-than", "0s", "--dry-run"],
        vec!["search", "hello", "--conv", "nosuch"],
        vec!["diff", "chat@xyz", "chat"],
    ];
    let local: Vec<_> = commands.iter().map(|args| cli(&copy, args, None)).collect();
    let server = Server::start(&db, &[]);
    for (args, alone) in commands.iter().zip(&local) {
        let through = cli(&db, args, None);
        assert_eq!(&through, alone, "{args:?} through the server");
    }
    assert!(
        local[0].2.contains("openai: left out"),
        "the openai note: {:?}",
        local[0]
    );
    assert_eq!(local[4].0, 2, "an inverted range is a usage error");
    drop(server);
}

/// Appends, reads and deletes of one conversation at once: an append by
/// name always stores (creating the conversation anew if a delete took
/// it), a read of a conversation deleted under it (its log, views,
/// explanation, statistics, export, timeline, pins) answers 404 (never a
/// corrupt database), what runs over the whole database meanwhile
/// (`verify`, a dry run of `gc`, `backup`) passes over what a delete
/// takes and finds nothing wrong with the rest (a stored view rewritten
/// while it is checked is no difference), and afterwards `verify` passes:
/// the search index holds no deleted conversation.
#[test]
fn deletes_racing_appends_and_reads_leave_a_sound_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let (code, _, err) = cli(&db, &["append", "keep", "--user", "x"], None);
    assert_eq!(code, 0, "{err}");
    let server = Server::start(&db, &[]);
    let url = format!("{}/v1/conversations/d", server.url);
    // Short texts, and a long one every tenth event (a blob, shared by
    // every conversation the appends create).
    let long = "a long tool result ".repeat(200);
    let body: Vec<Value> = (0..500)
        .map(|i| {
            let text = if i % 10 == 0 {
                long.clone()
            } else {
                format!("words {i}")
            };
            json!({"type": "user", "text": text})
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let rounds = 60;
    std::thread::scope(|scope| {
        let appends = scope.spawn(|| {
            for _ in 0..rounds {
                if Instant::now() > deadline {
                    break;
                }
                let (status, answer) =
                    answer(agent().post(&format!("{url}/events")).send_json(&body));
                assert!(status == 200 || status == 201, "{status} {answer}");
            }
        });
        let deletes = scope.spawn(|| {
            for _ in 0..rounds {
                if Instant::now() > deadline {
                    break;
                }
                let (status, answer) = answer(agent().delete(&url).call());
                assert!(status == 200 || status == 404, "{status} {answer}");
            }
        });
        let reads = scope.spawn(|| {
            for _ in 0..rounds {
                if Instant::now() > deadline {
                    break;
                }
                for path in [
                    "",
                    "events",
                    "view",
                    "views/default",
                    "views",
                    "explain?turn=0",
                    "stats",
                    "export?format=ndjson",
                    "timeline",
                    "inspect",
                    "pins",
                ] {
                    let target = if path.is_empty() {
                        url.clone()
                    } else {
                        format!("{url}/{path}")
                    };
                    match agent().get(&target).call() {
                        Ok(response) => {
                            // Cut short by a delete: the last line says why.
                            let text = response.into_string().unwrap_or_default();
                            assert!(!text.contains("\"corrupt\""), "{path}: {text}");
                        }
                        Err(ureq::Error::Status(status, response)) => {
                            let text = response.into_string().unwrap_or_default();
                            assert_eq!(status, 404, "{path}: {text}");
                            assert!(!text.contains("\"corrupt\""), "{path}: {text}");
                        }
                        // A stream a delete cut short.
                        Err(ureq::Error::Transport(_)) => {}
                    }
                }
            }
        });
        let whole = scope.spawn(|| {
            for round in 0..rounds {
                if Instant::now() > deadline {
                    break;
                }
                let (status, got) =
                    answer(agent().get(&format!("{}/v1/verify", server.url)).call());
                assert_eq!((status, &got["ok"]), (200, &json!(true)), "{got}");
                let (status, got) = answer(
                    agent()
                        .post(&format!("{}/v1/gc", server.url))
                        .send_json(json!({"dry_run": true})),
                );
                assert_eq!(status, 200, "{got}");
                let dest = dir.path().join(format!("backup-{round}"));
                let (status, got) = answer(
                    agent()
                        .post(&format!("{}/v1/backup", server.url))
                        .send_json(json!({"dest": dest})),
                );
                assert_eq!(status, 200, "{got}");
            }
        });
        for thread in [appends, deletes, reads, whole] {
            thread.join().expect("no failure");
        }
    });
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
    let (code, out, err) = cli(&db, &["verify"], None);
    assert_eq!(code, 0, "{out}{err}");
}

/// `reindex` while searches, redactions and appends go on: each of them
/// takes the index built anew (none meets its files half deleted or half
/// built), the redacted texts are not found, and `verify` passes.
#[test]
fn reindex_racing_searches_and_redactions_fails_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let server = Server::start(&db, &[]);
    let url = &server.url;
    let texts: Vec<Value> = (0..40)
        .map(|i| json!({"type": "user", "text": format!("needle {i}")}))
        .collect();
    let (status, body) = answer(
        agent()
            .post(&format!("{url}/v1/conversations/ri/events"))
            .send_json(&texts),
    );
    assert_eq!(status, 201, "{body}");
    let rounds = 15;
    // A use that lost to `reindex` rounds after rounds says so, and may be
    // retried; anything else is a failure.
    let fine = |what: &str, status: u16, body: &Value| {
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(
            status == 200 || status == 201 || message.contains("built anew while in use"),
            "{what}: {status} {body}"
        );
    };
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..rounds {
                let (status, body) = answer(agent().post(&format!("{url}/v1/reindex")).call());
                assert_eq!(status, 200, "{body}");
            }
        });
        scope.spawn(|| {
            for _ in 0..rounds * 2 {
                let (status, body) =
                    answer(agent().get(&format!("{url}/v1/search?q=needle")).call());
                fine("search", status, &body);
            }
        });
        scope.spawn(|| {
            for seq in 0..rounds {
                let (status, body) = answer(
                    agent()
                        .post(&format!("{url}/v1/conversations/ri/redact"))
                        .send_json(json!({"seq": seq, "reason": "gone"})),
                );
                fine("redact", status, &body);
            }
        });
        scope.spawn(|| {
            for i in 0..rounds * 4 {
                let (status, body) = answer(
                    agent()
                        .post(&format!("{url}/v1/conversations/ri/events"))
                        .send_json(json!([{"type": "user", "text": format!("more {i}")}])),
                );
                fine("append", status, &body);
            }
        });
    });
    let (status, body) = answer(agent().get(&format!("{url}/v1/verify")).call());
    assert_eq!((status, &body["ok"]), (200, &json!(true)), "{body}");
    // Each redaction that was answered took its text out of the index.
    let (status, hits) = answer(
        agent()
            .get(&format!("{url}/v1/search?q=needle&limit=100"))
            .call(),
    );
    assert_eq!(status, 200, "{hits}");
    let redacted = cli(&db, &["log", "ri"], None).1;
    for hit in hits.as_array().expect("hits") {
        let seq = hit["seq"].as_u64().expect("seq");
        let line = redacted
            .lines()
            .nth(seq as usize)
            .expect("the hit's record");
        assert!(
            !line.contains("\"redacted\""),
            "a redacted text found: {hit}"
        );
    }
    drop(server);
}

/// Requests that once took the server down or answered wrongly: a deeply
/// nested or over-long query, a huge search limit, an overflowing
/// `Last-Event-ID`, errors of the client's answered 500, a backup into
/// the database it copies, a body without a JSON content type, hits in
/// an internal form, recall hints dropped on the way.
#[test]
fn hostile_and_ordinary_requests_get_proper_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let server = Server::start(&db, &[]);
    let url = &server.url;
    let chat = format!("{url}/v1/conversations/chat");
    let tool_turn = "{\"type\":\"turn_start\"}\n{\"type\":\"user\",\"text\":\"read the file\"}\n{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"fs_read_file\",\"arguments\":{\"path\":\"a\"}}\n{\"type\":\"tool_result\",\"id\":\"c1\",\"content\":\"fn main() { println!(\\\"broken pipe\\\"); }\",\"is_error\":false}\n{\"type\":\"assistant\",\"text\":\"done\"}\n";
    let (status, body) = post(&format!("{chat}/events"), tool_turn);
    assert_eq!(status, 201, "{body}");
    let get = |path: &str| answer(agent().get(&format!("{url}{path}")).call());
    let code = |(status, body): (u16, Value)| (status, body["error"]["code"].clone());

    let deep = format!("{}a{}", "(".repeat(3000), ")".repeat(3000));
    let (status, body) = answer(
        agent()
            .get(&format!("{url}/v1/search"))
            .query("q", &deep)
            .call(),
    );
    assert_eq!(status, 400, "{body}");
    for limit in ["0", "100000000000", "18446744073709551615"] {
        let (status, _) = get(&format!("/v1/search?q=main&limit={limit}"));
        assert_eq!(status, 400, "limit {limit}");
    }
    // A parameter that does not parse is named, in convstore's words.
    let (status, body) = get("/v1/search?q=main&kind=user&limit=ten&since=x&nope=1");
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("query string: "), "{body}");
    // An empty query is refused, as `convstore search ''` is.
    for q in ["", "%20%20"] {
        let (status, body) = get(&format!("/v1/search?q={q}"));
        assert_eq!(status, 400, "q={q}: {body}");
        assert_eq!(body["error"]["message"], "q: an empty text", "{body}");
    }
    // Text as typed, not in the query syntax, is searched as words; hits
    // are in the form `search --json` prints.
    let (status, hits) = answer(
        agent()
            .get(&format!("{url}/v1/search"))
            .query("q", "fn main()")
            .call(),
    );
    assert_eq!(status, 200, "{hits}");
    let hit = &hits[0];
    assert_eq!(hit["kind"], "tool_result", "{hits}");
    assert_eq!(hit["view"], "visible", "{hits}");
    assert!(
        hit["conversation"].as_str().is_some_and(|c| c.len() == 32),
        "{hits}"
    );
    assert!(hit["timestamp"].as_str().is_some(), "{hits}");

    let mut request = agent()
        .get(&format!("{chat}/follow"))
        .set("Last-Event-ID", "18446744073709551615");
    request = request.timeout(Duration::from_secs(5));
    assert_eq!(code(answer(request.call())), (404, json!("no_such_record")));
    assert_eq!(get("/healthz").0, 200, "the server is up");

    assert_eq!(
        code(get("/v1/conversations/chat/recall?call=nope")),
        (404, json!("no_such_call"))
    );
    assert_eq!(
        code(get("/v1/conversations/chat/recall?summary_of=1")),
        (404, json!("not_summarized"))
    );

    // JSON bodies are read whatever their declared type (curl's default).
    let form = |path: &str, body: &str| {
        answer(
            agent()
                .post(&format!("{url}{path}"))
                .set("Content-Type", "application/x-www-form-urlencoded")
                .send_string(body),
        )
    };
    assert_eq!(
        form("/v1/conversations/chat/pins", r#"{"turns":"0"}"#).0,
        200
    );
    let inside = db.join("sub");
    let (status, body) = form(
        "/v1/backup",
        &json!({"dest": inside.to_str().expect("utf-8")}).to_string(),
    );
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("bad_destination")),
        "{body}"
    );
    assert!(!inside.exists());

    let (status, body) = form(
        "/v1/conversations/chat/compact",
        r#"{"tool_calls":"strip","recall_hints":true}"#,
    );
    assert_eq!(status, 200, "{body}");
    let view = get_text(&format!("{chat}/view?format=text"));
    assert!(view.contains("(recall 3)"), "{view}");

    // Another site's page cannot write (its Origin), and a rebound name
    // cannot read (its Host): nothing is stored.
    let (status, body) = answer(
        agent()
            .post(&format!("{chat}/events"))
            .set("Origin", "http://127.0.0.2:8000")
            .set("Content-Type", "text/plain")
            .send_string(r#"[{"type":"user","text":"planted"}]"#),
    );
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("forbidden")),
        "{body}"
    );
    let own = url.trim_start_matches("http://");
    let rebound = {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(own).expect("connects");
        stream
            .write_all(b"GET /v1/conversations HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")
            .expect("sends");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("reads");
        answer
    };
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");
    let (status, body) = answer(
        agent()
            .post(&format!("{chat}/events"))
            .set("Origin", &format!("http://{own}"))
            .send_string(r#"[{"type":"user","text":"from the inspector's own origin"}]"#),
    );
    assert_eq!(status, 200, "{body}");
    let log = get_text(&format!("{chat}/events"));
    assert!(!log.contains("planted"), "{log}");
}

/// A serve that cannot listen (beyond loopback without tokens, a port
/// taken) fails before it opens, so it creates no database.
#[test]
fn a_serve_that_cannot_listen_creates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().expect("addr").port().to_string();
    for listen in ["0.0.0.0:0".to_owned(), format!("127.0.0.1:{port}")] {
        let db = dir.path().join("fresh.db");
        let out = Command::new(BIN)
            .arg("--db")
            .arg(&db)
            .args(["serve", "--listen", &listen])
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(1), "{listen}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(!db.exists(), "{listen}: the database was created");
    }
}

#[test]
fn delete_over_http_and_through_the_cli() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let server = Server::start(&db, &[]);
    let (code, _, err) = cli(&db, &["append", "chat", "--user", "hi"], None);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli(&db, &["fork", "chat", "--name", "retry"], None);
    assert_eq!(code, 0, "{err}");
    let url = format!("{}/v1/conversations/chat", server.url);
    let (status, body) = answer(agent().delete(&url).call());
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("has_forks"))
    );
    // A follower of a conversation being deleted is told, and its stream
    // ends.
    let follow = agent()
        .get(&format!("{}/v1/conversations/retry/follow", server.url))
        .call()
        .expect("follow");
    let (sent, streamed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut follow.into_reader(), &mut text);
        let _ = sent.send(text);
    });
    // An append's idempotency key is forgotten with its conversation: a
    // retry after the deletion stores the event again.
    let idem = format!("{}/v1/conversations/idem/events", server.url);
    let append = || {
        answer(
            agent()
                .post(&idem)
                .set("Idempotency-Key", "key-1")
                .send_string(TURN),
        )
    };
    assert_eq!(append().0, 201);
    let (status, _) = answer(agent().delete(&idem.replace("/events", "")).call());
    assert_eq!(status, 200);
    let (status, body) = append();
    assert_eq!(
        (status, body["created"].as_bool()),
        (201, Some(true)),
        "{body}"
    );
    // Through the CLI: the server's refusal as one line, then the deletion.
    let (code, _, err) = cli(&db, &["delete", "chat"], None);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: ") && err.contains("--with-forks"),
        "{err}"
    );
    let (code, out, err) = cli(&db, &["delete", "retry", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let value: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(value["deleted"][0]["name"], "retry");
    let streamed = streamed
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the follow stream ends");
    assert!(
        streamed.contains("event: error") && streamed.contains("was deleted"),
        "{streamed}"
    );
    let (status, body) = answer(agent().delete(&format!("{url}?with_forks=true")).call());
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deleted"][0]["events"], 1);
    let (status, _) = answer(agent().get(&url).call());
    assert_eq!(status, 404);
    let (status, _) = answer(agent().delete(&url).call());
    assert_eq!(status, 404);
    let (code, out, _) = cli(&db, &["list", "--json"], None);
    assert!(
        code == 0 && out.contains("idem") && !out.contains("chat"),
        "{out}"
    );
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
    let (code, out, err) = cli(&db, &["verify"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ok: 1 conversation,"), "{out}");
}

#[test]
fn gc_through_the_server_drops_what_it_drops_locally() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let setup: [(&[&str], Option<&str>); 3] = [
        (&["append", "chat"], Some(TURN)),
        (
            &["append", "chat"],
            Some("{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"cargo_test\",\"arguments\":{\"x\":\"SECRET-ARG\"}}\n{\"type\":\"tool_result\",\"id\":\"c1\",\"content\":\"SECRET-RESULT\",\"is_error\":false}\n"),
        ),
        (&["compact", "chat", "--tool-calls", "strip", "--force"], None),
    ];
    for (args, stdin) in setup {
        let (code, _, err) = cli(&db, args, stdin);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    let (_, view, _) = cli(&db, &["project", "chat"], None);
    let server = Server::start(&db, &[]);
    let (code, out, err) = cli(&db, &["gc", "--dry-run", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let dry: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (dry["dry_run"].as_bool(), dry["records"].as_u64()),
        (Some(true), Some(2))
    );
    let (code, out, err) = cli(&db, &["gc", "chat"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("chat: dropped 2 payloads"), "{out}");
    let (_, after, _) = cli(&db, &["project", "chat"], None);
    assert_eq!(after, view);
    let (_, log, _) = cli(&db, &["log", "chat"], None);
    assert!(!log.contains("SECRET-"), "{log}");
    // A policy refused: the server's message as one line.
    let (code, _, err) = cli(&db, &["gc", "--all-payloads"], None);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: ") && err.contains("needs an age"),
        "{err}"
    );
    let (status, body) = answer(
        agent()
            .post(&format!("{}/v1/gc", server.url))
            .send_string("{\"dry_run\":true,\"bogus\":1}"),
    );
    assert_eq!(status, 400, "{body}");
    drop(server);
    let (code, out, _) = cli(&db, &["verify"], None);
    assert_eq!(code, 0);
    assert!(out.contains("redacted in chat: 2 records"), "{out}");
}

/// `redact` through the server that holds the database: the text goes as
/// it does locally, a refusal is 422 `not_redactable`, and `verify`
/// prints the redactions and what is proven the same through the server
/// as on the database.
#[test]
fn redact_over_http_and_through_the_cli() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let server = Server::start(&db, &[]);
    let (code, _, err) = cli(
        &db,
        &["append", "chat", "--user", "sk-SECRET", "--user", "fine"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(
        &db,
        &["redact", "chat", "0", "--reason", "a key pasted"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "redacted record 0 (text, 9 bytes); redaction event at seq 2\n"
    );
    let url = format!("{}/v1/conversations/chat/redact", server.url);
    let (status, body) = answer(
        agent()
            .post(&url)
            .send_string(r#"{"seq":0,"reason":"again"}"#),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("not_redactable")),
        "{body}"
    );
    // A reason is one line of text, at most 400 bytes.
    for reason in [r"two\nlines".to_owned(), "x".repeat(401)] {
        let (status, body) = answer(
            agent()
                .post(&url)
                .send_string(&format!(r#"{{"seq":1,"reason":"{reason}"}}"#)),
        );
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (422, Some("not_redactable")),
            "{body}"
        );
    }
    let (status, body) = answer(
        agent()
            .post(&url)
            .send_string(r#"{"seq":1,"field":"text","reason":"r"}"#),
    );
    assert_eq!(
        (status, body["event_seq"].as_u64()),
        (200, Some(3)),
        "{body}"
    );
    let (code, through, err) = cli(&db, &["verify"], None);
    assert_eq!(code, 0, "{err}");
    let (code, through_json, _) = cli(&db, &["verify", "--json"], None);
    assert_eq!(code, 0);
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
    let (code, local, err) = cli(&db, &["verify"], None);
    assert_eq!(code, 0, "{err}");
    // The local line counts the search index's documents too.
    let rest = |text: &str| text.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(rest(&through), rest(&local));
    assert!(
        local.contains("a key pasted") && local.contains("for 2 of 2 redacted records"),
        "{local}"
    );
    let value: Value = serde_json::from_str(&through_json).expect("json");
    assert_eq!(
        (
            value["redacted"].as_u64(),
            value["redacted_proven"].as_u64()
        ),
        (Some(2), Some(2))
    );
    let (code, out, _) = cli(&db, &["project", "chat"], None);
    assert_eq!(code, 0);
    assert!(
        !out.contains("sk-SECRET") && out.matches("[redacted]").count() == 2,
        "{out}"
    );
}

/// Flips one byte of the middle of the database's first segment file.
fn damage_the_first_segment_file(db: &std::path::Path) {
    let path = db.join("segments").join("00000001");
    let mut bytes = std::fs::read(&path).expect("a segment file");
    let at = bytes.len() * 2 / 3;
    bytes[at] ^= 0x55;
    std::fs::write(&path, bytes).expect("written back");
}

#[test]
fn a_stream_that_fails_part_way_is_cut_after_a_line_saying_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let (code, _, err) = cli(
        &db,
        &["gen", "big", "--events", "60000", "--compactions", "20"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    damage_the_first_segment_file(&db);
    // Without a server: the error line the server's answers must carry.
    let (code, _, local) = cli(&db, &["log", "big"], None);
    assert_eq!(code, 1);
    assert!(
        local.starts_with("error: corrupt data: ") && local.contains("checksum"),
        "{local}"
    );
    assert_eq!(local.lines().count(), 1, "{local}");
    let commands = [
        &["log", "big"][..],
        &["export", "big", "--format", "jp"],
        &["export", "big", "--format", "ndjson"],
    ];
    let printed: Vec<String> = commands.iter().map(|args| cli(&db, args, None).1).collect();

    let server = Server::start(&db, &[]);
    // Raw HTTP, uncompressed: records, then the error object on its own
    // line, then a cut (no final chunk), never an end that looks whole.
    let response = agent()
        .get(&format!("{}/v1/conversations/big/events", server.url))
        .set("Accept-Encoding", "identity")
        .call()
        .expect("200");
    assert_eq!(response.status(), 200);
    let mut body = Vec::new();
    let read = response.into_reader().read_to_end(&mut body);
    assert!(read.is_err(), "the answer ends with a cut, not an end");
    let text = String::from_utf8_lossy(&body);
    let last = text.lines().last().expect("lines");
    let error: Value = serde_json::from_str(last).expect("the last line is JSON");
    assert_eq!(error["error"]["code"], "corrupt", "{last}");
    assert_eq!(
        format!(
            "error: {}\n",
            error["error"]["message"].as_str().expect("message")
        ),
        local
    );
    let records = text.lines().count() - 1;
    assert!(records > 1000, "{records} records before the damage");
    for line in text.lines().take(records) {
        let record: Value = serde_json::from_str(line).expect("a record");
        assert!(record["seq"].is_u64(), "{line}");
    }

    // The CLI through the server: the same one error line, exit 1, and
    // byte for byte what it printed without a server (no error object, no
    // newline the server put before it where a JSON document stopped).
    for (args, printed) in commands.iter().zip(&printed) {
        let (code, out, err) = cli(&db, args, None);
        assert_eq!((code, err.as_str()), (1, local.as_str()), "{args:?}");
        assert!(!out.contains("{\"error\""), "{args:?}");
        assert!(
            !out.is_empty(),
            "{args:?}: what came before the damage is printed"
        );
        assert!(
            out == *printed,
            "{args:?}: {} bytes, {} without a server",
            out.len(),
            printed.len()
        );
    }
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
}

#[test]
fn a_copy_of_a_served_directory_is_not_taken_for_the_served_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("a.db");
    let copy = dir.path().join("b.db");
    let (code, _, err) = cli(&db, &["append", "chat", "--user", "ORIGINAL"], None);
    assert_eq!(code, 0, "{err}");
    let server = Server::start(&db, &[]);
    // The copy holds the discovery file too, naming a live server.
    let status = Command::new("cp")
        .arg("-a")
        .arg(&db)
        .arg(&copy)
        .status()
        .expect("cp runs");
    assert!(status.success());
    assert!(copy.join("convstore.server").exists());
    let (code, _, err) = cli(&copy, &["append", "chat", "--user", "WRITTEN TO B"], None);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = cli(&db, &["log", "chat"], None);
    assert_eq!(code, 0);
    assert!(!out.contains("WRITTEN TO B"), "the served database: {out}");
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
    let (_, out, _) = cli(&copy, &["log", "chat"], None);
    assert!(
        out.contains("WRITTEN TO B") && out.contains("ORIGINAL"),
        "{out}"
    );
}

#[test]
fn verify_through_a_server_checks_the_search_index_as_it_does_locally() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let other = dir.path().join("other");
    for (db, words) in [(&db, "one two"), (&other, "other words")] {
        let (code, _, err) = cli(db, &["append", "c", "--user", words], None);
        assert_eq!(code, 0, "{err}");
        let (code, _, err) = cli(db, &["search", "words"], None);
        assert_eq!(code, 0, "{err}");
    }
    let local = cli(&db, &["verify", "--json"], None);
    assert_eq!(local.0, 0, "{}", local.2);
    assert!(
        local.1.contains("\"search_index\":{\"documents\":1"),
        "{}",
        local.1
    );
    // Another database's index: verify fails, locally and through a server.
    std::fs::remove_dir_all(db.join("search")).expect("removed");
    let status = Command::new("cp")
        .arg("-r")
        .arg(other.join("search"))
        .arg(db.join("search"))
        .status()
        .expect("cp runs");
    assert!(status.success());
    let broken = cli(&db, &["verify"], None);
    assert_eq!(broken.0, 1);
    assert!(broken.2.contains("search index"), "{}", broken.2);
    let server = Server::start(&db, &[]);
    assert_eq!(cli(&db, &["verify"], None), broken);
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
    let (code, _, err) = cli(&db, &["reindex"], None);
    assert_eq!(code, 0, "{err}");
    let server = Server::start(&db, &[]);
    let through = cli(&db, &["verify", "--json"], None);
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
    assert_eq!(through, cli(&db, &["verify", "--json"], None));
    assert_eq!(through.1, local.1);
}

/// For a client that accepts gzip, large and streamed answers come
/// compressed, and an append's small answer as it is (deflating a hundred
/// bytes costs both sides more than it saves). Raw HTTP, so that the
/// headers are the server's own.
#[test]
fn large_answers_are_compressed_and_an_appends_answer_is_not() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path().join("db"), &[]);
    let (status, body) = post(&format!("{}/v1/conversations/c/events", server.url), TURN);
    assert_eq!(status, 201, "{body}");
    let host = server.url.trim_start_matches("http://").to_owned();
    let headers = |request: &str| -> String {
        let mut stream = std::net::TcpStream::connect(&host).expect("connect");
        stream.write_all(request.as_bytes()).expect("write");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("read");
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let end = answer.find("\r\n\r\n").expect("headers end");
        answer[..end].to_ascii_lowercase()
    };
    let get = |path: &str| {
        headers(&format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
        ))
    };
    for path in ["/v1/openapi.json", "/v1/conversations/c/events"] {
        let answer = get(path);
        assert!(answer.starts_with("http/1.1 200"), "{path}: {answer}");
        assert!(
            answer.contains("content-encoding: gzip"),
            "{path}: {answer}"
        );
    }
    let event = r#"{"type":"user","text":"one more"}"#;
    let answer = headers(&format!(
        "POST /v1/conversations/c/events HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: gzip\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{event}",
        event.len()
    ));
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(!answer.contains("content-encoding"), "{answer}");
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
}

/// What a new user gives the command line through a server: a `--url`
/// with a query, a fragment, credentials or no host is a usage error (it
/// once printed the inspector's page as the data); NDJSON after a byte
/// order mark is taken as without a server; a `--max-event-bytes` of the
/// command's own is refused, storing nothing, rather than passed over.
#[test]
fn the_cli_through_a_server_takes_what_it_takes_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let (code, _, err) = cli(&db, &["append", "c", "--user", "first"], None);
    assert_eq!(code, 0, "{err}");
    let server = Server::start(&db, &["--max-body-bytes", "2000000"]);
    for url in [
        format!("{}?x=1", server.url),
        format!("{}/#top", server.url),
        server.url.replace("http://", "http://user:secret@"),
        server.url.replace("http://", "http://user:se/cret@"),
        "u:secret@127.0.0.1:1".to_owned(),
        "http://".to_owned(),
        "http://127.0.0.1:99999".to_owned(),
        "http://[::1".to_owned(),
    ] {
        let (code, out, err) = cli(&db, &["--url", &url, "log", "c"], None);
        assert_eq!((code, out.as_str()), (2, ""), "{url}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains("secret"), "the password is echoed: {err}");
    }
    // --db on the command line and a server URL: two databases named.
    let (code, _, err) = cli(&db, &["--url", &server.url, "list"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("both name a database"), "{err}");
    for args in [
        &["list", "postgres://u:secret@h/db"][..],
        &["--db", "mysql://u:secret@h/db", "list"],
    ] {
        let (code, _, err) = cli(&db, args, None);
        assert!(code == 1 || code == 2, "{args:?}: {err}");
        assert!(!err.contains("secret") && err.lines().count() == 1, "{err}");
    }
    let (code, _, err) = cli(
        &db,
        &["append", "c"],
        Some("\u{feff}{\"type\":\"user\",\"text\":\"bom\"}\n"),
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli(
        &db,
        &["append", "c", "--max-event-bytes", "10"],
        Some("{\"type\":\"user\",\"text\":\"too long for ten bytes\"}\n"),
    );
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: --max-event-bytes 10: ") && err.lines().count() == 1,
        "{err}"
    );
    // Over the server's body limit: the server's reason, not a broken
    // pipe, and nothing stored.
    let line = format!("{{\"type\":\"user\",\"text\":\"{}\"}}\n", "x".repeat(200));
    let big = line.repeat(15_000);
    let big_file = dir.path().join("big.ndjson");
    std::fs::write(&big_file, &big).unwrap();
    for (args, input) in [
        (vec!["append", "c"], Some(big.as_str())),
        (
            vec!["import", "--format", "ndjson", big_file.to_str().unwrap()],
            None,
        ),
    ] {
        let (code, _, err) = cli(&db, &args, input);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains("larger than the server's limit of 2000000 bytes")
                && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    // Not UTF-8, a missing file, a directory: said as without a server.
    let (code, _, err) = cli_bytes(
        &db,
        &["append", "c"],
        Some(&b"{\"type\":\"user\",\"text\":\"a\"}\n{\"type\":\"user\",\"text\":\"\xff\"}\n"[..]),
    );
    assert_eq!((code, err.as_str()), (1, "error: line 2: not UTF-8\n"));
    let missing = dir.path().join("missing.ndjson");
    let (_, _, err) = cli(
        &db,
        &["import", "--format", "ndjson", missing.to_str().unwrap()],
        None,
    );
    assert!(err.starts_with("error: cannot open "), "{err}");
    let (_, _, err) = cli(
        &db,
        &["import", "--format", "ndjson", dir.path().to_str().unwrap()],
        None,
    );
    assert!(err.ends_with(": it is a directory\n"), "{err}");
    let (code, out, _) = cli(&db, &["log", "c"], None);
    assert_eq!((code, out.lines().count()), (0, 2), "{out}");
    let listed = cli(&db, &["list"], None).1;
    assert!(listed.contains('c') && !listed.contains("big"), "{listed}");
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
}

/// A request the server refuses before reading its body (no token, a
/// read-only token that writes, a body over `--max-body-bytes`) is read
/// and discarded up to 4 MiB first, so that the command line, which sends
/// a whole body before it reads the answer, says why rather than "broken
/// pipe".
#[test]
fn refusals_reach_a_client_still_sending_its_body() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "read-only reader-token-0123456789\nread-write writer-token-0123456789\n",
    )
    .expect("token file");
    let db = dir.path().join("db");
    let server = Server::start(
        &db,
        &[
            "--token-file",
            tokens.to_str().expect("utf-8"),
            "--max-body-bytes",
            "1000",
        ],
    );
    let line = format!("{{\"type\":\"user\",\"text\":\"{}\"}}\n", "x".repeat(200));
    let body = line.repeat(4_000); // 0.8 MB: sent without asking /healthz
    let file = dir.path().join("in.ndjson");
    std::fs::write(&file, &body).unwrap();
    let run = |token: &str, args: &[&str], stdin: Option<&str>| {
        let (code, _, err) = output(
            Command::new(BIN)
                .args(["--url", &server.url])
                .args(args)
                .env("CONVSTORE_TOKEN", token),
            stdin.map(str::as_bytes),
        );
        (code, err)
    };
    let import = ["import", "--format", "ndjson", file.to_str().unwrap()];
    for _ in 0..5 {
        for (token, args, stdin, expected) in [
            (
                "",
                &["append", "c"][..],
                Some(body.as_str()),
                "a token is needed",
            ),
            (
                "nonsense-token-0123456789",
                &import[..],
                None,
                "the token is not valid",
            ),
            (
                "reader-token-0123456789",
                &["append", "c"][..],
                Some(body.as_str()),
                "the token is read-only",
            ),
            (
                "writer-token-0123456789",
                &import[..],
                None,
                "larger than the server's limit of 1000 bytes",
            ),
        ] {
            let (code, err) = run(token, args, stdin);
            assert_eq!(code, 1, "{args:?}: {err}");
            assert!(
                err.contains(expected) && err.lines().count() == 1,
                "{args:?} with {token:?}: {err}"
            );
        }
    }
    // Bodies over the 4 MiB the server discards: the command line asks
    // `/healthz` what its token may do before sending them.
    let big = line.repeat(30_000); // 6 MB
    let big_file = dir.path().join("big.ndjson");
    std::fs::write(&big_file, &big).unwrap();
    let import = ["import", "--format", "ndjson", big_file.to_str().unwrap()];
    for (token, args, stdin, expected) in [
        ("", &["append", "c"][..], Some(big.as_str()), "a token is needed: send Authorization: Bearer TOKEN (the command line sends $CONVSTORE_TOKEN"),
        ("nonsense-token-0123456789", &import[..], None, "the token is not valid (the command line sends $CONVSTORE_TOKEN"),
        ("reader-token-0123456789", &import[..], None, "the token is read-only; this request writes\n"),
        ("writer-token-0123456789", &["append", "c"][..], Some(big.as_str()), "the request body is larger than the server's limit of 1000 bytes"),
    ] {
        let (code, err) = run(token, args, stdin);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(expected) && err.lines().count() == 1,
            "{args:?} with {token:?}: {err}"
        );
    }
    let (code, _) = server.stop();
    assert_eq!(code, Some(0));
}

/// A command interrupted while the server handles what it sent says that
/// the server may carry it out all the same. The server is stopped
/// (SIGSTOP) while the command sends, so that the command is interrupted
/// mid-request; what the server does once it goes on is whole or nothing.
#[test]
fn an_interrupted_write_through_a_server_says_the_server_may_finish_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let file = dir.path().join("in.ndjson");
    let line = format!(
        "{{\"type\":\"user\",\"text\":\"{}\"}}\n",
        "words and more words ".repeat(20)
    );
    // Under 1 MiB: sent without asking the server's limit first.
    std::fs::write(&file, line.repeat(2_000)).expect("input");
    let server = Server::start(&db, &[]);
    unsafe_free_kill(server.pid(), 19);
    let child = Command::new(BIN)
        .args([
            "--url",
            &server.url,
            "import",
            "--format",
            "ndjson",
            "--name",
            "big",
        ])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("convstore import starts");
    std::thread::sleep(Duration::from_millis(500));
    unsafe_free_kill(i32::try_from(child.id()).expect("pid"), 2);
    let out = child.wait_with_output().expect("import ends");
    unsafe_free_kill(server.pid(), 18);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.starts_with("interrupted: the server at ")
            && err.contains("may carry out the request all the same"),
        "{err}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let list: Value =
        serde_json::from_str(&get_text(&format!("{}/v1/conversations", server.url))).expect("JSON");
    let stored: Vec<u64> = list["conversations"]
        .as_array()
        .expect("conversations")
        .iter()
        .map(|c| c["events"].as_u64().expect("events"))
        .collect();
    assert!(stored.is_empty() || stored == [2_000], "{stored:?}");
}
