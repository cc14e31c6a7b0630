//! `convstore pin`: turns automatic compaction never covers.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_store::Store;

use crate::args::PinArgs;
use crate::cmd::project::parse_turns;
use crate::output;

pub(crate) fn run(store: &Store, args: &PinArgs) -> Result<ExitCode> {
    let id = store.resolve(&args.conversation)?;
    let pins = match &args.turns {
        Some(text) if !args.list => {
            let range = parse_turns(text)?;
            store.pin(&id, *range.start(), *range.end())?
        }
        _ => store.pins(&id)?,
    };
    let mut out = output::stdout();
    for (a, b) in pins {
        if a == b {
            writeln!(out, "{a}")?;
        } else if b == u64::MAX {
            writeln!(out, "{a}..")?;
        } else {
            writeln!(out, "{a}..={b}")?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
