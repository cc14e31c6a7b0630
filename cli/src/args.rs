//! The command line's shape: clap types only.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  convstore append chat --turn --user 'What is a B-tree?'
  printf '%s\\n' '{\"type\":\"assistant\",\"text\":\"A balanced search tree.\"}' | convstore append chat
  convstore log chat
  convstore verify
  convstore stats chat --json";

/// An append-only, content-addressed store for LLM conversations.
#[derive(Debug, Parser)]
#[command(name = "convstore", version, after_help = EXAMPLES)]
pub struct Cli {
    /// The database directory.
    #[arg(
        long,
        global = true,
        env = "CONVSTORE_DB",
        default_value = "convstore.db"
    )]
    pub db: PathBuf,
    /// Print nothing on stderr but errors.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Store a sample conversation, verify it and show what was stored.
    Demo,
    /// Append events (NDJSON on stdin, or the flags below) to a conversation,
    /// creating it if needed; prints the new head.
    #[command(after_help = "\
Examples:
  convstore append chat --turn --user 'hello' --assistant 'hi!'
  convstore append chat < events.ndjson
  convstore append chat --expect-head 3f2a...  < turn.ndjson")]
    Append(AppendArgs),
    /// Print a conversation's raw records as NDJSON, with seq, turn and
    /// address.
    Log(LogArgs),
    /// Re-hash every record and check everything derived from them.
    Verify(VerifyArgs),
    /// List conversations.
    List(ListArgs),
    /// Counts of a conversation: events, turns, bytes per kind.
    Stats(StatsArgs),
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `append`
#[derive(Debug, Args)]
pub struct AppendArgs {
    /// Conversation name, id or id prefix. A name that does not exist is
    /// created.
    pub conversation: String,
    /// Append a `user` event with this text (instead of reading stdin).
    #[arg(long, value_name = "TEXT")]
    pub user: Vec<String>,
    /// Append an `assistant` event with this text.
    #[arg(long, value_name = "TEXT")]
    pub assistant: Vec<String>,
    /// Append a `system` event with this text.
    #[arg(long, value_name = "TEXT")]
    pub system: Vec<String>,
    /// Append a `turn_start` event. Flags are appended in the order given.
    #[arg(long, num_args = 0, default_missing_value = "true", action = clap::ArgAction::Append)]
    pub turn: Vec<bool>,
    /// Append only if the head is this address (64 hex digits); otherwise
    /// fail with a conflict and store nothing.
    #[arg(long, value_name = "HASH")]
    pub expect_head: Option<String>,
    /// Return without waiting for the write to be durable.
    #[arg(long)]
    pub no_sync: bool,
}

/// `log`
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Conversation name, id or id prefix.
    pub conversation: String,
}

/// `verify`
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Only this conversation (default: all).
    pub conversation: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `list`
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `stats`
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Conversation name, id or id prefix.
    pub conversation: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}
