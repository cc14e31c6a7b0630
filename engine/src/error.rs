//! The engine's errors: [`Error`].

use convstore_projection::bounds::{BoundError, RangeError};
use convstore_projection::config::ConfigError;
use convstore_projection::summarize::SummarizeError;
use convstore_projection::TokenizerError;
use convstore_store::{StoreError, Timestamp};

/// Errors of engine operations. Each says what happened in words a user
/// can act on; the faces (command line, server) add which of their inputs
/// it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A location whose kind of database this build cannot open.
    #[error("{location}: a URL, not a directory; this convstore opens a directory or a postgres:// URL (no {scheme}:// backend)")]
    UnsupportedLocation {
        /// The location as given, without its password.
        location: String,
        /// Its scheme.
        scheme: String,
    },
    /// The store failed or refused (a conversation not found, a conflict,
    /// a damaged record, a disk error, ...).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The configuration cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The configuration file could not be read.
    #[error("cannot read {path}: {source}")]
    ConfigFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The configuration in a file cannot be used.
    #[error("{path}: {source}")]
    ConfigIn {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong in it.
        source: ConfigError,
    },
    /// A summarizer wrote no summary.
    #[error("the {summarizer} summarizer failed: {source}")]
    Summarizer {
        /// Which one: `extractive`, `command`, `openai`.
        summarizer: &'static str,
        /// What went wrong.
        source: SummarizeError,
    },
    /// A summarizer wrote an empty summary.
    #[error("the {0} summarizer wrote an empty summary")]
    EmptySummary(&'static str),
    /// A summarizer is configured without what it needs.
    #[error("the {summarizer} summarizer needs {what}")]
    SummarizerSetup {
        /// Which one.
        summarizer: &'static str,
        /// What it lacks.
        what: &'static str,
    },
    /// No tokenizer by that name, or it did not load.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A range bound does not parse or names no turn.
    #[error(transparent)]
    Bound(#[from] BoundError),
    /// A compaction range that is empty or names no turn.
    #[error(transparent)]
    Range(#[from] RangeError),
    /// A turn that does not exist.
    #[error("turn {turn} does not exist ({})", turns_note(*turns))]
    NoSuchTurn {
        /// The turn asked for.
        turn: u64,
        /// How many turns there are.
        turns: u64,
    },
    /// A turn range that names no turn that exists.
    #[error("{range}: names no turn ({})", turns_note(*turns))]
    NoTurnInRange {
        /// The range as given.
        range: String,
        /// How many turns there are.
        turns: u64,
    },
    /// A turn range that does not parse or is inverted.
    #[error("{range}: {problem}")]
    BadTurns {
        /// The range as given.
        range: String,
        /// What is wrong.
        problem: String,
    },
    /// No record is at or before the time asked for.
    #[error("no record is at or before {0}")]
    NothingAsOf(Timestamp),
    /// A conversation with no records, where some are needed.
    #[error("conversation {0} is empty: there is nothing to {1}")]
    EmptyConversation(String, &'static str),
    /// A compaction without any policy.
    #[error("no policy: the profile sets none; give reasoning, tool calls, a summary or a revert")]
    NoPolicy,
    /// Instructions for a summarizer when none runs.
    #[error(
        "instructions given, but no summarizer runs (ask for a summary or use a profile with one)"
    )]
    InstructionsWithoutSummarizer,
    /// A compaction that would not shrink the view (refused unless forced).
    #[error("inflated: the compaction would not shrink the view ({before} -> {after} tokens); nothing was stored")]
    Inflated {
        /// Tokens of the view before.
        before: u64,
        /// Tokens of the view it would give.
        after: u64,
    },
    /// A view profile that writes a summary (views apply mechanical
    /// profiles only).
    #[error("profile \"{0}\" writes a summary; a view applies profiles that strip or omit only")]
    SummaryProfile(String),
    /// A stored view that exists with another profile.
    #[error("view \"{name}\" exists with {existing}; drop it to change its profile")]
    ViewProfile {
        /// The view.
        name: String,
        /// `profile P` or `no profile`.
        existing: String,
    },
    /// A view name convstore keeps for its own views.
    #[error("view names starting with \".\" are convstore's own (\"{0}\")")]
    ReservedViewName(String),
    /// A stored view that other updates keep changing.
    #[error("view \"{0}\" keeps changing under this update; try again")]
    ViewBusy(String),
    /// A stored view that vanished while it was written.
    #[error("view \"{0}\" vanished while being written")]
    ViewVanished(String),
    /// A fork's compaction that would have nothing to compact.
    #[error("the fork would be empty: there is nothing to compact")]
    EmptyFork,
    /// Arguments that cannot be used together or at all (generator
    /// settings, ...).
    #[error("{0}")]
    Invalid(String),
    /// Other writers kept changing what an operation must see unchanged.
    #[error("{0}")]
    Busy(String),
    /// Input that cannot be read: where, and what is wrong.
    #[error("{at}: {problem}")]
    Input {
        /// The position: `line 3`, `event 12`, `message 4`.
        at: String,
        /// What is wrong there.
        problem: String,
    },
    /// No tool call or result has this call id.
    #[error("no tool call or result has the id \"{0}\"")]
    NoSuchCall(String),
    /// A record whose turn no summary replaces in the view.
    #[error("record {seq} (turn {turn}) is not replaced by a summary in the view")]
    NotSummarized {
        /// The seq asked about.
        seq: u64,
        /// Its turn.
        turn: u64,
    },
    /// The search index failed.
    #[error("search index: {0}")]
    Search(String),
    /// Reading input or writing output failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Results of engine operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `the conversation has 6 turns, 0..5`.
pub fn turns_note(turns: u64) -> String {
    match turns {
        0 => "the conversation has no turn".to_owned(),
        1 => "the conversation has 1 turn, turn 0".to_owned(),
        n => format!("the conversation has {n} turns, 0..{}", n - 1),
    }
}

impl Error {
    /// Whether this is a lost race that a retry from fresh state can win:
    /// another writer changed the head or the view first.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Store(StoreError::HeadMismatch { .. }))
    }

    /// Whether this is a mistake in what a caller (a model calling a tool)
    /// asked for, rather than a failure: a record or call that does not
    /// exist, a range that names nothing.
    pub fn is_model_mistake(&self) -> bool {
        matches!(
            self,
            Error::Store(StoreError::NoSuchRecord { .. })
                | Error::NoSuchCall(_)
                | Error::NotSummarized { .. }
                | Error::Invalid(_)
        )
    }
}
