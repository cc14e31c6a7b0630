//! Resolves overlays into disjoint turn spans, each with its winner per
//! content type. See [`resolve`].

use std::collections::BTreeSet;

use convstore_store::Timestamp;

use crate::overlay::{Overlay, Summary};

/// The content types a compaction has a policy for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ContentType {
    /// The summary policy.
    Summary,
    /// The reasoning policy.
    Reasoning,
    /// The tool-call policy.
    ToolCalls,
}

/// A run of turns with the same winners. Winners are indices into
/// [`Resolution::overlays`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First turn (inclusive).
    pub first: u64,
    /// Last turn (inclusive).
    pub last: u64,
    /// The winning summary policy.
    pub summary: Option<usize>,
    /// The winning reasoning policy.
    pub reasoning: Option<usize>,
    /// The winning tool-call policy.
    pub tool_calls: Option<usize>,
}

/// A summary run: a maximal run of consecutive turns won by the same
/// compaction's summary text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// First turn (inclusive).
    pub first: u64,
    /// Last turn (inclusive).
    pub last: u64,
    /// The overlay whose summary wins, an index into
    /// [`Resolution::overlays`].
    pub overlay: usize,
}

/// Overlays resolved against a stream.
///
/// # Invariants
/// - I4: per turn and content type the covering overlay with the greatest
///   `(timestamp, seq)` that sets a policy for it wins.
/// - I5: a winning summary text overrides the per-type policies of its turn
///   (applied by the view, which looks at the summary first).
#[derive(Debug, Clone, Default)]
pub struct Resolution {
    /// The overlays, in the order given.
    pub overlays: Vec<Overlay>,
    /// Disjoint spans in turn order; turns in no span have no policy.
    pub spans: Vec<Span>,
    /// Summary runs in turn order.
    pub runs: Vec<Run>,
}

impl Resolution {
    /// The span holding `turn`, if any overlay covers it: O(log S).
    pub fn span(&self, turn: u64) -> Option<&Span> {
        let i = self.spans.partition_point(|s| s.last < turn);
        self.spans.get(i).filter(|s| s.first <= turn)
    }
}

/// Resolves `overlays` against a stream whose last turn is `last_turn`
/// (`None` for an empty stream), by a sweep over the overlays' end points:
/// O(M log M) for M overlays, whatever the length of their ranges.
///
/// A covers 0..=9 and newer B covers 3..=5, both stripping reasoning: the
/// spans are 0..=2 (A), 3..=5 (B), 6..=9 (A).
pub fn resolve(overlays: Vec<Overlay>, last_turn: Option<u64>) -> Resolution {
    let Some(last_turn) = last_turn else {
        return Resolution {
            overlays,
            ..Resolution::default()
        };
    };
    // (turn, is_start, content type, overlay): ends sort before starts at
    // the same turn, but each end is placed one past its last turn, so the
    // order within a turn does not matter for correctness.
    let mut points: Vec<(u64, ContentType, bool, usize)> = Vec::new();
    for (i, overlay) in overlays.iter().enumerate() {
        let Some((first, last)) = overlay.covered(last_turn) else {
            continue;
        };
        let types = [
            (ContentType::Summary, overlay.summary.is_some()),
            (ContentType::Reasoning, overlay.reasoning.is_some()),
            (ContentType::ToolCalls, overlay.tool_calls.is_some()),
        ];
        for (content, set) in types {
            if set {
                points.push((first, content, true, i));
                points.push((last + 1, content, false, i));
            }
        }
    }
    points.sort_unstable_by_key(|&(turn, content, start, i)| (turn, start, content, i));

    let mut active: [BTreeSet<(Timestamp, u64, usize)>; 3] = Default::default();
    let slot = |c: ContentType| match c {
        ContentType::Summary => 0,
        ContentType::Reasoning => 1,
        ContentType::ToolCalls => 2,
    };
    let mut spans: Vec<Span> = Vec::new();
    let mut p = 0;
    while p < points.len() {
        let turn = points[p].0;
        while p < points.len() && points[p].0 == turn {
            let (_, content, start, i) = points[p];
            let key = (overlays[i].timestamp, overlays[i].seq, i);
            if start {
                active[slot(content)].insert(key);
            } else {
                active[slot(content)].remove(&key);
            }
            p += 1;
        }
        let Some(&(next, ..)) = points.get(p) else {
            break;
        };
        let winner = |s: usize| active[s].last().map(|&(_, _, i)| i);
        let span = Span {
            first: turn,
            last: next - 1,
            summary: winner(0),
            reasoning: winner(1),
            tool_calls: winner(2),
        };
        if span.summary.is_none() && span.reasoning.is_none() && span.tool_calls.is_none() {
            continue;
        }
        match spans.last_mut() {
            Some(prev)
                if prev.last + 1 == span.first
                    && (prev.summary, prev.reasoning, prev.tool_calls)
                        == (span.summary, span.reasoning, span.tool_calls) =>
            {
                prev.last = span.last;
            }
            _ => spans.push(span),
        }
    }

    let mut runs: Vec<Run> = Vec::new();
    for span in &spans {
        let Some(winner) = span.summary else {
            continue;
        };
        if !matches!(overlays[winner].summary, Some(Summary::Text(_))) {
            continue;
        }
        match runs.last_mut() {
            Some(run) if run.overlay == winner && run.last + 1 == span.first => {
                run.last = span.last;
            }
            _ => runs.push(Run {
                first: span.first,
                last: span.last,
                overlay: winner,
            }),
        }
    }
    Resolution {
        overlays,
        spans,
        runs,
    }
}
