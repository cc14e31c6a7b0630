//! Overlays as the engine sees them: [`Overlay`], built from a stored
//! compaction event.

use std::sync::Arc;

use convstore_store::event::{
    Compaction, HintAction, ReasoningPolicy, ToolCallKind, ToolCallPolicy, ToolHint,
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
    /// `"recall_hints": true`: where this overlay's policies win, stripped
    /// results say which record to recall (`(recall SEQ)`) and summaries
    /// which records they replace (`(recall FROM..TO)`). Off, the view is
    /// exactly SPEC §4's.
    pub recall_hints: bool,
}

/// Whether a compaction asks for recall hints: `"recall_hints": true` among
/// its fields beside the policies.
pub fn wants_recall_hints(compaction: &Compaction) -> bool {
    compaction.info.as_ref().is_some_and(|info| {
        // Most compactions never mention it: skip parsing their fields.
        info.as_str().contains("\"recall_hints\"")
            && serde_json::from_str::<serde_json::Value>(info.as_str())
                .ok()
                .and_then(|v| v.get("recall_hints").and_then(serde_json::Value::as_bool))
                == Some(true)
    })
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

/// Per-tool hints as written: the last hint for a name wins.
type ToolHints = [(String, ToolHint)];

impl ToolPolicy {
    /// The policy a compaction's `tool_calls` field says, whatever form it
    /// was written in (SPEC §4).
    pub fn of(policy: &ToolCallPolicy) -> Self {
        let strip = |request, response| ToolPolicy::Strip {
            request,
            response,
            tools: Vec::new(),
        };
        match policy {
            ToolCallPolicy::Keep => ToolPolicy::Keep,
            ToolCallPolicy::Omit => ToolPolicy::Omit,
            ToolCallPolicy::Strip => strip(true, true),
            ToolCallPolicy::StripRequests => strip(true, false),
            ToolCallPolicy::StripResponses => strip(false, true),
            ToolCallPolicy::Object(object) => match object.policy {
                ToolCallKind::Keep => ToolPolicy::Keep,
                ToolCallKind::Omit => ToolPolicy::Omit,
                ToolCallKind::Strip => ToolPolicy::Strip {
                    request: object.request.unwrap_or(true),
                    response: object.response.unwrap_or(true),
                    tools: object.tools.clone().unwrap_or_default(),
                },
            },
        }
    }

    /// Whether a call to `tool` has its arguments stripped.
    pub fn strips_request(&self, tool: &str) -> bool {
        self.strips(tool, |flags| flags.0, |hint| hint.request)
    }

    /// Whether a result of `tool` has its content stripped.
    pub fn strips_response(&self, tool: &str) -> bool {
        self.strips(tool, |flags| flags.1, |hint| hint.response)
    }

    /// Whether every call's arguments are stripped, whatever its tool.
    pub fn strips_every_request(&self) -> bool {
        self.strips_every(|flags| flags.0, |hint| hint.request)
    }

    /// Whether every result's content is stripped, whatever its tool.
    pub fn strips_every_response(&self) -> bool {
        self.strips_every(|flags| flags.1, |hint| hint.response)
    }

    /// Whether a side is stripped for every tool: its flag is set and no
    /// hint keeps that side of some tool.
    fn strips_every(
        &self,
        flag: impl Fn((bool, bool)) -> bool,
        side: impl Fn(&ToolHint) -> Option<HintAction>,
    ) -> bool {
        self.strip_parts().is_some_and(|(flags, tools)| {
            flag(flags)
                && tools
                    .iter()
                    .all(|(_, hint)| side(hint).is_none_or(|action| action == HintAction::Strip))
        })
    }

    /// A strip policy's `(request, response)` flags and per-tool hints.
    fn strip_parts(&self) -> Option<((bool, bool), &ToolHints)> {
        match self {
            ToolPolicy::Strip {
                request,
                response,
                tools,
            } => Some(((*request, *response), tools)),
            _ => None,
        }
    }

    /// A side's flag, replaced by the tool's hint for that side if it has
    /// one (the last hint written for a name wins).
    fn strips(
        &self,
        tool: &str,
        flag: impl Fn((bool, bool)) -> bool,
        side: impl Fn(&ToolHint) -> Option<HintAction>,
    ) -> bool {
        let Some((flags, tools)) = self.strip_parts() else {
            return false;
        };
        let hint = tools
            .iter()
            .rev()
            .find(|(name, _)| name == tool)
            .and_then(|(_, hint)| side(hint));
        match hint {
            Some(action) => action == HintAction::Strip,
            None => flag(flags),
        }
    }
}

impl Overlay {
    /// The overlay of the compaction event at `seq`. A revert sets all
    /// three policies to keep.
    pub fn from_compaction(seq: u64, timestamp: Timestamp, compaction: &Compaction) -> Self {
        let revert = compaction.is_revert();
        Overlay {
            seq,
            timestamp,
            from_turn: compaction.from_turn,
            to_turn: compaction.to_turn,
            summary: if revert {
                Some(Summary::Keep)
            } else {
                compaction
                    .summary
                    .as_deref()
                    .map(|text| Summary::Text(Arc::from(text)))
            },
            reasoning: if revert {
                Some(ReasoningPolicy::Keep)
            } else {
                compaction.reasoning
            },
            tool_calls: if revert {
                Some(ToolPolicy::Keep)
            } else {
                compaction.tool_calls.as_ref().map(ToolPolicy::of)
            },
            recall_hints: wants_recall_hints(compaction),
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

#[cfg(test)]
#[path = "overlay_tests.rs"]
mod tests;
