//! The `convstore` command line. Thin: it parses arguments, calls the
//! engine (`convstore_engine`), formats its answers and turns errors into
//! one `error:` line and an exit code (0 success, 1 failure, 2 usage).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod args;
mod client;
mod cmd;
mod interrupt;
mod limits;
mod output;
mod stdout;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

pub use args::Cli;

/// Answers what clap could not parse: help and the version on stdout
/// (exit 0); `convstore` alone, its help on stderr (exit 2); any other
/// usage error as one `error:` line (exit 2).
fn usage(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(2)
        }
        // No command, but an option (`-q`) or an environment variable
        // (`$CONVSTORE_DB`) given: the help, as for `convstore` alone (only
        // the top level has subcommands).
        ErrorKind::MissingSubcommand => {
            eprint!("{}", Cli::command().render_help());
            ExitCode::from(2)
        }
        _ => {
            // clap's message is a paragraph (the error, what it concerns),
            // then the usage and a pointer to --help: one line of each.
            // The standard library's words for a number it cannot read.
            let text = without_credentials(&e.to_string())
                .replace(": invalid digit found in string", ": not a whole number")
                .replace(
                    ": cannot parse integer from empty string",
                    ": not a whole number",
                );
            let mut paragraphs = text.split("\n\n");
            let message = paragraphs
                .next()
                .unwrap_or("error: bad arguments")
                .split('\n')
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let usage = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("Usage: "))
                // A global option given by the environment is no part of
                // the usage.
                .map(|u| {
                    let u = u.replace("--db <DIR|URL> ", "").replace("--url <URL> ", "");
                    format!(" (usage: {u})")
                })
                .unwrap_or_default();
            output::line_to_stderr(&format!("{message}{usage}"));
            ExitCode::from(2)
        }
    }
}

/// `cmd` with every option that takes a value taking one that reads as a
/// negative number (`--turn -1`), so that the value's own check refuses
/// it (`not a whole number`) instead of clap reading it as an unknown
/// option.
fn negative_numbers_are_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| {
        let takes_values = arg.get_action().takes_values()
            && arg.get_num_args().is_none_or(|n| n.max_values() > 0);
        if arg.get_long().is_some() && takes_values {
            arg.allow_negative_numbers(true)
        } else {
            arg
        }
    })
    .mut_subcommands(negative_numbers_are_values)
}

/// A usage error's message with the credentials of every quoted value
/// hidden: clap echoes the argument it could not take (`invalid value
/// '…'`, `unexpected argument '…'`), which may be a URL with a password
/// or a token (`http://user:secret@host`, `u:secret@host`, `TOKEN@host`,
/// `…?password=…`).
fn without_credentials(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for (i, piece) in message.split('\'').enumerate() {
        if i > 0 {
            out.push('\'');
        }
        let credentials =
            piece.contains("://") || piece.rfind('@').is_some_and(|at| piece[..at].contains(':'));
        if i % 2 == 1 && credentials {
            let piece = convstore_engine::store::backend::postgres::redact(piece);
            let start = piece.find("://").map_or(0, |s| s + 3);
            match piece[start..].rfind('@') {
                Some(at) => {
                    out.push_str(&piece[..start]);
                    out.push_str("***");
                    out.push_str(&piece[start + at..]);
                }
                None => out.push_str(&piece),
            }
        } else {
            out.push_str(piece);
        }
    }
    out
}

/// An error and its causes on one line, each cause once: a message that
/// already says its cause (`cannot read F: No such file or directory`) is
/// not followed by it again.
fn one_line(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message.replace('\n', " ")
}

/// Panics inside tantivy (some damaged index files make it panic rather
/// than fail) are caught by the engine and reported as one `error:` line
/// naming `convstore reindex`; the default hook's report of them is left
/// out. Every other panic is reported as usual.
fn quiet_about_caught_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info
            .location()
            .is_some_and(|place| place.file().contains("tantivy"))
        {
            return;
        }
        default(info);
    }));
}

/// Runs the command line and returns its exit code.
pub fn run() -> ExitCode {
    if let Some(code) = limits::check() {
        return code;
    }
    // Past a file size limit (`ulimit -f`) the kernel sends SIGXFSZ, whose
    // default action kills the process without a word; caught, the write
    // fails with EFBIG instead, which ends in an `error:` line like a full
    // disk.
    let _ = signal_hook::flag::register(
        signal_hook::consts::SIGXFSZ,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    quiet_about_caught_panics();
    // For comparisons: every hash one by one with the `blake3` crate, as
    // on a CPU without AVX-512.
    if std::env::var_os("CONVSTORE_NO_LANES").is_some() {
        convstore_lanes::set_enabled(false);
    }
    // rayon starts its threads when first used, and panics if it cannot
    // (under an address space limit, or a limit on processes): started
    // here instead, where failing is an error line.
    if let Err(e) = rayon::ThreadPoolBuilder::new().build_global() {
        output::line_to_stderr(&format!("error: cannot start worker threads: {e}"));
        return ExitCode::FAILURE;
    }
    // `COMPLETE=bash convstore -- WORDS`: the shell asking for completions.
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
    // An empty `CONVSTORE_DB` is as if it were not set.
    for name in ["CONVSTORE_DB", "CONVSTORE_URL"] {
        if std::env::var_os(name).is_some_and(|v| v.is_empty()) {
            std::env::remove_var(name);
        }
    }
    let matches = match negative_numbers_are_values(Cli::command()).try_get_matches() {
        Ok(matches) => matches,
        Err(e) => return usage(&e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return usage(&e),
    };
    // `serve` shuts down on its own signals (gracefully).
    if !matches!(cli.command, args::Command::Serve(_)) {
        interrupt::install();
    }
    // The command has released the database when it returns: only then
    // does what a slow reader has not taken yet get written. What a
    // command printed before it failed is written too, whole, before its
    // error line: every record before a damaged one, however fast the
    // reader was.
    let done = match cmd::dispatch(&cli, &matches) {
        Ok(code) => stdout::drain().map(|()| code).map_err(Into::into),
        Err(error) => {
            let _ = stdout::drain();
            Err(error)
        }
    };
    match done {
        Ok(code) => code,
        Err(error) if output::is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            let mut message = one_line(&error);
            let store_error = error
                .downcast_ref::<convstore_engine::Error>()
                .and_then(|e| match e {
                    convstore_engine::Error::Store(e) => Some(e),
                    _ => None,
                })
                .or_else(|| error.downcast_ref::<convstore_engine::store::StoreError>());
            match store_error {
                Some(convstore_engine::store::StoreError::NoDatabase { path }) => {
                    if path.to_string_lossy().contains("://") {
                        message.push_str(
                            " (`convstore migrate` sets one up, as does `convstore append`)",
                        );
                    } else {
                        message.push_str(
                            " (set --db or CONVSTORE_DB; `convstore append` creates one)",
                        );
                    }
                }
                Some(convstore_engine::store::StoreError::Locked { waited, .. })
                    if waited.is_zero() =>
                {
                    message.push_str(" (--wait SECS waits for it)");
                }
                _ => {}
            }
            let server_url = matches!(
                error.downcast_ref::<convstore_engine::Error>(),
                Some(convstore_engine::Error::UnsupportedLocation { scheme, .. })
                    if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
            );
            if server_url {
                message.push_str(" (a convstore server is named with --url or CONVSTORE_URL)");
            }
            output::line_to_stderr(&format!("error: {message}"));
            if error
                .chain()
                .any(<dyn std::error::Error>::is::<output::Usage>)
            {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command and option is well formed (clap's own checks, which
    /// run only for the command a debug build parses), with negative
    /// numbers taken as values.
    #[test]
    fn the_command_line_is_well_formed() {
        negative_numbers_are_values(Cli::command()).debug_assert();
    }
}
