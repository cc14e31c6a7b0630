//! `convstore verify`: re-hash everything, name the first bad record.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{anyhow, Result};
use convstore_store::{Store, VerifyFailure};
use serde_json::json;

use crate::args::VerifyArgs;
use crate::materialize;
use crate::output::{self, Notes};

pub(crate) fn run(store: &Store, args: &VerifyArgs, notes: &Notes) -> Result<ExitCode> {
    let conversations = store.conversations()?;
    let total = match &args.conversation {
        Some(_) => None,
        None => Some(
            conversations
                .iter()
                .map(|c| c.len - c.fork.map_or(0, |p| p.at))
                .sum(),
        ),
    };
    let progress = output::Progress::bar(notes, total.unwrap_or(0), "verifying");
    progress.attach(store);
    let (verified, ids) = match &args.conversation {
        Some(query) => {
            let id = store.resolve(query)?;
            (store.verify(&id)?, vec![id])
        }
        None => (
            store.verify_all()?,
            conversations.iter().map(|c| c.id).collect(),
        ),
    };
    progress.finish();
    // Then each stored view against a fresh projection of its head.
    let mut views = 0;
    let verified = match verified {
        Ok(report) => {
            let mut outcome = Ok(report);
            'all: for id in &ids {
                for state in store.views(id)? {
                    if let Some(problem) = materialize::check(store, id, &state)? {
                        let info = store.info(id)?;
                        outcome = Err(VerifyFailure {
                            conversation: *id,
                            name: info.name,
                            seq: None,
                            problem: format!("view \"{}\": {problem}", state.name),
                        });
                        break 'all;
                    }
                    views += 1;
                }
            }
            outcome
        }
        failed => failed,
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
