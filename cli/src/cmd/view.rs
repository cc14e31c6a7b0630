//! `convstore view`: a projected view stored in the database, kept current
//! and read without re-projecting.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Result};
use convstore_projection::ViewEvent;
use convstore_store::Store;

use crate::args::{Format, ViewArgs};
use crate::cmd::project::{text_line, write_openai, write_view_event};
use crate::materialize::{self, Refresh};
use crate::output::{self, Notes};

pub(crate) fn run(store: &Store, args: &ViewArgs, notes: &Notes) -> Result<ExitCode> {
    let id = store.resolve_exact(&args.conversation)?;
    if args.list {
        let views = store.views(&id)?;
        let mut out = output::stdout();
        if args.json {
            let items: Vec<serde_json::Value> = views
                .iter()
                .map(|state| {
                    serde_json::json!({
                        "name": state.name,
                        "profile": state.profile,
                        "events": state.events,
                        "records": state.len,
                        "head": state.head.hex(),
                    })
                })
                .collect();
            writeln!(out, "{}", serde_json::Value::Array(items))?;
            out.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut rows = vec![vec![
            "VIEW".to_owned(),
            "PROFILE".to_owned(),
            "EVENTS".to_owned(),
            "RECORDS".to_owned(),
            "HEAD".to_owned(),
        ]];
        for state in &views {
            rows.push(vec![
                state.name.clone(),
                state.profile.clone().unwrap_or_else(|| "-".to_owned()),
                state.events.to_string(),
                state.len.to_string(),
                state.head.hex()[..12].to_owned(),
            ]);
        }
        output::table(&mut out, &rows)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.drop {
        if !store.drop_view(&id, &args.name)? {
            bail!("no view named \"{}\"", args.name);
        }
        notes.say(&format!("dropped view \"{}\"", args.name));
        return Ok(ExitCode::SUCCESS);
    }
    // The output file is created before the view is stored or updated: a
    // path that cannot be written fails the command before it writes.
    let file = args
        .output
        .as_deref()
        .map(output::OutputFile::create)
        .transpose()?;
    let progress = match store.view_state(&id, &args.name)? {
        None => output::Progress::bar(notes, store.info(&id)?.len, "building the view"),
        Some(_) => output::Progress::bar(&Notes { quiet: true }, 0, ""),
    };
    progress.attach(store);
    let (state, refresh) = materialize::refresh(store, &id, &args.name, args.profile.as_deref())?;
    progress.finish();
    store.set_progress(None);
    notes.say(&match refresh {
        Refresh::Current => format!("view \"{}\" is current", state.name),
        Refresh::Built => format!(
            "view \"{}\" built: {} from {}",
            state.name,
            output::plural(state.events, "event"),
            output::plural(state.len, "record")
        ),
        Refresh::Updated(ranges) => format!(
            "view \"{}\" updated to record {}: recomputed turns {}",
            state.name,
            state.len.saturating_sub(1),
            ranges
                .iter()
                .map(|&(a, b)| output::range(a, b))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    });
    let mut write = |out: &mut dyn Write| -> Result<()> {
        write_events(out, args.format, notes, &mut |sink| {
            materialize::read(store, &id, &state.name, sink)
        })
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

type Source<'a> = dyn FnMut(&mut dyn FnMut(ViewEvent) -> Result<()>) -> Result<()> + 'a;

/// Writes the view events `source` yields in `format`, as `project` does.
fn write_events(
    out: &mut dyn Write,
    format: Format,
    notes: &Notes,
    source: &mut Source<'_>,
) -> Result<()> {
    let mut line = Vec::with_capacity(4096);
    match format {
        Format::Ndjson => source(&mut |v| {
            line.clear();
            write_view_event(&v, &mut line);
            line.push(b'\n');
            out.write_all(&line)?;
            Ok(())
        })?,
        Format::Json => {
            let mut first = true;
            out.write_all(b"[")?;
            source(&mut |v| {
                line.clear();
                if !first {
                    line.push(b',');
                }
                first = false;
                write_view_event(&v, &mut line);
                out.write_all(&line)?;
                Ok(())
            })?;
            out.write_all(b"]\n")?;
        }
        Format::Openai => {
            let mut events = Vec::new();
            source(&mut |v| {
                events.push(v);
                Ok(())
            })?;
            write_openai(out, &events, notes)?;
        }
        Format::Text => source(&mut |v| {
            writeln!(out, "{}", text_line(&v))?;
            Ok(())
        })?,
    }
    Ok(())
}
