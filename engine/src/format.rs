//! Views and logs as text: NDJSON, a JSON array, an OpenAI Chat
//! Completions `messages` array, or readable lines.

use std::io::Write;

use convstore_projection::openai::to_messages;
use convstore_projection::ViewEvent;
use convstore_store::json::{write_event_fields, ObjectWriter};
use convstore_store::EventKind;

use crate::error::Result;

/// How a view is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON event per line, with `seq`, `turn` and `summary_of`.
    Ndjson,
    /// The same events as one JSON array.
    Json,
    /// An OpenAI Chat Completions `messages` array.
    Openai,
    /// One readable line per event.
    Text,
}

/// What had to be left out of a `messages` array to keep it valid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Tool calls without a following result.
    pub calls: u64,
    /// Tool results without a preceding call.
    pub results: u64,
    /// Reasoning, config, extension and compaction events, which have no
    /// Chat Completions message.
    pub other: u64,
}

/// A view event as one JSON object: `seq`, `turn`, `summary_of` (for
/// injected summary events), then the event's fields.
pub fn write_view_event(v: &ViewEvent, out: &mut Vec<u8>) {
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
pub fn text_line(v: &ViewEvent) -> String {
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

/// Writes view events as a Chat Completions `messages` array, one message
/// a line; returns what had to be left out to keep it valid.
pub fn write_openai(out: &mut dyn Write, events: &[ViewEvent]) -> Result<Dropped> {
    let messages = to_messages(events);
    out.write_all(b"[")?;
    for (i, message) in messages.messages.iter().enumerate() {
        out.write_all(if i == 0 { b"\n" } else { b",\n" })?;
        serde_json::to_writer(&mut *out, message).map_err(std::io::Error::from)?;
    }
    out.write_all(b"\n]\n")?;
    Ok(Dropped {
        calls: messages.dropped_calls,
        results: messages.dropped_results,
        other: messages.left_out,
    })
}

/// The source of a view's events: calls its argument with each in order.
pub type Source<'a> = dyn FnMut(&mut dyn FnMut(ViewEvent) -> Result<()>) -> Result<()> + 'a;

/// Writes the view events `source` yields in `format`; returns what a
/// `messages` array left out.
pub fn write_events(
    out: &mut dyn Write,
    format: Format,
    source: &mut Source<'_>,
) -> Result<Dropped> {
    let mut line = Vec::with_capacity(4096);
    match format {
        Format::Ndjson => source(&mut |v| {
            line.clear();
            write_view_event(&v, &mut line);
            line.push(b'\n');
            out.write_all(&line)?;
            Ok(())
        })?,
        Format::Json => {
            let mut first = true;
            out.write_all(b"[")?;
            source(&mut |v| {
                line.clear();
                if !first {
                    line.push(b',');
                }
                first = false;
                write_view_event(&v, &mut line);
                out.write_all(&line)?;
                Ok(())
            })?;
            out.write_all(b"]\n")?;
        }
        Format::Openai => {
            let mut events = Vec::new();
            source(&mut |v| {
                events.push(v);
                Ok(())
            })?;
            return write_openai(out, &events);
        }
        Format::Text => source(&mut |v| {
            writeln!(out, "{}", text_line(&v))?;
            Ok(())
        })?,
    }
    Ok(Dropped::default())
}
