//! One module per subcommand; [`dispatch`] picks it.

mod append;
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

use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::ArgMatches;
use convstore_store::{OpenOptions, Store};

use crate::args::{Cli, Command};
use crate::output::Notes;
use crate::settings;

/// Runs the subcommand `cli` names.
pub(crate) fn dispatch(cli: &Cli, matches: &ArgMatches) -> Result<ExitCode> {
    let notes = Notes { quiet: cli.quiet };
    check_location(&cli.db)?;
    // An explicit configuration file must exist and parse, whatever the
    // command (and before anything is written).
    if cli.config.is_some() {
        settings::load(cli.config.as_deref(), &cli.db)?;
    }
    let config = || settings::load(cli.config.as_deref(), &cli.db);
    match &cli.command {
        Command::Append(args) => {
            let sub = matches
                .subcommand_matches("append")
                .context("append: arguments missing")?;
            append::run(cli, args, sub, &notes)
        }
        Command::Demo => demo::run(&open(cli, true)?, &notes),
        Command::Compact(args) => {
            let config = config()?;
            compact::run(&open(cli, false)?, args, &config, &notes)
        }
        Command::Import(args) => import::run(cli, args, &notes),
        Command::Export(args) => export::run(&open(cli, false)?, args, &notes),
        Command::Gen(args) => gen::run(cli, args, &notes),
        Command::Project(args) => project::run(&open(cli, false)?, args, &notes),
        Command::Log(args) => log::run(&open(cli, false)?, args, &notes),
        Command::Head(args) => log::head(&open(cli, false)?, args),
        Command::Fork(args) => {
            let config = config()?;
            fork::run(&open(cli, false)?, args, &config, &notes)
        }
        Command::View(args) => view::run(&open(cli, false)?, args, &notes),
        Command::Explain(args) => explain::run(&open(cli, false)?, args),
        Command::Pin(args) => pin::run(&open(cli, false)?, args),
        Command::Unpin(args) => pin::unpin(&open(cli, false)?, args),
        Command::Verify(args) => verify::run(&open(cli, false)?, args, &notes),
        Command::List(args) => stats::list(&open(cli, false)?, args),
        Command::Stats(args) => stats::run(&open(cli, false)?, args, &notes),
        Command::Completions { shell } => completions(*shell),
    }
}

/// Refuses a `--db` that names no directory this build can use: a URL
/// (`postgres://...`) is never taken for a path.
fn check_location(db: &Path) -> Result<()> {
    let text = db.to_string_lossy();
    if let Some((scheme, _)) = text.split_once("://") {
        if !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            bail!(
                "--db {text}: a URL, not a directory; this convstore stores conversations in a \
                 directory only (no {scheme}:// backend)"
            );
        }
    }
    Ok(())
}

/// Opens the database. Only commands that create (`append`, `import`,
/// `gen`, `demo`) pass `create`: they may create it where nothing is, or
/// in an empty directory. No command writes into a directory that holds
/// anything but a convstore database.
pub(crate) fn open(cli: &Cli, create: bool) -> Result<Store> {
    let wait = Duration::try_from_secs_f64(cli.wait.max(0.0))
        .map_err(|_| anyhow::anyhow!("--wait: {} is not a number of seconds", cli.wait))?;
    let options = if create {
        OpenOptions::create()
    } else {
        OpenOptions::existing()
    }
    .wait(wait);
    let store = Store::open_with(&cli.db, &options)?;
    for file in store.discarded_snapshots() {
        Notes { quiet: cli.quiet }.say(&format!(
            "note: a crash had left an unfinished sled snapshot; moved it to {} and \
             recovered from the previous snapshot and the log",
            file.display()
        ));
    }
    Ok(store)
}

/// Prints the script that registers `convstore` for completion in `shell`:
/// the shell then asks `convstore` itself (`COMPLETE=SHELL convstore --
/// WORDS`), so conversation names complete as well as flags.
fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};
    use std::io::Write as _;
    let completer: &dyn EnvCompleter = match shell {
        clap_complete::Shell::Bash => &Bash,
        clap_complete::Shell::Elvish => &Elvish,
        clap_complete::Shell::Fish => &Fish,
        clap_complete::Shell::PowerShell => &Powershell,
        clap_complete::Shell::Zsh => &Zsh,
        other => bail!("no completions for {other}"),
    };
    // The binary as it was invoked: by name from PATH, or by its path.
    let invoked = std::env::args_os().next().unwrap_or_default();
    let program = if Path::new(&invoked).components().count() > 1 {
        std::env::current_exe().context("cannot find the convstore binary")?
    } else {
        invoked.into()
    };
    let mut out = crate::output::stdout();
    completer.write_registration(
        "COMPLETE",
        "convstore",
        "convstore",
        &program.to_string_lossy(),
        &mut out,
    )?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
