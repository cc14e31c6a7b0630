//! `convstore log`: the raw records, for audits, and a fork's lineage.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::pipeline;
use convstore_engine::store::json::write_log_record;
use convstore_engine::store::RawChunk;
use convstore_engine::Engine;
use serde_json::json;

use crate::args::{HeadArgs, LogArgs};
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &LogArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let id = store.resolve(&args.conversation)?;
    let mut out = output::stdout();
    if args.lineage {
        for (conversation, point) in store.lineage(&id)? {
            let info = store.info(&conversation)?;
            let value = json!({
                "id": conversation.hex(),
                "name": info.name,
                "events": info.len,
                "head": info.head.hex(),
                "parent": point.map(|p| p.parent.hex()),
                "shared": point.map(|p| p.at),
                "fork_head": point.map(|p| p.base.hex()),
            });
            writeln!(out, "{value}")?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(point) = store.fork_point(&id)? {
        let parent = store.info(&point.parent)?;
        // Ranges are inclusive, as everywhere else.
        let shared = match point.at {
            0 => "no record is shared with it".to_owned(),
            1 => "record 0 is shared with it".to_owned(),
            n => format!("records 0..{} are shared with it", n - 1),
        };
        notes.say(&format!(
            "a fork of {} ({}): {shared}",
            parent.label(),
            point.parent,
        ));
    }
    let scope = crate::cmd::scope(store, &id, args.as_of)?;
    if args.as_of.is_none() {
        store.prefetch_for(&id);
    }
    // Chunks are decoded, hashed along the chain and written as JSON in
    // parallel, and printed in order.
    let write = |chunk: &RawChunk| -> convstore_engine::Result<Vec<u8>> {
        let records = chunk.log_records(store, 0, scope.end)?;
        let mut lines = Vec::with_capacity(records.len() * 256);
        for record in &records {
            write_log_record(record, &mut lines);
            lines.push(b'\n');
        }
        Ok(lines)
    };
    pipeline::for_each_chunk(store, &id, 0..scope.end, write, |lines| {
        Ok(out.write_all(&lines)?)
    })?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `convstore head`: the head from the conversation's metadata (no record
/// is read).
pub(crate) fn head(engine: &Engine, args: &HeadArgs) -> Result<ExitCode> {
    let store = engine.store();
    let id = store.resolve(&args.conversation)?;
    let info = store.info(&id)?;
    let mut out = output::stdout();
    if args.json {
        let value = json!({
            "id": id.hex(),
            "name": info.name,
            "head": info.head.hex(),
            "events": info.len,
            "turns": info.turns,
        });
        writeln!(out, "{value}")?;
    } else {
        writeln!(out, "{}", info.head)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
