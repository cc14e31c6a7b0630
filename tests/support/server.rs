//! `convstore serve` as the tests start it, and their HTTP client (ureq)
//! and command runner.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_convstore");

/// A running `convstore serve`.
pub struct Server {
    pub child: Option<Child>,
    pub url: String,
    /// The database, as given to `--db`.
    pub db: PathBuf,
}

impl Server {
    /// Starts `convstore --db DB serve` on an ephemeral port (DB: a
    /// directory or a URL).
    pub fn start(db: impl AsRef<OsStr>, extra: &[&str]) -> Server {
        let db = db.as_ref();
        let mut child = Command::new(BIN)
            .arg("--db")
            .arg(db)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("convstore serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the URL line");
        assert!(line.starts_with("http://127.0.0.1:"), "{line:?}");
        Server {
            child: Some(child),
            url: line.trim().to_owned(),
            db: PathBuf::from(db),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// SIGTERM, then the exit code and stderr.
    pub fn stop(mut self) -> (Option<i32>, String) {
        let mut child = self.child.take().expect("running");
        unsafe_free_kill(child.id() as i32, libc::SIGTERM);
        let status = child.wait().expect("exits");
        let mut err = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .ok();
        (status.code(), err)
    }

    pub fn kill9(mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// kill(2) through the `kill` command (the crate forbids unsafe code).
pub fn unsafe_free_kill(pid: i32, signal: i32) {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
}

pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build()
}

/// Status and JSON body of a request, errors included.
pub fn answer(result: Result<ureq::Response, ureq::Error>) -> (u16, Value) {
    match result {
        Ok(r) => {
            let status = r.status();
            let text = r.into_string().expect("body");
            (
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )
        }
        Err(ureq::Error::Status(status, r)) => {
            let text = r.into_string().expect("body");
            let value: Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("error bodies are JSON: {status} {text:?}"));
            (status, value)
        }
        Err(e) => panic!("transport: {e}"),
    }
}

pub fn post(url: &str, body: &str) -> (u16, Value) {
    answer(
        agent()
            .post(url)
            .set("Content-Type", "application/x-ndjson")
            .send_string(body),
    )
}

pub fn get_text(url: &str) -> String {
    agent()
        .get(url)
        .call()
        .expect("200")
        .into_string()
        .expect("text")
}

pub fn cli(db: impl AsRef<OsStr>, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    cli_bytes(db, args, stdin.map(str::as_bytes))
}

/// `cli` with standard input given as bytes (not necessarily UTF-8).
pub fn cli_bytes(
    db: impl AsRef<OsStr>,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> (i32, String, String) {
    output(
        Command::new(BIN)
            .arg("--db")
            .arg(db.as_ref())
            .args(args)
            .env_remove("CONVSTORE_URL")
            .env_remove("CONVSTORE_DB"),
        stdin,
    )
}

/// The exit code, stdout and stderr of `command` run with `stdin`.
pub fn output(command: &mut Command, stdin: Option<&[u8]>) -> (i32, String, String) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("convstore runs");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(bytes) = stdin {
        input.write_all(bytes).expect("stdin written");
    }
    drop(input);
    let out = child.wait_with_output().expect("finishes");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Reads SSE events (`id`, `event`, `data`) from a stream, until `count`
/// of them other than `behind`.
pub fn sse_events(reader: &mut impl BufRead, count: usize) -> Vec<(Option<u64>, String, String)> {
    let mut events: Vec<(Option<u64>, String, String)> = Vec::new();
    let (mut id, mut event, mut data) = (None, String::new(), String::new());
    let mut line = String::new();
    while events.iter().filter(|e| e.1 != "behind").count() < count {
        line.clear();
        if reader.read_line(&mut line).expect("reads") == 0 {
            break;
        }
        let line = line.trim_end_matches('\n');
        if line.is_empty() {
            if !event.is_empty() {
                events.push((
                    id.take(),
                    std::mem::take(&mut event),
                    std::mem::take(&mut data),
                ));
            }
        } else if let Some(v) = line.strip_prefix("id: ") {
            id = v.parse().ok();
        } else if let Some(v) = line.strip_prefix("event: ") {
            v.clone_into(&mut event);
        } else if let Some(v) = line.strip_prefix("data: ") {
            v.clone_into(&mut data);
        }
    }
    events
}
