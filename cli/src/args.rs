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
    /// If another process has the database open, wait up to SECS for it
    /// (default: fail at once).
    #[arg(long, global = true, value_name = "SECS", default_value_t = 0.0)]
    pub wait: f64,
    /// The largest event accepted, in bytes (an NDJSON line, or an event's
    /// record and texts).
    #[arg(long, global = true, value_name = "BYTES", default_value_t = convstore_store::DEFAULT_MAX_EVENT_BYTES)]
    pub max_event_bytes: u64,
    /// Configuration file (default: convstore.toml beside the database).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
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
    /// Store a sample conversation, compact it with the default profile and
    /// show the projected view and the tokens saved.
    Demo,
    /// Append events (NDJSON on stdin, or the flags below) to a conversation,
    /// creating it if needed; prints the new head.
    #[command(after_help = "\
Examples:
  convstore append chat --turn --user 'hello' --assistant 'hi!'
  convstore append chat < events.ndjson
  convstore append chat --expect-head 3f2a...  < turn.ndjson")]
    Append(AppendArgs),
    /// Print the projected view: what a model sees after compaction.
    #[command(after_help = "\
Examples:
  convstore project chat
  convstore project chat --format openai > messages.json
  convstore project chat --as-of 120 --turns 3..5 --format text")]
    Project(ProjectArgs),
    /// Append a compaction overlay: change the view, never the history.
    #[command(after_help = "\
Bounds (--from, --to): N is turn N; -N is N turns before the last turn;
90m, 5h, 2d are turns that started that long ago; last is one past the
highest turn any compaction covers. --keep-last N is --to -N.

Examples:
  convstore compact chat --reasoning strip --tool-calls strip --keep-last 3
  convstore compact chat --summary 'We fixed the parser.' --from 0 --to 12
  convstore compact chat --tool-calls omit --from 2h --dry-run
  convstore compact chat --revert --from 0 --to 5")]
    Compact(CompactArgs),
    /// Import a conversation from JP events.json, OpenAI messages or NDJSON.
    #[command(after_help = "\
Examples:
  convstore import --format jp 17648402467-design.events.json
  convstore import --format openai messages.json --name support-42
  cat events.ndjson | convstore import --format ndjson - --name chat")]
    Import(ImportArgs),
    /// Export a conversation, or its view, as JP events.json, OpenAI
    /// messages or NDJSON.
    #[command(after_help = "\
Examples:
  convstore export chat --format jp > chat.events.json
  convstore export chat --format openai --projected --output messages.json
  convstore export chat --format ndjson --as-of 120")]
    Export(ExportArgs),
    /// Generate a deterministic synthetic conversation (for benchmarks).
    #[command(after_help = "\
Examples:
  convstore gen big --events 1000000 --compactions 10000 --seed 1
  convstore gen small --events 10000 --compactions 100")]
    Gen(GenArgs),
    /// Print a conversation's raw records as NDJSON, with seq, turn and
    /// address.
    #[command(after_help = "\
Examples:
  convstore log chat
  convstore log chat --as-of 2026-03-01T12:00:00Z
  convstore log chat-fork --lineage")]
    Log(LogArgs),
    /// Branch a conversation: the new one shares the parent's records up to
    /// the fork point (nothing is copied) and takes its own appends.
    #[command(after_help = "\
Examples:
  convstore fork chat --name chat-retry
  convstore fork chat --at-turn 12 --name chat-from-12
  convstore fork chat --at-seq 340 --compact=light")]
    Fork(ForkArgs),
    /// Store a projected view and keep it current; print it or write it to
    /// a file.
    #[command(after_help = "\
Examples:
  convstore view chat                          # the view named default
  convstore view chat --name small --profile default --format openai
  convstore view chat --name small --out view.json --format json
  convstore view chat --list")]
    View(ViewArgs),
    /// Pin turns: automatic compaction never covers them.
    #[command(after_help = "\
Examples:
  convstore pin chat --turns 0..2
  convstore pin chat --list")]
    Pin(PinArgs),
    /// Which overlay won each content type for a turn, and which others
    /// cover it.
    #[command(after_help = "\
Examples:
  convstore explain chat --turn 12
  convstore explain chat --turn 12 --as-of 340 --json")]
    Explain(ExplainArgs),
    /// Re-hash every record and check everything derived from them.
    Verify(VerifyArgs),
    /// Copy every conversation, as of one moment, into a new database and
    /// verify the copy; other commands may use the database meanwhile.
    #[command(after_help = "\
Examples:
  convstore backup /backups/chats-2026-03-01.db
  convstore --db chats.db backup chats-copy.db --json")]
    Backup(BackupArgs),
    /// Recover every conversation that can still be read from a damaged
    /// database into a new one, and report what was recovered and lost.
    /// DAMAGED is only read.
    #[command(after_help = "\
Examples:
  convstore salvage broken.db recovered.db
  convstore salvage broken.db recovered.db --json")]
    Salvage(SalvageArgs),
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
    /// Then compact automatically if the view needs it
    /// ([compaction.auto] in the configuration).
    #[arg(long)]
    pub auto: bool,
}

/// `project`
#[derive(Debug, Args)]
pub struct ProjectArgs {
    /// Conversation name, id or id prefix.
    pub conversation: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Ndjson)]
    pub format: Format,
    /// The view as it was when record SEQ was the newest, or at TIME
    /// (RFC 3339: as of the newest record at or before it).
    #[arg(long, value_name = "SEQ|TIME", value_parser = parse_as_of)]
    pub as_of: Option<AsOf>,
    /// Only view events of these turns: `A..B` (inclusive), `A..`, `..B`, `N`.
    #[arg(long, value_name = "A..B")]
    pub turns: Option<String>,
}

/// View formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSON event per line, with `seq`, `turn` and `summary_of`.
    Ndjson,
    /// The same events as one JSON array.
    Json,
    /// An OpenAI Chat Completions `messages` array.
    Openai,
    /// One readable line per event.
    Text,
}

/// `compact`
#[derive(Debug, Args)]
#[allow(clippy::struct_excessive_bools)] // one per flag
pub struct CompactArgs {
    /// Conversation name, id or id prefix.
    pub conversation: String,
    /// Reasoning policy.
    #[arg(long, value_enum)]
    pub reasoning: Option<ReasoningArg>,
    /// Tool call policy.
    #[arg(long, value_enum)]
    pub tool_calls: Option<ToolCallsArg>,
    /// Replace the range with this summary text (the range widens over any
    /// summary it meets).
    #[arg(long, value_name = "TEXT")]
    pub summary: Option<String>,
    /// Restore the raw view over the range (keep all three content types).
    #[arg(long, conflicts_with_all = ["reasoning", "tool_calls", "summary", "summarize", "profile"])]
    pub revert: bool,
    /// Use this profile's policies (flags given override them). Without
    /// any policy flag, the configured default profile is used.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Have a summarizer write the summary: the profile's, else the
    /// built-in extractive one.
    #[arg(long, conflicts_with = "summary")]
    pub summarize: bool,
    /// Instructions added to the summarizer's.
    #[arg(long, value_name = "TEXT")]
    pub instructions: Option<String>,
    /// Store the compaction even if it does not shrink the view.
    #[arg(long)]
    pub force: bool,
    /// How tokens are counted: chars4 (four characters a token), cl100k or
    /// o200k (exact, offline).
    #[arg(long, default_value = "chars4", value_name = "NAME")]
    pub tokenizer: String,
    /// First turn of the range (default 0).
    #[arg(long, value_name = "BOUND", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Last turn of the range (default: the last turn).
    #[arg(long, value_name = "BOUND", allow_hyphen_values = true)]
    pub to: Option<String>,
    /// Leave the newest N turns out of the range (`--to -N`).
    #[arg(long, value_name = "N", conflicts_with = "to")]
    pub keep_last: Option<u64>,
    /// Show the resolved range and the token change; store nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `--reasoning` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReasoningArg {
    /// Remove reasoning.
    Strip,
    /// Leave reasoning (overrides older policies).
    Keep,
}

/// `--tool-calls` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolCallsArg {
    /// Strip arguments and results.
    Strip,
    /// Strip arguments only.
    StripRequests,
    /// Strip results only.
    StripResponses,
    /// Remove calls and results.
    Omit,
    /// Leave them (overrides older policies).
    Keep,
}

/// Formats of `import` and `export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InteropFormat {
    /// JP's events.json (a JSON array of JP events).
    Jp,
    /// OpenAI Chat Completions messages (an array, or an object with `messages`).
    Openai,
    /// One convstore event per line (SPEC §2).
    Ndjson,
}

/// `import`
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Input format.
    #[arg(long, value_enum)]
    pub format: InteropFormat,
    /// The file to read; `-` for stdin.
    pub file: String,
    /// Name of the new conversation (default: the file name without its
    /// extension; none for stdin).
    #[arg(long)]
    pub name: Option<String>,
    /// Machine-readable report.
    #[arg(long)]
    pub json: bool,
}

/// `export`
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Conversation name, id or id prefix.
    pub conversation: String,
    /// Output format.
    #[arg(long, value_enum)]
    pub format: InteropFormat,
    /// Export the projected view instead of the raw history.
    #[arg(long)]
    pub projected: bool,
    /// Only records up to SEQ, or to the newest record at or before TIME
    /// (the view as it was then, with --projected).
    #[arg(long, value_name = "SEQ|TIME", value_parser = parse_as_of)]
    pub as_of: Option<AsOf>,
    /// Write to FILE (atomically: a temporary file renamed over it); `-` for
    /// stdout (the default).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<String>,
}

/// `gen`
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Name of the new conversation.
    pub conversation: String,
    /// How many events, compactions included.
    #[arg(long, default_value_t = 10_000)]
    pub events: u64,
    /// How many of them are compactions.
    #[arg(long, default_value_t = 0)]
    pub compactions: u64,
    /// The seed: the same seed gives the same conversation (and head).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The shape of the conversation.
    #[arg(long, value_enum, default_value_t = Shape::Small)]
    pub shape: Shape,
    /// Events per append: 1 writes the log as an agent storing each event
    /// as it happens (same events and head; more, smaller chunks).
    #[arg(long, default_value_t = crate::generate::BATCH)]
    pub batch: usize,
}

/// Shapes of generated conversations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Ten events a turn, texts of 50 B to 4 KB (mostly under 450 B).
    Small,
    /// Turns, kinds and sizes like the real JP conversations (about 24
    /// events a turn, heavy-tailed; large tool results).
    Jp,
}

/// `log`
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Conversation name, id or id prefix.
    pub conversation: String,
    /// Only records up to SEQ, or to the newest record at or before TIME
    /// (RFC 3339).
    #[arg(long, value_name = "SEQ|TIME", value_parser = parse_as_of)]
    pub as_of: Option<AsOf>,
    /// Print the conversation's lineage instead: itself, then each parent
    /// it was forked from, to the root, one JSON object a line.
    #[arg(long, conflicts_with = "as_of")]
    pub lineage: bool,
}

/// A point in a log's history: a record's seq or a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsOf {
    /// Records `0..=SEQ`.
    Seq(u64),
    /// Records up to the newest one at or before this time.
    Time(convstore_store::Timestamp),
}

fn parse_as_of(text: &str) -> Result<AsOf, String> {
    if let Ok(seq) = text.parse::<u64>() {
        return Ok(AsOf::Seq(seq));
    }
    convstore_store::Timestamp::parse_rfc3339(text)
        .map(AsOf::Time)
        .ok_or_else(|| {
            format!("\"{text}\" is neither a record seq nor an RFC 3339 time (e.g. 2026-03-01T12:00:00Z)")
        })
}

/// `fork`
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The parent: name, id or id prefix.
    pub conversation: String,
    /// Share the parent's turns up to and including turn T.
    #[arg(long, value_name = "T", conflicts_with = "at_seq")]
    pub at_turn: Option<u64>,
    /// Share the parent's records up to and including record S.
    #[arg(long, value_name = "S")]
    pub at_seq: Option<u64>,
    /// Name of the new conversation.
    #[arg(long)]
    pub name: Option<String>,
    /// Then compact the fork's turns with a profile (default: `default`).
    #[arg(long, value_name = "PROFILE", num_args = 0..=1, require_equals = true, default_missing_value = "default")]
    pub compact: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `view`
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// Conversation name, id or id prefix.
    pub conversation: String,
    /// The view's name: a conversation can have several.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Compaction profile the view applies under the log's own overlays
    /// (set when the view is created).
    #[arg(long)]
    pub profile: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Ndjson)]
    pub format: Format,
    /// Write the view to FILE atomically (a temporary file renamed over
    /// it) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// List the conversation's stored views instead.
    #[arg(long, conflicts_with_all = ["profile", "out", "drop"])]
    pub list: bool,
    /// Delete the stored view (the log is untouched).
    #[arg(long, conflicts_with_all = ["profile", "out"])]
    pub drop: bool,
}

/// `pin`
#[derive(Debug, Args)]
pub struct PinArgs {
    /// Conversation name, id or id prefix.
    pub conversation: String,
    /// The turns to pin: `A..B` (inclusive) or `N`.
    #[arg(long, value_name = "A..B", required_unless_present = "list")]
    pub turns: Option<String>,
    /// List the pinned turns instead.
    #[arg(long)]
    pub list: bool,
}

/// `explain`
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Conversation name, id or id prefix.
    pub conversation: String,
    /// The turn to explain.
    #[arg(long, value_name = "T")]
    pub turn: u64,
    /// Explain the view as of SEQ or TIME.
    #[arg(long, value_name = "SEQ|TIME", value_parser = parse_as_of)]
    pub as_of: Option<AsOf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
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

/// `backup`
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Where the copy goes: a new database directory (it must not exist,
    /// or be empty).
    pub dest: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `salvage`
#[derive(Debug, Args)]
pub struct SalvageArgs {
    /// The damaged database directory (only read, never written).
    pub damaged: PathBuf,
    /// Where the recovered database goes (it must not exist, or be empty).
    pub dest: PathBuf,
    /// Machine-readable report: one JSON object per conversation, then a
    /// summary.
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
    /// How tokens are counted: chars4 (four characters a token), cl100k or
    /// o200k (exact, offline).
    #[arg(long, default_value = "chars4", value_name = "NAME")]
    pub tokenizer: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}
