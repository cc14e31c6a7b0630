//! `convstore verify`: re-hash everything, name the first bad record.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{anyhow, Result};
use convstore_engine::Engine;
use serde_json::Value;

use crate::args::VerifyArgs;
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &VerifyArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let id = match &args.conversation {
        Some(query) => Some(store.resolve(query)?),
        None => None,
    };
    if store.is_locked_by_key() {
        let value = convstore_engine::keyless_verification_json(store, id.as_ref())?;
        return finish(value, notes, args.json);
    }
    // Records to check: a fork's own and its parents' (checked through
    // it); every conversation's own records, once.
    match &id {
        Some(id) => store.prefetch_for(id),
        None => store.prefetch(),
    }
    let total = match &id {
        Some(id) => store.info(id)?.len,
        None => store
            .conversations()?
            .iter()
            .map(|c| c.len - c.fork.map_or(0, |p| p.at))
            .sum(),
    };
    let progress = output::Progress::bar(notes, total, "verifying");
    progress.attach(store);
    // Every record, then each stored view against a fresh projection of
    // its head.
    let verified = engine.verify(id.as_ref())?;
    progress.finish();
    let value = convstore_engine::verification_json(engine, id.as_ref(), verified)?;
    if value["ok"].as_bool() == Some(true) {
        warn_pending(store, notes);
    }
    finish(value, notes, args.json)
}

/// Prints a verification as [`convstore_engine::verification_json`]
/// gives it, locally or from a server: a passed one (with a note if the
/// search index is behind), or a failed one's JSON with `--json` and its
/// `message` as the error.
pub(crate) fn finish(mut value: Value, notes: &Notes, json: bool) -> Result<ExitCode> {
    let mut out = output::stdout();
    if value["ok"].as_bool() == Some(true) {
        note_behind(&value, notes);
        print_ok(&mut out, &value, json)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let message = value
        .as_object_mut()
        .and_then(|object| object.remove("message"))
        .and_then(|m| m.as_str().map(str::to_owned))
        .unwrap_or_else(|| "verification failed".to_owned());
    if json {
        writeln!(out, "{value}")?;
        out.flush()?;
    }
    Err(anyhow!("{message}"))
}

/// Warns of redactions and retention passes whose texts are still on
/// disk.
fn warn_pending(store: &convstore_engine::store::Store, notes: &Notes) {
    if let Ok(pending @ 1..) = store.pending_purges() {
        notes.warn(&format!(
            "{} still {} texts to remove from disk (the records read [redacted]); \
             the next command that can write the database files tries again",
            output::plural(pending, "redaction or retention batch"),
            if pending == 1 { "has" } else { "have" }
        ));
    }
}

/// Notes a search index behind the logs (`value`: a passed
/// verification's, with `search_index`), as `verify` says it locally and
/// through a server.
fn note_behind(value: &Value, notes: &Notes) {
    let index = &value["search_index"];
    let behind = index["behind_conversations"].as_u64().unwrap_or(0);
    if behind > 0 {
        notes.say(&format!(
            "note: the search index is behind the log in {} ({}): the next search catches it up",
            output::plural(behind, "conversation"),
            output::plural(index["behind"].as_u64().unwrap_or(0), "record")
        ));
    }
}

/// Prints a verification that passed, as `verify` does locally and
/// through a server: `value` is [`convstore_engine::verified_json`]'s,
/// with `search_index` where the index was checked.
fn print_ok(out: &mut impl Write, value: &Value, json: bool) -> Result<()> {
    if json {
        writeln!(out, "{value}")?;
        return Ok(());
    }
    let number = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    if value["keyless"].as_bool() == Some(true) {
        writeln!(
            out,
            "ok: {} checked without the key: {} chained to each head, {} matching their \
             checksums (with the key, verify also re-hashes every record)",
            output::plural(number(value, "conversations"), "encrypted conversation"),
            output::plural(number(value, "chunks"), "sealed chunk"),
            output::plural(number(value, "sealed_values"), "sealed value"),
        )?;
        return Ok(());
    }
    let mut counts = vec![
        output::plural(number(value, "conversations"), "conversation"),
        output::plural(number(value, "records"), "record"),
        output::plural(number(value, "blobs"), "blob"),
        output::plural(number(value, "views"), "view"),
    ];
    if value["search_index"].is_object() {
        counts.push(output::plural(
            number(&value["search_index"], "documents"),
            "search document",
        ));
    }
    writeln!(out, "ok: {} verified", counts.join(", "))?;
    if let Some(shredded @ 1..) = value["shredded"].as_u64() {
        writeln!(
            out,
            "not verified: {} whose data key was deleted (deleted after this copy was made; \
             `verify` without the key checks {})",
            output::plural(shredded, "conversation"),
            if shredded == 1 {
                "its chain"
            } else {
                "their chains"
            }
        )?;
    }
    for r in value["redactions"].as_array().into_iter().flatten() {
        let label = r["name"].as_str().or(r["conversation"].as_str());
        let (first, last) = (number(r, "first_seq"), number(r, "last_seq"));
        let seqs = if first == last {
            format!("record {first}")
        } else {
            format!(
                "{} (between seqs {first} and {last})",
                output::plural(number(r, "records"), "record"),
            )
        };
        writeln!(
            out,
            "redacted in {}: {seqs} at {}: {}",
            convstore_store::one_line(label.unwrap_or("")),
            r["time"].as_str().unwrap_or(""),
            convstore_store::one_line(r["reason"].as_str().unwrap_or(""))
        )?;
    }
    let (redacted, proven) = (number(value, "redacted"), number(value, "redacted_proven"));
    if redacted > 0 {
        let others = if proven < redacted {
            " (the others: only the address the chain was built on, as they are older than format 7)"
        } else {
            ""
        };
        writeln!(
            out,
            "proven: every field but the removed text, for {proven} of {}{others}",
            output::plural(redacted, "redacted record"),
        )?;
    }
    Ok(())
}
