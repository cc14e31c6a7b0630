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

fn reads_as_its_build_did(format: u32) {
    let env = unpack(format);
    let store =
        convstore_store::Store::open_with(env.db(), &convstore_store::OpenOptions::existing())
            .unwrap();
    assert_eq!(store.format_version(), format);
    drop(store);
    for conversation in ["chat", "big", "fork"] {
        let log = env.run(&["log", conversation]).ok().lines();
        assert_eq!(
            log,
            expected(&env, format, &format!("{conversation}.log.ndjson")),
            "format {format}: log {conversation}"
        );
        let view = env.run(&["project", conversation]).ok().lines();
        assert_eq!(
            view,
            expected(&env, format, &format!("{conversation}.view.ndjson")),
            "format {format}: view {conversation}"
        );
    }
    // Its stored view and pins, as the old build left them.
    let views = env.run(&["view", "chat", "--list", "--json"]).ok().lines();
    assert_eq!(views[0][0]["name"], "default");
    assert_eq!(env.run(&["pin", "chat", "--list"]).ok().stdout, "0\n");
    let verified = env.run(&["verify", "--json"]).ok().lines();
    assert_eq!(verified[0]["conversations"], 3);
    // New writes go on in the old format: a redacted record of a format
    // before 7 proves only its address, a committed one every other field.
    env.run(&["append", "chat", "--turn", "--user", "and now?"])
        .ok();
    let len = env.run(&["log", "chat"]).ok().lines().len();
    env.run(&["redact", "chat", &(len - 1).to_string(), "--reason", "test"])
        .ok();
    let verified = env.run(&["verify", "--json"]).ok().lines();
    assert_eq!(verified[0]["redacted"], 1);
    assert_eq!(
        verified[0]["redacted_proven"],
        u64::from(format >= 7),
        "format {format}"
    );
    env.run(&["append", "fork", "--user", "more"]).ok();
    env.run(&["compact", "big", "--reasoning", "strip", "--force"])
        .ok();
    env.run(&["view", "chat"]).ok();
    env.run(&["verify"]).ok();
    let log = env.run(&["log", "chat"]).ok().lines();
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
    env.run(&["--db", newer, "append", "n", "--turn", "--user", "x"])
        .ok();
    env.run(&[
        "--db",
        newer,
        "compact",
        "n",
        "--reasoning",
        "strip",
        "--force",
    ])
    .ok();
    let before = env.run(&["list", "--json"]).ok().stdout;
    let run = env.run(&["copy", newer, env.db().to_str().unwrap()]);
    if format < 7 {
        let run = run.fails();
        assert!(
            run.stderr.contains("cannot hold the format-7 records"),
            "{}",
            run.stderr
        );
        assert_eq!(env.run(&["list", "--json"]).ok().stdout, before);
    } else {
        run.ok();
        assert_eq!(
            env.run(&["log", "n"]).ok().stdout,
            env.run(&["--db", newer, "log", "n"]).ok().stdout
        );
        env.run(&["verify"]).ok();
    }
    // A backup is a copy in the current format, reading the same.
    let copy = env.path().join("copy");
    env.run(&["backup", copy.to_str().unwrap()]).ok();
    let store = convstore_store::Store::open_with(&copy, &convstore_store::OpenOptions::existing())
        .unwrap();
    assert_eq!(store.format_version(), convstore_store::FORMAT_VERSION);
    drop(store);
    let copy_db = copy.to_str().unwrap();
    for conversation in ["chat", "big", "fork"] {
        for command in ["log", "project"] {
            assert_eq!(
                env.run(&[command, conversation, "--db", copy_db])
                    .ok()
                    .stdout,
                env.run(&[command, conversation]).ok().stdout,
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
