//! The `convstore` command line. Thin: it parses arguments, calls the
//! store and projection libraries, formats their answers and turns errors
//! into one `error:` line and an exit code (0 success, 1 failure, 2 usage).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod args;
pub mod auto;
mod cmd;
pub mod generate;
mod limits;
pub mod materialize;
mod output;
pub mod settings;
pub mod summarizers;
pub mod view;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

pub use args::{AsOf, Cli};

/// Runs the command line and returns its exit code.
pub fn run() -> ExitCode {
    if let Some(code) = limits::check() {
        return code;
    }
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
    match cmd::dispatch(&cli, &matches) {
        Ok(code) => code,
        Err(error) if output::is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            let message = format!("{error:#}").replace('\n', " ");
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
