//! `convstore backup`: a verified copy of a database.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_store::Store;
use serde_json::json;

use crate::args::BackupArgs;
use crate::materialize;
use crate::output;

pub(crate) fn run(store: &Store, args: &BackupArgs) -> Result<ExitCode> {
    let report = store.backup_checked(&args.dest, check_views)?;
    let mut out = output::stdout();
    if args.json {
        let value = json!({
            "ok": true,
            "dest": args.dest.display().to_string(),
            "conversations": report.conversations,
            "records": report.records,
            "blobs": report.blobs,
            "views": report.views,
        });
        writeln!(out, "{value}")?;
    } else {
        writeln!(
            out,
            "backed up {} conversation(s), {} record(s), {} blob(s), {} view(s) to {}; the copy verifies",
            report.conversations,
            report.records,
            report.blobs,
            report.views,
            args.dest.display()
        )?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Every stored view of `copy` against a fresh projection of its head.
fn check_views(copy: &Store) -> Result<(), String> {
    let conversations = copy.conversations().map_err(|e| e.to_string())?;
    for conversation in conversations {
        for state in copy.views(&conversation.id).map_err(|e| e.to_string())? {
            let problem =
                materialize::check(copy, &conversation.id, &state).map_err(|e| format!("{e:#}"))?;
            if let Some(problem) = problem {
                return Err(format!(
                    "conversation {}: view \"{}\": {problem}",
                    conversation.id, state.name
                ));
            }
        }
    }
    Ok(())
}
