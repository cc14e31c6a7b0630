//! Overlays as the engine sees them: [`Overlay`], built from a stored
//! compaction event.

use std::sync::Arc;

use convstore_store::event::{
    Compaction, ReasoningPolicy, SummaryPolicy, ToolCallAction, ToolHint,
};
use convstore_store::Timestamp;

/// A compaction overlay: its place in the log (for ordering) and its
/// policies, resolved from the form they were written in.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlay {
    /// The seq of the compaction event.
    pub seq: u64,
    /// Its timestamp: the greatest wins.
    pub timestamp: Timestamp,
    /// First covered turn (inclusive).
    pub from_turn: u64,
    /// Last covered turn (inclusive), before clamping to the stream.
    pub to_turn: u64,
    /// The summary policy, if set.
    pub summary: Option<Summary>,
    /// The reasoning policy, if set.
    pub reasoning: Option<ReasoningPolicy>,
    /// The tool-call policy, if set.
    pub tool_calls: Option<ToolPolicy>,
}

/// A summary policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Summary {
    /// Replace the covered conversation events with this text.
    Text(Arc<str>),
    /// Leave the events (from `revert`).
    Keep,
}

/// A tool-call policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolPolicy {
    /// Leave calls and results.
    Keep,
    /// Remove calls and results.
    Omit,
    /// Strip arguments and/or results, per-tool hints replacing the flags.
    Strip {
        /// Strip arguments.
        request: bool,
        /// Strip results.
        response: bool,
        /// Per-tool hints, as written (the last hint for a name wins).
        tools: Vec<(String, ToolHint)>,
    },
}

impl ToolPolicy {
    fn of(action: ToolCallAction<'_>) -> Self {
        match action {
            ToolCallAction::Keep => ToolPolicy::Keep,
            ToolCallAction::Omit => ToolPolicy::Omit,
            ToolCallAction::Strip {
                request,
                response,
                tools,
            } => ToolPolicy::Strip {
                request,
                response,
                tools: tools.to_vec(),
            },
        }
    }

    fn action(&self) -> ToolCallAction<'_> {
        match self {
            ToolPolicy::Keep => ToolCallAction::Keep,
            ToolPolicy::Omit => ToolCallAction::Omit,
            ToolPolicy::Strip {
                request,
                response,
                tools,
            } => ToolCallAction::Strip {
                request: *request,
                response: *response,
                tools,
            },
        }
    }

    /// Whether a call to `tool` has its arguments stripped.
    pub fn strips_request(&self, tool: &str) -> bool {
        self.action().strips_request(tool)
    }

    /// Whether a result of `tool` has its content stripped.
    pub fn strips_response(&self, tool: &str) -> bool {
        self.action().strips_response(tool)
    }
}

impl Overlay {
    /// The overlay of the compaction event at `seq`.
    pub fn from_compaction(seq: u64, timestamp: Timestamp, compaction: &Compaction) -> Self {
        Overlay {
            seq,
            timestamp,
            from_turn: compaction.from_turn,
            to_turn: compaction.to_turn,
            summary: compaction.summary_policy().map(|s| match s {
                SummaryPolicy::Text(text) => Summary::Text(Arc::from(text)),
                SummaryPolicy::Keep => Summary::Keep,
            }),
            reasoning: compaction.reasoning_policy(),
            tool_calls: compaction.tool_call_policy().map(ToolPolicy::of),
        }
    }

    /// The order in which overlays win: greater timestamp, then later in
    /// the log.
    pub fn precedence(&self) -> (Timestamp, u64) {
        (self.timestamp, self.seq)
    }

    /// The turns this overlay covers in a stream whose last turn is
    /// `last_turn`, if any.
    pub fn covered(&self, last_turn: u64) -> Option<(u64, u64)> {
        let last = self.to_turn.min(last_turn);
        (self.from_turn <= last).then_some((self.from_turn, last))
    }
}
