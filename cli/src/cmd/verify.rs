//! `convstore verify`: re-hash everything, name the first bad record.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{anyhow, Result};
use convstore_store::Store;
use serde_json::json;

use crate::args::VerifyArgs;
use crate::output;

pub(crate) fn run(store: &Store, args: &VerifyArgs) -> Result<ExitCode> {
    let verified = match &args.conversation {
        Some(query) => store.verify(&store.resolve(query)?)?,
        None => store.verify_all()?,
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
                });
                writeln!(out, "{value}")?;
            } else {
                writeln!(
                    out,
                    "ok: {} conversation(s), {} record(s), {} blob(s) verified",
                    report.conversations, report.records, report.blobs
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
