//! Which overlay decides what a turn looks like: [`explain`].
//!
//! The winners come from the projection's own resolution
//! (`convstore_projection::resolve`), the one every view is made with, so
//! what `explain` says is what the view does.

use convstore_projection::{ContentType, Overlay, Summary, ToolPolicy};
use convstore_store::event::ReasoningPolicy;
use convstore_store::{ConversationId, Store};
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::pipeline::{self, Scope};

/// What decides a turn's view.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Explanation {
    /// The turn.
    pub turn: u64,
    /// The newest record in scope (`None` for an empty log).
    pub as_of: Option<u64>,
    /// The winning overlay per content type (summary, reasoning, tool
    /// calls), if any sets it.
    pub winners: Vec<(ContentType, Option<Overlay>)>,
    /// Every overlay covering the turn, oldest first (by precedence).
    pub covering: Vec<Overlay>,
}

/// Explains `turn` of `id`'s view over the records in `scope`.
pub fn explain(store: &Store, id: &ConversationId, scope: Scope, turn: u64) -> Result<Explanation> {
    let turns = scope.turns(store, id)?;
    if turn >= turns {
        return Err(Error::NoSuchTurn { turn, turns });
    }
    let last_turn = turns - 1;
    // Only the overlays that meet the turn decide it.
    let resolution =
        pipeline::resolve_turns(store, id, scope.end, last_turn, &[(turn, turn)], None)?;
    let mut covering: Vec<Overlay> = resolution
        .overlays
        .iter()
        .filter(|o| {
            o.covered(last_turn)
                .is_some_and(|(a, b)| (a..=b).contains(&turn))
        })
        .cloned()
        .collect();
    covering.sort_by_key(Overlay::precedence);
    let span = resolution.span(turn);
    let winner = |index: Option<usize>| index.map(|i| resolution.overlays[i].clone());
    let winners = vec![
        (ContentType::Summary, winner(span.and_then(|s| s.summary))),
        (
            ContentType::Reasoning,
            winner(span.and_then(|s| s.reasoning)),
        ),
        (
            ContentType::ToolCalls,
            winner(span.and_then(|s| s.tool_calls)),
        ),
    ];
    Ok(Explanation {
        turn,
        as_of: scope.end.checked_sub(1),
        winners,
        covering,
    })
}

impl Explanation {
    /// As `explain --json` prints it: the turn, the record it is as of,
    /// the winning overlay's seq per content type, and every covering
    /// overlay.
    pub fn to_json(&self) -> Value {
        let name = |kind: ContentType| match kind {
            ContentType::Summary => "summary",
            ContentType::Reasoning => "reasoning",
            ContentType::ToolCalls => "tool_calls",
        };
        json!({
            "turn": self.turn,
            "as_of": self.as_of,
            "winners": self.winners.iter().map(|(k, w)| (name(*k).to_owned(), json!(w.as_ref().map(|o| o.seq)))).collect::<serde_json::Map<String, Value>>(),
            "covering": self.covering.iter().map(overlay_json).collect::<Vec<_>>(),
        })
    }
}

/// An overlay as `explain --json` shows it.
pub fn overlay_json(o: &Overlay) -> Value {
    json!({
        "seq": o.seq,
        "timestamp": o.timestamp.to_string(),
        "from_turn": o.from_turn,
        "to_turn": o.to_turn,
        "summary": o.summary.as_ref().map(|_| policy_text(o, "summary")),
        "reasoning": o.reasoning.map(|_| policy_text(o, "reasoning")),
        "tool_calls": o.tool_calls.as_ref().map(|_| policy_text(o, "tool_calls")),
    })
}

/// What `o` sets for one content type (`summary`, `reasoning`,
/// `tool_calls`), in a few words; `-` if it sets nothing.
pub fn policy_text(o: &Overlay, kind: &str) -> String {
    match kind {
        "summary" => match &o.summary {
            Some(Summary::Text(text)) => {
                let short: String = text
                    .chars()
                    .take(60)
                    .collect::<String>()
                    .replace('\n', " ⏎ ");
                if text.chars().count() > 60 {
                    format!("summary \"{short}...\"")
                } else {
                    format!("summary \"{short}\"")
                }
            }
            Some(Summary::Keep) => "keep".to_owned(),
            None => "-".to_owned(),
        },
        "reasoning" => match o.reasoning {
            Some(ReasoningPolicy::Strip) => "strip".to_owned(),
            Some(ReasoningPolicy::Keep) => "keep".to_owned(),
            None => "-".to_owned(),
        },
        _ => match &o.tool_calls {
            Some(ToolPolicy::Keep) => "keep".to_owned(),
            Some(ToolPolicy::Omit) => "omit".to_owned(),
            Some(ToolPolicy::Strip {
                request,
                response,
                tools,
            }) => {
                let what = match (request, response) {
                    (true, true) => "strip",
                    (true, false) => "strip-requests",
                    (false, true) => "strip-responses",
                    (false, false) => "strip (neither)",
                };
                if tools.is_empty() {
                    what.to_owned()
                } else {
                    let hints = if tools.len() == 1 { "hint" } else { "hints" };
                    format!("{what} with {} per-tool {hints}", tools.len())
                }
            }
            None => "-".to_owned(),
        },
    }
}

/// What `o` sets, as `kind=policy` words.
pub fn describe(o: &Overlay) -> String {
    ["summary", "reasoning", "tool_calls"]
        .iter()
        .filter(|k| policy_text(o, k) != "-")
        .map(|k| format!("{k}={}", policy_text(o, k)))
        .collect::<Vec<_>>()
        .join(" ")
}
