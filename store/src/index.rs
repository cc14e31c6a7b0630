//! The interval index of compaction overlays: [`OverlayIndex`].
//!
//! The overlays of a conversation are persisted in their own key range
//! (`o` id seq, written in the same batch as the compaction record; see
//! `keys.rs`), so loading them never scans the log. [`OverlayIndex`] is a
//! centered interval tree over their turn ranges, built in O(M log M), that
//! answers which overlays cover a turn (stabbing) or meet a turn window in
//! O(log M + k).

use std::cmp::Ordering;

/// An inclusive turn range with the position of its overlay in the list the
/// index was built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Interval {
    first: u64,
    last: u64,
    item: usize,
}

#[derive(Debug)]
struct Node {
    center: u64,
    /// Intervals containing `center`, by `first` ascending.
    by_first: Vec<Interval>,
    /// The same intervals, by `last` descending.
    by_last: Vec<Interval>,
    left: Option<usize>,
    right: Option<usize>,
}

/// A centered interval tree over inclusive turn ranges.
///
/// # Invariants
/// - I3: the index is derived: building it from the same ranges gives the
///   same answers, and `verify` checks the persisted overlay entries against
///   the log.
#[derive(Debug, Default)]
pub struct OverlayIndex {
    nodes: Vec<Node>,
    root: Option<usize>,
    /// Every interval by `first`, for window queries.
    by_first: Vec<Interval>,
}

impl OverlayIndex {
    /// Builds the index of `ranges` (`(first, last)`, both inclusive); query
    /// answers are positions in `ranges`. Inverted ranges are ignored.
    pub fn new(ranges: &[(u64, u64)]) -> Self {
        let intervals: Vec<Interval> = ranges
            .iter()
            .enumerate()
            .filter(|(_, (a, b))| a <= b)
            .map(|(item, &(first, last))| Interval { first, last, item })
            .collect();
        let mut index = OverlayIndex::default();
        let mut by_first = intervals.clone();
        by_first.sort_unstable_by_key(|i| (i.first, i.item));
        index.root = index.build(intervals);
        index.by_first = by_first;
        index
    }

    fn build(&mut self, intervals: Vec<Interval>) -> Option<usize> {
        if intervals.is_empty() {
            return None;
        }
        let mut ends: Vec<u64> = intervals.iter().flat_map(|i| [i.first, i.last]).collect();
        let middle = ends.len() / 2;
        let center = *ends.select_nth_unstable(middle).1;
        let (mut here, mut left, mut right) = (Vec::new(), Vec::new(), Vec::new());
        for interval in intervals {
            if interval.last < center {
                left.push(interval);
            } else if interval.first > center {
                right.push(interval);
            } else {
                here.push(interval);
            }
        }
        let mut by_first = here.clone();
        by_first.sort_unstable_by_key(|i| (i.first, i.item));
        let mut by_last = here;
        by_last.sort_unstable_by_key(|i| (std::cmp::Reverse(i.last), i.item));
        let node = self.nodes.len();
        self.nodes.push(Node {
            center,
            by_first,
            by_last,
            left: None,
            right: None,
        });
        let left = self.build(left);
        let right = self.build(right);
        self.nodes[node].left = left;
        self.nodes[node].right = right;
        Some(node)
    }

    /// The positions of the ranges that contain `turn`, in no particular
    /// order: O(log M + k).
    pub fn covering(&self, turn: u64) -> Vec<usize> {
        let mut out = Vec::new();
        let mut next = self.root;
        while let Some(n) = next {
            let node = &self.nodes[n];
            match turn.cmp(&node.center) {
                Ordering::Less => {
                    out.extend(
                        node.by_first
                            .iter()
                            .take_while(|i| i.first <= turn)
                            .map(|i| i.item),
                    );
                    next = node.left;
                }
                Ordering::Greater => {
                    out.extend(
                        node.by_last
                            .iter()
                            .take_while(|i| i.last >= turn)
                            .map(|i| i.item),
                    );
                    next = node.right;
                }
                Ordering::Equal => {
                    out.extend(node.by_first.iter().map(|i| i.item));
                    next = None;
                }
            }
        }
        out
    }

    /// The positions of the ranges that meet `first..=last`: those covering
    /// `first`, and those starting inside `first + 1..=last`. O(log M + k).
    pub fn meeting(&self, first: u64, last: u64) -> Vec<usize> {
        if first > last {
            return Vec::new();
        }
        let mut out = self.covering(first);
        let start = self.by_first.partition_point(|i| i.first <= first);
        out.extend(
            self.by_first[start..]
                .iter()
                .take_while(|i| i.first <= last)
                .map(|i| i.item),
        );
        out
    }

    /// How many ranges the index holds.
    pub fn len(&self) -> usize {
        self.by_first.len()
    }

    /// Whether the index holds no range.
    pub fn is_empty(&self) -> bool {
        self.by_first.is_empty()
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
