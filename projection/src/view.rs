//! The view: [`Plan`] gathers what a projection needs from a first pass
//! over the stream, [`Projector`] transforms each raw event into its view
//! events.

use std::collections::HashMap;
use std::sync::Arc;

use convstore_store::event::ReasoningPolicy;
use convstore_store::{Event, EventKind, EventType, Json};

use crate::overlay::{Overlay, Summary, ToolPolicy};
use crate::resolve::{resolve, Resolution};

/// A raw event of the stream with its place in the log.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEvent {
    /// Its seq.
    pub seq: u64,
    /// Its turn.
    pub turn: u64,
    /// The event.
    pub event: Event,
}

/// An event of the view, with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewEvent {
    /// The raw seq it was produced from (for an injected summary event: the
    /// first event its run drops).
    pub seq: u64,
    /// The raw turn it was produced from.
    pub turn: u64,
    /// For injected summary events: the raw turns the run replaces.
    pub summary_of: Option<(u64, u64)>,
    /// The event as the model sees it.
    pub event: Event,
}

/// The user text of an injected summary.
pub const SUMMARY_HEADER: &str = "[Summary of previous conversation]";

/// What a first pass over the stream learns: the overlays, the name of the
/// latest call for each tool call id, the last turn, and where each turn's
/// first conversation event is. Feed it every event in log order with
/// [`Plan::observe`], then [`Plan::finish`].
#[derive(Debug, Default)]
pub struct Plan {
    overlays: Vec<Overlay>,
    names: HashMap<String, Arc<str>>,
    last_turn: Option<u64>,
    /// Seq of the first conversation event of each turn (index = turn).
    first_conversation: Vec<Option<u64>>,
}

impl Plan {
    /// An empty plan.
    pub fn new() -> Self {
        Self::default()
    }

    /// Learns from the next raw event.
    pub fn observe(&mut self, seq: u64, turn: u64, event: &Event) {
        self.last_turn = Some(turn);
        match &event.kind {
            EventKind::Compaction(c) => {
                self.overlays
                    .push(Overlay::from_compaction(seq, event.timestamp, c));
            }
            EventKind::ToolCall { id, name, .. } => {
                self.names.insert(id.clone(), Arc::from(name.as_str()));
            }
            _ => {}
        }
        if event.kind.event_type().is_conversation() {
            let index = turn as usize;
            if self.first_conversation.len() <= index {
                self.first_conversation.resize(index + 1, None);
            }
            self.first_conversation[index].get_or_insert(seq);
        }
    }

    /// Resolves the overlays and returns the projector.
    pub fn finish(self) -> Projector {
        let first = self.first_conversation;
        let result: Result<Projector, std::convert::Infallible> =
            Self::assemble(self.overlays, self.names, self.last_turn, |turn| {
                Ok(first.get(turn as usize).copied().flatten())
            });
        match result {
            Ok(projector) => projector,
            Err(never) => match never {},
        }
    }

    /// A projector from what a store already knows, without a first pass:
    /// the overlays, the latest name per call id, the last turn, and a way
    /// to find the first conversation event of a turn (asked only for the
    /// first turns of summary runs).
    pub fn assemble<E>(
        overlays: Vec<Overlay>,
        names: HashMap<String, Arc<str>>,
        last_turn: Option<u64>,
        mut first_conversation: impl FnMut(u64) -> Result<Option<u64>, E>,
    ) -> Result<Projector, E> {
        let resolution = resolve(overlays, last_turn);
        // A run's summary goes right before the first event it drops: the
        // first conversation event of its turns.
        let mut run_heads = HashMap::new();
        for (index, run) in resolution.runs.iter().enumerate() {
            for turn in run.first..=run.last {
                if let Some(seq) = first_conversation(turn)? {
                    run_heads.insert(seq, index);
                    break;
                }
            }
        }
        Ok(Projector {
            resolution,
            names,
            run_heads,
        })
    }
}

/// Transforms raw events into view events (SPEC §4). Pure: the same raw
/// event always gives the same view events, so chunks of the stream can be
/// transformed in any order and on any thread.
#[derive(Debug)]
pub struct Projector {
    resolution: Resolution,
    names: HashMap<String, Arc<str>>,
    run_heads: HashMap<u64, usize>,
}

impl Projector {
    /// The resolved overlays.
    pub fn resolution(&self) -> &Resolution {
        &self.resolution
    }

    /// The name of the latest call with this id, if any.
    pub fn tool_name(&self, id: &str) -> Option<&str> {
        self.names.get(id).map(|n| &**n)
    }

    /// Appends the view events of one raw event to `out`.
    pub fn transform(&self, raw: LogEvent, out: &mut Vec<ViewEvent>) {
        let LogEvent { seq, turn, event } = raw;
        let kind = event.kind.event_type();
        if kind == EventType::Compaction {
            return;
        }
        if !kind.is_conversation() {
            out.push(ViewEvent {
                seq,
                turn,
                summary_of: None,
                event,
            });
            return;
        }
        let Some(segment) = self.resolution.segment(turn) else {
            out.push(ViewEvent {
                seq,
                turn,
                summary_of: None,
                event,
            });
            return;
        };
        let overlays = &self.resolution.overlays;
        if let Some(Summary::Text(text)) =
            segment.summary.and_then(|i| overlays[i].summary.as_ref())
        {
            if let Some(&run) = self.run_heads.get(&seq) {
                let run = self.resolution.runs[run];
                let inject = |kind| ViewEvent {
                    seq,
                    turn,
                    summary_of: Some((run.first, run.last)),
                    event: Event::new(event.timestamp, kind),
                };
                out.push(inject(EventKind::TurnStart));
                out.push(inject(EventKind::User {
                    text: SUMMARY_HEADER.to_owned(),
                }));
                out.push(inject(EventKind::Assistant {
                    text: text.to_string(),
                }));
            }
            return;
        }
        let reasoning = segment.reasoning.and_then(|i| overlays[i].reasoning);
        let tools = segment
            .tool_calls
            .and_then(|i| overlays[i].tool_calls.as_ref());
        let mut event = event;
        match &mut event.kind {
            EventKind::Reasoning { .. } if reasoning == Some(ReasoningPolicy::Strip) => return,
            EventKind::ToolCall { .. } | EventKind::ToolResult { .. }
                if tools == Some(&ToolPolicy::Omit) =>
            {
                return
            }
            EventKind::ToolCall {
                name, arguments, ..
            } if tools.is_some_and(|t| t.strips_request(name)) => {
                *arguments = Json::empty_object();
            }
            EventKind::ToolResult {
                id,
                content,
                is_error,
            } => {
                let name = self.tool_name(id).unwrap_or("unknown");
                if tools.is_some_and(|t| t.strips_response(name)) {
                    let status = if *is_error { "error" } else { "success" };
                    *content = format!("[compacted] {name}: {status}");
                }
            }
            _ => {}
        }
        out.push(ViewEvent {
            seq,
            turn,
            summary_of: None,
            event,
        });
    }
}
