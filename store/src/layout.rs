//! Where a conversation's records are: a log is a sequence of
//! [`Piece`]s, each stored under one conversation's keys (a fork's log is
//! its ancestors' pieces, then its own).

use crate::ids::ConversationId;

/// Records `start..end` of a conversation's log, stored under `owner`'s
/// keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub owner: ConversationId,
    pub start: u64,
    pub end: u64,
}
