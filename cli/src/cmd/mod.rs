//! One module per subcommand; [`dispatch`] picks it.

pub(crate) mod append;
pub(crate) mod backup;
pub(crate) mod compact;
pub(crate) mod delete;
mod demo;
pub(crate) mod diff;
pub(crate) mod explain;
mod export;
pub(crate) mod fork;
pub(crate) mod gc;
mod gen;
pub(crate) mod import;
mod log;
mod mcp;
pub(crate) mod pin;
pub(crate) mod project;
pub(crate) mod recall;
pub(crate) mod redact;
pub(crate) mod search;
mod serve;

pub(crate) use convstore_engine::search::parse_since;
pub(crate) mod stats;
pub(crate) mod verify;
mod view;

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::ArgMatches;
use convstore_engine::config_file;
use convstore_engine::projection::config::Config;
use convstore_engine::{Engine, Location, OpenOptions, Secrets};

use crate::args::{Cli, Command};
use crate::output::Notes;

/// Runs the subcommand `cli` names.
pub(crate) fn dispatch(cli: &Cli, matches: &ArgMatches) -> Result<ExitCode> {
    let notes = Notes { quiet: cli.quiet };
    // An explicit configuration file must exist and parse, whatever the
    // command and wherever it runs (and before anything is written).
    if cli.config.is_some() {
        config(cli)?;
    }
    // Through a server: `--url`, or the one that holds the database. A
    // command that uses the configuration checks the local one too: the
    // server applies its own, but a file that does not parse is a
    // mistake to report before anything is stored.
    if let Some(client) = crate::client::target(cli) {
        // `--db DIR` on the command line with a server URL: two databases
        // named, and going through the server would ignore the one typed.
        if cli.url.is_some()
            && matches.value_source("db") == Some(clap::parser::ValueSource::CommandLine)
        {
            return Err(crate::output::usage(
                "--db and --url (or $CONVSTORE_URL) both name a database: give one (unset CONVSTORE_URL to use --db)",
            ));
        }
        let configured = match &cli.command {
            Command::Append(args) => args.auto,
            Command::Compact(_) => true,
            Command::Fork(args) => args.compact.is_some(),
            _ => false,
        };
        if configured {
            config(cli)?;
        }
        return crate::client::dispatch(cli, matches, &client, &notes);
    }
    location(cli)?;
    let read = || open(cli, false);
    let configured = || Ok::<_, anyhow::Error>(open(cli, false)?.with_config(config(cli)?));
    match &cli.command {
        Command::Append(args) => {
            let sub = matches
                .subcommand_matches("append")
                .context("append: arguments missing")?;
            append::run(cli, args, sub, &notes)
        }
        Command::Demo => demo::run(&open(cli, true)?, &notes),
        Command::Compact(args) => compact::run(&configured()?, args, &notes),
        Command::Import(args) => import::run(cli, args, &notes),
        Command::Export(args) => export::run(&read()?, args, &notes),
        Command::Gen(args) => gen::run(cli, args, &notes),
        Command::Project(args) => project::run(&read()?, args, &notes),
        Command::Log(args) => log::run(&read()?, args, &notes),
        Command::Head(args) => log::head(&read()?, args),
        // Only a fork that compacts reads the configuration's profiles.
        Command::Fork(args) if args.compact.is_some() => fork::run(&configured()?, args, &notes),
        Command::Fork(args) => fork::run(&read()?, args, &notes),
        Command::Delete(args) => delete::run(&read()?, args, &notes),
        Command::Redact(args) => redact::run(&read()?, args, &notes),
        Command::Gc(args) => gc::run(&configured()?, args, &notes),
        Command::View(args) => view::run(&read()?, args, &notes),
        Command::Explain(args) => explain::run(&read()?, args),
        Command::Pin(args) => pin::run(&read()?, args),
        Command::Unpin(args) => pin::unpin(&read()?, args),
        Command::Verify(args) => verify::run(&read()?, args, &notes),
        Command::Backup(args) => backup::run(read()?.store(), args),
        Command::Salvage(args) => backup::salvage(args),
        Command::Copy(args) => backup::copy(args, &notes),
        Command::Keygen(args) => keygen(args),
        Command::Migrate => backup::migrate(cli),
        Command::List(args) => stats::list(&read()?, args),
        Command::Stats(args) => stats::run(&read()?, args, &notes),
        Command::Serve(args) => serve::run(cli, args, &notes),
        Command::Recall(args) => recall::run(&read()?, args),
        Command::Tools(args) => recall::tools(args),
        Command::Search(args) => search::run(&read()?, args, &notes),
        Command::Diff(args) => {
            let sub = matches
                .subcommand_matches("diff")
                .context("diff: arguments missing")?;
            diff::run(&configured()?, args, sub)
        }
        Command::Reindex(args) => search::reindex(&read()?, args, &notes),
        Command::Mcp(args) => mcp::run(cli, args),
        Command::Completions { shell } => completions(*shell),
    }
}

/// After a write the command made through the store: the engine's hook
/// (the search index catches up, listeners are told). The write stands
/// either way: an index that could not be updated is a warning.
pub(crate) fn written(
    engine: &Engine,
    id: &convstore_engine::store::ConversationId,
    notes: &Notes,
) {
    engine.after_write(id);
    index_warning(engine, notes);
}

/// Warns if `[retention]` could not run after a compaction.
pub(crate) fn retention_warning(engine: &Engine, notes: &Notes) {
    match engine.take_retention() {
        Some(Ok(dropped)) if dropped.records > 0 => {
            notes.say(&format!(
                "retention: dropped {} ({}) the compaction covers",
                crate::output::plural(dropped.records, "payload"),
                crate::output::bytes(dropped.bytes)
            ));
            if let Some(why) = &dropped.unfinished {
                notes.warn(&format!(
                    "retention: not all of the dropped payloads' old copies are gone from disk \
                     yet ({why}); the next command that opens the database tries again"
                ));
            }
        }
        Some(Err(error)) => notes.warn(&format!(
            "the compaction was stored, but [retention] could not drop the payloads it covers \
             ({error}); `convstore gc` runs it again"
        )),
        _ => {}
    }
}

/// Warns if the engine could not update the search index after a write.
pub(crate) fn index_warning(engine: &Engine, notes: &Notes) {
    if let Some(error) = engine.take_index_error() {
        notes.warn(&format!(
            "the write was stored, but the search index was not updated ({error}); the next search catches it up, `convstore reindex` rebuilds it"
        ));
    }
}

/// `convstore keygen FILE`: a new master key.
fn keygen(args: &crate::args::KeygenArgs) -> Result<ExitCode> {
    convstore_engine::store::Keyring::generate(&args.key_file)
        .with_context(|| format!("cannot write the key file {}", args.key_file.display()))?;
    let mut out = crate::output::stdout();
    std::io::Write::write_all(
        &mut out,
        format!(
            "wrote a new master key to {}; name it in convstore.toml ([encryption] key_file) or \
             ${}, and keep it (and {}.keyring, made beside it) apart from the database\n",
            args.key_file.display(),
            convstore_engine::store::crypto::KEY_FILE_VARIABLE,
            args.key_file.display()
        )
        .as_bytes(),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Where the database is: `--db` (or `$CONVSTORE_DB`) as a [`Location`];
/// a URL (`postgres://...`) is never taken for a path.
pub(crate) fn location(cli: &Cli) -> Result<Location> {
    Ok(Location::parse(&cli.db.to_string_lossy())?)
}

/// The configuration: `--config FILE`, else `convstore.toml` beside the
/// database (in the current directory for a database server, which has
/// no directory), else the defaults.
pub(crate) fn config(cli: &Cli) -> Result<Config> {
    Ok(config_file::load(cli.config.as_deref(), &beside_db(cli))?)
}

/// The path the configuration is looked for beside: the database's, or
/// the current directory's for a database server.
fn beside_db(cli: &Cli) -> std::path::PathBuf {
    match location(cli) {
        Ok(Location::Path(_)) | Err(_) => cli.db.clone(),
        Ok(_) => std::path::PathBuf::from(config_file::CONFIG_FILE),
    }
}

/// A database a command may create: the `--db` directory did not exist,
/// or was empty, before the command opened it.
pub(crate) struct Creating {
    path: std::path::PathBuf,
    /// Whether it was an empty directory (kept, emptied again).
    emptied: bool,
}

impl Creating {
    /// Before the database is opened: whether opening it creates it.
    pub(crate) fn look(cli: &Cli) -> Option<Creating> {
        let Ok(Location::Path(path)) = location(cli) else {
            return None;
        };
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(Creating {
                path,
                emptied: false,
            }),
            Ok(_) => {
                let empty = std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none());
                empty.then_some(Creating {
                    path,
                    emptied: true,
                })
            }
            Err(_) => None,
        }
    }

    /// After the command failed: closes `engine` and leaves the path as
    /// it was, absent or an empty directory, if the database holds no
    /// conversation (another process may have created it between the look
    /// and the open, and stored one).
    pub(crate) fn undo(self, engine: Engine) {
        let empty = engine
            .store()
            .conversations()
            .is_ok_and(|all| all.is_empty());
        drop(engine);
        if empty {
            convstore_engine::store::remove_created_database(&self.path, self.emptied);
        }
    }
}

/// Opens the database. Only commands that create (`append`, `import`,
/// `gen`, `demo`) pass `create`: they may create it where nothing is, or
/// in an empty directory. No command writes into a directory that holds
/// anything but a convstore database. Summarizers find API keys in the
/// environment.
pub(crate) fn open(cli: &Cli, create: bool) -> Result<Engine> {
    let wait = Duration::try_from_secs_f64(cli.wait.max(0.0))
        .map_err(|_| anyhow::anyhow!("--wait: {} is not a number of seconds", cli.wait))?;
    // An encrypted database's key: `[encryption] key_file`, else
    // `$CONVSTORE_KEY_FILE`. A configuration that cannot be read for it
    // fails a command that would create a database (it might have been
    // meant encrypted) or opens an encrypted one; it does not fail every
    // other command. A key file named but missing or unreadable fails
    // every command, as a key configured for a database that is not
    // encrypted does: encryption was meant, and nothing may be stored in
    // clear meanwhile.
    let (keyring, unread) =
        match config_file::encryption_for(cli.config.as_deref(), &beside_db(cli)) {
            Ok(config) => (config_file::keyring(&config)?, None),
            Err(e) if create && Creating::look(cli).is_some() => return Err(e.into()),
            Err(e) => (config_file::keyring(&Config::default())?, Some(e)),
        };
    let options = if create {
        OpenOptions::create()
    } else {
        OpenOptions::existing()
    }
    .wait(wait)
    .encryption(keyring);
    // Under an address space limit below 1 GiB tantivy's writer may fail
    // to allocate, which aborts: writes then leave the search index to the
    // next search (which catches it up) rather than risk it after a write
    // is stored.
    let index_on_write =
        convstore_engine::store::address_space_limit().is_none_or(|limit| limit >= 1 << 30);
    let opened = Engine::open(&location(cli)?, &options)?;
    if let Some(e) = unread.filter(|_| opened.store().is_encrypted()) {
        return Err(e.into());
    }
    let mut engine = opened
        .with_secrets(Secrets::from_fn(|name| std::env::var(name).ok()))
        .with_index_on_write(index_on_write);
    if let Some(cache) = cache_dir() {
        engine = engine.with_cache_dir(cache);
    }
    for file in engine.store().discarded_snapshots() {
        Notes { quiet: cli.quiet }.say(&format!(
            "note: an unfinished sled snapshot was left by an earlier crash or failed open; \
             moved it to {} and recovered from the previous snapshot and the log",
            file.display()
        ));
    }
    Ok(engine)
}

/// The records `as_of` leaves of `id` (all without it); an error names
/// `--as-of` only when it was given.
pub(crate) fn scope(
    store: &convstore_engine::store::Store,
    id: &convstore_engine::store::ConversationId,
    as_of: Option<convstore_engine::AsOf>,
) -> Result<convstore_engine::Scope> {
    let scope = convstore_engine::Scope::as_of(store, id, as_of);
    match as_of {
        Some(_) => scope.context("--as-of"),
        None => Ok(scope?),
    }
}

/// Where derived data of a database without a directory (PostgreSQL) is
/// kept on this machine: `$CONVSTORE_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/convstore`, else `~/.cache/convstore`.
pub(crate) fn cache_dir() -> Option<std::path::PathBuf> {
    let from = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    from("CONVSTORE_CACHE_DIR")
        .or_else(|| from("XDG_CACHE_HOME").map(|d| d.join("convstore")))
        .or_else(|| from("HOME").map(|d| d.join(".cache").join("convstore")))
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
