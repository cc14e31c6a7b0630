//! Automatic compaction planning: whether a view needs compacting and over
//! which turns ([`decide`]). Pure: the caller measures the view and stores
//! the compaction.
//!
//! The view is compacted when its tokens pass `trigger_ratio` of the
//! usable window (the context window less `reserve_tokens`), are at least
//! `token_floor`, and the conversation has at least `min_turns` turns. The
//! newest `keep_last` turns stay out, fewer if they alone exceed
//! `buffer_max_ratio` of the window. Each compaction covers only turns no
//! compaction covered yet (`--from last`), stopping before a pinned turn
//! (pinned turns are skipped over, never covered). When the summaries in
//! the view pass `fold_ratio` of the window, one summary is written over
//! the whole summarized range instead (a *fold*; it widens over the
//! earlier summaries). A fold does not cross a pinned turn: it covers the
//! summaries after the last pin, when there are at least two and their own
//! tokens pass `fold_ratio`.

use crate::config::AutoConfig;

/// What [`decide`] needs to know about a conversation's current view.
#[derive(Debug, Clone)]
pub struct AutoInput<'a> {
    /// The model's context window, in tokens.
    pub window: u64,
    /// The view's tokens.
    pub view_tokens: u64,
    /// Tokens of the view per raw turn, indexed by turn.
    pub turn_tokens: &'a [u64],
    /// The summary runs of the view: `(first turn, tokens)`.
    pub summary_runs: &'a [(u64, u64)],
    /// One past the highest turn any compaction covers (`last`).
    pub next_uncovered: u64,
    /// The turn ranges of the summary compactions.
    pub summaries: &'a [(u64, u64)],
    /// Pinned turn ranges, sorted.
    pub pins: &'a [(u64, u64)],
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing, and why.
    Skip(String),
    /// Compact turns `from..=to`.
    Compact {
        /// First turn.
        from: u64,
        /// Last turn.
        to: u64,
        /// A fold: one summary over the summarized range.
        fold: bool,
        /// The newest turns left out.
        keep_last: u64,
    },
}

/// Decides whether and what to compact (see the module's documentation).
pub fn decide(config: &AutoConfig, input: &AutoInput<'_>) -> Decision {
    let usable = input.window.saturating_sub(config.reserve_tokens);
    let threshold = (config.trigger_ratio * usable as f64) as u64;
    let turns = input.turn_tokens.len() as u64;
    if input.view_tokens < config.token_floor {
        return Decision::Skip(format!(
            "{} tokens, under the floor of {}",
            input.view_tokens, config.token_floor
        ));
    }
    if input.view_tokens <= threshold {
        return Decision::Skip(format!(
            "{} tokens, under the trigger of {threshold}",
            input.view_tokens
        ));
    }
    if turns < config.min_turns.max(1) {
        return Decision::Skip(format!("{turns} turns, fewer than {}", config.min_turns));
    }
    // The kept turns may not exceed their share of the window.
    let buffer = (config.buffer_max_ratio * usable as f64) as u64;
    let mut keep = config.keep_last.min(turns);
    while keep > 0
        && input.turn_tokens[(turns - keep) as usize..]
            .iter()
            .sum::<u64>()
            > buffer
    {
        keep -= 1;
    }
    if keep >= turns {
        return Decision::Skip("every turn is kept".to_owned());
    }
    let to = turns - 1 - keep;
    // A fold covers the summaries after the last pinned turn before `to`
    // (a summary never spans a pin); there must be two to fold.
    let fold_limit = (config.fold_ratio * usable as f64) as u64;
    let segment = input
        .pins
        .iter()
        .filter(|&&(_, b)| b < to)
        .map(|&(_, b)| b + 1)
        .max()
        .unwrap_or(0);
    let foldable: Vec<u64> = input
        .summaries
        .iter()
        .filter(|&&(a, _)| a >= segment && a <= to)
        .map(|&(a, _)| a)
        .collect();
    let foldable_tokens: u64 = input
        .summary_runs
        .iter()
        .filter(|&&(first, _)| first >= segment && first <= to)
        .map(|&(_, tokens)| tokens)
        .sum();
    let (start, fold) = match foldable.iter().min() {
        Some(&first) if foldable_tokens > fold_limit && foldable.len() >= 2 => (first, true),
        _ => (input.next_uncovered, false),
    };
    // Skip pinned turns at the start; stop before the next pinned one.
    let mut from = start;
    for &(a, b) in input.pins {
        if (a..=b).contains(&from) {
            from = b + 1;
        }
    }
    let to = input
        .pins
        .iter()
        .find(|&&(a, _)| a > from)
        .map_or(to, |&(a, _)| to.min(a - 1));
    if from > to {
        return Decision::Skip(format!(
            "no turn to cover: turns {start}.. are compacted, pinned or kept"
        ));
    }
    Decision::Compact {
        from,
        to,
        fold,
        keep_last: keep,
    }
}
