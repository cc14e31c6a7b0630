//! `convstore fork`: branch a conversation without copying it.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Result};
use convstore_projection::config::Config;
use convstore_store::{Event, EventKind, Store, StoreError, Timestamp};
use serde_json::json;

use crate::args::ForkArgs;
use crate::output::{self, Notes};
use crate::summarizers;

pub(crate) fn run(
    store: &Store,
    args: &ForkArgs,
    config: &Config,
    notes: &Notes,
) -> Result<ExitCode> {
    let parent = store.resolve(&args.conversation)?;
    let info = store.info(&parent)?;
    let at = match (args.at_turn, args.at_seq) {
        (Some(turn), _) if turn >= info.turns => bail!(
            "--at-turn {turn}: names no turn ({})",
            crate::cmd::project::turns_note(info.turns)
        ),
        // Everything up to the next turn's first record.
        (Some(turn), _) => store.turn_records(&parent, 0, turn, info.len)?.end,
        (None, Some(seq)) if seq >= info.len => {
            return Err(
                anyhow::Error::from(StoreError::NoSuchRecord { seq, len: info.len })
                    .context("--at-seq"),
            )
        }
        (None, Some(seq)) => seq + 1,
        (None, None) => info.len,
    };
    // The compaction, if asked for, is stored with the fork in one write.
    let mut events = Vec::new();
    if let Some(name) = &args.compact {
        let profile = config.profile(name).map_err(anyhow::Error::msg)?;
        if at == 0 {
            bail!("--compact: the fork would be empty: there is nothing to compact");
        }
        let last_turn = store.turn_of(&parent, at - 1)?;
        let summary = match &profile.summary {
            // The summary is written from the parent's raw events: the
            // fork's are the same.
            Some(spec) => {
                let summarizer = summarizers::make(spec, None)?;
                let raw = summarizers::raw_events(store, &parent, 0, last_turn, at)?;
                Some(summarizers::run(&*summarizer, &raw)?)
            }
            None => None,
        };
        events.push(Event::new(
            Timestamp::now(),
            EventKind::Compaction(profile.compaction(0, last_turn, summary, config)),
        ));
    }
    let (id, head) = store.fork(&parent, at, args.name.as_deref(), &events)?;
    let fork = store.info(&id)?;
    let mut out = output::stdout();
    if args.json {
        let value = json!({
            "id": id.hex(),
            "name": fork.name,
            "parent": parent.hex(),
            "at": at,
            "events": fork.len,
            "head": head.hex(),
        });
        writeln!(out, "{value}")?;
    } else {
        notes.say(&format!(
            "forked {} at record {} ({} shared{})",
            info.label(),
            at.saturating_sub(1),
            output::plural(at, "record"),
            if events.is_empty() {
                String::new()
            } else {
                format!(
                    ", compacted with profile {}",
                    args.compact.as_deref().unwrap_or("")
                )
            }
        ));
        writeln!(out, "{} {}", fork.label(), head)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
