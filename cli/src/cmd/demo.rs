//! `convstore demo`: the main job end to end on a sample conversation
//! written for the project: store it, compact it with the default profile
//! (strip reasoning, strip tool calls), print the projected view and the
//! tokens saved, verify.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use convstore_engine::format::text_line;
use convstore_engine::pipeline::{self as view, tally, Scope};
use convstore_engine::projection::config::Config;
use convstore_engine::projection::tokens_for_chars;
use convstore_engine::store::{json, AppendOptions, Event, EventKind, Store, Timestamp};
use convstore_engine::Engine;

use crate::output::{self, Notes};

const SAMPLE: &str = include_str!("../demo/sample.ndjson");

/// The sample conversation's events.
fn sample_events() -> Result<Vec<Event>> {
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
        if store.find_name(&name)?.is_none() {
            return Ok(name);
        }
        n += 1;
    }
}

pub(crate) fn run(engine: &Engine, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let events = sample_events()?;
    let name = free_name(store)?;
    let (id, _) = store.create_and_append(Some(&name), &events, &AppendOptions::default())?;
    let info = store.info(&id)?;
    notes.say(&format!(
        "stored the sample conversation as \"{name}\" ({}, {}) in {}",
        output::plural(info.len, "event"),
        output::plural(info.turns, "turn"),
        store.describe()
    ));
    let before = tally(store, &id, Scope { end: info.len }, None)?;

    // The default profile over every turn.
    let config = Config::default();
    let compaction = config
        .profile("default")
        .map_err(anyhow::Error::msg)?
        .compaction(0, info.turns.saturating_sub(1), None, &config);
    let appended = store.append(
        &id,
        &[Event::new(
            Timestamp::now(),
            EventKind::Compaction(compaction),
        )],
        &AppendOptions::default(),
    )?;
    crate::cmd::written(engine, &id, notes);
    let scope = Scope {
        end: appended.first_seq + 1,
    };
    let projector = view::plan(store, &id, scope, None)?;
    let mut out = output::stdout();
    writeln!(
        out,
        "projected view of \"{name}\" after `compact --reasoning strip --tool-calls strip`:"
    )?;
    view::stream(store, &id, scope, &projector, |v| {
        let mut line = text_line(v);
        if line.chars().count() > 110 {
            line = line.chars().take(107).collect::<String>() + "...";
        }
        writeln!(out, "  {line}")?;
        Ok(())
    })?;
    let after = tally(store, &id, scope, None)?;
    let (b, a) = (
        tokens_for_chars(before.total_chars()),
        tokens_for_chars(after.total_chars()),
    );
    writeln!(
        out,
        "tokens (4 characters a token): {b} -> {a}, saved {} ({:.0}%)",
        b.saturating_sub(a),
        100.0 * b.saturating_sub(a) as f64 / b.max(1) as f64
    )?;
    match store.verify(&id)? {
        Ok(report) => writeln!(
            out,
            "verify: ok, {} records re-hashed; the raw history is untouched",
            report.records
        )?,
        Err(failure) => anyhow::bail!("verification failed: {failure}"),
    }
    writeln!(
        out,
        "next: convstore log {name}   convstore project {name} --format openai"
    )?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
