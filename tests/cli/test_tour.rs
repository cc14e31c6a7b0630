//! The tour in README.md, run as written: README and binary cannot drift
//! apart.

use std::process::Command;

/// The first ```sh block after `## A short tour` in README.md.
fn tour() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let section = &readme[readme.find("## A short tour").expect("a tour section")..];
    let start = section.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let block = &section[start..];
    block[..block.find("```").expect("the end of the block")].to_owned()
}

#[test]
fn the_readme_tour_runs_as_written() {
    let tour = tour();
    let binary = env!("CARGO_BIN_EXE_convstore");
    // Two lines are the reader's own setup: building (the test has built
    // the binary) and the alias (a function is what a script can use).
    let mut script = String::from("set -euo pipefail\nset -x\n");
    let (mut built, mut aliased) = (false, false);
    for line in tour.lines() {
        if line.starts_with("cargo build --release") {
            built = true;
        } else if line.starts_with("alias convstore=") {
            aliased = true;
            script.push_str("convstore() { \"");
            script.push_str(binary);
            script.push_str("\" \"$@\"; }\n");
        } else {
            script.push_str(line);
            script.push('\n');
        }
    }
    assert!(
        built && aliased,
        "the tour starts with the build and the alias"
    );
    let scratch = tempfile::tempdir().unwrap();
    let run = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(scratch.path())
        .env("TMPDIR", scratch.path())
        .env_remove("CONVSTORE_DB")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "the tour failed at the last command traced:\n{}",
        stderr
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Every command ran: the last one printed a head.
    let stdout = String::from_utf8_lossy(&run.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    assert_eq!(last.len(), 64, "{last}");
    assert!(!stderr.contains("error:"), "{stderr}");
    // And did what its comment says: no compaction of the tour is a
    // no-op, the recall hint shows where the tour says it does, and the
    // recalled result is the one stored.
    assert!(
        !stderr.contains("noop"),
        "a tour compaction stored nothing: {stderr}"
    );
    assert!(
        stdout.contains("[compacted] fs_read_file: success (recall 4)"),
        "{stdout}"
    );
    assert!(stdout.contains("let path = &args[1];"), "{stdout}");
    assert!(stderr.contains("auto-compaction: turns"), "{stderr}");
}
