//! `convstore redact`: remove one text of one record for good.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::store::RedactField;
use convstore_engine::Engine;
use serde_json::Value;

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
    print(
        &convstore_engine::redaction_json(&redaction, &id),
        args.json,
    )
}

/// Prints a redaction ([`convstore_engine::redaction_json`]'s value), as
/// `redact` does locally and through a server.
pub(crate) fn print(value: &Value, json: bool) -> Result<ExitCode> {
    let mut out = output::stdout();
    if json {
        writeln!(out, "{value}")?;
    } else {
        let number = |k: &str| value[k].as_u64().unwrap_or(0);
        write!(
            out,
            "redacted record {} ({}, {}); redaction event at seq {}",
            number("seq"),
            value["field"].as_str().unwrap_or(""),
            output::bytes(number("len")),
            number("event_seq")
        )?;
        if value["conversation"] != value["by"] {
            write!(
                out,
                "; the record is shared with the parent conversation {}, redacted there too",
                value["conversation"].as_str().unwrap_or("")
            )?;
        }
        let blob = value["blob"]
            .as_bool()
            .unwrap_or(number("len") > convstore_engine::store::INLINE_MAX as u64);
        if blob && value["blob_removed"] == false {
            write!(
                out,
                "; the text itself stays stored: another record still holds it"
            )?;
        }
        writeln!(out)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
