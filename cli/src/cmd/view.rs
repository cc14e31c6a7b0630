//! `convstore view`: a projected view stored in the database, kept current
//! and read without re-projecting.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Result};
use convstore_engine::format::write_events;
use convstore_engine::views::{self as materialize, Refresh};
use convstore_engine::Engine;

use crate::args::ViewArgs;
use crate::cmd::project::note_dropped;
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &ViewArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
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
    // `-` is stdout, as for export.
    let file = match args.output.as_deref() {
        None | Some("-") => None,
        Some(path) => Some(output::OutputFile::create(std::path::Path::new(path))?),
    };
    let progress = match store.view_state(&id, &args.name)? {
        None => output::Progress::bar(notes, store.info(&id)?.len, "building the view"),
        Some(_) => output::Progress::bar(&Notes { quiet: true }, 0, ""),
    };
    progress.attach(store);
    let (state, refresh) = engine
        .refresh_view(&id, &args.name, args.profile.as_deref())
        .map_err(|e| match e {
            convstore_engine::Error::ViewProfile { name, existing } => anyhow::anyhow!(
                "view \"{name}\" exists with {existing}; drop it (view --drop) to change its profile"
            ),
            e => e.into(),
        })?;
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
        let dropped = write_events(out, args.format.into(), &mut |sink| {
            materialize::read(store, &id, &state.name, sink)
        })?;
        note_dropped(dropped, notes);
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
