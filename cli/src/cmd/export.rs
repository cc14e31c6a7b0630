//! `convstore export`: a conversation (or its view) as JP `events.json`,
//! OpenAI messages or NDJSON.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use convstore_engine::export::{self, ExportFormat};
use convstore_engine::Engine;

use crate::args::{ExportArgs, InteropFormat};
use crate::cmd::project::note_dropped;
use crate::output::{self, Notes};

pub(crate) fn run(engine: &Engine, args: &ExportArgs, notes: &Notes) -> Result<ExitCode> {
    let store = engine.store();
    let id = store.resolve(&args.conversation)?;
    store.prefetch_for(&id);
    let scope = crate::cmd::scope(store, &id, args.as_of)?;
    let file = match args.output.as_deref() {
        None | Some("-") => None,
        Some(path) => Some(output::OutputFile::create(Path::new(path))?),
    };
    let end = scope.end;

    let progress = output::Progress::bar(notes, end, "exporting");
    progress.attach(store);
    let format = match args.format {
        InteropFormat::Ndjson => ExportFormat::Ndjson,
        InteropFormat::Jp => ExportFormat::Jp,
        InteropFormat::Openai => ExportFormat::Openai,
    };
    let mut write = |out: &mut dyn Write| -> Result<()> {
        let dropped = export::export(store, &id, scope, args.projected, format, out, &mut |n| {
            progress.inc(n);
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
