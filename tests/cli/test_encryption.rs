#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns
//! Encryption at rest: a database created with a key holds no text in
//! clear, reads and verifies with the key, verifies without it, refuses
//! the rest without it; deleting a conversation shreds its data key, in
//! every copy; a killed delete leaves the conversation whole or gone.

use std::path::Path;
use std::time::Duration;

use crate::support::TestEnv;

/// A key file and a configuration naming it, beside the database.
fn with_key(env: &TestEnv) {
    env.run(&["keygen", "master.key"]).ok();
    configure(env, "[encryption]\nkey_file = \"master.key\"\n");
}

/// `text` as the configuration beside the database.
fn configure(env: &TestEnv, text: &str) {
    std::fs::write(env.path().join("convstore.toml"), text).unwrap();
}

/// An unencrypted database `plain.db` beside the test's.
fn plain_database(env: &TestEnv) {
    env.run(&["--db", "plain.db", "append", "p", "--user", "plain"])
        .ok();
}

/// The configuration set aside: no key.
fn without_key(env: &TestEnv) {
    std::fs::rename(
        env.path().join("convstore.toml"),
        env.path().join("off.toml"),
    )
    .unwrap();
}

/// Files under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if std::fs::read(&path)
            .unwrap()
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
        {
            found.push(path);
        }
    }
    found
}

/// A conversation with a short secret, a long one (over 1 KiB: a blob in
/// an unencrypted database), a tool call's arguments and enough filler to
/// pass 64 KiB.
fn conversation() -> String {
    let long = format!("LONG-SECRET-{}", "q".repeat(3000));
    let mut input = String::from("{\"type\":\"turn_start\"}\n");
    input.push_str("{\"type\":\"user\",\"text\":\"SHORT-SECRET-81f2\"}\n");
    let mut lines = vec![
        format!("{{\"type\":\"assistant\",\"text\":\"{long}\"}}"),
        "{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"read\",\"arguments\":{\"path\":\"ARG-SECRET\"}}"
            .to_owned(),
        format!(
            "{{\"type\":\"tool_result\",\"id\":\"c1\",\"is_error\":false,\"content\":\"RESULT-{long}\"}}"
        ),
    ];
    for i in 0..300 {
        lines.push("{\"type\":\"turn_start\"}".to_owned());
        lines.push(format!(
            "{{\"type\":\"user\",\"text\":\"FILLER-{i:03} {}\"}}",
            "f".repeat(300)
        ));
    }
    input.push_str(&lines.join("\n"));
    input.push('\n');
    input
}

const SECRETS: &[&str] = &[
    "SHORT-SECRET-81f2",
    "LONG-SECRET-",
    "ARG-SECRET",
    "RESULT-LONG",
    "FILLER-150",
];

#[test]
fn an_encrypted_database_keeps_no_text_in_clear_and_needs_its_key() {
    let env = TestEnv::new();
    plain_database(&env);
    // A mistake in [encryption] is never taken for no encryption: a
    // database is not created.
    configure(&env, "[encryption]\nkey_fle = \"master.key\"\n");
    let refused = env
        .run_with_stdin(&["append", "chat"], "{\"type\":\"user\",\"text\":\"x\"}\n")
        .fails()
        .stderr;
    assert!(refused.contains("key_fle"), "{refused}");
    assert!(!env.db().exists());
    with_key(&env);
    // A second key never replaces the first.
    env.run(&["keygen", "master.key"]).fails();
    env.run_with_stdin(&["append", "chat", "-q"], &conversation())
        .ok();
    env.run(&["view", "chat", "--name", "v"]).ok();
    env.run(&["compact", "chat", "-q"]).ok();
    let view = env.run(&["project", "chat"]).ok().stdout;
    assert!(
        view.contains("FILLER-300") || view.contains("FILLER-299"),
        "{view}"
    );
    let log = env.run(&["log", "chat"]).ok().lines();
    assert_eq!(log[1]["text"], "SHORT-SECRET-81f2");
    assert!(log[2]["text"].as_str().unwrap().starts_with("LONG-SECRET-"));
    let verified = env.run(&["verify"]).ok().stdout;
    assert!(verified.contains("1 view"), "{verified}");
    for secret in SECRETS {
        assert_eq!(
            files_holding(&env.db(), secret),
            Vec::<std::path::PathBuf>::new(),
            "{secret} in clear"
        );
    }
    // Salvage does not read an encrypted database, and says so.
    let refused = env.run(&["salvage", "db", "salvaged.db"]).fails().stderr;
    assert!(refused.contains("encrypted"), "{refused}");
    assert!(!env.path().join("salvaged.db").exists());
    // No search index: it would hold the texts in clear.
    let refused = env.run(&["search", "SECRET"]).fails().stderr;
    assert!(refused.contains("encrypted database"), "{refused}");
    assert!(!env.db().join("search").exists());

    // Without the key: verify checks what it can, the rest is refused,
    // and a refused write stores nothing.
    without_key(&env);
    let keyless = env.run(&["verify"]).ok().stdout;
    assert!(keyless.contains("checked without the key"), "{keyless}");
    let refused = env.run(&["project", "chat"]).fails().stderr;
    assert!(refused.contains("no key is configured"), "{refused}");
    env.run_with_stdin(&["append", "chat"], "{\"type\":\"user\",\"text\":\"x\"}\n")
        .fails();
    let listed = env.run(&["list", "--json"]).ok().stdout;
    let before = log.len() as u64;
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["events"].as_u64(), Some(before), "{listed}");

    // Another key is named as such.
    env.run(&["keygen", "other.key"]).ok();
    configure(&env, "[encryption]\nkey_file = \"other.key\"\n");
    let wrong = env.run(&["project", "chat"]).fails().stderr;
    assert!(wrong.contains("not the key"), "{wrong}");

    // A key configured for a database that is not encrypted is refused
    // rather than taken for encryption.
    std::fs::rename(
        env.path().join("off.toml"),
        env.path().join("convstore.toml"),
    )
    .unwrap();
    let refused = env.run(&["--db", "plain.db", "list"]).fails().stderr;
    assert!(refused.contains("not encrypted"), "{refused}");
}

#[test]
fn a_redaction_in_an_encrypted_database_is_proven_and_verifies() {
    let env = TestEnv::new();
    with_key(&env);
    env.run_with_stdin(&["append", "chat", "-q"], &conversation())
        .ok();
    env.run(&["view", "chat", "--name", "v"]).ok();
    env.run(&["redact", "chat", "1", "--reason", "leak"]).ok();
    let long = env
        .run(&["redact", "chat", "2", "--reason", "leak"])
        .ok()
        .stdout;
    assert!(!long.contains("stays stored"), "{long}");
    let log = env.run(&["log", "chat"]).ok().lines();
    assert_eq!(log[1]["text"], "[redacted]");
    assert_eq!(log[2]["text"], "[redacted]");
    let view = env.run(&["view", "chat", "--name", "v"]).ok().stdout;
    assert!(!view.contains("SHORT-SECRET-81f2"), "{view}");
    assert!(!view.contains("\"text\":\"LONG-SECRET-"), "{view}");
    let verified = env.run(&["verify"]).ok().stdout;
    assert!(
        verified.contains("for 2 of 2 redacted records"),
        "{verified}"
    );
}

#[test]
fn deleting_a_conversation_shreds_it_in_every_copy() {
    let env = TestEnv::new();
    with_key(&env);
    env.run_with_stdin(&["append", "a", "-q"], &conversation())
        .ok();
    env.run_with_stdin(&["append", "b"], "{\"type\":\"user\",\"text\":\"kept\"}\n")
        .ok();
    env.run(&["backup", "copy.db"]).ok();
    // The copy is encrypted with the same keys.
    for secret in SECRETS {
        assert!(files_holding(&env.path().join("copy.db"), secret).is_empty());
    }
    assert!(env
        .run(&["--db", "copy.db", "project", "a"])
        .ok()
        .stdout
        .contains("FILLER-"));
    env.run(&["delete", "a"]).ok();
    let shredded = env.run(&["--db", "copy.db", "project", "a"]).fails().stderr;
    assert!(shredded.contains("data key is gone"), "{shredded}");
    let kept = env.run(&["--db", "copy.db", "project", "b"]).ok().stdout;
    assert!(kept.contains("kept"), "{kept}");
    // The copy's chain still checks without the key.
    without_key(&env);
    env.run(&["--db", "copy.db", "verify"]).ok();
}

#[test]
fn a_killed_delete_of_an_encrypted_conversation_leaves_it_whole_or_gone() {
    let env = TestEnv::new();
    with_key(&env);
    let mut outcomes = [0, 0];
    for round in 0..8u64 {
        let name = format!("c{round}");
        env.run_with_stdin(&["append", &name, "-q"], &conversation())
            .ok();
        env.run_killed_after(&["delete", &name], Duration::from_millis(round * 15));
        let listed = env.run(&["list", "--json"]).ok().stdout;
        let present = listed.contains(&format!("\"{name}\""));
        if present {
            let view = env.run(&["project", &name]).ok().stdout;
            assert!(view.contains("FILLER-"), "round {round}");
            env.run(&["delete", &name]).ok();
        }
        let gone = env.run(&["project", &name]).fails().stderr;
        assert!(gone.contains("no conversation"), "round {round}: {gone}");
        env.run(&["verify"]).ok();
        outcomes[usize::from(!present)] += 1;
    }
    eprintln!("whole, gone: {outcomes:?}");
}

#[test]
fn a_conversation_without_its_key_is_never_given_another() {
    let env = TestEnv::new();
    with_key(&env);
    env.run_with_stdin(&["append", "a"], "{\"type\":\"user\",\"text\":\"one\"}\n")
        .ok();
    // The keyring lost (or an older copy of it put back): appending to
    // the conversation is refused, and it reads again once the keyring
    // is back.
    let keyring = env.path().join("master.key.keyring");
    let saved = env.path().join("saved.keyring");
    std::fs::rename(&keyring, &saved).unwrap();
    let refused = env
        .run_with_stdin(&["append", "a"], "{\"type\":\"user\",\"text\":\"two\"}\n")
        .fails()
        .stderr;
    assert!(refused.contains("no data key"), "{refused}");
    std::fs::rename(&saved, &keyring).unwrap();
    let log = env.run(&["log", "a"]).ok().lines();
    assert_eq!(log.len(), 1);
    env.run(&["verify"]).ok();
}

#[test]
fn a_copy_has_keys_of_its_own_and_a_backup_verifies_after_a_delete() {
    let env = TestEnv::new();
    // An unencrypted database is not copied into an encrypted one, and
    // nothing is made.
    plain_database(&env);
    with_key(&env);
    let refused = env.run(&["copy", "plain.db", "enc.db"]).fails().stderr;
    assert!(refused.contains("not encrypted"), "{refused}");
    assert!(!env.path().join("enc.db").exists());

    env.run_with_stdin(&["append", "a", "-q"], &conversation())
        .ok();
    env.run_with_stdin(&["append", "b"], "{\"type\":\"user\",\"text\":\"kept\"}\n")
        .ok();
    env.run(&["copy", "db", "copy.db"]).ok();
    env.run(&["backup", "backup.db"]).ok();
    for secret in SECRETS {
        assert!(files_holding(&env.path().join("copy.db"), secret).is_empty());
    }
    // Deleting in the copy leaves the original; deleting in the original
    // leaves the copy, and shreds the backup's.
    env.run(&["--db", "copy.db", "delete", "b"]).ok();
    env.run(&["project", "b"]).ok();
    env.run(&["delete", "a"]).ok();
    assert!(env
        .run(&["--db", "copy.db", "project", "a"])
        .ok()
        .stdout
        .contains("FILLER-"));
    env.run(&["--db", "backup.db", "project", "a"]).fails();
    let verified = env.run(&["--db", "backup.db", "verify"]).ok().stdout;
    assert!(
        verified.contains("not verified: 1 conversation whose data key was deleted"),
        "{verified}"
    );
    // A backup of the backup leaves the shredded conversation out.
    env.run(&["--db", "backup.db", "backup", "again.db"]).ok();
    let listed = env.run(&["--db", "again.db", "list", "--json"]).ok().stdout;
    assert!(!listed.contains("\"a\""), "{listed}");
}

#[test]
fn an_empty_key_setting_is_a_mistake_not_plain_text() {
    let env = TestEnv::new();
    let input = "{\"type\":\"user\",\"text\":\"x\"}\n";
    let mut empty = env.command(&["append", "c", "--user", "x"]);
    empty.env(convstore_engine::store::crypto::KEY_FILE_VARIABLE, "");
    let out = empty.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("set but empty"));
    configure(&env, "[encryption]\n");
    let refused = env.run_with_stdin(&["append", "c"], input).fails().stderr;
    assert!(refused.contains("key_file"), "{refused}");
    assert!(!env.db().exists());
}

/// A key file named but missing fails every command on a database that is
/// not encrypted, as a key that is there does: nothing is stored in clear
/// while encryption is meant.
#[test]
fn a_missing_key_file_is_never_taken_for_no_encryption() {
    let env = TestEnv::new();
    env.run(&["append", "c", "--user", "plain"]).ok();
    configure(&env, "[encryption]\nkey_file = \"gone.key\"\n");
    for args in [
        &["append", "c", "--user", "in clear?"][..],
        &["project", "c"],
        &["list"],
    ] {
        let refused = env.run(args).fails().stderr;
        assert!(
            refused.starts_with("error: key file or keyring ") && refused.contains("gone.key"),
            "{args:?}: {refused}"
        );
    }
    without_key(&env);
    let log = env.run(&["log", "c"]).ok().stdout;
    assert_eq!(log.lines().count(), 1, "{log}");
}

#[test]
fn a_deletion_whose_key_cannot_be_deleted_yet_is_finished_later() {
    let env = TestEnv::new();
    with_key(&env);
    env.run_with_stdin(
        &["append", "a"],
        "{\"type\":\"user\",\"text\":\"doomed\"}\n",
    )
    .ok();
    env.run_with_stdin(&["append", "b"], "{\"type\":\"user\",\"text\":\"kept\"}\n")
        .ok();
    env.run(&["backup", "bk.db"]).ok();
    // The keyring cannot be written (its new file's name taken).
    let blocker = env.path().join("master.key.keyring.new");
    std::fs::create_dir(&blocker).unwrap();
    env.run(&["delete", "a"]).ok();
    env.run(&["list"]).ok();
    assert!(!env.run(&["list"]).ok().stdout.contains(" a "));
    // Not shredded yet: the deletion stays unfinished...
    env.run(&["--db", "bk.db", "project", "a"]).ok();
    // ...until the keyring can be written: the next open finishes it.
    std::fs::remove_dir(&blocker).unwrap();
    env.run(&["list"]).ok();
    let shredded = env.run(&["--db", "bk.db", "project", "a"]).fails().stderr;
    assert!(shredded.contains("data key is gone"), "{shredded}");
    env.run(&["--db", "bk.db", "project", "b"]).ok();
}

#[test]
fn a_plain_fork_in_an_encrypted_database_has_a_key_of_its_own() {
    let env = TestEnv::new();
    with_key(&env);
    env.run(&["append", "p", "--turn", "--user", "a", "--assistant", "b"])
        .ok();
    env.run(&["fork", "p", "--name", "f"]).ok();
    env.run(&["append", "f", "--user", "FORK-OWN"]).ok();
    env.run(&["view", "f", "--name", "v"]).ok();
    env.run(&["redact", "f", "1", "--reason", "shared"]).ok();
    assert!(env.run(&["project", "f"]).ok().stdout.contains("FORK-OWN"));
    assert!(files_holding(&env.db(), "FORK-OWN").is_empty());
    env.run(&["verify"]).ok();
    assert!(!env.run(&["verify"]).ok().stderr.contains("still"));
}

#[test]
fn nothing_is_deleted_or_created_while_the_keyring_is_away() {
    let env = TestEnv::new();
    with_key(&env);
    env.run(&["append", "x", "--user", "text of x"]).ok();
    env.run(&["backup", "bk.db"]).ok();
    let keyring = env.path().join("master.key.keyring");
    let away = env.path().join("away.keyring");
    std::fs::rename(&keyring, &away).unwrap();
    // A delete could not shred x's key, which lives in the keyring away.
    let refused = env.run(&["delete", "x"]).fails().stderr;
    assert!(refused.contains("would not shred"), "{refused}");
    // A new conversation would start a new keyring without x's key.
    let refused = env.run(&["append", "y", "--user", "new"]).fails().stderr;
    assert!(refused.contains("does not exist"), "{refused}");
    assert!(!keyring.exists());
    std::fs::rename(&away, &keyring).unwrap();
    env.run(&["delete", "x"]).ok();
    env.run(&["--db", "bk.db", "project", "x"]).fails();
}
