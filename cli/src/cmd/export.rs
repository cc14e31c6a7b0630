//! `convstore export`: a conversation (or its view) as JP `events.json`,
//! OpenAI messages or NDJSON.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use convstore_engine::pipeline::{self as view, Scope};
use convstore_engine::projection::ViewEvent;
use convstore_engine::store::interop::jp::to_jp;
use convstore_engine::store::json::write_event;
use convstore_engine::{Engine, Result as EngineResult};

use crate::args::{ExportArgs, InteropFormat};
use crate::cmd::project::write_openai;
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &ExportArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let id = store.resolve(&args.conversation)?;
    let scope = Scope::as_of(store, &id, args.as_of).context("--as-of")?;
    let file = match args.output.as_deref() {
        None | Some("-") => None,
        Some(path) => Some(output::OutputFile::create(Path::new(path))?),
    };
    let end = scope.end;

    let progress = output::Progress::bar(notes, end, "exporting");
    progress.attach(store);
    // The events to write: the raw records, or the view.
    let mut write = |out: &mut dyn Write| -> Result<()> {
        let each = |f: &mut dyn FnMut(&ViewEvent) -> EngineResult<()>| -> EngineResult<()> {
            if args.projected {
                let projector = view::plan(store, &id, scope, None)?;
                view::stream(store, &id, scope, &projector, f)
            } else {
                for record in store.scan(&id, 0..end)? {
                    let record = record?;
                    progress.inc(1);
                    f(&ViewEvent {
                        seq: record.seq,
                        turn: record.turn,
                        summary_of: None,
                        event: record.event,
                    })?;
                }
                Ok(())
            }
        };
        match args.format {
            InteropFormat::Ndjson => {
                let mut line = Vec::with_capacity(4096);
                each(&mut |v| {
                    line.clear();
                    write_event(&v.event, &mut line);
                    line.push(b'\n');
                    out.write_all(&line)?;
                    Ok(())
                })?;
            }
            InteropFormat::Jp => {
                let mut first = true;
                out.write_all(b"[")?;
                each(&mut |v| {
                    out.write_all(if first { b"\n" } else { b",\n" })?;
                    first = false;
                    serde_json::to_writer(&mut *out, &to_jp(&v.event))
                        .map_err(std::io::Error::from)?;
                    Ok(())
                })?;
                out.write_all(b"\n]\n")?;
            }
            InteropFormat::Openai => {
                let mut events: Vec<ViewEvent> = Vec::new();
                each(&mut |v| {
                    events.push(v.clone());
                    Ok(())
                })?;
                write_openai(out, &events, notes)?;
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
