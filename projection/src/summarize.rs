//! Summarizers: [`Summarizer`] writes a summary's text from the raw events
//! of the range it covers (never from a view or an earlier summary), and
//! [`Extractive`] is the built-in one: offline and deterministic.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use convstore_store::{EventKind, Json};

use crate::projector::LogEvent;

/// Writes summaries.
pub trait Summarizer {
    /// Its kind, as configured (`extractive`, `command`, `openai`).
    fn name(&self) -> &'static str;
    /// The model it asks, if any.
    fn model(&self) -> Option<&str>;
    /// The instructions it works from; their hash is stored with each
    /// summary.
    fn prompt(&self) -> String;
    /// The summary of `events`, the raw events of the range in log order.
    fn summarize(&self, events: &[LogEvent]) -> Result<String, SummarizeError>;
}

/// Why a summarizer wrote no summary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SummarizeError {
    /// It could not be started or reached: a program that does not run, a
    /// connection refused.
    #[error("{0}")]
    Unavailable(String),
    /// It did not answer in time.
    #[error("{what} did not finish within {secs} s")]
    Timeout {
        /// The program or URL.
        what: String,
        /// The time it had.
        secs: u64,
    },
    /// It answered with a failure: an exit status, an HTTP status.
    #[error("{what} {status}: {said}")]
    Failed {
        /// The program or URL.
        what: String,
        /// `exited with exit status: 3`, `answered 500`.
        status: String,
        /// The last line it wrote on stderr, or the body of its answer.
        said: String,
    },
    /// Its answer cannot be used: not UTF-8, not JSON, without content.
    #[error("{0}")]
    BadAnswer(String),
}

/// The default instructions for summarizers that take instructions.
pub const DEFAULT_INSTRUCTIONS: &str = "\
Summarize the conversation below so that it can replace it in the context of \
the assistant that continues it. Keep: the user's goal and every request the \
user made; decisions and answers given; every file path touched; errors and \
how they were resolved; the current state of the work; the next steps and any \
open question. Be factual and brief; write no preamble.";

/// The built-in summarizer: a structured state snapshot extracted from the
/// events, in the spirit of Gemini CLI's `<state_snapshot>`:
///
/// - `overall_goal`: the first user message;
/// - `user_messages`: every user message verbatim, while they fit in
///   `budget` characters, the newest kept first (an omitted count says
///   how many older ones did not fit);
/// - `answers`: the last assistant message of each turn, cut to 300
///   characters, newest first within the same budget;
/// - `files`: every path in tool call arguments (keys `path`, `paths`,
///   `file`, `files`, `dir`, `directory`, `prefixes`, or ending in `_path`,
///   `_file`, `_dir`), each once;
/// - `errors`: for each tool that had results with `is_error`, how many,
///   and the first 200 characters of the latest;
/// - `tools`: each tool used, with its count;
/// - `open_question`: the last user message, if no assistant message
///   answered it.
#[derive(Debug, Clone, Copy)]
pub struct Extractive {
    /// Characters for user messages, and as many again for answers.
    pub budget: usize,
}

impl Default for Extractive {
    fn default() -> Self {
        Extractive { budget: 6_000 }
    }
}

impl Summarizer for Extractive {
    fn name(&self) -> &'static str {
        "extractive"
    }

    fn model(&self) -> Option<&str> {
        None
    }

    fn prompt(&self) -> String {
        format!("extractive state snapshot, budget {}", self.budget)
    }

    fn summarize(&self, events: &[LogEvent]) -> Result<String, SummarizeError> {
        Ok(self.snapshot(events))
    }
}

impl Extractive {
    /// The snapshot of `events`.
    pub fn snapshot(&self, events: &[LogEvent]) -> String {
        let mut users: Vec<(u64, &str)> = Vec::new();
        let mut answers: BTreeMap<u64, &str> = BTreeMap::new();
        let mut files: Vec<String> = Vec::new();
        // Per tool: the count and the latest content, in order of first error.
        let mut errors: Vec<(String, u64, String)> = Vec::new();
        let mut tools: BTreeMap<&str, u64> = BTreeMap::new();
        let mut names: BTreeMap<&str, &str> = BTreeMap::new();
        let mut answered = true;
        for e in events {
            match &e.event.kind {
                EventKind::User { text } => {
                    users.push((e.turn, text));
                    answered = false;
                }
                EventKind::Assistant { text } => {
                    answers.insert(e.turn, text);
                    answered = true;
                }
                EventKind::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    *tools.entry(name).or_default() += 1;
                    names.insert(id, name);
                    for path in paths_in(arguments) {
                        if !files.contains(&path) {
                            files.push(path);
                        }
                    }
                }
                EventKind::ToolResult {
                    id,
                    content,
                    is_error: true,
                } => {
                    let tool = names.get(id.as_str()).copied().unwrap_or("unknown");
                    match errors.iter_mut().find(|(t, _, _)| t == tool) {
                        Some((_, count, latest)) => {
                            *count += 1;
                            *latest = excerpt(content, 200);
                        }
                        None => errors.push((tool.to_owned(), 1, excerpt(content, 200))),
                    }
                }
                _ => {}
            }
        }

        let mut out = String::from("<state_snapshot>\n");
        if let Some((_, goal)) = users.first() {
            let _ = writeln!(out, "<overall_goal>{}</overall_goal>", one_line(goal));
        }
        // Newest first within the budget, printed in order.
        let mut used = 0;
        let kept = users
            .iter()
            .rev()
            .take_while(|(_, text)| {
                used += text.chars().count();
                used <= self.budget
            })
            .count()
            .max(users.len().min(1));
        let _ = writeln!(out, "<user_messages>");
        if kept < users.len() {
            let _ = writeln!(out, "({} earlier message(s) omitted)", users.len() - kept);
        }
        for (turn, text) in &users[users.len() - kept..] {
            let _ = writeln!(out, "- [turn {turn}] {text}");
        }
        let _ = writeln!(out, "</user_messages>");
        let mut used = 0;
        let answers: Vec<(u64, String)> = answers
            .iter()
            .rev()
            .map(|(turn, text)| (*turn, excerpt(text, 300)))
            .take_while(|(_, text)| {
                used += text.chars().count();
                used <= self.budget
            })
            .collect();
        let _ = writeln!(out, "<answers>");
        for (turn, text) in answers.iter().rev() {
            let _ = writeln!(out, "- [turn {turn}] {}", one_line(text));
        }
        let _ = writeln!(out, "</answers>");
        let _ = writeln!(out, "<files>");
        for path in &files {
            let _ = writeln!(out, "- {path}");
        }
        let _ = writeln!(out, "</files>");
        let _ = writeln!(out, "<errors>");
        for (tool, count, text) in &errors {
            let _ = writeln!(
                out,
                "- {tool}: {count} error(s), latest: {}",
                one_line(text)
            );
        }
        let _ = writeln!(out, "</errors>");
        let _ = writeln!(out, "<tools>");
        for (tool, count) in &tools {
            let _ = writeln!(out, "- {tool} x{count}");
        }
        let _ = writeln!(out, "</tools>");
        if !answered {
            if let Some((_, last)) = users.last() {
                let _ = writeln!(out, "<open_question>{}</open_question>", one_line(last));
            }
        }
        out.push_str("</state_snapshot>");
        out
    }
}

/// The paths in tool call arguments (see [`Extractive`]).
pub fn paths_in(arguments: &Json) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(arguments.as_str()) {
        for (key, value) in map {
            let key = key.to_ascii_lowercase();
            let is_path = matches!(
                key.as_str(),
                "path" | "paths" | "file" | "files" | "dir" | "directory" | "prefixes"
            ) || key.ends_with("_path")
                || key.ends_with("_file")
                || key.ends_with("_dir");
            if !is_path {
                continue;
            }
            let mut push = |v: &serde_json::Value| {
                if let Some(s) = v.as_str().filter(|s| !s.is_empty()) {
                    out.push(s.to_owned());
                }
            };
            match &value {
                serde_json::Value::Array(items) => items.iter().for_each(&mut push),
                other => push(other),
            }
        }
    }
    out
}

fn excerpt(text: &str, chars: usize) -> String {
    let mut out: String = text.chars().take(chars).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
