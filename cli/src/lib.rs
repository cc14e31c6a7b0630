//! The `convstore` command line. Thin: it parses arguments, calls the
//! engine (`convstore_engine`), formats its answers and turns errors into
//! one `error:` line and an exit code (0 success, 1 failure, 2 usage).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod args;
mod calls;
mod cmd;
mod output;
mod stdout;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

pub use args::Cli;

/// Runs the command line and returns its exit code.
pub fn run() -> ExitCode {
    // `COMPLETE=bash convstore -- WORDS`: the shell asking for completions.
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
    let matches = match Cli::command().try_get_matches() {
        Ok(matches) => matches,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayVersion
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(2),
            };
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    // The command has released the database when it returns: only then
    // does what a slow reader has not taken yet get written.
    let done = cmd::dispatch(&cli, &matches).and_then(|code| {
        stdout::drain()?;
        Ok(code)
    });
    match done {
        Ok(code) => code,
        Err(error) if output::is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            let mut message = format!("{error:#}").replace('\n', " ");
            let store_error = error
                .downcast_ref::<convstore_engine::Error>()
                .and_then(|e| match e {
                    convstore_engine::Error::Store(e) => Some(e),
                    _ => None,
                })
                .or_else(|| error.downcast_ref::<convstore_engine::store::StoreError>());
            match store_error {
                Some(convstore_engine::store::StoreError::NoDatabase { .. }) => {
                    message.push_str(" (set --db or CONVSTORE_DB; `convstore append` creates one)");
                }
                Some(convstore_engine::store::StoreError::Locked { waited, .. })
                    if waited.is_zero() =>
                {
                    message.push_str(" (--wait SECS waits for it)");
                }
                _ => {}
            }
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
