//! `convstore project`: the view a model sees.

use std::io::Write;
use std::ops::RangeInclusive;
use std::process::ExitCode;

use anyhow::{bail, Result};
use convstore_engine::format::{self, text_line, write_view_event, Dropped};
use convstore_engine::pipeline::{self as view};
use convstore_engine::projection::ViewEvent;
use convstore_engine::Engine;

use crate::args::{Format, ProjectArgs};
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &ProjectArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let id = store.resolve(&args.conversation)?;
    let scope = crate::cmd::scope(store, &id, args.as_of)?;
    let turns = match &args.turns {
        Some(text) => {
            let range = parse_turns(text)?;
            let count = scope.turns(store, &id)?;
            if *range.start() >= count {
                bail!("--turns {text}: names no turn ({})", turns_note(count));
            }
            Some(range)
        }
        None => None,
    };
    // A turn range reads only its records, and places only the summaries
    // that meet it.
    let (projector, seqs) = match &turns {
        Some(range) => view::plan_turns(store, &id, scope, range.clone())?,
        None => (view::plan(store, &id, scope, None)?, 0..scope.end),
    };
    if turns.is_none()
        && args.as_of.is_none()
        && view::reads_most(store, &id, scope.end, &projector)?
    {
        store.prefetch_for(&id);
    }
    let wanted = |v: &ViewEvent| turns.as_ref().is_none_or(|r| r.contains(&v.turn));
    let each = |sink: &mut dyn FnMut(&ViewEvent) -> convstore_engine::Result<()>| {
        view::stream_range(
            store,
            &id,
            seqs.clone(),
            &projector,
            |v| v,
            |v| v.iter().filter(|v| wanted(v)).try_for_each(&mut *sink),
        )
    };
    let file = match args.output.as_deref() {
        None | Some("-") => None,
        Some(path) => Some(output::OutputFile::create(std::path::Path::new(path))?),
    };
    let mut write = |out: &mut dyn Write| -> Result<()> {
        match args.format {
            Format::Ndjson | Format::Json => {
                // Formatted on the worker threads: JSON elements each start
                // with a comma, and the first one's is dropped here.
                let json = args.format == Format::Json;
                let mut first = true;
                if json {
                    out.write_all(b"[")?;
                }
                let format = |view: Vec<ViewEvent>| {
                    let mut bytes = Vec::with_capacity(view.len() * 256);
                    for v in view.iter().filter(|v| wanted(v)) {
                        if json {
                            bytes.push(b',');
                        }
                        write_view_event(v, &mut bytes);
                        if !json {
                            bytes.push(b'\n');
                        }
                    }
                    bytes
                };
                view::stream_range(store, &id, seqs.clone(), &projector, format, |bytes| {
                    let skip = usize::from(json && first && !bytes.is_empty());
                    first &= bytes.is_empty();
                    out.write_all(&bytes[skip..])?;
                    Ok(())
                })?;
                if json {
                    out.write_all(b"]\n")?;
                }
            }
            Format::Openai => {
                let mut events = Vec::new();
                each(&mut |v| {
                    events.push(v.clone());
                    Ok(())
                })?;
                write_openai(out, &events, notes)?;
            }
            Format::Text => {
                each(&mut |v| {
                    writeln!(out, "{}", text_line(v))?;
                    Ok(())
                })?;
            }
        }
        Ok(())
    };
    if let Some(file) = file {
        file.write_with(&mut write)?;
    } else {
        let mut out = output::stdout();
        write(&mut out)?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes view events as a Chat Completions `messages` array, and says on
/// stderr what had to be left out to keep it valid.
pub(crate) fn write_openai(out: &mut dyn Write, events: &[ViewEvent], notes: &Notes) -> Result<()> {
    let dropped = format::write_openai(out, events)?;
    note_dropped(dropped, notes);
    Ok(())
}

/// Says on stderr what a `messages` array left out.
pub(crate) fn note_dropped(dropped: Dropped, notes: &Notes) {
    if dropped.calls + dropped.results > 0 {
        notes.say(&format!(
            "openai: left out {} without a following result and {} without a preceding call",
            output::plural(dropped.calls, "tool call"),
            output::plural(dropped.results, "tool result")
        ));
    }
    if dropped.other > 0 {
        notes.say(&format!(
            "openai: left out {} (reasoning, config, extension, compaction: no Chat Completions message holds them)",
            output::plural(dropped.other, "event")
        ));
    }
}

pub(crate) use convstore_engine::error::turns_note;

/// The range `text` gives (checked already when the arguments were read).
pub(crate) fn parse_turns(text: &str) -> Result<RangeInclusive<u64>> {
    crate::args::parse_turns(text).map_err(|e| anyhow::anyhow!("--turns {text}: {e}"))
}
