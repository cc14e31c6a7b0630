//! `convstore redact`: remove one text of one record for good.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::store::RedactField;
use convstore_engine::Engine;
use serde_json::json;

use crate::args::RedactArgs;
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &RedactArgs, notes: &Notes) -> Result<ExitCode> {
    let id = engine.store().resolve_exact(&args.conversation)?;
    let field = args.field.as_deref().and_then(RedactField::parse);
    let redaction = engine.redact(&id, args.seq, field, &args.reason)?;
    if let Some(error) = engine.take_index_error() {
        notes.warn(&format!(
            "the record was redacted, but the search index was not updated yet ({error}); \
             the next search catches it up, `convstore reindex` rebuilds it"
        ));
    }
    let mut out = output::stdout();
    if args.json {
        let value = json!({
            "conversation": redaction.owner.hex(),
            "seq": redaction.seq,
            "field": redaction.field.as_str(),
            "len": redaction.len,
            "hash": redaction.hash.hex(),
            "blob_removed": redaction.blob_removed,
            "view_blocks": redaction.view_blocks,
            "event_seq": redaction.event.first_seq,
            "head": redaction.event.head.hex(),
        });
        writeln!(out, "{value}")?;
    } else {
        writeln!(
            out,
            "redacted record {} ({}, {}); redaction event at seq {}",
            redaction.seq,
            redaction.field.as_str(),
            output::bytes(redaction.len),
            redaction.event.first_seq
        )?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
