//! The command line's shape: clap types only.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use convstore_engine::store;
use convstore_engine::AsOf;

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
    /// The database: a directory (sled), or a PostgreSQL URL
    /// (postgres://USER@HOST/DB).
    #[arg(
        long,
        global = true,
        env = "CONVSTORE_DB",
        hide_env_values = true,
        default_value = "convstore.db",
        value_name = "DIR|URL",
        help_heading = "Global options"
    )]
    pub db: PathBuf,
    /// If another process has the database open, wait up to SECS for it
    /// (without it: fail at once).
    #[arg(
        long,
        global = true,
        value_name = "SECS",
        default_value_t = 0.0,
        hide_default_value = true,
        value_parser = seconds,
        help_heading = "Global options"
    )]
    pub wait: f64,
    /// Configuration file (without it: convstore.toml beside the database,
    /// if there is one).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        help_heading = "Global options"
    )]
    pub config: Option<PathBuf>,
    /// Run the command through a convstore server at URL (`convstore
    /// serve`) instead of opening the database; `$CONVSTORE_TOKEN` is sent
    /// as its bearer token. Without it, a command whose --db is held by a
    /// running server goes through that server.
    #[arg(
        long,
        global = true,
        env = "CONVSTORE_URL",
        hide_env_values = true,
        value_name = "URL",
        value_parser = server_url,
        help_heading = "Global options"
    )]
    pub url: Option<String>,
    /// Print nothing on stderr but errors: no notes, warnings or progress.
    #[arg(long, short, global = true, help_heading = "Global options")]
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
    #[command(after_help = "\
Examples:
  convstore demo
  convstore --db /tmp/demo.db demo")]
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
  convstore gen small --events 10000 --compactions 100
  convstore gen wide --events 1000000 --compactions 10000 --overlays strip")]
    Gen(GenArgs),
    /// Print a conversation's raw records as NDJSON, with seq, turn and
    /// address.
    #[command(after_help = "\
Examples:
  convstore log chat
  convstore log chat --as-of 2026-03-01T12:00:00Z
  convstore log chat-fork --lineage")]
    Log(LogArgs),
    /// Print a conversation's head: the address of its last record (what
    /// `append --expect-head` takes).
    #[command(after_help = "\
Examples:
  convstore head chat
  convstore append chat --expect-head \"$(convstore head chat)\" --user 'Thanks!'
  convstore head chat --json")]
    Head(HeadArgs),
    /// Branch a conversation: the new one shares the parent's records up to
    /// the fork point (nothing is copied) and takes its own appends.
    #[command(after_help = "\
Examples:
  convstore fork chat --name chat-retry
  convstore fork chat --at-turn 12 --name chat-from-12
  convstore fork chat --at-seq 340 --compact=light")]
    Fork(ForkArgs),
    /// Delete a conversation for good: its records, its views, its search
    /// documents, and the long texts and segment files nothing else holds.
    #[command(after_help = "\
A conversation with forks is refused unless --with-forks, which deletes
them too (a fork reads its parent's records: copy one to another database
first to keep it, `convstore copy DB KEEP.db --conv FORK`). Space returns
to the file system as the files holding only deleted records go; `--json`
says how much.

Examples:
  convstore delete scratch
  convstore delete chat --with-forks --json")]
    Delete(DeleteArgs),
    /// Remove one text of one record for good, keeping the chain
    /// verifiable: the record reads as [redacted] and a redaction event is
    /// appended.
    #[command(after_help = "\
The text goes from the record, from the views showing it, from the search
index, and (if nothing else holds it) from the long texts and segment
files; the record keeps the text's hash and length, so `verify` still
proves every other record untouched and names each redaction. In a
database of format 7 (new databases) it also proves the redacted record's
other fields as appended; in an older one only its address. sled keeps
overwritten values in its own files until it reuses their space.

By default the record's main text: `text` (user, assistant, reasoning,
system), `arguments` (tool_call), `content` (tool_result), `payload`
(extension) or `delta` (config); `--field meta` removes its meta.

Examples:
  convstore redact chat 41 --reason 'API key pasted by mistake'
  convstore redact chat 57 --field meta --reason 'personal data' --json")]
    Redact(RedactArgs),
    /// Drop the raw payloads a retention policy no longer needs: by
    /// default those no view shows any more (stripped, dropped or
    /// summarized by a compaction), so every view stays as it is.
    #[command(after_help = "\
The policy is `[retention]` in convstore.toml: `older_than` (unset: any
age), `only_compacted` (default true) and `after_compaction` (default
false: true runs it after each compaction that `compact`, automatic
compaction or `append` stores; not after `import` or `gen`).
--older-than and --all-payloads replace the file's policy for one run.
A dropped payload goes as `redact`
removes a text (from the record, stored views, the search index, the long
texts and segment files nothing else holds): the record keeps the text's
hash and length and reads as [redacted], `verify` proves every other
record untouched and lists each one dropped, and the conversation's head
and length stay (no event is appended). Meta, config events and
compactions' summaries are kept. A fork's shared records are its parent's:
a run over every conversation covers them, and a record stays while any
fork's view shows it. An as-of view from before a compaction, a revert of
it, or a summary written over the range later read [redacted] where the
payload went. sled keeps overwritten values in its own files (`db`,
`blobs/`) until it reuses the space, and `stats` counts bytes as they
were appended.

Examples:
  convstore gc --dry-run                     # what the policy would drop
  convstore gc chat                          # covered payloads of chat
  convstore gc --older-than 90d --json       # covered and older than 90 days
  convstore gc chat --older-than 30d --all-payloads")]
    Gc(GcArgs),
    /// Store a projected view and keep it current; print it or write it to
    /// a file.
    #[command(after_help = "\
Examples:
  convstore view chat                          # the view named default
  convstore view chat --name small --profile default --format openai
  convstore view chat --name small --output view.json --format json
  convstore view chat --list --json")]
    View(ViewArgs),
    /// Pin turns: automatic compaction never covers them.
    #[command(after_help = "\
Examples:
  convstore pin chat --turns 0..2
  convstore pin chat --list --json")]
    Pin(PinArgs),
    /// Unpin turns pinned with `pin`.
    #[command(after_help = "\
Examples:
  convstore unpin chat --turns 1
  convstore unpin chat --all")]
    Unpin(UnpinArgs),
    /// Which overlay won each content type for a turn, and which others
    /// cover it.
    #[command(after_help = "\
Examples:
  convstore explain chat --turn 12
  convstore explain chat --turn 12 --as-of 340 --json")]
    Explain(ExplainArgs),
    /// Re-hash every record and check everything derived from them.
    #[command(after_help = "\
Examples:
  convstore verify
  convstore verify chat --json")]
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
    /// Copy a database, or some of its conversations, into another one, on
    /// any backend (a directory or postgres://...), and check that every
    /// head is identical on both sides.
    #[command(after_help = "\
FROM and TO are database locations: a directory (sled) or a PostgreSQL URL.
TO is created if it does not exist (a new directory, or the schema in an
empty PostgreSQL database). Each conversation appears in TO whole or not at
all; one TO already holds with the same head is skipped, so a copy cut
short can be run again. A fork is copied with the parents it shares
records with.

Examples:
  convstore copy chats.db postgres://me@db.internal/convstore
  convstore copy postgres://me@db.internal/convstore laptop.db --conv chat
  convstore copy old.db new.db --json")]
    Copy(CopyArgs),
    /// Write a new random master key for an encrypted database (64
    /// hexadecimal digits, readable by its owner only). Name it in
    /// convstore.toml (`[encryption] key_file = "..."`) or
    /// $CONVSTORE_KEY_FILE: a database created with it is encrypted.
    #[command(after_help = "\
Each conversation gets its own data key, wrapped by the master key and kept
in KEY_FILE.keyring beside the key file (not in the database): deleting a
conversation deletes its data key, which leaves every copy of its bytes,
in a backup too, unreadable. Keep the key file and the keyring safe and
backed up apart from the database: without them nothing can be read.

Examples:
  convstore keygen ~/.config/convstore/master.key
  printf '[encryption]\\nkey_file = \"master.key\"\\n' > convstore.toml")]
    Keygen(KeygenArgs),
    /// Create or upgrade the schema of a PostgreSQL database (--db
    /// postgres://...).
    #[command(after_help = "\
Commands that create (append, import, gen, demo) set up an empty database
themselves; a database of an older schema is refused until it is migrated.

Examples:
  convstore --db postgres://me@localhost/convstore migrate
  CONVSTORE_DB=postgres:///convstore?host=/run/postgresql convstore migrate")]
    Migrate,
    /// List conversations.
    #[command(after_help = "\
Examples:
  convstore list
  convstore list --json | jq -r '.[].name'")]
    List(ListArgs),
    /// Counts of a conversation: events, turns, bytes and tokens per kind,
    /// raw and projected, and its compactions.
    #[command(after_help = "\
Examples:
  convstore stats chat
  convstore stats chat --tokenizer o200k --json")]
    Stats(StatsArgs),
    /// Serve the database over HTTP: many processes and tools read and
    /// write it at once through this one (a JSON API under /v1, live
    /// follow). Commands given --db of a database it holds go through it.
    #[command(after_help = "\
The API is described at /v1/openapi.json and in docs/server.md. Without
--token-file the server listens on loopback addresses only and every
request is allowed; with it, every request but /healthz needs
Authorization: Bearer TOKEN (read-only tokens may only read).

SIGINT or SIGTERM stops it gracefully: no new connections, requests in
flight finish, appends are flushed and answered, then exit 0.

Examples:
  convstore serve
  convstore --db chats.db serve --listen 127.0.0.1:8080
  convstore serve --listen 0.0.0.0:7377 --token-file tokens.txt
  CONVSTORE_URL=http://127.0.0.1:7377 convstore log chat")]
    Serve(ServeArgs),
    /// Print the raw events behind any part of a view: a stripped tool
    /// result, the turns a summary replaced, a tool call, a range of seqs.
    /// Or answer a model's call of the `recall` tool (`convstore tools`).
    #[command(after_help = "\
A compaction with recall hints (a profile's `recall_hints = true`, or
`compact --recall-hints`) leaves handles in the view: a stripped result
reads `[compacted] NAME: success (recall 1234)`, a summary's header
`[Summary of previous conversation] (recall 12..345)`.

Examples:
  convstore recall chat 1234                   # the record at seq 1234
  convstore recall chat 12..345 --format text  # records 12 to 345
  convstore recall chat --call call_7          # a tool call and its result
  convstore recall chat --summary-of 12        # what the summary at 12 replaced
  convstore recall chat --tool-call '{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"recall\",\"input\":{\"handle\":\"1234\"}}'")]
    Recall(RecallArgs),
    /// Print the JSON definition of the `recall` tool for a model's tools
    /// (answer its calls with `recall --tool-call`).
    #[command(after_help = "\
Examples:
  convstore tools --format openai      # Chat Completions `tools`
  convstore tools --format anthropic   # Messages API `tools`")]
    Tools(ToolsArgs),
    /// Search every conversation (ranked, BM25): each hit with its
    /// conversation, seq, turn, a snippet, and whether the view shows it.
    #[command(after_help = "\
QUERY: words (all must match), \"a phrase\", -word, a OR b.

Examples:
  convstore search 'panic unwrap'
  convstore search '\"connection refused\"' --conv chat --kind tool_result
  convstore search migration --since 2d --limit 5 --json")]
    Search(SearchArgs),
    /// Compare two views, aligned by raw seq: per turn, what one shows that
    /// the other strips, drops or summarizes, and the tokens per type.
    #[command(after_help = "\
A side is CONV (its view now), CONV@SEQ (as of record SEQ), CONV@TIME
(as of the newest record at or before TIME), each optionally followed by
--profile P (the view as if P were applied over every turn).

Examples:
  convstore diff chat@40 chat                       # what came after record 40
  convstore diff chat retry                         # a fork against its parent
  convstore diff chat --profile light chat --profile heavy
  convstore diff chat@2026-03-01T12:00:00Z chat --json")]
    Diff(DiffArgs),
    /// Build the search index anew from every conversation's log.
    #[command(after_help = "\
The index (search/ in the database directory) is derived from the logs
and kept current by every write; `verify` compares it with them.

Examples:
  convstore reindex")]
    Reindex(ReindexArgs),
    /// Serve the database to MCP clients (Model Context Protocol) on stdin
    /// and stdout: views and logs as resources, recall, search and diff as
    /// tools.
    #[command(after_help = "\
The server opens the database for each request and closes it after, so
other processes (a harness appending with `convstore --wait 10 append`)
can use it in between; a request waits up to --wait SECS (10 s if not
given) for them. Writes by anyone are sent to subscribers of the
conversation's resources as notifications/resources/updated.

A client's configuration (docs/mcp.md):
  {\"mcpServers\": {\"convstore\": {\"command\": \"convstore\",
    \"args\": [\"--db\", \"/path/to/convstore.db\", \"mcp\"]}}}

Examples:
  convstore --db chats.db mcp
  convstore --db chats.db mcp --allow-write   # adds the append and compact tools")]
    Mcp(McpArgs),
    /// Print a shell completion script (conversation names complete too).
    #[command(after_help = "\
Examples:
  convstore completions bash > ~/.local/share/bash-completion/completions/convstore
  convstore completions zsh > ~/.zfunc/_convstore
  convstore completions fish > ~/.config/fish/completions/convstore.fish")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Completes conversation arguments with the names (else ids) of the
/// conversations in the database the words being completed name with
/// `--db`, else `$CONVSTORE_DB`, else `./convstore.db`.
fn conversations() -> clap_complete::engine::ArgValueCandidates {
    clap_complete::engine::ArgValueCandidates::new(|| {
        // The shell passes the words of the command line being completed
        // as arguments (`convstore -- convstore --db X project ...`).
        let words: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let mut given = None;
        for (i, word) in words.iter().enumerate() {
            let word = word.to_string_lossy();
            if word == "--db" {
                given = words.get(i + 1).cloned();
            } else if let Some(value) = word.strip_prefix("--db=") {
                given = Some(value.into());
            }
        }
        let db = given
            .or_else(|| std::env::var_os("CONVSTORE_DB").filter(|v| !v.is_empty()))
            .unwrap_or_else(|| "convstore.db".into());
        let Ok(store) =
            convstore_store::Store::open_with(db, &convstore_store::OpenOptions::existing())
        else {
            return Vec::new();
        };
        store
            .conversations()
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                let plural = crate::output::plural;
                let help = format!("{}, {}", plural(c.len, "event"), plural(c.turns, "turn"));
                clap_complete::engine::CompletionCandidate::new(
                    c.name.unwrap_or_else(|| c.id.hex()),
                )
                .help(Some(help.into()))
            })
            .collect()
    })
}

/// `serve`
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address and port to listen on (port 0: any free port; the URL
    /// is printed on stdout).
    #[arg(long, default_value = "127.0.0.1:7377", value_name = "ADDR:PORT")]
    pub listen: std::net::SocketAddr,
    /// Bearer tokens, one a line: `read-only TOKEN` or `read-write TOKEN`.
    /// Needed to listen beyond loopback.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The largest request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024 * 1024, value_parser = at_least_one::<usize>)]
    pub max_body_bytes: usize,
    /// The largest event an append takes, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = convstore_store::DEFAULT_MAX_EVENT_BYTES, value_parser = at_least_one::<u64>)]
    pub max_event_bytes: u64,
    /// Open connections at most (more are answered 503).
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = at_least_one::<usize>)]
    pub max_connections: usize,
    /// Requests handled at once at most (more are answered 503).
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = at_least_one::<usize>)]
    pub max_in_flight: usize,
    /// How long a read may take to answer (408 after it); writes are never
    /// cut short.
    #[arg(long, value_name = "SECS", default_value_t = 120.0, value_parser = positive_seconds)]
    pub request_timeout: f64,
    /// A follower this many records behind the log is told so.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = at_least_one::<u64>)]
    pub follow_behind: u64,
    /// Offer the MCP endpoint's (`/mcp`) `append` and `compact` tools
    /// (read-write tokens then; without it read-only tokens may use it).
    #[arg(long)]
    pub mcp_allow_write: bool,
}

/// `append`
#[derive(Debug, Args)]
pub struct AppendArgs {
    /// Conversation name, full id or id:PREFIX. A name that does not exist
    /// is created; a bare id prefix is read as a name.
    #[arg(add = conversations(), value_parser = conversation)]
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
    #[arg(long, value_name = "HASH", value_parser = address)]
    pub expect_head: Option<String>,
    /// Return without waiting for the write to be durable.
    #[arg(long)]
    pub no_sync: bool,
    /// Then compact automatically if the view needs it
    /// ([compaction.auto] in the configuration).
    #[arg(long)]
    pub auto: bool,
    /// The largest event accepted, in bytes (an NDJSON line, or an event's
    /// record and texts).
    #[arg(long, value_name = "BYTES", default_value_t = convstore_store::DEFAULT_MAX_EVENT_BYTES, value_parser = at_least_one::<u64>)]
    pub max_event_bytes: u64,
}

/// `project`
#[derive(Debug, Args)]
pub struct ProjectArgs {
    /// Conversation name, id or id prefix.
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Ndjson)]
    pub format: Format,
    /// The view as it was when record SEQ was the newest, or at TIME
    /// (RFC 3339: as of the newest record at or before it).
    #[arg(long, value_name = "SEQ|TIME", value_parser = parse_as_of)]
    pub as_of: Option<AsOf>,
    /// Only view events of these turns: `A..B` (inclusive), `A..`, `..B`, `N`.
    #[arg(long, value_name = "A..B", value_parser = turns, allow_hyphen_values = true)]
    pub turns: Option<String>,
    /// Write to FILE (atomically: a temporary file renamed over it); `-` for
    /// stdout (the default).
    #[arg(long, short, value_name = "FILE", visible_alias = "out", value_parser = path)]
    pub output: Option<String>,
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

impl From<Format> for convstore_engine::format::Format {
    fn from(format: Format) -> Self {
        match format {
            Format::Ndjson => Self::Ndjson,
            Format::Json => Self::Json,
            Format::Openai => Self::Openai,
            Format::Text => Self::Text,
        }
    }
}

/// `compact`
#[derive(Debug, Args)]
#[allow(clippy::struct_excessive_bools)] // one per flag
pub struct CompactArgs {
    /// Conversation name, full id or id:PREFIX (a command that writes
    /// takes no bare id prefix).
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// Reasoning policy.
    #[arg(long, value_enum)]
    pub reasoning: Option<ReasoningArg>,
    /// Tool call policy.
    #[arg(long, value_enum)]
    pub tool_calls: Option<ToolCallsArg>,
    /// Replace the range with this summary text (the range widens over any
    /// summary it meets).
    #[arg(long, value_name = "TEXT", value_parser = text)]
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
    #[arg(long, default_value = "chars4", value_name = "NAME", value_parser = tokenizer)]
    pub tokenizer: String,
    /// First turn of the range (default 0).
    #[arg(long, value_name = "BOUND", allow_hyphen_values = true, value_parser = bound)]
    pub from: Option<String>,
    /// Last turn of the range (default: the last turn; with `[compaction]
    /// keep_last = N` in convstore.toml, the newest N turns are left out).
    #[arg(long, value_name = "BOUND", allow_hyphen_values = true, value_parser = bound)]
    pub to: Option<String>,
    /// Leave the newest N turns out of the range (`--to -N`).
    #[arg(long, value_name = "N", conflicts_with = "to")]
    pub keep_last: Option<u64>,
    /// Show the resolved range and the token change; store nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Stripped results and summaries say which records to recall:
    /// `[compacted] NAME: success (recall SEQ)` (a profile's
    /// `recall_hints = true` does the same).
    #[arg(long)]
    pub recall_hints: bool,
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
    /// OpenAI Chat Completions messages (an array; imports also take an
    /// object with `messages`).
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
    #[arg(long, value_parser = new_name)]
    pub name: Option<String>,
    /// Machine-readable report.
    #[arg(long)]
    pub json: bool,
    /// The largest event accepted, in bytes (an NDJSON line, or an event's
    /// record and texts).
    #[arg(long, value_name = "BYTES", default_value_t = convstore_store::DEFAULT_MAX_EVENT_BYTES, value_parser = at_least_one::<u64>)]
    pub max_event_bytes: u64,
}

/// `export`
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Conversation name, id or id prefix.
    #[arg(add = conversations(), value_parser = conversation)]
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
    #[arg(long, short, value_name = "FILE", visible_alias = "out", value_parser = path)]
    pub output: Option<String>,
}

/// `gen`
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Name of the new conversation.
    #[arg(add = conversations(), value_parser = conversation)]
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
    #[arg(long, default_value_t = convstore_engine::generate::BATCH)]
    pub batch: usize,
    /// What the compactions do.
    #[arg(long, value_enum, default_value_t = GenOverlays::Mixed)]
    pub overlays: GenOverlays,
}

/// What generated compactions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GenOverlays {
    /// 10% summaries, 45% strip reasoning and tool calls, 45% another
    /// tool-call policy (the view keeps a few percent of the events).
    Mixed,
    /// Every one strips reasoning and tool calls over a random range: no
    /// summaries, nothing omitted (the view keeps most events).
    Strip,
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
    #[arg(add = conversations(), value_parser = conversation)]
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

/// `A..B` (both inclusive), `A..`, `..B`, `A..=B` or `N`.
pub fn parse_turns(text: &str) -> Result<std::ops::RangeInclusive<u64>, String> {
    convstore_engine::turns::parse(text)
}

/// A server's URL, as `convstore serve` prints it: `http://` or
/// `https://` (any case), a host, perhaps a path under which the API is
/// served; no query, fragment or credentials (the command line adds its
/// own paths, and sends its token from `$CONVSTORE_TOKEN`). Given back
/// with a lower-case scheme and no trailing `/`.
fn server_url(text: &str) -> Result<String, String> {
    let lower = text.to_ascii_lowercase();
    let Some(scheme) = ["http://", "https://"]
        .into_iter()
        .find(|scheme| lower.starts_with(scheme))
    else {
        return Err("not an http:// URL (a server, as `convstore serve` prints it)".to_owned());
    };
    let no_server = || {
        Err("names no server (as `convstore serve` prints it: http://127.0.0.1:7377)".to_owned())
    };
    let rest = text[scheme.len()..].trim_end_matches('/');
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() {
        return no_server();
    }
    if rest.contains(['?', '#']) {
        return Err("a server's URL takes no query or fragment".to_owned());
    }
    // Anywhere before a query: a password may hold `/`.
    if rest.contains('@') {
        return Err(
            "a server's URL takes no user or password (the command line sends $CONVSTORE_TOKEN)"
                .to_owned(),
        );
    }
    // The host and port, as a URL parser would take them.
    let (name, port) = match host.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((address, after)) => (address, after.strip_prefix(':')),
            None => return Err("an IPv6 address without its closing ]".to_owned()),
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return no_server();
    }
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Err("the port is not a number from 0 to 65535".to_owned());
    }
    Ok(format!("{scheme}{rest}"))
}

/// A conversation argument: a name, a full id or `id:PREFIX` (or a bare
/// id prefix, which is a name too), in Unicode NFC: names are stored so,
/// and a name typed in another form (a decomposed `é`) finds them. What
/// cannot name a conversation is a usage error.
fn conversation(text: &str) -> Result<String, String> {
    use unicode_normalization::UnicodeNormalization as _;
    let text: String = text.nfc().collect();
    if let Some(hex) = text.strip_prefix(store::ID_MARKER) {
        if !(4..=32).contains(&hex.len()) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("id: takes 4 to 32 hex digits of a conversation id".to_owned());
        }
    }
    let id = text.starts_with(store::ID_MARKER)
        || (text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()));
    if id {
        return Ok(text);
    }
    store::validate_conversation_name(&text)
        .map(|()| text)
        .map_err(|e| e.to_string())
}

/// A side of `diff`: a conversation, or `CONV@SEQ|TIME` (checked when
/// the database is read: a name may hold `@`).
fn side(text: &str) -> Result<String, String> {
    use unicode_normalization::UnicodeNormalization as _;
    let text: String = text.nfc().collect();
    if text.is_empty() {
        return Err("an empty side".to_owned());
    }
    Ok(text)
}

/// The name of a conversation a command creates.
fn new_name(text: &str) -> Result<String, String> {
    use unicode_normalization::UnicodeNormalization as _;
    let text: String = text.nfc().collect();
    store::validate_conversation_name(&text)
        .map(|()| text)
        .map_err(|e| e.to_string())
}

/// A view's name.
fn view_name(text: &str) -> Result<String, String> {
    store::validate_view_name(text)
        .map(|()| text.to_owned())
        .map_err(|e| e.to_string())
}

fn turns(text: &str) -> Result<String, String> {
    parse_turns(text).map(|_| text.to_owned())
}

fn seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(secs) if (0.0..=1e9).contains(&secs) => Ok(secs),
        _ => Err(format!("\"{text}\" is not a number of seconds (0 or more)")),
    }
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    match seconds(text) {
        Ok(secs) if secs >= 0.01 => Ok(secs),
        _ => Err(format!(
            "\"{text}\" is not a number of seconds (0.01 or more)"
        )),
    }
}

/// A limit: a whole number of at least 1 (0 would refuse everything).
fn at_least_one<N: std::str::FromStr + PartialOrd + From<u8>>(text: &str) -> Result<N, String> {
    match text.parse::<N>() {
        Ok(n) if n >= N::from(1) => Ok(n),
        _ => Err(format!("\"{text}\" is not a whole number of at least 1")),
    }
}

fn address(text: &str) -> Result<String, String> {
    convstore_engine::store::Address::from_hex(&text.to_ascii_lowercase())
        .map(|_| text.to_owned())
        .ok_or_else(|| format!("\"{text}\" is not a 64-digit hex address"))
}

fn tokenizer(text: &str) -> Result<String, String> {
    match text {
        "chars4" | "cl100k" | "cl100k_base" | "o200k" | "o200k_base" => Ok(text.to_owned()),
        _ => Err(format!(
            "no tokenizer named \"{text}\" (chars4, cl100k, o200k)"
        )),
    }
}

fn bound(text: &str) -> Result<String, String> {
    convstore_engine::projection::bounds::Bound::parse(text)
        .map(|_| text.to_owned())
        .map_err(|e| e.to_string())
}

fn text(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        Err("an empty text".to_owned())
    } else {
        Ok(text.to_owned())
    }
}

fn path(text: &str) -> Result<String, String> {
    if text.is_empty() {
        Err("an empty path".to_owned())
    } else {
        Ok(text.to_owned())
    }
}

/// A duration as `[retention] older_than` takes it (checked here, so a
/// bad one is a usage error; kept as given).
fn duration(text: &str) -> Result<String, String> {
    convstore_projection::config::parse_age(text).map(|_| text.to_owned())
}

fn parse_as_of(text: &str) -> Result<AsOf, String> {
    AsOf::parse(text).ok_or_else(|| {
        format!(
            "\"{text}\" is neither a record seq nor an RFC 3339 time (e.g. 2026-03-01T12:00:00Z)"
        )
    })
}

/// `fork`
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The parent: name, id or id prefix.
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// Share the parent's turns up to and including turn T.
    #[arg(long, value_name = "T", conflicts_with = "at_seq")]
    pub at_turn: Option<u64>,
    /// Share the parent's records up to and including record S.
    #[arg(long, value_name = "S")]
    pub at_seq: Option<u64>,
    /// Name of the new conversation; without one it has none, and is
    /// named by its id (`id:PREFIX`, as printed).
    #[arg(long, value_parser = new_name)]
    pub name: Option<String>,
    /// Then compact the fork's turns with a profile (default: `default`).
    #[arg(long, value_name = "PROFILE", num_args = 0..=1, require_equals = true, default_missing_value = "default")]
    pub compact: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `delete`
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Conversation name, full id or id:PREFIX.
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// Delete its forks (and theirs) with it.
    #[arg(long)]
    pub with_forks: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `redact`
#[derive(Debug, Args)]
pub struct RedactArgs {
    /// Conversation name, full id or id:PREFIX.
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// The record's seq (as `convstore log` shows it).
    pub seq: u64,
    /// The text to remove (default: the record's main text).
    #[arg(long, value_parser = ["text", "content", "arguments", "payload", "delta", "meta"])]
    pub field: Option<String>,
    /// Why: kept with the record and in the redaction event (one line, at
    /// most 400 bytes).
    #[arg(long)]
    pub reason: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `gc`
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Only this conversation's own records (name, full id or
    /// id:PREFIX); every conversation if omitted.
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: Option<String>,
    /// Only payloads of records older than this (45s, 30m for minutes,
    /// 12h, 90d, 2w), in place of `[retention] older_than`.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = duration)]
    pub older_than: Option<String>,
    /// Drop payloads views still show too (needs an age): those records
    /// read [redacted] in the view.
    #[arg(long)]
    pub all_payloads: bool,
    /// Say what would go and how many bytes; store nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `view`
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// Conversation name, full id or id:PREFIX (a command that writes
    /// takes no bare id prefix).
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// The view's name: a conversation can have several.
    #[arg(long, default_value = "default", value_parser = view_name)]
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
    #[arg(long, short, value_name = "FILE", visible_alias = "out", value_parser = path)]
    pub output: Option<String>,
    /// List the conversation's stored views instead.
    #[arg(long, conflicts_with_all = ["profile", "output", "drop"])]
    pub list: bool,
    /// Delete the stored view (the log is untouched).
    #[arg(long, conflicts_with_all = ["profile", "output"])]
    pub drop: bool,
    /// Machine-readable output (with --list).
    #[arg(long, requires = "list")]
    pub json: bool,
}

/// `pin`
#[derive(Debug, Args)]
pub struct PinArgs {
    /// Conversation name, full id or id:PREFIX (a command that writes
    /// takes no bare id prefix).
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// The turns to pin: `A..B` (inclusive), `A..` (from A on, later turns included) or `N`.
    #[arg(long, value_name = "A..B", required_unless_present = "list", value_parser = turns, allow_hyphen_values = true)]
    pub turns: Option<String>,
    /// List the pinned turns instead.
    #[arg(long, conflicts_with = "turns")]
    pub list: bool,
    /// Machine-readable output: the pinned ranges as `[[first, last], ...]`
    /// (`last` null for an open range).
    #[arg(long)]
    pub json: bool,
}

/// `unpin`
#[derive(Debug, Args)]
pub struct UnpinArgs {
    /// Conversation name, full id or id:PREFIX.
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// The turns to unpin: `A..B` (inclusive), `A..` or `N`.
    #[arg(long, value_name = "A..B", required_unless_present = "all", value_parser = turns, allow_hyphen_values = true)]
    pub turns: Option<String>,
    /// Unpin every turn.
    #[arg(long, conflicts_with = "turns")]
    pub all: bool,
}

/// `head`
#[derive(Debug, Args)]
pub struct HeadArgs {
    /// Conversation name, id or id prefix.
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// Machine-readable output: id, name, head, events, turns.
    #[arg(long)]
    pub json: bool,
}

/// `explain`
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Conversation name, id or id prefix.
    #[arg(add = conversations(), value_parser = conversation)]
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
    #[arg(add = conversations(), value_parser = conversation)]
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

/// `keygen`
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Where the key goes (a new file).
    pub key_file: PathBuf,
}

/// `copy`
#[derive(Debug, Args)]
pub struct CopyArgs {
    /// The database copied from (only read).
    pub from: PathBuf,
    /// The database copied into (created if it does not exist).
    pub to: PathBuf,
    /// Only this conversation (name, id or id prefix in FROM); repeat for
    /// more.
    #[arg(long = "conv", value_name = "CONV")]
    pub conversations: Vec<String>,
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

/// `recall`
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["target", "call", "summary_of", "tool_call"])))]
#[command(
    override_usage = "convstore recall [OPTIONS] <CONVERSATION> <SEQ|FROM..TO|--call <ID>|--summary-of <SEQ>|--tool-call <JSON>>"
)]
pub struct RecallArgs {
    /// Conversation name, id or id prefix.
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// A record's seq (`1234`) or a range of seqs, both included (`12..345`):
    /// the handle a recall hint gives.
    #[arg(value_name = "SEQ|FROM..TO", value_parser = handle)]
    pub target: Option<String>,
    /// Every tool call and result with this call id.
    #[arg(long, value_name = "ID")]
    pub call: Option<String>,
    /// The conversation events the summary standing for record SEQ replaced.
    #[arg(long, value_name = "SEQ")]
    pub summary_of: Option<u64>,
    /// Answer a model's call of the `recall` tool (OpenAI or Anthropic
    /// shape, or the arguments alone; `-` reads it from stdin): prints the
    /// tool result message in the same shape.
    #[arg(long, value_name = "JSON")]
    pub tool_call: Option<String>,
    /// The answer's budget with --tool-call, in tokens (four characters a
    /// token; 120 at least, a smaller one is raised to it): what does not
    /// fit is cut, and the answer says how to get it.
    #[arg(long, value_name = "N", default_value_t = convstore_engine::recall::DEFAULT_MAX_TOKENS, requires = "tool_call", value_parser = at_least_one::<u64>)]
    pub max_tokens: u64,
    /// Output format (not with --tool-call).
    #[arg(long, value_enum, default_value_t = RecallFormat::Ndjson, conflicts_with = "tool_call")]
    pub format: RecallFormat,
    /// Resolve --summary-of and check seqs in the view as of SEQ or TIME.
    #[arg(long, value_name = "SEQ|TIME", value_parser = parse_as_of, conflicts_with = "tool_call")]
    pub as_of: Option<AsOf>,
}

/// `search`
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// What to look for.
    #[arg(value_parser = text)]
    pub query: String,
    /// Only this conversation (with the records a fork shares with its
    /// parents).
    #[arg(long, add = conversations(), value_parser = conversation)]
    pub conv: Option<String>,
    /// Only events of this kind (repeatable).
    #[arg(long, value_name = "KIND", value_parser = clap::builder::PossibleValuesParser::new(["user", "assistant", "reasoning", "tool_call", "tool_result", "system", "config", "extension", "compaction"]))]
    pub kind: Vec<String>,
    /// Only records at or after TIME (RFC 3339), or from the last 90m, 5h,
    /// 2d...
    #[arg(long, value_name = "TIME", value_parser = since)]
    pub since: Option<convstore_engine::store::Timestamp>,
    /// How many hits.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub limit: u64,
    /// Machine-readable output: a JSON array of hits.
    #[arg(long)]
    pub json: bool,
    /// Say on stderr how long the query took, and the check of the index
    /// against the logs before it.
    #[arg(long)]
    pub stats: bool,
}

fn since(text: &str) -> Result<convstore_engine::store::Timestamp, String> {
    crate::cmd::parse_since(text)
}

/// `diff`
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The two sides: CONV, CONV@SEQ or CONV@TIME.
    #[arg(required = true, value_name = "SIDE", action = clap::ArgAction::Append, add = conversations(), value_parser = side)]
    pub sides: Vec<String>,
    /// Apply this profile to the side it follows (over every turn).
    #[arg(long, value_name = "P", action = clap::ArgAction::Append)]
    pub profile: Vec<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `reindex`
#[derive(Debug, Args)]
pub struct ReindexArgs {
    /// Machine-readable output: `{"conversations": N, "records": N}`.
    #[arg(long)]
    pub json: bool,
}

/// `mcp`
#[derive(Debug, Args)]
pub struct McpArgs {
    /// Offer the tools that write: `append` and `compact`.
    #[arg(long)]
    pub allow_write: bool,
}

/// `recall` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RecallFormat {
    /// One raw record per line, as `log` prints them (seq, turn, address,
    /// the event's fields).
    Ndjson,
    /// Each record's header line, then its text, whole.
    Text,
}

/// `tools`
#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// Whose tool definition shape.
    #[arg(long, value_enum, default_value_t = ToolsFormat::Openai)]
    pub format: ToolsFormat,
}

/// `tools` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolsFormat {
    /// OpenAI Chat Completions (`{"type":"function","function":{...}}`).
    Openai,
    /// Anthropic Messages (`{"name","description","input_schema"}`).
    Anthropic,
}

fn handle(text: &str) -> Result<String, String> {
    convstore_engine::recall::Target::parse_handle(text)
        .map(|_| text.to_owned())
        .ok_or_else(|| format!("\"{text}\" is neither a seq (1234) nor a range of seqs (12..345)"))
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
    #[arg(add = conversations(), value_parser = conversation)]
    pub conversation: String,
    /// How tokens are counted: chars4 (four characters a token), cl100k or
    /// o200k (exact, offline).
    #[arg(long, default_value = "chars4", value_name = "NAME", value_parser = tokenizer)]
    pub tokenizer: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}
