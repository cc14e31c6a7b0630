//! `convstore redact` killed part-way: the record whole, or redacted with
//! its event and the text gone from the segment files; never half.

use std::time::Duration;

use crate::support::TestEnv;
use crate::test_delete::user_lines;

#[test]
fn a_killed_redact_leaves_the_record_whole_or_redacted() {
    let env = TestEnv::new();
    let mut outcomes = [0, 0];
    for round in 0..10u64 {
        let name = format!("c{round}");
        let secret = format!("SECRET-{round}-4f1a");
        // 100 long events and the secret, in one append to the segment
        // files; a stored view shows the secret.
        let input = format!(
            "{}{{\"type\":\"user\",\"text\":\"{secret}\"}}\n",
            user_lines("filler", 100)
        );
        env.run_with_stdin(&["append", &name], &input).ok();
        env.run(&["view", &name, "--name", "v"]).ok();
        env.run_killed_after(
            &["redact", &name, "100", "--reason", "leak"],
            Duration::from_millis(round * 20),
        );
        let log = env.run(&["log", &name]).ok().lines();
        let events = log.iter().filter(|e| e.get("delta").is_some()).count();
        let whole = match log[100]["text"].as_str() {
            Some("[redacted]") => {
                assert_eq!(events, 1, "round {round}: one redaction event");
                assert_eq!(log[100]["redacted"]["reason"], "leak", "round {round}");
                assert!(!env.segments_hold(&secret), "round {round}");
                false
            }
            Some(text) => {
                assert_eq!(text, secret, "round {round}");
                assert_eq!(events, 0, "round {round}: no redaction event");
                true
            }
            None => panic!("round {round}: {}", log[100]),
        };
        outcomes[usize::from(!whole)] += 1;
        let view = env.run(&["view", &name, "--name", "v"]).ok().stdout;
        assert_eq!(view.contains(&secret), whole, "round {round}");
        env.run(&["verify"]).ok();
    }
    eprintln!("whole, redacted: {outcomes:?}");
}

/// Whether any file under `dir` holds `needle`.
fn files_hold(dir: &std::path::Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            found.extend(files_hold(&path, needle));
        } else if std::fs::read(&path)
            .expect("its bytes")
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
        {
            found.push(path);
        }
    }
    found
}

/// A record redacted in a chunk of the segment files: the chunk, rewritten,
/// goes back to the segment files, so the other texts it holds are not
/// copied into sled's files (where they would outlive their own
/// redaction); redacted in turn, they are nowhere in the directory.
#[test]
fn redacting_beside_other_texts_in_the_segment_files_copies_none_into_sled() {
    let env = TestEnv::new();
    let neighbour = "NEIGHBOUR-7c1e";
    let long = "LONG-9d2b ".repeat(300);
    let input = format!(
        "{}{{\"type\":\"user\",\"text\":\"{neighbour}\"}}\n{{\"type\":\"user\",\"text\":\"{long}\"}}\n",
        user_lines("filler", 60)
    );
    env.run_with_stdin(&["append", "c"], &input).ok();
    assert!(env.segments_hold(neighbour));
    env.run(&["redact", "c", "61", "--reason", "long"]).ok();
    let outside: Vec<_> = files_hold(&env.db(), neighbour)
        .into_iter()
        .filter(|p| !p.starts_with(env.db().join("segments")))
        .collect();
    assert!(outside.is_empty(), "{outside:?}");
    env.run(&["redact", "c", "60", "--reason", "neighbour"])
        .ok();
    for secret in [neighbour, "LONG-9d2b"] {
        let found = files_hold(&env.db(), secret);
        assert!(found.is_empty(), "{secret}: {found:?}");
    }
    env.run(&["verify"]).ok();
}

/// A redaction refused (no such record, nothing to redact, already
/// redacted) stores nothing: the search index keeps every document it had.
#[test]
fn a_refused_redaction_leaves_the_search_index_as_it_was() {
    let env = TestEnv::new();
    one_turn(&env, "one two");
    env.run(&["search", "two"]).ok();
    let before = env.run(&["verify"]).ok().stdout;
    assert!(before.contains("2 search documents verified"), "{before}");
    for args in [
        &["redact", "c", "99", "--reason", "x"][..],
        &["redact", "c", "0", "--reason", "x"],
        &["redact", "c", "1", "--field", "arguments", "--reason", "x"],
    ] {
        env.run(args).fails();
        let after = env.run(&["verify"]).ok();
        assert_eq!(after.stdout, before, "{args:?}");
        assert!(
            !after.stderr.contains("behind"),
            "{args:?}: {}",
            after.stderr
        );
    }
    env.run(&["redact", "c", "1", "--reason", "x"]).ok();
    env.run(&["redact", "c", "1", "--reason", "again"]).fails();
    let after = env.run(&["verify"]).ok();
    assert!(!after.stderr.contains("behind"), "{}", after.stderr);
    assert!(!env.run(&["search", "two"]).ok().stdout.contains("seq 1"));
}

/// A search index that cannot forget a conversation's documents (damaged
/// here; a full disk does the same) would keep a text the log lost: the
/// redaction, or the retention pass, is refused and stores nothing.
#[test]
fn a_redaction_the_search_index_cannot_follow_is_refused() {
    let env = TestEnv::new();
    one_turn(&env, "one SECRETWORD");
    env.run(&["search", "SECRETWORD"]).ok();
    let meta = env.db().join("search").join("meta.json");
    let kept = std::fs::read(&meta).expect("the index's meta.json");
    std::fs::write(&meta, "garbage\n").expect("damaged");
    let log = env.run(&["log", "c"]).ok().stdout;
    let refused = env.run(&["redact", "c", "1", "--reason", "leak"]).fails();
    assert!(
        refused.stderr.contains("nothing was redacted") && refused.stderr.lines().count() == 1,
        "{}",
        refused.stderr
    );
    let refused = env
        .run(&["gc", "c", "--older-than", "0s", "--all-payloads"])
        .fails();
    assert!(
        refused.stderr.contains("nothing was dropped"),
        "{}",
        refused.stderr
    );
    assert_eq!(env.run(&["log", "c"]).ok().stdout, log);
    std::fs::write(&meta, kept).expect("put back");
    env.run(&["redact", "c", "1", "--reason", "leak"]).ok();
    assert!(!env
        .run(&["search", "SECRETWORD"])
        .ok()
        .stdout
        .contains("seq 1"));
}

/// Appends to `c` a turn whose user says `user` and assistant "three".
fn one_turn(env: &TestEnv, user: &str) {
    env.run(&[
        "append",
        "c",
        "--turn",
        "--user",
        user,
        "--assistant",
        "three",
    ])
    .ok();
}
