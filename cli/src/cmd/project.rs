//! `convstore project`: the view a model sees.

use std::io::Write;
use std::ops::RangeInclusive;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use convstore_projection::openai::to_messages;
use convstore_projection::ViewEvent;
use convstore_store::json::{write_event_fields, ObjectWriter};
use convstore_store::{EventKind, Store};

use crate::args::{Format, ProjectArgs};
use crate::output::{self, Notes};
use crate::view::{self, Scope};

pub(crate) fn run(store: &Store, args: &ProjectArgs, notes: &Notes) -> Result<ExitCode> {
    let id = store.resolve(&args.conversation)?;
    let scope = Scope::as_of(store, &id, args.as_of)?;
    let turns = match &args.turns {
        Some(text) => {
            let range = parse_turns(text)?;
            let count = scope.turns(store, &id)?;
            if *range.start() >= count {
                bail!("--turns {text}: names no turn ({})", turns_note(count));
            }
            Some(range)
        }
        None => None,
    };
    let projector = view::plan(store, &id, scope, None)?;
    let wanted = |v: &ViewEvent| turns.as_ref().is_none_or(|r| r.contains(&v.turn));
    let mut out = output::stdout();
    match args.format {
        Format::Ndjson | Format::Json => {
            // Formatted on the worker threads: JSON elements each start
            // with a comma, and the first one's is dropped here.
            let json = args.format == Format::Json;
            let mut first = true;
            if json {
                out.write_all(b"[")?;
            }
            let format = |view: Vec<ViewEvent>| {
                let mut bytes = Vec::with_capacity(view.len() * 256);
                for v in view.iter().filter(|v| wanted(v)) {
                    if json {
                        bytes.push(b',');
                    }
                    write_view_event(v, &mut bytes);
                    if !json {
                        bytes.push(b'\n');
                    }
                }
                bytes
            };
            view::stream_map(store, &id, scope, &projector, format, |bytes| {
                let skip = usize::from(json && first && !bytes.is_empty());
                first &= bytes.is_empty();
                out.write_all(&bytes[skip..])?;
                Ok(())
            })?;
            if json {
                out.write_all(b"]\n")?;
            }
        }
        Format::Openai => {
            let mut events = Vec::new();
            view::stream(store, &id, scope, &projector, |v| {
                if wanted(v) {
                    events.push(v.clone());
                }
                Ok(())
            })?;
            write_openai(&mut out, &events, notes)?;
        }
        Format::Text => {
            view::stream(store, &id, scope, &projector, |v| {
                if wanted(v) {
                    writeln!(out, "{}", text_line(v))?;
                }
                Ok(())
            })?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes view events as a Chat Completions `messages` array, one message a
/// line, and says on stderr what had to be left out to keep it valid.
pub(crate) fn write_openai(out: &mut dyn Write, events: &[ViewEvent], notes: &Notes) -> Result<()> {
    let messages = to_messages(events);
    out.write_all(b"[")?;
    for (i, message) in messages.messages.iter().enumerate() {
        out.write_all(if i == 0 { b"\n" } else { b",\n" })?;
        serde_json::to_writer(&mut *out, message)?;
    }
    out.write_all(b"\n]\n")?;
    if messages.dropped_calls + messages.dropped_results > 0 {
        notes.say(&format!(
            "openai: left out {} without a following result and {} without a preceding call",
            output::plural(messages.dropped_calls as u64, "tool call"),
            output::plural(messages.dropped_results as u64, "tool result")
        ));
    }
    Ok(())
}

/// A view event as one JSON object: `seq`, `turn`, `summary_of` (for
/// injected summary events), then the event's fields.
pub(crate) fn write_view_event(v: &ViewEvent, out: &mut Vec<u8>) {
    let mut object = ObjectWriter::begin(out);
    object.u64("seq", v.seq);
    object.u64("turn", v.turn);
    if let Some((from, to)) = v.summary_of {
        object.raw("summary_of", &format!("[{from},{to}]"));
    }
    write_event_fields(&v.event, &mut object);
    object.end();
}

/// `[turn 3] user: text`, one line (newlines shown as ⏎).
pub(crate) fn text_line(v: &ViewEvent) -> String {
    let body = match &v.event.kind {
        EventKind::TurnStart => "── turn start ──".to_owned(),
        EventKind::User { text } => format!("user: {text}"),
        EventKind::Assistant { text } => format!("assistant: {text}"),
        EventKind::Reasoning { text } => format!("reasoning: {text}"),
        EventKind::System { text } => format!("system: {text}"),
        EventKind::ToolCall {
            id,
            name,
            arguments,
        } => format!("tool call {name} ({id}): {}", arguments.as_str()),
        EventKind::ToolResult {
            id,
            content,
            is_error,
        } => format!(
            "tool result ({id}{}): {content}",
            if *is_error { ", error" } else { "" }
        ),
        EventKind::Config { delta } => format!("config: {}", delta.as_str()),
        EventKind::Extension { name, payload } => format!("extension {name}: {}", payload.as_str()),
        EventKind::Compaction(_) => "compaction".to_owned(),
    };
    format!("[turn {}] {}", v.turn, body.replace('\n', " ⏎ "))
}

/// `the conversation has 6 turns, 0..5`, for errors about turn ranges.
pub(crate) fn turns_note(turns: u64) -> String {
    match turns {
        0 => "the conversation has no turn".to_owned(),
        1 => "the conversation has 1 turn, 0".to_owned(),
        n => format!("the conversation has {n} turns, 0..{}", n - 1),
    }
}

/// `A..B` (both inclusive), `A..`, `..B` or `N`.
pub(crate) fn parse_turns(text: &str) -> Result<RangeInclusive<u64>> {
    let number = |s: &str| -> Result<u64> {
        s.trim()
            .parse()
            .with_context(|| format!("--turns {text}: \"{s}\" is not a turn number"))
    };
    let range = if let Some((a, b)) = text.split_once("..") {
        let a = if a.is_empty() { 0 } else { number(a)? };
        let b = if b.is_empty() {
            u64::MAX
        } else {
            number(b.trim_start_matches('='))?
        };
        a..=b
    } else {
        let n = number(text)?;
        n..=n
    };
    if range.is_empty() {
        bail!("--turns {text}: the range is empty (from is after to)");
    }
    Ok(range)
}
