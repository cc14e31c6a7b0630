//! A conversation, or its view, written for other tools: NDJSON events,
//! JP's `events.json`, or an OpenAI Chat Completions `messages` array
//! (`convstore export`; the server's `/export`).

use std::io::Write;

use convstore_projection::ViewEvent;
use convstore_store::interop::jp::to_jp;
use convstore_store::json::write_event;
use convstore_store::{ConversationId, RawChunk, Store};

use crate::error::Result;
use crate::format::{self, Dropped};
use crate::pipeline::{self, Scope};

/// What an export writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// One event per line, as they were appended (SPEC §2).
    Ndjson,
    /// JP's `events.json`: an array of JP events.
    Jp,
    /// An OpenAI Chat Completions `messages` array.
    Openai,
}

impl ExportFormat {
    /// The format named `name` (`ndjson`, `jp`, `openai`).
    pub fn named(name: &str) -> Option<ExportFormat> {
        match name {
            "ndjson" => Some(ExportFormat::Ndjson),
            "jp" => Some(ExportFormat::Jp),
            "openai" => Some(ExportFormat::Openai),
            _ => None,
        }
    }
}

/// Writes records `0..scope.end` of `id` (or, `projected`, its view as of
/// then) in `format` to `out`; `tick` is told of each raw record read.
/// Returns what a `messages` array left out.
pub fn export(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    projected: bool,
    format: ExportFormat,
    out: &mut dyn Write,
    tick: &mut dyn FnMut(u64),
) -> Result<Dropped> {
    if !projected && !matches!(format, ExportFormat::Openai) {
        return export_raw(store, id, scope, format, out, tick);
    }
    let mut each = |f: &mut dyn FnMut(&ViewEvent) -> Result<()>| -> Result<()> {
        if projected {
            let projector = pipeline::plan(store, id, scope, None)?;
            pipeline::stream(store, id, scope, &projector, f)
        } else {
            for record in store.scan(id, 0..scope.end)? {
                let record = record?;
                tick(1);
                f(&ViewEvent {
                    seq: record.seq,
                    turn: record.turn,
                    summary_of: None,
                    event: record.event,
                })?;
            }
            Ok(())
        }
    };
    match format {
        ExportFormat::Ndjson => {
            let mut line = Vec::with_capacity(4096);
            each(&mut |v| {
                line.clear();
                write_event(&v.event, &mut line);
                line.push(b'\n');
                out.write_all(&line)?;
                Ok(())
            })?;
        }
        ExportFormat::Jp => {
            let mut first = true;
            out.write_all(b"[")?;
            each(&mut |v| {
                out.write_all(if first { b"\n" } else { b",\n" })?;
                first = false;
                serde_json::to_writer(&mut *out, &to_jp(&v.event)).map_err(std::io::Error::from)?;
                Ok(())
            })?;
            out.write_all(b"\n]\n")?;
        }
        ExportFormat::Openai => {
            let mut events: Vec<ViewEvent> = Vec::new();
            each(&mut |v| {
                events.push(v.clone());
                Ok(())
            })?;
            return format::write_openai(out, &events);
        }
    }
    Ok(Dropped::default())
}

/// The raw log in NDJSON or JP's format: each chunk decoded and written on
/// its own thread (see [`pipeline::for_each_chunk`]), printed in order.
fn export_raw(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    format: ExportFormat,
    out: &mut dyn Write,
    tick: &mut dyn FnMut(u64),
) -> Result<Dropped> {
    let jp = matches!(format, ExportFormat::Jp);
    let write = |chunk: &RawChunk| -> Result<(u64, Vec<u8>)> {
        let events = chunk.events(store, 0, scope.end, |_, _, _| false)?;
        let mut bytes = Vec::with_capacity(events.len() * 256);
        for (_, _, event) in &events {
            if jp {
                // Each event after a separator; the first one's is cut.
                bytes.extend_from_slice(b",\n");
                serde_json::to_writer(&mut bytes, &to_jp(event)).map_err(std::io::Error::from)?;
            } else {
                write_event(event, &mut bytes);
                bytes.push(b'\n');
            }
        }
        Ok((events.len() as u64, bytes))
    };
    if jp {
        out.write_all(b"[")?;
    }
    let mut first = true;
    pipeline::for_each_chunk(store, id, 0..scope.end, write, |(count, bytes)| {
        tick(count);
        let bytes = match (jp && first, bytes.split_first()) {
            (true, Some((_, rest))) => rest,
            _ => &bytes,
        };
        first &= count == 0;
        out.write_all(bytes)?;
        Ok(())
    })?;
    if jp {
        out.write_all(b"\n]\n")?;
    }
    Ok(Dropped::default())
}
