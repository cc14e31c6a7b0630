//! `naive_project`: SPEC §4 transcribed as plainly as possible, slow on
//! purpose (O(turns × overlays)). Only for checking the engine.

use convstore_store::event::{Compaction, ReasoningPolicy, SummaryPolicy, ToolCallAction};
use convstore_store::{Event, EventKind, EventType, Json};

use crate::view::{LogEvent, ViewEvent, SUMMARY_HEADER};

/// Which compaction (by its index in the stream) wins a policy for a turn.
fn winner<'c, T>(
    compactions: &[(usize, &LogEvent, &'c Compaction)],
    turn: u64,
    last: u64,
    policy: impl Fn(&'c Compaction) -> Option<T>,
) -> Option<(usize, T)> {
    let mut best: Option<(usize, T)> = None;
    let mut best_key = None;
    for &(index, raw, c) in compactions {
        let covers = c.from_turn <= turn && turn <= c.to_turn.min(last);
        if let (true, Some(p)) = (covers, policy(c)) {
            // Greatest timestamp wins; a tie goes to the later one in the log.
            let key = (raw.event.timestamp, raw.seq);
            if best_key.is_none_or(|k| key > k) {
                best_key = Some(key);
                best = Some((index, p));
            }
        }
    }
    best
}

/// The view of `events`, computed the slow and obvious way.
pub fn naive_project(events: &[LogEvent]) -> Vec<ViewEvent> {
    let Some(last) = events.last().map(|e| e.turn) else {
        return Vec::new();
    };
    let compactions: Vec<(usize, &LogEvent, &Compaction)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.event.kind {
            EventKind::Compaction(c) => Some((i, e, c)),
            _ => None,
        })
        .collect();
    let summary_winner =
        |turn: u64| match winner(&compactions, turn, last, Compaction::summary_policy) {
            Some((index, SummaryPolicy::Text(text))) => Some((index, text.to_owned())),
            _ => None,
        };
    let mut emitted_runs: Vec<(usize, u64)> = Vec::new();
    let mut view = Vec::new();
    for raw in events {
        let kind = raw.event.kind.event_type();
        if kind == EventType::Compaction {
            continue;
        }
        let keep = |event: Event| ViewEvent {
            seq: raw.seq,
            turn: raw.turn,
            summary_of: None,
            event,
        };
        if !kind.is_conversation() {
            view.push(keep(raw.event.clone()));
            continue;
        }
        if let Some((index, text)) = summary_winner(raw.turn) {
            // The run: the consecutive turns around this one that the same
            // compaction's summary wins.
            let mut first = raw.turn;
            while first > 0 && summary_winner(first - 1).is_some_and(|(i, _)| i == index) {
                first -= 1;
            }
            let mut last_of_run = raw.turn;
            while last_of_run < last
                && summary_winner(last_of_run + 1).is_some_and(|(i, _)| i == index)
            {
                last_of_run += 1;
            }
            if !emitted_runs.contains(&(index, first)) {
                emitted_runs.push((index, first));
                for kind in [
                    EventKind::TurnStart,
                    EventKind::User {
                        text: SUMMARY_HEADER.to_owned(),
                    },
                    EventKind::Assistant { text },
                ] {
                    view.push(ViewEvent {
                        seq: raw.seq,
                        turn: raw.turn,
                        summary_of: Some((first, last_of_run)),
                        event: Event::new(raw.event.timestamp, kind),
                    });
                }
            }
            continue;
        }
        let reasoning =
            winner(&compactions, raw.turn, last, Compaction::reasoning_policy).map(|w| w.1);
        let tools = winner(&compactions, raw.turn, last, Compaction::tool_call_policy).map(|w| w.1);
        let mut event = raw.event.clone();
        match &mut event.kind {
            EventKind::Reasoning { .. } if reasoning == Some(ReasoningPolicy::Strip) => continue,
            EventKind::ToolCall {
                name, arguments, ..
            } => match tools {
                Some(ToolCallAction::Omit) => continue,
                Some(action) if action.strips_request(name) => *arguments = Json::empty_object(),
                _ => {}
            },
            EventKind::ToolResult {
                id,
                content,
                is_error,
            } => {
                // The name of the latest call with this id anywhere in the log.
                let name = events
                    .iter()
                    .rev()
                    .find_map(|e| match &e.event.kind {
                        EventKind::ToolCall { id: call, name, .. } if call == id => {
                            Some(name.clone())
                        }
                        _ => None,
                    })
                    .unwrap_or_else(|| "unknown".to_owned());
                match tools {
                    Some(ToolCallAction::Omit) => continue,
                    Some(action) if action.strips_response(&name) => {
                        let status = if *is_error { "error" } else { "success" };
                        *content = format!("[compacted] {name}: {status}");
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        view.push(keep(event));
    }
    view
}
