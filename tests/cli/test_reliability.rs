//! Reliability of the command line against other processes: a slow
//! reader never keeps the database from writers.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::io::Read;
use std::process::Stdio;

use crate::support::TestEnv;

#[test]
fn a_reader_that_does_not_read_keeps_no_writer_waiting() {
    let env = TestEnv::new();
    env.run(&["gen", "big", "--events", "100000", "--seed", "2"])
        .ok();
    for args in [
        vec!["log", "big"],
        vec!["project", "big", "--format", "openai"],
        vec!["export", "big", "--format", "jp"],
    ] {
        // Nobody reads its stdout (as `| sleep 12` or a paused pager): the
        // output waits in its spool, not in the database.
        let mut reader = env
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // It has the database open and has started writing.
        let mut stdout = reader.stdout.take().unwrap();
        let mut first = [0u8; 100];
        stdout.read_exact(&mut first).unwrap();
        let append = env.run(&["--wait", "30", "append", "big", "--user", "meanwhile"]);
        assert_eq!(append.code, 0, "{args:?}: {}", append.stderr);
        let mut output = String::from_utf8_lossy(&first).into_owned();
        stdout.read_to_string(&mut output).unwrap();
        let status = reader.wait().unwrap();
        assert!(status.success(), "{args:?}");
        // The reader saw the log as it was when it read it, whole.
        assert!(output.len() > 1_000_000, "{args:?}: {} bytes", output.len());
        if args[0] == "log" {
            assert_eq!(output.lines().count(), 100_000);
        }
    }
    assert_eq!(
        env.run(&["head", "big", "--json"]).ok().lines()[0]["events"],
        100_003
    );
}
