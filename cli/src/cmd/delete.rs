//! `convstore delete`: remove a conversation for good.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::{deletion_json, Engine};
use serde_json::Value;

use crate::args::DeleteArgs;
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &DeleteArgs, notes: &Notes) -> Result<ExitCode> {
    let id = engine.store().resolve_exact(&args.conversation)?;
    let deletion = engine.delete(&id, args.with_forks)?;
    if let Some(error) = engine.take_index_error() {
        notes.warn(&format!(
            "the conversation was deleted, but its search documents were not removed yet \
             ({error}); the next search drops them, `convstore reindex` rebuilds the index"
        ));
    }
    print(&deletion_json(&deletion), args.json, notes)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints a deletion as `delete --json` (`json`) or as a sentence per
/// conversation, from its JSON form.
pub(crate) fn print(value: &Value, json: bool, notes: &Notes) -> Result<()> {
    let mut out = output::stdout();
    if json {
        writeln!(out, "{value}")?;
        out.flush()?;
        return Ok(());
    }
    for c in value["deleted"].as_array().into_iter().flatten() {
        let label = c["name"]
            .as_str()
            .map_or_else(|| c["id"].as_str().unwrap_or("").to_owned(), str::to_owned);
        let events = c["events"].as_u64().unwrap_or(0);
        let shared = c["shared"].as_u64().unwrap_or(0);
        if shared > 0 {
            writeln!(
                out,
                "deleted {label} ({} of its own; the {shared} shared with its parent stay)",
                output::plural(events.saturating_sub(shared), "record")
            )?;
        } else {
            writeln!(
                out,
                "deleted {label} ({})",
                output::plural(events, "record")
            )?;
        }
    }
    for problem in value["problems"].as_array().into_iter().flatten() {
        notes.warn(&format!(
            "deleted, but not all of it was reclaimed: {}",
            problem.as_str().unwrap_or("")
        ));
    }
    if value["keys_shredded"].as_bool() == Some(true) {
        notes.say(
            "deleted its data key from the keyring: every copy of its records (a backup too) \
             is unreadable",
        );
        out.flush()?;
        return Ok(());
    }
    let blobs = value["blobs"].as_u64().unwrap_or(0);
    let bytes = value["segment_bytes"].as_u64().unwrap_or(0);
    notes.say(&format!(
        "removed {} and {} of segment files",
        output::plural(blobs, "long text"),
        output::bytes(bytes)
    ));
    out.flush()?;
    Ok(())
}
