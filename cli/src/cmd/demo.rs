//! `convstore demo`: the main job end to end on a sample conversation
//! written for the project.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use convstore_store::{json, AppendOptions, Event, EventType, Store, Timestamp};

use crate::output::{self, Notes};

const SAMPLE: &str = include_str!("../demo/sample.ndjson");

/// The sample conversation's events.
pub(crate) fn sample_events() -> Result<Vec<Event>> {
    let now = Timestamp::now();
    SAMPLE
        .lines()
        .enumerate()
        .map(|(i, line)| {
            json::parse_event(line, now).with_context(|| format!("sample line {}", i + 1))
        })
        .collect()
}

/// A name not yet taken: `demo`, `demo-2`, `demo-3`, ...
fn free_name(store: &Store) -> Result<String> {
    let mut n = 1;
    loop {
        let name = if n == 1 {
            "demo".to_owned()
        } else {
            format!("demo-{n}")
        };
        if store.find(&name)?.is_none() {
            return Ok(name);
        }
        n += 1;
    }
}

pub(crate) fn run(store: &Store, notes: &Notes) -> Result<ExitCode> {
    let events = sample_events()?;
    let name = free_name(store)?;
    let (id, appended) =
        store.create_and_append(Some(&name), &events, &AppendOptions::default())?;
    notes.say(&format!(
        "stored the sample conversation as \"{name}\" ({id}) in {}",
        store.path().display()
    ));
    let verified = store.verify(&id)?;
    let info = store.info(&id)?;
    let mut out = output::stdout();
    writeln!(
        out,
        "conversation {name}: {} events in {} turns",
        info.len, info.turns
    )?;
    for kind in EventType::ALL {
        let stats = info.kind(kind);
        if stats.count > 0 {
            writeln!(
                out,
                "  {:<12} {:>3} events {:>7} bytes",
                kind.as_str(),
                stats.count,
                stats.bytes
            )?;
        }
    }
    writeln!(out, "head {}", appended.head)?;
    match verified {
        Ok(report) => writeln!(out, "verify: ok, {} records re-hashed", report.records)?,
        Err(failure) => anyhow::bail!("verification failed: {failure}"),
    }
    writeln!(out, "try: convstore log {name}    convstore stats {name}")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
