//! The summarizers that reach outside the process — `command` (an external
//! program) and `openai` (a Chat Completions endpoint) — beside the
//! built-in extractive one, behind `convstore_projection`'s `Summarizer`.

use convstore_store::{Seq, Turn};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use convstore_projection::config::{SummarizerKind, SummaryConfig};
use convstore_projection::summarize::{
    Extractive, SummarizeError, Summarizer, DEFAULT_INSTRUCTIONS,
};
use convstore_projection::LogEvent;
use convstore_store::json::{write_event_fields, ObjectWriter};
use convstore_store::{ConversationId, EventKind, Store};
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};

/// Where summarizers find secrets such as API keys, by name (the
/// `api_key_env` of a summarizer's configuration). The engine reads no
/// environment: the command line passes one that reads it, a server its
/// own store of keys.
#[derive(Clone)]
pub struct Secrets(Arc<Lookup>);

/// How [`Secrets`] finds a secret by name.
type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

impl Secrets {
    /// No secrets at all.
    pub fn none() -> Secrets {
        Secrets(Arc::new(|_| None))
    }

    /// Secrets looked up by `lookup`.
    pub fn from_fn(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Secrets {
        Secrets(Arc::new(lookup))
    }

    /// The secret named `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.0)(name)
    }
}

impl Default for Secrets {
    fn default() -> Self {
        Secrets::none()
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(..)")
    }
}

/// Seconds before a `command` or `openai` summarizer is given up.
const DEFAULT_TIMEOUT: u64 = 120;

/// The environment variable a `command` summarizer finds its instructions
/// in.
pub const INSTRUCTIONS_ENV: &str = "CONVSTORE_INSTRUCTIONS";

/// The summarizer `spec` describes; `extra` adds to its instructions; an
/// `openai` summarizer takes its API key from `secrets`.
pub fn make(
    spec: &SummaryConfig,
    extra: Option<&str>,
    secrets: &Secrets,
) -> Result<Box<dyn Summarizer>> {
    let mut instructions = spec
        .instructions
        .clone()
        .unwrap_or_else(|| DEFAULT_INSTRUCTIONS.to_owned());
    for more in [spec.extra_instructions.as_deref(), extra]
        .into_iter()
        .flatten()
    {
        instructions.push_str("\n\n");
        instructions.push_str(more);
    }
    let timeout = Duration::from_secs(spec.timeout_secs.unwrap_or(DEFAULT_TIMEOUT));
    Ok(match spec.summarizer {
        SummarizerKind::Extractive => Box::new(Extractive::default()),
        SummarizerKind::Command => {
            Box::new(CommandSummarizer {
                argv: spec.command.clone().filter(|c| !c.is_empty()).ok_or(
                    Error::SummarizerSetup {
                        summarizer: "command",
                        what: "`command`",
                    },
                )?,
                instructions,
                model: spec.model.clone(),
                timeout,
            })
        }
        SummarizerKind::Openai => Box::new(OpenAiSummarizer {
            base_url: spec
                .base_url
                .clone()
                .unwrap_or_else(|| "https://api.openai.com/v1".to_owned()),
            api_key: secrets.get(spec.api_key_env.as_deref().unwrap_or("OPENAI_API_KEY")),
            model: spec
                .model
                .clone()
                .unwrap_or_else(|| "gpt-4o-mini".to_owned()),
            instructions,
            timeout,
        }),
    })
}

/// Runs `summarizer` over `events`; an empty summary is an error.
pub fn run(summarizer: &dyn Summarizer, events: &[LogEvent]) -> Result<String> {
    let text = summarizer
        .summarize(events)
        .map_err(|source| Error::Summarizer {
            summarizer: summarizer.name(),
            source,
        })?;
    let text = text.trim().to_owned();
    if text.is_empty() {
        return Err(Error::EmptySummary(summarizer.name()));
    }
    Ok(text)
}

/// [`run`], and what [`record_provenance`] records of the summarizer.
pub fn write(
    summarizer: &dyn Summarizer,
    events: &[LogEvent],
) -> Result<(String, Map<String, Value>)> {
    let text = run(summarizer, events)?;
    let mut provenance = Map::new();
    record_provenance(summarizer, &mut provenance);
    Ok((text, provenance))
}

/// Adds what a compaction records of the summarizer that wrote its
/// summary: its kind, its model, and a hash of its instructions (blake3,
/// 16 hex digits).
pub fn record_provenance(summarizer: &dyn Summarizer, provenance: &mut Map<String, Value>) {
    provenance.insert("summarizer".into(), json!(summarizer.name()));
    if let Some(model) = summarizer.model() {
        provenance.insert("model".into(), json!(model));
    }
    let hash = blake3::hash(summarizer.prompt().as_bytes());
    provenance.insert("prompt_hash".into(), json!(hash.to_hex()[..16].to_owned()));
}

/// The raw events of turns `from..=to` among records `0..end`, compactions
/// left out: what a summary of those turns is written from.
pub fn raw_events(
    store: &Store,
    id: &ConversationId,
    from: u64,
    to: u64,
    end: u64,
) -> Result<Vec<LogEvent>> {
    let mut out = Vec::new();
    for record in store.scan(id, store.turn_records(id, Turn(from)..=Turn(to), Seq(end))?)? {
        let record = record?;
        if !matches!(record.event.kind, EventKind::Compaction(_)) {
            out.push(LogEvent {
                seq: record.seq,
                turn: record.turn,
                event: record.event,
            });
        }
    }
    Ok(out)
}

/// Events as NDJSON lines with `seq` and `turn`, as `log` prints them.
fn ndjson(events: &[LogEvent]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        let mut object = ObjectWriter::begin(&mut out);
        object.u64("seq", e.seq);
        object.u64("turn", e.turn);
        write_event_fields(&e.event, &mut object);
        object.end();
        out.push(b'\n');
    }
    out
}

/// An external program: the events as NDJSON on its stdin, the
/// instructions in `CONVSTORE_INSTRUCTIONS`, the summary on its stdout.
struct CommandSummarizer {
    argv: Vec<String>,
    instructions: String,
    model: Option<String>,
    timeout: Duration,
}

impl Summarizer for CommandSummarizer {
    fn name(&self) -> &'static str {
        "command"
    }

    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn prompt(&self) -> String {
        format!("{}\n{}", self.argv.join(" "), self.instructions)
    }

    fn summarize(&self, events: &[LogEvent]) -> Result<String, SummarizeError> {
        let program = &self.argv[0];
        let mut command = Command::new(program);
        command
            .args(&self.argv[1..])
            .env(INSTRUCTIONS_ENV, &self.instructions)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // A process group of its own, so that what it starts (a script's
        // commands) is ended with it on a timeout or an interrupt.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command
            .spawn()
            .map_err(|e| SummarizeError::Unavailable(format!("cannot run {program}: {e}")))?;
        let group = Running::group(&child);
        // Feed stdin and drain the pipes on threads, so a program that
        // writes before it has read everything cannot block us.
        let input = ndjson(events);
        let piped = || SummarizeError::Unavailable(format!("{program}: no pipe"));
        let mut stdin = child.stdin.take().ok_or_else(piped)?;
        let feeder = std::thread::spawn(move || {
            // A program that exits without reading all of it is fine.
            let _ = stdin.write_all(&input);
        });
        let mut stdout = child.stdout.take().ok_or_else(piped)?;
        let mut stderr = child.stderr.take().ok_or_else(piped)?;
        let out_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = stdout.read_to_end(&mut buf);
            buf
        });
        let err_reader = std::thread::spawn(move || {
            let mut buf = String::new();
            let _ = stderr.read_to_string(&mut buf);
            buf
        });
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child
                .try_wait()
                .map_err(|e| SummarizeError::Unavailable(format!("{program}: {e}")))?
            {
                break status;
            }
            if started.elapsed() > self.timeout {
                group.end();
                let _ = child.kill();
                let _ = child.wait();
                return Err(SummarizeError::Timeout {
                    what: program.clone(),
                    secs: self.timeout.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let _ = feeder.join();
        let out = out_reader.join().unwrap_or_default();
        let err = err_reader.join().unwrap_or_default();
        if !status.success() {
            let said = err.lines().last().unwrap_or("").trim();
            return Err(SummarizeError::Failed {
                what: program.clone(),
                status: format!("exited with {status}"),
                said: said.to_owned(),
            });
        }
        String::from_utf8(out).map_err(|_| {
            SummarizeError::BadAnswer(format!("{program} wrote output that is not UTF-8"))
        })
    }
}

/// An OpenAI-compatible Chat Completions endpoint.
struct OpenAiSummarizer {
    base_url: String,
    api_key: Option<String>,
    model: String,
    instructions: String,
    timeout: Duration,
}

impl Summarizer for OpenAiSummarizer {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn model(&self) -> Option<&str> {
        Some(&self.model)
    }

    fn prompt(&self) -> String {
        self.instructions.clone()
    }

    fn summarize(&self, events: &[LogEvent]) -> Result<String, SummarizeError> {
        let transcript = String::from_utf8_lossy(&ndjson(events)).into_owned();
        let body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": self.instructions},
                {"role": "user", "content": format!(
                    "The conversation to summarize, one event per line (NDJSON):\n\n{transcript}"
                )},
            ],
        });
        let url = format!("{}/chat/completions", self.base_url.trim_end_matches('/'));
        let agent = ureq::AgentBuilder::new().timeout(self.timeout).build();
        let mut request = agent.post(&url);
        if let Some(key) = &self.api_key {
            request = request.set("Authorization", &format!("Bearer {key}"));
        }
        let response = match request.send_json(body) {
            Ok(response) => response,
            Err(ureq::Error::Status(code, response)) => {
                let text = response.into_string().unwrap_or_default();
                return Err(SummarizeError::Failed {
                    what: url,
                    status: format!("answered {code}"),
                    said: text.trim().to_owned(),
                });
            }
            // ureq's message names the URL.
            Err(e) => return Err(SummarizeError::Unavailable(e.to_string())),
        };
        let value: Value = response.into_json().map_err(|e| {
            SummarizeError::BadAnswer(format!("{url}: the answer is not JSON: {e}"))
        })?;
        value["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| {
                SummarizeError::BadAnswer(format!(
                    "{url}: the answer has no choices[0].message.content"
                ))
            })
    }
}

/// The process groups of the summarizer programs running, for
/// [`end_running`].
static RUNNING: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// A summarizer program's process group while it runs (its id is the
/// program's): ended by [`Running::end`], forgotten when dropped.
struct Running(u32);

impl Running {
    fn group(child: &std::process::Child) -> Running {
        RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(child.id());
        Running(child.id())
    }

    /// Kills every process of the group.
    fn end(&self) {
        kill_group(self.0);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|&g| g != self.0);
    }
}

fn kill_group(group: u32) {
    #[cfg(unix)]
    if let Some(pid) = i32::try_from(group)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    #[cfg(not(unix))]
    let _ = group;
}

/// Ends every summarizer program running, and what each started: for a
/// command interrupted while one runs (the programs run in process groups
/// of their own, which an interrupt at the terminal does not reach).
pub fn end_running() {
    for group in RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .drain(..)
    {
        kill_group(group);
    }
}
