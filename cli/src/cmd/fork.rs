//! `convstore fork`: branch a conversation without copying it.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::fork::ForkAt;
use convstore_engine::{Engine, Error};
use serde_json::json;

use crate::args::ForkArgs;
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &ForkArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let parent = store.resolve(&args.conversation)?;
    let info = store.info(&parent)?;
    let at = match (args.at_turn, args.at_seq) {
        (Some(turn), _) => ForkAt::Turn(turn),
        (None, Some(seq)) => ForkAt::Seq(seq),
        (None, None) => ForkAt::End,
    };
    let forked = engine
        .fork(&parent, at, args.name.as_deref(), args.compact.as_deref())
        .map_err(|e| match (e, at) {
            (e @ Error::NoSuchTurn { .. }, ForkAt::Turn(turn)) => {
                anyhow::Error::from(e).context(format!("--at-turn {turn}"))
            }
            (e @ Error::Store(_), ForkAt::Seq(seq)) => {
                anyhow::Error::from(e).context(format!("--at-seq {seq}"))
            }
            (e @ Error::EmptyFork, _) => anyhow::Error::from(e).context("--compact"),
            (e, _) => e.into(),
        })?;
    crate::cmd::index_warning(engine, notes);
    let fork = store.info(&forked.id)?;
    let mut out = output::stdout();
    if args.json {
        let value = json!({
            "id": forked.id.hex(),
            "name": fork.name,
            "parent": parent.hex(),
            // Records shared: the fork's own records start at this seq.
            "at": forked.at,
            "shared": forked.at,
            "after_seq": forked.at.checked_sub(1),
            "events": fork.len,
            "head": forked.head.hex(),
        });
        writeln!(out, "{value}")?;
    } else {
        notes.say(&forked_note(
            &info.label(),
            forked.at,
            forked
                .compacted
                .then_some(args.compact.as_deref().unwrap_or("")),
        ));
        writeln!(out, "{} {}", fork.label(), forked.head)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// What `fork` says it did: where the fork branches off, and the profile
/// it was compacted with.
pub(crate) fn forked_note(parent: &str, at: u64, compacted: Option<&str>) -> String {
    let place = match at {
        0 => "at its start".to_owned(),
        at => format!("after record {}", at - 1),
    };
    let compacted = compacted.map_or(String::new(), |p| format!(", compacted with profile {p}"));
    format!(
        "forked {parent} {place} ({} shared{compacted})",
        output::plural(at, "record")
    )
}
