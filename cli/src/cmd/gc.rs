//! `convstore gc`: drop the raw payloads a retention policy no longer
//! needs.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::retention::Retention;
use convstore_engine::Engine;
use serde_json::{json, Value};

use crate::args::GcArgs;
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &GcArgs, notes: &Notes) -> Result<ExitCode> {
    let retention = Retention::new(
        &engine.config().retention,
        args.older_than.as_deref(),
        args.all_payloads,
    )?;
    let store = engine.store();
    let targets = match &args.conversation {
        Some(name) => {
            let id = store.resolve_exact(name)?;
            vec![(id, store.info(&id)?.name)]
        }
        None => store
            .conversations()?
            .into_iter()
            .map(|c| (c.id, c.name))
            .collect(),
    };
    let mut conversations = Vec::new();
    let (mut records, mut bytes, mut blobs) = (0, 0, 0);
    for (id, name) in targets {
        let dropped = engine.gc(&id, &retention, args.dry_run)?;
        records += dropped.records;
        bytes += dropped.bytes;
        blobs += dropped.blobs_removed;
        if dropped.records > 0 || args.conversation.is_some() {
            conversations.push(json!({
                "id": id.hex(),
                "name": name,
                "records": dropped.records,
                "bytes": dropped.bytes,
                "first_seq": dropped.seqs.map(|s| s.0),
                "last_seq": dropped.seqs.map(|s| s.1),
                "blobs_removed": dropped.blobs_removed,
                "view_blocks": dropped.view_blocks,
            }));
        }
    }
    if let Some(error) = engine.take_index_error() {
        notes.warn(&format!(
            "the payloads were dropped, but the search index was not updated yet ({error}); \
             the next search catches it up, `convstore reindex` rebuilds it"
        ));
    }
    let value = json!({
        "dry_run": args.dry_run,
        "reason": retention.reason(),
        "conversations": conversations,
        "records": records,
        "bytes": bytes,
        "blobs_removed": blobs,
    });
    print(&value, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints a pass as `gc --json` (`json`) or as a line per conversation
/// and a total, from its JSON form.
fn print(value: &Value, json: bool) -> Result<()> {
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
            (Some(a), Some(b)) => format!(" (seqs {a}..{b})"),
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
        value["reason"].as_str().unwrap_or(""),
    );
    if count(value, "blobs_removed") > 0 {
        total.push_str("; removed ");
        total.push_str(&output::plural(count(value, "blobs_removed"), "long text"));
    }
    writeln!(out, "{total}")?;
    out.flush()?;
    Ok(())
}
