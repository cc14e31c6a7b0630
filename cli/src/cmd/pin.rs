//! `convstore pin` and `convstore unpin`: turns automatic compaction never
//! covers.

use std::io::Write;
use std::ops::RangeInclusive;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::store::{ConversationId, Store};
use convstore_engine::{turns, Engine};
use serde_json::{json, Value};

use crate::args::{PinArgs, UnpinArgs};
use crate::output;

pub(crate) fn run(engine: &Engine, args: &PinArgs) -> Result<ExitCode> {
    let store = engine.store();
    let id = store.resolve_exact(&args.conversation)?;
    let pins = match &args.turns {
        Some(text) => {
            let range = existing_turns(store, &id, text)?;
            store.pin(&id, *range.start(), *range.end())?
        }
        None => store.pins(&id)?,
    };
    print(&pins, args.json)
}

pub(crate) fn unpin(engine: &Engine, args: &UnpinArgs) -> Result<ExitCode> {
    let store = engine.store();
    let id = store.resolve_exact(&args.conversation)?;
    let pins = match &args.turns {
        Some(text) => {
            let range = existing_turns(store, &id, text)?;
            store.unpin(&id, *range.start(), *range.end())?
        }
        None => store.unpin(&id, 0, u64::MAX)?,
    };
    print(&pins, false)
}

/// The turns `text` names that exist (see [`turns::existing`]).
fn existing_turns(store: &Store, id: &ConversationId, text: &str) -> Result<RangeInclusive<u64>> {
    Ok(turns::existing(store, id, "--turns", text)?)
}

pub(crate) fn print(pins: &[(u64, u64)], json: bool) -> Result<ExitCode> {
    let mut out = output::stdout();
    if json {
        let ranges: Vec<Value> = pins
            .iter()
            .map(|&(a, b)| json!([a, (b != u64::MAX).then_some(b)]))
            .collect();
        writeln!(out, "{}", Value::Array(ranges))?;
    } else {
        for &(a, b) in pins {
            writeln!(out, "{}", output::range(a, b))?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
