//! `convstore gen`: see [`crate::generate`].

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;

use crate::args::{Cli, GenArgs, Shape};
use crate::cmd;
use crate::generate;
use crate::output::{self, Notes};

pub(crate) fn run(cli: &Cli, args: &GenArgs, notes: &Notes) -> Result<ExitCode> {
    let shape = match args.shape {
        Shape::Small => generate::Shape::Small,
        Shape::Jp => generate::Shape::Jp,
    };
    generate::check(args.events, args.compactions, args.batch)?;
    let store = &cmd::open(cli, true)?;
    let progress = output::Progress::bar(notes, args.events, "generating");
    progress.attach(store);
    let id = generate::generate_shaped(
        store,
        &args.conversation,
        args.events,
        args.compactions,
        args.seed,
        shape,
        args.batch,
    )?;
    progress.finish();
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
