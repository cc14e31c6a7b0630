//! The PostgreSQL backend through the binary: the commands, schema
//! versions, several processes and servers on one database, copies between
//! backends, the statements an append and a projection send, and kills of
//! a server or of PostgreSQL itself. Each test gets a schema of its own in
//! the test cluster (`support::postgres`); without PostgreSQL they say
//! loudly that they were skipped.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::postgres::{fresh_url, psql};
use support::server::{agent, answer, cli, Server};

/// A fresh database (a schema of its own), or `None` after saying the
/// test is skipped.
fn database(test: &str) -> Option<String> {
    let url = fresh_url();
    if url.is_none() {
        eprintln!("*** {test}: SKIPPED (no PostgreSQL) ***");
    }
    url
}

fn ok(db: &str, args: &[&str], stdin: Option<&str>) -> String {
    let (code, out, err) = cli(db, args, stdin);
    assert_eq!(code, 0, "convstore {args:?}: {err}");
    out
}

fn fails(db: &str, args: &[&str]) -> String {
    let (code, out, err) = cli(db, args, None);
    assert_eq!(code, 1, "convstore {args:?} should fail: {out} {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    err
}

const TURN: &str = "{\"type\":\"turn_start\"}\n{\"type\":\"user\",\"text\":\"why does it panic?\"}\n{\"type\":\"reasoning\",\"text\":\"the index is unchecked\"}\n{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"fs_read_file\",\"arguments\":{\"path\":\"src/main.rs\"}}\n{\"type\":\"tool_result\",\"id\":\"c1\",\"content\":\"fn main() { let x = v[3]; }\",\"is_error\":false}\n{\"type\":\"assistant\",\"text\":\"v[3] is out of bounds\"}\n";

#[test]
fn every_command_runs_on_postgres_and_schemas_are_versioned() {
    let Some(db) = database("every_command_runs_on_postgres") else {
        return;
    };
    // An empty schema: reads find no database and create none.
    let err = fails(&db, &["list"]);
    assert!(err.contains("no database at postgres://"), "{err}");
    assert_eq!(
        psql(&db, "SELECT to_regclass('convstore_schema') IS NULL"),
        "t\n"
    );
    // Commands that create set it up.
    ok(&db, &["append", "chat"], Some(TURN));
    ok(
        &db,
        &["append", "chat", "--turn", "--user", "and now?"],
        None,
    );
    assert_eq!(ok(&db, &["log", "chat"], None).lines().count(), 8);
    ok(&db, &["compact", "chat", "--to", "0"], None);
    let view = ok(&db, &["project", "chat", "--format", "text"], None);
    assert!(view.contains("[compacted] fs_read_file: success"), "{view}");
    assert!(!view.contains("the index is unchecked"), "{view}");
    ok(
        &db,
        &["fork", "chat", "--at-turn", "0", "--name", "retry"],
        None,
    );
    ok(&db, &["append", "retry", "--user", "try again"], None);
    let view = ok(&db, &["view", "chat", "--format", "openai"], None);
    assert!(view.starts_with('['), "{view}");
    let hits = ok(&db, &["search", "out of bounds", "--json"], None);
    assert!(hits.contains("\"seq\":5"), "{hits}");
    ok(&db, &["pin", "chat", "--turns", "1"], None);
    let stats = ok(&db, &["stats", "chat", "--json"], None);
    assert!(stats.contains("\"events\":9"), "{stats}");
    let verified = ok(&db, &["verify"], None);
    assert!(verified.starts_with("ok: 2 conversations"), "{verified}");
    let out = ok(&db, &["migrate"], None);
    assert!(out.contains("schema version 2, up to date"), "{out}");
    // The MCP server on a database server: one engine for the session,
    // closed cleanly when the client goes.
    let (code, _, err) = cli(&db, &["mcp"], Some(""));
    assert!(code <= 1 && !err.contains("panicked"), "{code}: {err}");
    // TLS is not built in: said so, before connecting.
    let err = fails(&format!("{db}&sslmode=verify-full"), &["list"]);
    assert!(err.contains("TLS is not built into"), "{err}");
    // The conversations written so far go: the database is made one of
    // format 4 below, whose staged chunks have turn index entries, which
    // the current format does not write.
    ok(&db, &["delete", "chat", "--with-forks"], None);
    // A schema of a newer convstore is refused, never misread.
    psql(
        &db,
        "INSERT INTO convstore_schema (version, applied_by) VALUES (99, 'the future')",
    );
    let err = fails(&db, &["list"]);
    assert!(err.contains("schema version 99"), "{err}");
    let err = fails(&db, &["migrate"]);
    assert!(err.contains("schema version 99"), "{err}");
    // A database of schema 1 (store format 4, before compactions were
    // filed by turn range) asks for `migrate`, then keeps working as
    // format 4: its compactions are read whole.
    psql(&db, "DELETE FROM convstore_schema WHERE version = 99");
    psql(&db, "DROP TABLE overlay_ranges");
    psql(&db, "DELETE FROM convstore_schema WHERE version = 2");
    psql(
        &db,
        "UPDATE settings SET value = '\\x00000004'::bytea WHERE key = 'F'::bytea",
    );
    let err = fails(&db, &["list"]);
    assert!(err.contains("run `convstore migrate` first"), "{err}");
    let out = ok(&db, &["migrate"], None);
    assert!(
        out.contains("migrated the schema from version 1 to 2"),
        "{out}"
    );
    // A conversation of its own, written as format 4 writes.
    ok(&db, &["append", "old", "--user", "from format 4"], None);
    let compaction = r#"{"type":"compaction","from_turn":0,"to_turn":0,"summary":"migrated"}"#;
    ok(&db, &["append", "old"], Some(compaction));
    let view = ok(&db, &["project", "old", "--turns", "0"], None);
    assert!(view.contains("\"text\":\"migrated\""), "{view}");
    assert_eq!(psql(&db, "SELECT count(*) FROM overlay_ranges").trim(), "0");
    ok(&db, &["verify"], None);
    // A current schema missing a table: migrate says so too.
    psql(&db, "DELETE FROM convstore_schema WHERE version = 99");
    psql(&db, "DROP TABLE pins");
    let err = fails(&db, &["migrate"]);
    assert!(err.contains("table pins is missing"), "{err}");
}

#[test]
fn processes_append_to_one_conversation_at_once_and_lose_nothing() {
    let Some(db) = database("processes_append_to_one_conversation") else {
        return;
    };
    ok(&db, &["append", "shared", "--user", "start"], None);
    let children: Vec<_> = (0..6)
        .map(|p| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..15 {
                    let (code, _, err) = cli(
                        &db,
                        &[
                            "append",
                            "shared",
                            "--user",
                            &format!("process {p} append {i}"),
                        ],
                        None,
                    );
                    assert_eq!(code, 0, "{err}");
                }
            })
        })
        .collect();
    for child in children {
        child.join().unwrap();
    }
    let log = ok(&db, &["log", "shared"], None);
    let texts: BTreeSet<String> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["text"].to_string())
        .collect();
    assert_eq!(texts.len(), 91);
    ok(&db, &["verify", "shared"], None);
    // With an expected head, of processes racing from one head exactly one
    // stores; the others are told, and store nothing.
    let head = ok(&db, &["head", "shared"], None).trim().to_owned();
    let racers: Vec<_> = (0..5)
        .map(|p| {
            let (db, head) = (db.clone(), head.clone());
            std::thread::spawn(move || {
                cli(
                    &db,
                    &[
                        "append",
                        "shared",
                        "--expect-head",
                        &head,
                        "--user",
                        &format!("racer {p}"),
                    ],
                    None,
                )
            })
        })
        .collect();
    let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(
        results.iter().filter(|r| r.0 == 0).count(),
        1,
        "{results:?}"
    );
    for (code, _, err) in results.iter().filter(|r| r.0 != 0) {
        assert_eq!(*code, 1);
        assert!(err.contains("conflict"), "{err}");
    }
    assert_eq!(ok(&db, &["log", "shared"], None).lines().count(), 92);
    // Processes whose first append creates one name at once: one creates
    // it, the others append to it.
    let creators: Vec<_> = (0..6)
        .map(|p| {
            let db = db.clone();
            std::thread::spawn(move || {
                cli(&db, &["append", "fresh", "--user", &format!("p{p}")], None)
            })
        })
        .collect();
    for creator in creators {
        let (code, _, err) = creator.join().unwrap();
        assert_eq!(code, 0, "{err}");
    }
    assert_eq!(ok(&db, &["log", "fresh"], None).lines().count(), 6);
}

#[test]
fn copies_between_sled_and_postgres_keep_every_head() {
    let Some(db) = database("copies_between_sled_and_postgres") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sled = dir.path().join("laptop.db");
    let sled = sled.to_str().unwrap();
    // Texts long enough to be blobs, a fork, a stored view, pins.
    let long = "x".repeat(5000);
    ok(sled, &["append", "chat"], Some(TURN));
    ok(sled, &["append", "chat", "--turn", "--user", &long], None);
    ok(sled, &["compact", "chat", "--to", "0"], None);
    ok(
        sled,
        &["fork", "chat", "--at-turn", "0", "--name", "retry"],
        None,
    );
    ok(sled, &["append", "retry", "--assistant", &long], None);
    ok(sled, &["view", "chat", "--name", "small"], None);
    ok(sled, &["pin", "chat", "--turns", "1"], None);
    ok(
        sled,
        &["gen", "big", "--events", "3000", "--compactions", "30"],
        None,
    );
    let heads = |at: &str| -> HashMap<String, String> {
        let list: Value = serde_json::from_str(&ok(at, &["list", "--json"], None)).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_owned(),
                    c["head"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let out = ok("unused", &["copy", sled, &db], None);
    assert!(out.contains("copied 3 conversations"), "{out}");
    assert_eq!(heads(sled), heads(&db));
    // Run again: nothing to do.
    let out = ok("unused", &["copy", sled, &db, "--json"], None);
    assert!(out.contains("\"skipped\":3"), "{out}");
    // Back to a new sled database, one conversation (and the parent its
    // fork shares records with).
    let back = dir.path().join("back.db");
    let back = back.to_str().unwrap();
    ok("unused", &["copy", &db, back, "--conv", "retry"], None);
    let copied = heads(back);
    assert_eq!(copied.len(), 2);
    assert_eq!(copied["retry"], heads(sled)["retry"]);
    assert_eq!(copied["chat"], heads(sled)["chat"]);
    for at in [&db[..], back] {
        ok(at, &["verify"], None);
        assert_eq!(
            ok(at, &["view", "chat", "--name", "small"], None),
            ok(sled, &["view", "chat", "--name", "small"], None)
        );
        assert_eq!(
            ok(at, &["pin", "chat", "--list", "--json"], None),
            ok(sled, &["pin", "chat", "--list", "--json"], None)
        );
    }
    // Into a database that holds another history under the same id: refused,
    // nothing written.
    ok(back, &["append", "chat", "--user", "diverged"], None);
    let err = fails("unused", &["copy", back, &db]);
    assert!(err.contains("another history"), "{err}");
    assert_eq!(heads(&db), heads(sled));
}

/// The conversation ids a logged statement binds to `conversation_id`, or
/// an error if it reads or writes conversations it cannot name one by one.
fn statement_conversations(statement: &str, parameters: &str) -> Result<Vec<String>, String> {
    const PER_CONVERSATION: &[&str] = &[
        "conversations",
        "staging",
        "pins",
        "auto_state",
        "lineage",
        "idempotency_keys",
        "chunks",
        "turns",
        "calls",
        "overlay_directories",
        "overlays",
        "staged_chunks",
        "staged_turns",
        "staged_calls",
        "staged_overlays",
        "views",
        "view_blocks",
        "view_calls",
    ];
    let table = statement
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .find(|w| PER_CONVERSATION.contains(w));
    if table.is_none() {
        return Ok(Vec::new());
    }
    if statement.contains("(conversation_id, key) >")
        || statement.contains("(conversation_id, key) <")
    {
        return Err(format!("a range across conversations: {statement}"));
    }
    // Every parameter conversation_id is bound to: `conversation_id = $N`,
    // and the first array of `unnest(...)` after a column list or a
    // condition that starts with conversation_id.
    let number_after = |text: &str| -> Option<usize> {
        text.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let mut indexes = Vec::new();
    for piece in statement.split("conversation_id = $").skip(1) {
        indexes.extend(number_after(piece));
    }
    for opening in [
        "(conversation_id, key, value)",
        "(conversation_id, value)",
        "(conversation_id, key) IN",
        "(conversation_id) IN",
        "conversation_id = ANY($",
    ] {
        for piece in statement.split(opening).skip(1) {
            let after = match piece.split_once("unnest($") {
                Some((_, after)) if opening != "conversation_id = ANY($" => after,
                _ if opening == "conversation_id = ANY($" => piece,
                _ => continue,
            };
            indexes.extend(number_after(after));
        }
    }
    if indexes.is_empty() {
        return Err(format!("no conversation_id condition: {statement}"));
    }
    let mut ids = Vec::new();
    for index in indexes {
        let value = parameters
            .split(&format!("${index} = '"))
            .nth(1)
            .and_then(|rest| rest.split('\'').next())
            .ok_or_else(|| format!("parameter ${index} not logged: {parameters}"))?;
        ids.extend(
            value
                .split(|c: char| !(c.is_ascii_hexdigit() || c == 'x'))
                .filter_map(|w| w.strip_prefix('x'))
                .filter(|w| !w.is_empty())
                .map(str::to_owned),
        );
    }
    Ok(ids)
}

/// Every statement an append or a projection sends reads or writes the
/// rows of that one conversation (so each is a query of one shard when
/// the tables are distributed by conversation_id), as the server's own
/// statement log shows.
#[test]
fn an_append_or_a_projection_touches_one_conversation() {
    let Some(server) = support::postgres::server() else {
        eprintln!("*** an_append_or_a_projection_touches_one_conversation: SKIPPED ***");
        return;
    };
    let Some(log_file) = server.log_file() else {
        eprintln!("*** an_append_or_a_projection_touches_one_conversation: SKIPPED (the cluster's log is not ours) ***");
        return;
    };
    let db = fresh_url().unwrap();
    ok(&db, &["append", "other"], Some(TURN));
    ok(&db, &["append", "chat"], Some(TURN));
    ok(&db, &["compact", "chat", "--to", "0"], None);
    let chat: Value = serde_json::from_str(&ok(&db, &["head", "chat", "--json"], None)).unwrap();
    let chat = chat["id"].as_str().unwrap().to_owned();
    let logged = format!("{db}%20-c%20log_statement%3Dall%20-c%20log_min_duration_statement%3D-1");
    // The statements a command sent, from the server's log.
    let statements_of = |args: &[&str]| -> Vec<(String, String)> {
        let before = std::fs::metadata(&log_file).unwrap().len();
        let stdin = (args.len() == 2 && args[0] == "append").then_some(TURN);
        ok(&logged, args, stdin);
        let text = std::fs::read(&log_file).unwrap();
        let text = String::from_utf8_lossy(&text[before as usize..]).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        let mut found = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let Some(statement) = line
                .split_once("LOG:  execute ")
                .and_then(|(_, rest)| rest.split_once(": "))
                .map(|(_, sql)| sql)
            else {
                continue;
            };
            let parameters = lines
                .get(i + 1)
                .filter(|l| l.contains("DETAIL:  parameters:"))
                .copied()
                .unwrap_or("");
            found.push((statement.to_owned(), parameters.to_owned()));
        }
        found
    };
    for args in [
        &["append", "chat", "--turn", "--user", "once more"][..],
        &["project", "chat"][..],
        &["project", "chat", "--turns", "1..1"][..],
        &["append", "chat"][..],
    ] {
        let mut bound = 0;
        for (statement, parameters) in statements_of(args) {
            let ids = statement_conversations(&statement, &parameters)
                .unwrap_or_else(|e| panic!("convstore {args:?}: {e}"));
            for id in ids {
                bound += 1;
                assert_eq!(id, chat, "convstore {args:?}: {statement} {parameters}");
            }
        }
        assert!(bound > 0, "convstore {args:?}: nothing logged");
        eprintln!("convstore {args:?}: {bound} conversation ids bound, each {chat}");
    }
    // The check can fail: `list` reads every conversation.
    let list = statements_of(&["list"]);
    assert!(
        list.iter()
            .any(|(s, p)| statement_conversations(s, p).is_err()),
        "{list:?}"
    );
}

/// Appends `body` to `conv` through `server`, returning the status and
/// answer.
fn append(server: &str, conv: &str, query: &str, body: &str) -> (u16, Value) {
    answer(
        agent()
            .post(&format!("{server}/v1/conversations/{conv}/events{query}"))
            .set("Content-Type", "application/x-ndjson")
            .send_string(body),
    )
}

/// Two servers on one database, eight clients appending through both to
/// one conversation (with expected seqs) and to their own (without):
/// nothing lost, every conflict a 409, the chain valid, views the same
/// through either server, an idempotency key honoured across them, and a
/// follower of one server sees appends through the other.
#[test]
fn two_servers_on_one_database() {
    let Some(db) = database("two_servers_on_one_database") else {
        return;
    };
    ok(&db, &["migrate"], None);
    let a = Server::start(&db, &[]);
    let b = Server::start(&db, &[]);
    let servers = [a.url.clone(), b.url.clone()];
    let stored = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let conflicts = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let servers = servers.clone();
            let stored = Arc::clone(&stored);
            let conflicts = Arc::clone(&conflicts);
            std::thread::spawn(move || {
                for i in 0..25 {
                    let server = &servers[(c + i) % 2];
                    let text = format!("client {c} append {i}");
                    let body = json!({"type": "user", "text": text}).to_string();
                    if c < 4 {
                        // One conversation, optimistic: read the length
                        // through either server, append expecting it.
                        loop {
                            let (_, info) = answer(
                                agent()
                                    .get(&format!("{server}/v1/conversations/shared"))
                                    .call(),
                            );
                            let len = info["events"].as_u64().unwrap_or(0);
                            let (status, answer) =
                                append(server, "shared", &format!("?expected_seq={len}"), &body);
                            match status {
                                200 | 201 => break,
                                409 => {
                                    assert_eq!(answer["error"]["code"], "conflict");
                                    conflicts.fetch_add(1, Ordering::Relaxed);
                                }
                                404 if len == 0 => {
                                    conflicts.fetch_add(1, Ordering::Relaxed);
                                }
                                other => panic!("{other}: {answer}"),
                            }
                        }
                        stored.lock().unwrap().push(("shared".to_owned(), text));
                    } else {
                        let conv = format!("own-{c}");
                        let (status, answer) = append(server, &conv, "", &body);
                        assert!(status == 200 || status == 201, "{status}: {answer}");
                        stored.lock().unwrap().push((conv, text));
                    }
                }
            })
        })
        .collect();
    // Created by the first append through either server.
    append(
        &servers[0],
        "shared",
        "",
        "{\"type\":\"system\",\"text\":\"start\"}",
    );
    for client in clients {
        client.join().unwrap();
    }
    let stored = stored.lock().unwrap().clone();
    assert_eq!(stored.len(), 200);
    eprintln!(
        "two servers: 200 appends, {} conflicts answered 409",
        conflicts.load(Ordering::Relaxed)
    );
    for conv in ["shared", "own-4", "own-5", "own-6", "own-7"] {
        let log = ok(&db, &["log", conv], None);
        let texts: BTreeSet<String> = log
            .lines()
            .filter_map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["text"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        for (c, text) in stored.iter().filter(|(c, _)| c == conv) {
            assert!(texts.contains(text), "{c}: {text} acknowledged, not stored");
        }
        let expected =
            stored.iter().filter(|(c, _)| c == conv).count() + usize::from(conv == "shared");
        assert_eq!(
            log.lines().count(),
            expected,
            "{conv}: nothing stored twice"
        );
        // The same view through either server.
        let views: Vec<String> = servers
            .iter()
            .map(|s| {
                agent()
                    .get(&format!("{s}/v1/conversations/{conv}/views/default"))
                    .call()
                    .unwrap()
                    .into_string()
                    .unwrap()
            })
            .collect();
        assert_eq!(views[0], views[1]);
    }
    ok(&db, &["verify"], None);
    // An idempotency key used through one server is honoured by the other.
    let body = "{\"type\":\"user\",\"text\":\"exactly once\"}";
    let send = |server: &str| {
        agent()
            .post(&format!("{server}/v1/conversations/own-4/events"))
            .set("Idempotency-Key", "retry-across-servers")
            .send_string(body)
            .unwrap()
    };
    let first = send(&servers[0]);
    let first_seq = first.into_json::<Value>().unwrap()["first_seq"].clone();
    let again = send(&servers[1]);
    assert_eq!(again.header("idempotency-replay"), Some("true"));
    assert_eq!(again.into_json::<Value>().unwrap()["first_seq"], first_seq);
    assert_eq!(ok(&db, &["log", "own-4"], None).lines().count(), 26);
    // Keys are per conversation, on every server alike; a replay of an
    // append that created its conversation is answered as it was (201).
    let create = |server: &str, conv: &str| {
        agent()
            .post(&format!("{server}/v1/conversations/{conv}/events"))
            .set("Idempotency-Key", "one-key")
            .send_string(body)
            .unwrap()
    };
    assert_eq!(create(&servers[0], "keyed-a").status(), 201);
    let replay = create(&servers[1], "keyed-a");
    assert_eq!(
        (replay.status(), replay.header("idempotency-replay")),
        (201, Some("true"))
    );
    assert_eq!(create(&servers[1], "keyed-b").status(), 201);
    assert_eq!(create(&servers[0], "keyed-b").status(), 201);
    assert_eq!(ok(&db, &["log", "keyed-b"], None).lines().count(), 1);
    // A follower of server B hears an append made through server A.
    let stream = agent()
        .get(&format!(
            "{}/v1/conversations/own-5/follow?from=25",
            servers[1]
        ))
        .call()
        .unwrap();
    let mut reader = std::io::BufReader::new(stream.into_reader());
    let started = Instant::now();
    append(
        &servers[0],
        "own-5",
        "",
        "{\"type\":\"user\",\"text\":\"heard\"}",
    );
    let events = support::server::sse_events(&mut reader, 1);
    assert_eq!(events[0].0, Some(25));
    assert!(events[0].2.contains("heard"), "{events:?}");
    eprintln!("follow across servers: {:?}", started.elapsed());
}

/// Batches of three events appended through a server while the server, or
/// PostgreSQL itself, is killed with SIGKILL: every batch acknowledged is
/// in the log after a restart, whole, and no batch is there in part.
#[test]
fn kills_of_a_server_or_of_postgres_lose_nothing_acknowledged() {
    if support::postgres::server().is_none() {
        eprintln!("*** kills_of_a_server_or_of_postgres: SKIPPED (no PostgreSQL) ***");
        return;
    }
    // A cluster of its own: this test kills it.
    let cluster = support::postgres::start().expect("a cluster of its own");
    let db = cluster.database_url("postgres");
    ok(&db, &["migrate"], None);
    let acknowledged = Arc::new(Mutex::new(Vec::<u64>::new()));
    let mut next = 0u64;
    let rounds: u64 = std::env::var("CONVSTORE_PG_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    for round in 0..rounds {
        let server = Server::start(&db, &[]);
        let url = server.url.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (acknowledged, stop) = (Arc::clone(&acknowledged), Arc::clone(&stop));
            let start = next;
            std::thread::spawn(move || {
                let mut batch = start;
                let quick = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(5))
                    .build();
                while !stop.load(Ordering::Relaxed) {
                    let body: String = (0..3)
                        .map(|part| {
                            json!({"type": "user", "text": format!("batch {batch} part {part}")})
                                .to_string()
                                + "\n"
                        })
                        .collect();
                    let sent = quick
                        .post(&format!("{url}/v1/conversations/kills/events"))
                        .set("Content-Type", "application/x-ndjson")
                        .send_string(&body);
                    match sent {
                        Ok(_) => acknowledged.lock().unwrap().push(batch),
                        Err(_) => return batch + 1,
                    }
                    batch += 1;
                }
                batch
            })
        };
        std::thread::sleep(Duration::from_millis(150 + (round * 97) % 400));
        if round % 2 == 0 {
            server.kill9();
            stop.store(true, Ordering::Relaxed);
            next = writer.join().unwrap();
        } else {
            cluster.kill9();
            stop.store(true, Ordering::Relaxed);
            next = writer.join().unwrap();
            drop(server);
            cluster.restart();
        }
        // Whole batches only, every acknowledged one.
        let log = ok(&db, &["log", "kills"], None);
        let mut parts: HashMap<u64, u32> = HashMap::new();
        for line in log.lines() {
            let text = serde_json::from_str::<Value>(line).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned();
            let batch: u64 = text.split(' ').nth(1).unwrap().parse().unwrap();
            *parts.entry(batch).or_default() += 1;
        }
        assert!(
            parts.values().all(|&n| n == 3),
            "a batch in part: {parts:?}"
        );
        for batch in acknowledged.lock().unwrap().iter() {
            assert!(
                parts.contains_key(batch),
                "batch {batch} acknowledged, lost"
            );
        }
        ok(&db, &["verify"], None);
    }
    eprintln!(
        "{rounds} kills (server and PostgreSQL in turn): {} acknowledged batches kept",
        acknowledged.lock().unwrap().len()
    );
}

/// An import into PostgreSQL is one transaction: killed part-way, the
/// conversation does not exist; run again, it holds every event.
#[test]
fn an_import_killed_part_way_stores_nothing() {
    let Some(db) = database("an_import_killed_part_way_stores_nothing") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.db");
    let source = source.to_str().unwrap();
    ok(
        source,
        &["gen", "big", "--events", "150000", "--compactions", "100"],
        None,
    );
    let file = dir.path().join("big.ndjson");
    ok(
        source,
        &[
            "export",
            "big",
            "--format",
            "ndjson",
            "--output",
            file.to_str().unwrap(),
        ],
        None,
    );
    let import = |name: &str| {
        std::process::Command::new(support::server::BIN)
            .args([
                "--db", &db, "import", "--format", "ndjson", "--name", name, "-q",
            ])
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    // Kills land at fractions of an uninterrupted import's time, so they
    // fall inside it on a fast machine as on a slow one.
    let timed = Instant::now();
    assert!(import("timed").wait().unwrap().success());
    let took = timed.elapsed();
    for percent in [20, 50, 80] {
        let delay = took * percent / 100;
        let mut child = import("copy");
        std::thread::sleep(delay);
        let _ = child.kill();
        let status = child.wait().unwrap();
        let (code, out, _) = cli(&db, &["log", "copy"], None);
        if status.success() || code == 0 {
            // Committed before the kill landed (the process may have been
            // killed after its commit, before it exited): whole.
            assert_eq!(
                out.lines().count(),
                150_000,
                "after a kill at {delay:?} the import is all or nothing"
            );
            return;
        }
        eprintln!("import killed after {delay:?} of {took:?}: absent");
        assert_eq!(
            code,
            1,
            "after a kill at {delay:?} the import is all or nothing: {} records",
            out.lines().count()
        );
    }
    let (code, _, err) = cli(
        &db,
        &[
            "import",
            "--format",
            "ndjson",
            "--name",
            "copy",
            "-q",
            file.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 0, "the import run again: {err}");
    assert_eq!(ok(&db, &["log", "copy"], None).lines().count(), 150_000);
    assert_eq!(
        ok(&db, &["head", "copy"], None),
        ok(source, &["head", "big"], None)
    );
}

/// Sessions ended by the server (`pg_terminate_backend`, as a restart
/// does) under appends and reads: a pooled connection found dead is
/// replaced, a write whose answer was lost is read back, so every append
/// reported stored is stored once and every one reported failed stored
/// nothing; a server's reads go on.
#[test]
fn ended_sessions_neither_fail_reads_nor_misreport_writes() {
    // A database of its own: sessions are ended database-wide.
    let Some(db) = support::postgres::fresh_database() else {
        eprintln!("*** ended_sessions_neither_fail_reads_nor_misreport_writes: SKIPPED ***");
        return;
    };
    ok(&db, &["append", "c", "--user", "start"], None);
    let terminate = || {
        psql(
            &db,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name LIKE 'convstore%' AND datname = current_database() \
             AND pid <> pg_backend_pid()",
        )
    };
    let server = Server::start(&db, &[]);
    let read = |server: &str| {
        agent()
            .get(&format!("{server}/v1/conversations/c/events?limit=1"))
            .call()
            .map_or_else(
                |e| match e {
                    ureq::Error::Status(status, _) => status,
                    ureq::Error::Transport(_) => 0,
                },
                |r| r.status(),
            )
    };
    assert_eq!(read(&server.url), 200);
    terminate();
    for _ in 0..20 {
        assert_eq!(read(&server.url), 200, "a read after the sessions ended");
    }
    // Writers while sessions end every 50 ms.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ender = {
        let (stop, db) = (Arc::clone(&stop), db.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                psql(
                    &db,
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE application_name LIKE 'convstore%' AND datname = current_database() \
             AND pid <> pg_backend_pid()",
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                (0..15)
                    .filter(|i| {
                        let text = format!("writer {w} append {i}");
                        let (code, _, err) = cli(&db, &["append", "c", "--user", &text], None);
                        if code != 0 {
                            eprintln!("writer {w} append {i}: {err}");
                        }
                        code == 0
                    })
                    .count()
            })
        })
        .collect();
    let reported: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    ender.join().unwrap();
    let log = ok(&db, &["log", "c"], None);
    let stored = log.lines().count() - 1;
    assert_eq!(
        stored, reported,
        "appends reported stored, and stored:\n{log}"
    );
    ok(&db, &["verify"], None);
    eprintln!("{reported} of 45 appends stored while sessions ended every 50 ms");
}

/// With two call directories damaged (one gone, a later one cut short),
/// `verify` names the one that does not decode, whichever comes first:
/// every directory is read before a mismatch is reported.
#[test]
fn verify_names_a_call_directory_that_does_not_decode_past_a_missing_one() {
    let Some(db) =
        database("verify_names_a_call_directory_that_does_not_decode_past_a_missing_one")
    else {
        return;
    };
    ok(
        &db,
        &["-q", "gen", "g", "--events", "3000", "--seed", "7"],
        None,
    );
    ok(&db, &["verify"], None);
    psql(&db, "DELETE FROM calls WHERE key = '\\x0000000000000000'");
    psql(
        &db,
        "UPDATE calls SET value = substring(value FROM 1 FOR 5) WHERE key = '\\x0000000000000800'",
    );
    let err = fails(&db, &["verify"]);
    assert!(
        err.contains("(g): record 2048: corrupt data: call directory:"),
        "{err}"
    );
}

/// `verify` while appends run, through the server that takes them and
/// from another process: each conversation is read as it stood at one
/// moment, so a log that grows (and settles) while it is read is never
/// reported as corrupt.
#[test]
fn verify_while_appends_run_reads_one_state() {
    let Some(db) = database("verify_while_appends_run_reads_one_state") else {
        return;
    };
    ok(&db, &["append", "chat"], Some(TURN));
    // With a search index, which verify checks against the logs.
    ok(&db, &["search", "panic"], None);
    let server = Server::start(&db, &[]);
    let url = server.url.clone();
    // Past 256 staged records a conversation's records settle, so the
    // checks also meet settles.
    let appenders: Vec<_> = (0..2)
        .map(|c| {
            let url = url.clone();
            std::thread::spawn(move || {
                for n in 0..600 {
                    let body = json!({"type": "user", "text": format!("{c}: {n}")}).to_string();
                    let conv = if c == 0 { "chat" } else { "other" };
                    let (status, answer) = append(&url, conv, "", &body);
                    assert!(status == 200 || status == 201, "{status}: {answer}");
                }
            })
        })
        .collect();
    // Another process creates and deletes conversations meanwhile.
    let deleter = {
        let db = db.clone();
        std::thread::spawn(move || {
            for i in 0..15 {
                let name = format!("brief-{i}");
                let seed = i.to_string();
                ok(
                    &db,
                    &["-q", "gen", &name, "--events", "50", "--seed", &seed],
                    None,
                );
                ok(&db, &["delete", &name], None);
            }
        })
    };
    let started = Instant::now();
    let mut checks = 0;
    while (appenders.iter().any(|a| !a.is_finished()) || !deleter.is_finished())
        && started.elapsed() < Duration::from_secs(60)
    {
        let (status, verified) = answer(agent().get(&format!("{url}/v1/verify")).call());
        assert_eq!(status, 200, "through the server: {verified}");
        assert_eq!(verified["ok"], true, "through the server: {verified}");
        if checks % 4 == 0 {
            ok(&db, &["verify"], None);
        }
        checks += 1;
    }
    for appender in appenders {
        appender.join().unwrap();
    }
    deleter.join().unwrap();
    assert!(checks > 4, "{checks} checks during the appends");
    let (status, verified) = answer(agent().get(&format!("{url}/v1/verify")).call());
    assert_eq!((status, &verified["ok"]), (200, &json!(true)), "{verified}");
}
