//! `convstore gen`: see [`crate::generate`].

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;

use crate::args::{Cli, GenArgs, GenOverlays, Shape};
use crate::cmd;
use crate::output::{self, Notes};
use convstore_engine::generate;

pub(crate) fn run(cli: &Cli, args: &GenArgs, notes: &Notes) -> Result<ExitCode> {
    let shape = match args.shape {
        Shape::Small => generate::Shape::Small,
        Shape::Jp => generate::Shape::Jp,
    };
    // The same checks as the generator's, in the flags' words, before a
    // database is opened.
    if args.batch == 0 {
        return Err(output::usage("--batch must be at least 1"));
    }
    if args.events == 0 {
        return Err(output::usage("--events must be at least 1"));
    }
    if args.compactions > args.events {
        return Err(output::usage(format!(
            "--compactions {} exceeds --events {}",
            args.compactions, args.events
        )));
    }
    let engine = cmd::open(cli, true)?;
    let store = engine.store();
    let progress = output::Progress::bar(notes, args.events, "generating");
    progress.attach(store);
    let spec = generate::Spec {
        shape,
        batch: args.batch,
        overlays: match args.overlays {
            GenOverlays::Mixed => generate::Overlays::Mixed,
            GenOverlays::Strip => generate::Overlays::Strip,
        },
        ..generate::Spec::new(args.events, args.compactions, args.seed)
    };
    let id = generate::generate_spec(store, &args.conversation, &spec)?;
    progress.finish();
    cmd::written(&engine, &id, notes);
    let info = store.info(&id)?;
    notes.say(&format!(
        "generated {} ({}) in {}",
        output::plural(info.len, "event"),
        output::plural(args.compactions, "compaction"),
        output::plural(info.turns, "turn")
    ));
    let mut out = output::stdout();
    writeln!(out, "{}", info.head)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
