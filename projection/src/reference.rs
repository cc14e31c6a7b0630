//! `naive_project`: SPEC §4 transcribed as plainly as possible, slow on
//! purpose (O(turns × overlays)). Only for checking the engine.
//!
//! It shares no rule with the engine: what a compaction's fields mean
//! (revert, the string and object forms of `tool_calls`, per-tool hints)
//! is read here from the fields themselves, so a mistake in the engine's
//! reading of them (`overlay.rs`) cannot pass both.

use convstore_store::event::{
    Compaction, HintAction, ReasoningPolicy, ToolCallKind, ToolCallPolicy,
};
use convstore_store::{Event, EventKind, EventType, Json};

/// A compaction's summary policy, if it sets one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SummarySetting<'a> {
    /// Replace the turn's conversation events with this text.
    Replace(&'a str),
    /// Leave them (a revert).
    Keep,
}

fn summary_of(c: &Compaction) -> Option<SummarySetting<'_>> {
    if c.revert == Some(true) {
        Some(SummarySetting::Keep)
    } else {
        c.summary.as_deref().map(SummarySetting::Replace)
    }
}

/// Whether a compaction asks for recall hints: its field `recall_hints` is
/// `true`.
fn hints_of(c: &Compaction) -> bool {
    c.info.as_ref().is_some_and(|info| {
        serde_json::from_str::<serde_json::Value>(info.as_str())
            .is_ok_and(|fields| fields.get("recall_hints") == Some(&serde_json::Value::Bool(true)))
    })
}

/// A compaction's reasoning policy.
fn reasoning_of(c: &Compaction) -> Option<ReasoningPolicy> {
    if c.revert == Some(true) {
        Some(ReasoningPolicy::Keep)
    } else {
        c.reasoning
    }
}

/// What a tool-call policy does to one tool: omit, or strip its request
/// and/or response (keep is strip of neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolEffect {
    Omit,
    Strip { request: bool, response: bool },
}

/// A compaction's tool-call policy, applied to calls of `tool`.
fn tools_of(c: &Compaction) -> Option<impl Fn(&str) -> ToolEffect + '_> {
    if c.revert == Some(true) {
        return Some(Box::new(|_: &str| ToolEffect::Strip {
            request: false,
            response: false,
        }) as Box<dyn Fn(&str) -> ToolEffect>);
    }
    let policy = c.tool_calls.as_ref()?;
    Some(Box::new(move |tool: &str| match policy {
        ToolCallPolicy::Keep => ToolEffect::Strip {
            request: false,
            response: false,
        },
        ToolCallPolicy::Omit => ToolEffect::Omit,
        ToolCallPolicy::Strip => ToolEffect::Strip {
            request: true,
            response: true,
        },
        ToolCallPolicy::StripRequests => ToolEffect::Strip {
            request: true,
            response: false,
        },
        ToolCallPolicy::StripResponses => ToolEffect::Strip {
            request: false,
            response: true,
        },
        ToolCallPolicy::Object(object) => match object.policy {
            ToolCallKind::Keep => ToolEffect::Strip {
                request: false,
                response: false,
            },
            ToolCallKind::Omit => ToolEffect::Omit,
            ToolCallKind::Strip => {
                let mut request = object.request != Some(false);
                let mut response = object.response != Some(false);
                // Hints in the order written: a later one for the same
                // tool overrides an earlier one, side by side.
                for (name, hint) in object.tools.iter().flatten() {
                    if name == tool {
                        if let Some(side) = hint.request {
                            request = side == HintAction::Strip;
                        }
                        if let Some(side) = hint.response {
                            response = side == HintAction::Strip;
                        }
                    }
                }
                ToolEffect::Strip { request, response }
            }
        },
    }) as Box<dyn Fn(&str) -> ToolEffect>)
}

use crate::projector::{LogEvent, ViewEvent, SUMMARY_HEADER};

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
    let summary_winner = |turn: u64| match winner(&compactions, turn, last, summary_of) {
        Some((index, SummarySetting::Replace(text))) => Some((index, text.to_owned())),
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
                let EventKind::Compaction(summarizing) = &events[index].event.kind else {
                    unreachable!("a winner is a compaction")
                };
                // Under recall hints: this event (the first the run drops)
                // to the last record of the run's last turn.
                let header = if hints_of(summarizing) {
                    let to = events
                        .iter()
                        .find(|e| e.turn > last_of_run)
                        .map_or_else(|| events.last().map_or(raw.seq, |e| e.seq), |e| e.seq - 1);
                    format!("{SUMMARY_HEADER} (recall {}..{to})", raw.seq)
                } else {
                    SUMMARY_HEADER.to_owned()
                };
                for kind in [
                    EventKind::TurnStart,
                    EventKind::User { text: header },
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
        let reasoning = winner(&compactions, raw.turn, last, reasoning_of).map(|w| w.1);
        let tools_winner = winner(&compactions, raw.turn, last, tools_of);
        let hints = tools_winner.as_ref().is_some_and(|&(index, _)| {
            matches!(&events[index].event.kind, EventKind::Compaction(c) if hints_of(c))
        });
        let tools = tools_winner.map(|w| w.1);
        let mut event = raw.event.clone();
        match &mut event.kind {
            EventKind::Reasoning { .. } if reasoning == Some(ReasoningPolicy::Strip) => continue,
            EventKind::ToolCall {
                name, arguments, ..
            } => match tools.as_ref().map(|effect| effect(name)) {
                Some(ToolEffect::Omit) => continue,
                Some(ToolEffect::Strip { request: true, .. }) => *arguments = Json::empty_object(),
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
                match tools.as_ref().map(|effect| effect(&name)) {
                    Some(ToolEffect::Omit) => continue,
                    Some(ToolEffect::Strip { response: true, .. }) => {
                        let status = if *is_error { "error" } else { "success" };
                        *content = if hints {
                            format!("[compacted] {name}: {status} (recall {})", raw.seq)
                        } else {
                            format!("[compacted] {name}: {status}")
                        };
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
