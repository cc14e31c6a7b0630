//! `convstore gc`: drop the raw payloads a retention policy no longer
//! needs.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::retention::Retention;
use convstore_engine::Engine;
use serde_json::Value;

use crate::args::GcArgs;
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &GcArgs, notes: &Notes) -> Result<ExitCode> {
    let retention = Retention::new(
        &engine.config().retention,
        args.older_than.as_deref(),
        args.all_payloads,
    )?;
    let target = match &args.conversation {
        Some(name) => Some(engine.store().resolve_exact(name)?),
        None => None,
    };
    let value = engine.gc_report(target.as_ref(), &retention, args.dry_run)?;
    for c in value["conversations"].as_array().into_iter().flatten() {
        if let Some(why) = c["unfinished"].as_str() {
            notes.warn(&format!(
                "{}: the payloads were dropped, but not all of their old copies are gone from \
                 disk yet ({why}); the next command that opens the database tries again",
                c["name"].as_str().or(c["id"].as_str()).unwrap_or("")
            ));
        }
    }
    if let Some(error) = engine.take_index_error() {
        notes.warn(&format!(
            "the payloads were dropped, but the search index was not updated yet ({error}); \
             the next search catches it up, `convstore reindex` rebuilds it"
        ));
    }
    print(&value, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints a pass as `gc --json` (`json`) or as a line per conversation
/// and a total, from its JSON form.
pub(crate) fn print(value: &Value, json: bool) -> Result<()> {
    let mut out = output::stdout();
    if json {
        writeln!(out, "{value}")?;
        out.flush()?;
        return Ok(());
    }
    let verb = if value["dry_run"].as_bool() == Some(true) {
        "would drop"
    } else {
        "dropped"
    };
    let count = |v: &Value, key: &str| v[key].as_u64().unwrap_or(0);
    let conversations = value["conversations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in &conversations {
        let label = c["name"]
            .as_str()
            .map_or_else(|| c["id"].as_str().unwrap_or("").to_owned(), str::to_owned);
        let seqs = match (c["first_seq"].as_u64(), c["last_seq"].as_u64()) {
            (Some(a), Some(b)) if a == b => format!(" (seq {a})"),
            (Some(a), Some(b)) => format!(" (between seqs {a} and {b})"),
            _ => String::new(),
        };
        writeln!(
            out,
            "{label}: {verb} {} ({}){seqs}",
            output::plural(count(c, "records"), "payload"),
            output::bytes(count(c, "bytes")),
        )?;
    }
    let mut total = format!(
        "{verb} {} ({}) from {} ({})",
        output::plural(count(value, "records"), "payload"),
        output::bytes(count(value, "bytes")),
        output::plural(
            conversations
                .iter()
                .filter(|c| count(c, "records") > 0)
                .count() as u64,
            "conversation"
        ),
        convstore_store::one_line(value["reason"].as_str().unwrap_or("")),
    );
    if count(value, "blobs_removed") > 0 {
        total.push_str(if value["dry_run"].as_bool() == Some(true) {
            "; would remove "
        } else {
            "; removed "
        });
        total.push_str(&output::plural(count(value, "blobs_removed"), "long text"));
    }
    writeln!(out, "{total}")?;
    out.flush()?;
    Ok(())
}
