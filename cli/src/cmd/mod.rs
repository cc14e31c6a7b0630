//! One module per subcommand; [`dispatch`] picks it.

mod append;
mod compact;
mod demo;
mod export;
mod gen;
mod import;
mod log;
mod project;
mod stats;
mod verify;

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::ArgMatches;
use convstore_store::Store;

use crate::args::{Cli, Command};
use crate::output::Notes;

/// Runs the subcommand `cli` names.
pub(crate) fn dispatch(cli: &Cli, matches: &ArgMatches) -> Result<ExitCode> {
    let notes = Notes { quiet: cli.quiet };
    match &cli.command {
        Command::Append(args) => {
            let sub = matches
                .subcommand_matches("append")
                .context("append: arguments missing")?;
            append::run(&open_or_create(&cli.db)?, args, sub, &notes)
        }
        Command::Demo => demo::run(&open_or_create(&cli.db)?, &notes),
        Command::Compact(args) => compact::run(&open_existing(&cli.db)?, args, &notes),
        Command::Import(args) => import::run(&open_or_create(&cli.db)?, args, &notes),
        Command::Export(args) => export::run(&open_existing(&cli.db)?, args, &notes),
        Command::Gen(args) => gen::run(&open_or_create(&cli.db)?, args, &notes),
        Command::Project(args) => project::run(&open_existing(&cli.db)?, args, &notes),
        Command::Log(args) => log::run(&open_existing(&cli.db)?, args),
        Command::Verify(args) => verify::run(&open_existing(&cli.db)?, args),
        Command::List(args) => stats::list(&open_existing(&cli.db)?, args),
        Command::Stats(args) => stats::run(&open_existing(&cli.db)?, args),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut command, "convstore", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Opens the database, creating it if needed.
fn open_or_create(path: &Path) -> Result<Store> {
    Ok(Store::open(path)?)
}

/// Opens a database that must exist: commands that only read never create
/// one.
fn open_existing(path: &Path) -> Result<Store> {
    if !path.exists() {
        bail!(
            "no database at {} (set --db or CONVSTORE_DB; `convstore append` creates one)",
            path.display()
        );
    }
    Ok(Store::open(path)?)
}
