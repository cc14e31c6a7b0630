//! One module per subcommand; [`dispatch`] picks it.

mod append;
mod backup;
mod compact;
mod demo;
mod explain;
mod export;
mod fork;
mod gen;
mod import;
mod log;
mod pin;
mod project;
mod stats;
mod verify;
mod view;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::ArgMatches;
use convstore_store::Store;

use crate::args::{Cli, Command};
use crate::output::Notes;
use crate::settings;

/// Runs the subcommand `cli` names.
pub(crate) fn dispatch(cli: &Cli, matches: &ArgMatches) -> Result<ExitCode> {
    let notes = Notes { quiet: cli.quiet };
    match &cli.command {
        Command::Append(args) => {
            let sub = matches
                .subcommand_matches("append")
                .context("append: arguments missing")?;
            let config = (cli.config.as_deref(), cli.db.as_path());
            append::run(&open_or_create(cli)?, args, sub, config, &notes)
        }
        Command::Demo => demo::run(&open_or_create(cli)?, &notes),
        Command::Compact(args) => {
            let config = settings::load(cli.config.as_deref(), &cli.db)?;
            compact::run(&open_existing(cli)?, args, &config, &notes)
        }
        Command::Import(args) => import::run(&open_or_create(cli)?, args, &notes),
        Command::Export(args) => export::run(&open_existing(cli)?, args, &notes),
        Command::Gen(args) => gen::run(&open_or_create(cli)?, args, &notes),
        Command::Project(args) => project::run(&open_existing(cli)?, args, &notes),
        Command::Log(args) => log::run(&open_existing(cli)?, args, &notes),
        Command::Fork(args) => {
            let config = settings::load(cli.config.as_deref(), &cli.db)?;
            fork::run(&open_existing(cli)?, args, &config, &notes)
        }
        Command::View(args) => view::run(&open_existing(cli)?, args, &notes),
        Command::Explain(args) => explain::run(&open_existing(cli)?, args),
        Command::Pin(args) => pin::run(&open_existing(cli)?, args),
        Command::Verify(args) => verify::run(&open_existing(cli)?, args),
        Command::Backup(args) => backup::run(&open_existing(cli)?, args),
        Command::Salvage(args) => backup::salvage(args),
        Command::List(args) => stats::list(&open_existing(cli)?, args),
        Command::Stats(args) => stats::run(&open_existing(cli)?, args),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut command, "convstore", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Opens the database, creating it if needed.
fn open_or_create(cli: &Cli) -> Result<Store> {
    let wait = Duration::try_from_secs_f64(cli.wait.max(0.0))
        .map_err(|_| anyhow::anyhow!("--wait: {} is not a number of seconds", cli.wait))?;
    let store = Store::open_waiting(&cli.db, wait)?;
    for file in store.discarded_snapshots() {
        Notes { quiet: cli.quiet }.say(&format!(
            "note: an unfinished sled snapshot was left by an earlier crash or failed open; \
             moved it to {} and recovered from the previous snapshot and the log",
            file.display()
        ));
    }
    store.set_max_event_bytes(cli.max_event_bytes);
    Ok(store)
}

/// Opens a database that must exist: commands that only read never create
/// one.
fn open_existing(cli: &Cli) -> Result<Store> {
    if !cli.db.exists() {
        bail!(
            "no database at {} (set --db or CONVSTORE_DB; `convstore append` creates one)",
            cli.db.display()
        );
    }
    open_or_create(cli)
}
