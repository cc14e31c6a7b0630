//! `convstore gen`: see [`crate::generate`].

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use convstore_store::Store;

use crate::args::{GenArgs, Shape};
use crate::generate;
use crate::output::{self, Notes};

pub(crate) fn run(store: &Store, args: &GenArgs, notes: &Notes) -> Result<ExitCode> {
    let shape = match args.shape {
        Shape::Small => generate::Shape::Small,
        Shape::Jp => generate::Shape::Jp,
    };
    let id = generate::generate_shaped(
        store,
        &args.conversation,
        args.events,
        args.compactions,
        args.seed,
        shape,
        args.batch,
    )?;
    let info = store.info(&id)?;
    notes.say(&format!(
        "generated {} events ({} compactions) in {} turns",
        info.len, args.compactions, info.turns
    ));
    let mut out = output::stdout();
    writeln!(out, "{}", info.head)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
