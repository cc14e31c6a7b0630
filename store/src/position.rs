//! Where a record is: [`Seq`] (its place in its conversation's log) and
//! [`Turn`] (the turn it belongs to), apart in the API so that one is
//! never passed for the other.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A record's place in its conversation's log, from 0.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Seq(pub u64);

/// A turn's index, from 0 (SPEC §2: the turn rule).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Turn(pub u64);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Turn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Seq> for u64 {
    fn from(seq: Seq) -> u64 {
        seq.0
    }
}

impl From<Turn> for u64 {
    fn from(turn: Turn) -> u64 {
        turn.0
    }
}

/// Inclusive turn ranges sorted, overlapping or adjacent ones merged:
/// `[(5, 9), (0, 2), (3, 3)]` becomes `[(0, 3), (5, 9)]`.
pub fn merge_ranges(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    ranges.dedup_by(|next, kept| {
        let joins = next.0 <= kept.1.saturating_add(1);
        if joins {
            kept.1 = kept.1.max(next.1);
        }
        joins
    });
    ranges
}
