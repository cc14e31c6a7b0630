//! Shared by the integration tests: event generators and a CLI runner.
#![allow(dead_code, clippy::unwrap_used)]

pub mod backends;
pub mod gen;
pub mod postgres;
pub mod server;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Runs the built `convstore` binary against a database in a temp dir.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
}

/// What a run printed and returned.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(self) -> Self {
        assert_eq!(self.code, 0, "expected success, stderr: {}", self.stderr);
        self
    }

    pub fn fails(self) -> Self {
        assert_eq!(
            self.code, 1,
            "expected failure (1), stdout: {} stderr: {}",
            self.stdout, self.stderr
        );
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "errors are one line: {:?}", self.stderr);
        assert!(lines[0].starts_with("error: "), "{:?}", self.stderr);
        self
    }

    /// A usage error: exit 2 and one `error:` line.
    pub fn usage(self) -> Self {
        assert_eq!(
            self.code, 2,
            "expected a usage error (2), stdout: {} stderr: {}",
            self.stdout, self.stderr
        );
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "errors are one line: {:?}", self.stderr);
        assert!(lines[0].starts_with("error: "), "{:?}", self.stderr);
        self
    }

    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("stdout line is JSON"))
            .collect()
    }
}

impl TestEnv {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("db")
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_convstore"));
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("CONVSTORE_DB", self.db())
            .env_remove("NO_COLOR");
        command
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with_stdin(args, "")
    }

    pub fn run_with_stdin(&self, args: &[&str], stdin: &str) -> Run {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn convstore");
        // A command may refuse before it reads its input, closing it.
        match child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
        {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.expect("write stdin"),
        }
        let output: Output = child.wait_with_output().expect("wait");
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `args` and kills the process `after` it started (whatever it
    /// was doing), output discarded.
    pub fn run_killed_after(&self, args: &[&str], after: std::time::Duration) {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn convstore");
        let started = std::time::Instant::now();
        std::thread::sleep(after);
        let _ = child.kill();
        let _ = child.wait();
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }

    /// Whether any segment file of the database holds `needle`.
    pub fn segments_hold(&self, needle: &str) -> bool {
        let dir = self.db().join("segments");
        std::fs::read_dir(dir).expect("segments/").any(|entry| {
            let bytes = std::fs::read(entry.expect("a segment file").path()).expect("its bytes");
            bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
        })
    }
}

/// A small deterministic generator (xorshift), so that a failure repeats.
pub struct Xorshift(pub u64);

impl Xorshift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The real JP conversations, when the shared data is beside the checkout.
/// Absent, the test is skipped, and says so loudly; with
/// `CONVSTORE_REQUIRE_JP_DATA=1` (CI sets it when the data is there) an
/// absent directory fails the test instead.
pub fn jp_data_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/jp");
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CONVSTORE_REQUIRE_JP_DATA").is_none_or(|v| v != "1"),
        "{} is absent, and CONVSTORE_REQUIRE_JP_DATA=1 requires it",
        dir.display()
    );
    eprintln!(
        "\n*** SKIPPED: {} is absent; this test of the real JP conversations did not run ***\n",
        dir.display()
    );
    None
}

/// The 21 real JP conversation files, sorted; `None` (with a message) when
/// the shared data is absent.
pub fn jp_files() -> Option<Vec<PathBuf>> {
    let dir = jp_data_dir()?;
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".events.json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 21);
    Some(files)
}
