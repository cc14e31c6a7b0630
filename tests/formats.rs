//! Databases written by the builds of formats 1 to 9 (checked in under
//! `tests/fixtures/`) read as those builds read them, verify, and take new
//! appends; a backup of each is a current-format copy that reads the same.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::TestEnv;

/// Unpacks `formatN.tar.gz` into the test's directory; returns the env
/// pointed at its database.
fn unpack(format: u32) -> TestEnv {
    let env = TestEnv::new();
    let archive =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/format{format}.tar.gz"));
    let status = Command::new("tar")
        .arg("xzf")
        .arg(&archive)
        .arg("-C")
        .arg(env.path())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::rename(env.path().join(format!("format{format}/db")), env.db()).unwrap();
    env
}

fn expected(env: &TestEnv, format: u32, file: &str) -> Vec<Value> {
    std::fs::read_to_string(env.path().join(format!("format{format}/{file}")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `env.run(args)`, waiting for the database if something still holds
/// it: this test opens databases in its own process too, and the lock of
/// one it dropped may be released a moment later (sled closes its file
/// once the last of its threads lets go of it).
fn run(env: &TestEnv, args: &[&str]) -> support::Run {
    env.run(&[&["--wait", "10"], args].concat())
}

fn reads_as_its_build_did(format: u32) {
    let env = unpack(format);
    let store =
        convstore_store::Store::open_with(env.db(), &convstore_store::OpenOptions::existing())
            .unwrap();
    assert_eq!(store.format_version(), format);
    drop(store);
    for conversation in ["chat", "big", "fork"] {
        let log = run(&env, &["log", conversation]).ok().lines();
        assert_eq!(
            log,
            expected(&env, format, &format!("{conversation}.log.ndjson")),
            "format {format}: log {conversation}"
        );
        let view = run(&env, &["project", conversation]).ok().lines();
        assert_eq!(
            view,
            expected(&env, format, &format!("{conversation}.view.ndjson")),
            "format {format}: view {conversation}"
        );
    }
    // Its stored view and pins, as the old build left them.
    let views = run(&env, &["view", "chat", "--list", "--json"])
        .ok()
        .lines();
    assert_eq!(views[0][0]["name"], "default");
    assert_eq!(run(&env, &["pin", "chat", "--list"]).ok().stdout, "0\n");
    let verified = run(&env, &["verify", "--json"]).ok().lines();
    assert_eq!(verified[0]["conversations"], 3);
    // New writes go on in the old format: a redacted record of a format
    // before 7 proves only its address, a committed one every other field.
    run(&env, &["append", "chat", "--turn", "--user", "and now?"]).ok();
    let len = run(&env, &["log", "chat"]).ok().lines().len();
    run(
        &env,
        &["redact", "chat", &(len - 1).to_string(), "--reason", "test"],
    )
    .ok();
    let verified = run(&env, &["verify", "--json"]).ok().lines();
    assert_eq!(verified[0]["redacted"], 1);
    assert_eq!(
        verified[0]["redacted_proven"],
        u64::from(format >= 7),
        "format {format}"
    );
    run(&env, &["append", "fork", "--user", "more"]).ok();
    run(&env, &["compact", "big", "--reasoning", "strip", "--force"]).ok();
    run(&env, &["view", "chat"]).ok();
    run(&env, &["verify"]).ok();
    let log = run(&env, &["log", "chat"]).ok().lines();
    // The two records appended, and the redaction event.
    assert_eq!(
        &log[..log.len() - 3],
        expected(&env, format, "chat.log.ndjson").as_slice()
    );
    let store =
        convstore_store::Store::open_with(env.db(), &convstore_store::OpenOptions::existing())
            .unwrap();
    assert_eq!(store.format_version(), format);
    drop(store);
    // Records of format 7 (committed) are not copied into an older
    // format: nothing written. From format 7 on, a copy from a database of
    // the current format (compactions filed as it files them) is filed as
    // the older format files them.
    let newer = env.path().join("newer");
    let newer = newer.to_str().unwrap();
    run(
        &env,
        &["--db", newer, "append", "n", "--turn", "--user", "x"],
    )
    .ok();
    run(
        &env,
        &[
            "--db",
            newer,
            "compact",
            "n",
            "--reasoning",
            "strip",
            "--force",
        ],
    )
    .ok();
    let before = run(&env, &["list", "--json"]).ok().stdout;
    let copied = run(&env, &["copy", newer, env.db().to_str().unwrap()]);
    if format < 7 {
        let copied = copied.fails();
        assert!(
            copied.stderr.contains("cannot hold the format-7 records"),
            "{}",
            copied.stderr
        );
        assert_eq!(run(&env, &["list", "--json"]).ok().stdout, before);
    } else {
        copied.ok();
        assert_eq!(
            run(&env, &["log", "n"]).ok().stdout,
            run(&env, &["--db", newer, "log", "n"]).ok().stdout
        );
        run(&env, &["verify"]).ok();
    }
    // A backup is a copy in the current format, reading the same.
    let copy = env.path().join("copy");
    run(&env, &["backup", copy.to_str().unwrap()]).ok();
    let store = convstore_store::Store::open_with(&copy, &convstore_store::OpenOptions::existing())
        .unwrap();
    assert_eq!(store.format_version(), convstore_store::FORMAT_VERSION);
    drop(store);
    let copy_db = copy.to_str().unwrap();
    for conversation in ["chat", "big", "fork"] {
        for command in ["log", "project"] {
            assert_eq!(
                run(&env, &[command, conversation, "--db", copy_db])
                    .ok()
                    .stdout,
                run(&env, &[command, conversation]).ok().stdout,
                "format {format}: {command} {conversation} of the backup"
            );
        }
    }
}

#[test]
fn format_1_databases_read_and_take_appends() {
    reads_as_its_build_did(1);
}

#[test]
fn format_2_databases_read_and_take_appends() {
    reads_as_its_build_did(2);
}

#[test]
fn format_3_databases_read_and_take_appends() {
    reads_as_its_build_did(3);
}

#[test]
fn format_4_databases_read_and_take_appends() {
    reads_as_its_build_did(4);
}

#[test]
fn format_5_databases_read_and_take_appends() {
    reads_as_its_build_did(5);
}

#[test]
fn format_6_databases_read_and_take_appends() {
    reads_as_its_build_did(6);
}

#[test]
fn format_7_databases_read_and_take_appends() {
    reads_as_its_build_did(7);
}

#[test]
fn format_8_databases_read_and_take_appends() {
    reads_as_its_build_did(8);
}

#[test]
fn format_9_databases_read_and_take_appends() {
    reads_as_its_build_did(9);
}
