//! `convstore delete`: as a user meets it, and killed part-way.

use std::fmt::Write as _;
use std::time::Duration;

use crate::support::TestEnv;

/// `count` user events of about 1.2 KB, each starting with `tag`: an
/// append of them is large enough for the segment files.
pub(crate) fn user_lines(tag: &str, count: usize) -> String {
    let pad = "pad ".repeat(300);
    let mut text = String::new();
    for i in 0..count {
        writeln!(text, "{{\"type\":\"user\",\"text\":\"{tag} {i} {pad}\"}}")
            .expect("a String takes every write");
    }
    text
}

#[test]
fn delete_refuses_what_it_should_and_says_what_it_removed() {
    let env = TestEnv::new();
    env.run(&["append", "chat", "--user", "hello"]).ok();
    env.run(&["append", "chat", "--assistant", "hi"]).ok();
    env.run(&["fork", "chat", "--name", "retry"]).ok();
    env.run(&["append", "other", "--user", "kept"]).ok();

    env.run(&["delete"]).usage();
    env.run(&["delete", "nope"]).fails();
    let id = env.run(&["head", "other", "--json"]).ok().lines()[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A destructive command takes no bare id prefix.
    let run = env.run(&["delete", &id[..8]]).fails();
    assert!(run.stderr.contains("id:"), "{}", run.stderr);
    let run = env.run(&["delete", "chat"]).fails();
    assert!(
        run.stderr.contains("1 fork (retry)") && run.stderr.contains("--with-forks"),
        "{}",
        run.stderr
    );
    assert_eq!(env.run(&["log", "chat"]).ok().lines().len(), 2);

    let run = env.run(&["delete", "chat", "--with-forks", "--json"]).ok();
    let value = &run.lines()[0];
    let names: Vec<&str> = value["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["chat", "retry"]);
    assert_eq!(value["deleted"][0]["events"], 2);
    assert_eq!(value["deleted"][1]["parent"], value["deleted"][0]["id"]);
    env.run(&["log", "chat"]).fails();
    env.run(&["log", "retry"]).fails();
    let list = env.run(&["list", "--json"]).ok();
    assert!(list.stdout.contains("other") && !list.stdout.contains("chat"));
    let run = env.run(&["delete", &format!("id:{}", &id[..8])]).ok();
    assert!(
        run.stdout.starts_with("deleted other (1 record)"),
        "{}",
        run.stdout
    );
    env.run(&["verify"]).ok();
    // The name can be used again.
    env.run(&["append", "chat", "--user", "again"]).ok();
    assert_eq!(env.run(&["log", "chat"]).ok().lines().len(), 1);
}

#[test]
fn a_deleted_long_text_leaves_the_segment_files_and_the_search_index() {
    let env = TestEnv::new();
    let secret = "QUOKKA-7f3e";
    // Both large appends go to the same segment file.
    env.run_with_stdin(&["append", "keep"], &user_lines("kept-text", 200))
        .ok();
    env.run_with_stdin(&["append", "gone"], &user_lines(secret, 200))
        .ok();
    assert_eq!(env.run(&["search", secret, "--json"]).ok().lines().len(), 1);
    let holding = || -> Vec<String> {
        let mut found = Vec::new();
        for dir in ["segments", "search"] {
            for entry in std::fs::read_dir(env.db().join(dir)).unwrap() {
                let path = entry.unwrap().path();
                let bytes = std::fs::read(&path).unwrap();
                if bytes.windows(secret.len()).any(|w| w == secret.as_bytes()) {
                    found.push(path.display().to_string());
                }
            }
        }
        found
    };
    assert!(!holding().is_empty());
    env.run(&["delete", "gone"]).ok();
    assert_eq!(holding(), Vec::<String>::new());
    assert!(env.run(&["search", secret, "--json"]).ok().stdout.trim() == "[]");
    assert_eq!(env.run(&["log", "keep"]).ok().lines().len(), 200);
    env.run(&["verify"]).ok();
}

/// A delete killed at any moment leaves the conversation whole or gone,
/// the others untouched, and the database verifying; the next command
/// finishes a deletion that was decided.
#[test]
fn a_killed_delete_leaves_the_conversation_whole_or_gone() {
    let env = TestEnv::new();
    env.run(&["append", "keep", "--user", "stays"]).ok();
    let mut outcomes = [0, 0];
    for round in 0..10u64 {
        let name = format!("big{round}");
        env.run(&[
            "gen",
            &name,
            "--events",
            "30000",
            "--compactions",
            "10",
            "--seed",
            &round.to_string(),
        ])
        .ok();
        env.run_killed_after(&["delete", &name], Duration::from_millis(round * 12));
        let log = env.run(&["log", &name]);
        if log.code == 0 {
            assert_eq!(log.stdout.lines().count(), 30000);
            outcomes[0] += 1;
        } else {
            log.fails();
            outcomes[1] += 1;
        }
        env.run(&["verify"]).ok();
        assert_eq!(env.run(&["log", "keep"]).ok().lines().len(), 1);
    }
    eprintln!("whole, gone: {outcomes:?}");
    // Uncut, each conversation that survived goes.
    for round in 0..10 {
        let name = format!("big{round}");
        if env.run(&["log", &name]).code == 0 {
            env.run(&["delete", &name]).ok();
        }
        env.run(&["log", &name]).fails();
    }
    env.run(&["verify"]).ok();
    assert_eq!(
        env.run(&["list", "--json"]).ok().lines()[0]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// A damaged segment file never stops a deletion or the commands after
/// it: what cannot be moved out stays, with a warning.
#[test]
fn a_damaged_segment_file_does_not_block_a_deletion_or_the_database() {
    for damage in ["remove", "truncate"] {
        let env = TestEnv::new();
        // Both large appends go to segment file 1.
        env.run_with_stdin(&["append", "a"], &user_lines("first", 100))
            .ok();
        env.run_with_stdin(&["append", "b"], &user_lines("second", 100))
            .ok();
        env.run(&["append", "c", "--user", "small"]).ok();
        let file = env.db().join("segments").join("00000001");
        if damage == "remove" {
            std::fs::remove_file(&file).unwrap();
        } else {
            let len = std::fs::metadata(&file).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
            f.set_len(len / 2).unwrap();
        }
        let run = env.run(&["delete", "a"]).ok();
        assert!(run.stdout.starts_with("deleted a"), "{}", run.stdout);
        assert!(
            run.stderr.contains("segment file 00000001 was not emptied"),
            "{}",
            run.stderr
        );
        env.run(&["log", "a"]).fails();
        let list = env.run(&["list", "--json"]).ok();
        assert!(!list.stdout.contains("\"a\""), "{}", list.stdout);
        assert_eq!(env.run(&["log", "c"]).ok().lines().len(), 1);
        env.run(&["append", "c", "--user", "more"]).ok();
        // b's damage is b's: verify names it, as before the deletion.
        env.run(&["verify", "c"]).ok();
        let run = env.run(&["verify"]).fails();
        assert!(run.stderr.contains("(b)"), "{}", run.stderr);
    }
}
