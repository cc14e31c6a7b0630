//! `convstore verify`: re-hash everything, name the first bad record.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{anyhow, Result};
use convstore_engine::Engine;
use serde_json::json;

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
    match verified {
        Ok(report) => {
            if args.json {
                let value = json!({
                    "ok": true,
                    "conversations": report.conversations,
                    "records": report.records,
                    "blobs": report.blobs,
                    "views": views,
                });
                writeln!(out, "{value}")?;
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
