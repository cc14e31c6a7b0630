//! Which overlay decides what a turn looks like: [`explain`].
//!
//! The winners come from the projection's own resolution
//! (`convstore_projection::resolve`), the one every view is made with, so
//! what `explain` says is what the view does.

use convstore_projection::{resolve, ContentType, Overlay};
use convstore_store::{ConversationId, Store};

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
    let overlays = pipeline::overlays_under(store, id, scope.end, None)?;
    let mut covering: Vec<Overlay> = overlays
        .iter()
        .filter(|o| {
            o.covered(last_turn)
                .is_some_and(|(a, b)| (a..=b).contains(&turn))
        })
        .cloned()
        .collect();
    covering.sort_by_key(Overlay::precedence);
    let resolution = resolve(overlays, Some(last_turn));
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
