//! `convstore verify`: re-hash everything, name the first bad record.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{anyhow, Result};
use convstore_engine::store::ConversationId;
use convstore_engine::Engine;
use serde_json::{json, Value};

use crate::args::VerifyArgs;
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &VerifyArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let id = match &args.conversation {
        Some(query) => Some(store.resolve(query)?),
        None => None,
    };
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
    let (verified, views) = match verified {
        Ok((report, views)) => (Ok(report), views),
        Err(failure) => (Err(failure), 0),
    };
    let mut out = output::stdout();
    // The search index, once the logs are sound: derived data, compared
    // with them.
    let index = match &verified {
        Ok(_) => engine.check_index(id.as_ref())?,
        Err(_) => None,
    };
    if let Some(problem) = index.as_ref().and_then(|i| i.problem.clone()) {
        if args.json {
            let value = json!({ "ok": false, "search_index": problem });
            writeln!(out, "{value}")?;
            out.flush()?;
        }
        return Err(anyhow!(
            "verification failed: search index: {problem}; `convstore reindex` rebuilds it from the logs"
        ));
    }
    if let Ok(pending @ 1..) = store.pending_purges() {
        notes.warn(&format!(
            "{} still {} texts to remove from disk (the records read [redacted]); \
             the next command that can write the database files tries again",
            output::plural(pending, "redaction or retention batch"),
            if pending == 1 { "has" } else { "have" }
        ));
    }
    if let Some(behind) = index.as_ref().filter(|i| i.behind > 0) {
        notes.say(&format!(
            "note: the search index is behind the log in {} ({}): the next write or search catches it up",
            output::plural(behind.behind, "conversation"),
            output::plural(behind.behind_records, "record")
        ));
    }
    match verified {
        Ok(report) => {
            let redactions = if report.redacted > 0 {
                redactions(engine, id.as_ref())?
            } else {
                Vec::new()
            };
            if args.json {
                let value = json!({
                    "ok": true,
                    "conversations": report.conversations,
                    "records": report.records,
                    "blobs": report.blobs,
                    "views": views,
                    "redacted": report.redacted,
                    "redacted_proven": report.redacted_proven,
                    "redactions": redactions,
                    "search_index": index.as_ref().map(|i| json!({
                        "documents": i.documents,
                        "behind": i.behind_records,
                    })),
                });
                writeln!(out, "{value}")?;
            } else if let Some(index) = &index {
                writeln!(
                    out,
                    "ok: {}, {}, {}, {}, {} verified",
                    output::plural(report.conversations, "conversation"),
                    output::plural(report.records, "record"),
                    output::plural(report.blobs, "blob"),
                    output::plural(views, "view"),
                    output::plural(index.documents, "search document")
                )?;
            } else {
                writeln!(
                    out,
                    "ok: {}, {}, {}, {} verified",
                    output::plural(report.conversations, "conversation"),
                    output::plural(report.records, "record"),
                    output::plural(report.blobs, "blob"),
                    output::plural(views, "view")
                )?;
            }
            if !args.json {
                for r in &redactions {
                    let label = r["name"].as_str().or(r["conversation"].as_str());
                    let (first, last) = (r["first_seq"].as_u64(), r["last_seq"].as_u64());
                    let seqs = if first == last {
                        format!("record {}", first.unwrap_or(0))
                    } else {
                        format!(
                            "{} (between seqs {} and {})",
                            output::plural(r["records"].as_u64().unwrap_or(0), "record"),
                            first.unwrap_or(0),
                            last.unwrap_or(0)
                        )
                    };
                    writeln!(
                        out,
                        "redacted in {}: {seqs} at {}: {}",
                        label.unwrap_or(""),
                        r["time"].as_str().unwrap_or(""),
                        r["reason"].as_str().unwrap_or("")
                    )?;
                }
                if report.redacted > 0 {
                    let others = if report.redacted_proven < report.redacted {
                        " (the others: only the address the chain was built on, \
                         as they are older than format 7)"
                    } else {
                        ""
                    };
                    writeln!(
                        out,
                        "proven: every field but the removed text, for {} of {}{others}",
                        report.redacted_proven,
                        output::plural(report.redacted, "redacted record"),
                    )?;
                }
            }
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            if args.json {
                let value = json!({
                    "ok": false,
                    "conversation": failure.conversation.hex(),
                    "name": failure.name,
                    "seq": failure.seq,
                    "problem": failure.problem,
                });
                writeln!(out, "{value}")?;
                out.flush()?;
            }
            Err(anyhow!("verification failed: {failure}"))
        }
    }
}

/// The redactions of `id`'s records (its own and its ancestors', which it
/// shares; every conversation's own for `None`), grouped as they were
/// made: one `redact`, or one retention pass.
fn redactions(engine: &Engine, id: Option<&ConversationId>) -> Result<Vec<Value>> {
    let store = engine.store();
    let targets = match id {
        Some(id) => {
            let mut chain = vec![(*id, store.info(id)?.name)];
            let mut at = *id;
            while let Some(point) = store.fork_point(&at)? {
                chain.push((point.parent, store.info(&point.parent)?.name));
                at = point.parent;
            }
            chain
        }
        None => store
            .conversations()?
            .into_iter()
            .map(|c| (c.id, c.name))
            .collect(),
    };
    let mut out = Vec::new();
    for (id, name) in targets {
        for group in store.redaction_groups(&id)? {
            out.push(json!({
                "conversation": id.hex(),
                "name": name,
                "records": group.records,
                "first_seq": group.first_seq,
                "last_seq": group.last_seq,
                "time": group.time.to_string(),
                "reason": group.reason,
                "by": group.by.hex(),
            }));
        }
    }
    Ok(out)
}
