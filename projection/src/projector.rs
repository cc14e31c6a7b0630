//! The view: [`Plan`] gathers what a projection needs from a first pass
//! over the stream, [`Projector`] transforms each raw event into its view
//! events.

use std::collections::HashMap;

use convstore_store::event::ReasoningPolicy;
use convstore_store::{Event, EventKind, EventType, Json, Reading, ToolNames};

use crate::overlay::{Overlay, Summary, ToolPolicy};
use crate::resolve::{resolve, Resolution, Run, Span};

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

impl LogEvent {
    /// `events` as a log: each with its seq (from 0) and its turn (the turn
    /// rule, SPEC §2).
    pub fn sequence(events: impl IntoIterator<Item = Event>) -> Vec<LogEvent> {
        let mut turns = convstore_store::TurnTracker::new();
        events
            .into_iter()
            .enumerate()
            .map(|(seq, event)| LogEvent {
                seq: seq as u64,
                turn: turns.next(event.kind.event_type()),
                event,
            })
            .collect()
    }
}

pub use convstore_store::ViewEvent;

/// The user text of an injected summary.
pub const SUMMARY_HEADER: &str = "[Summary of previous conversation]";

/// The user text of an injected summary under recall hints: the header,
/// then the seqs of the records it replaces (both inclusive), which
/// `recall FROM..TO` gives back.
pub fn recall_summary_header(from: u64, to: u64) -> String {
    format!("{SUMMARY_HEADER} (recall {from}..{to})")
}

/// What a first pass over the stream learns: the overlays, the name of the
/// latest call for each tool call id, the last turn, and where each turn's
/// first conversation event is. Feed it every event in log order with
/// [`Plan::observe`], then [`Plan::finish`].
#[derive(Debug, Default)]
pub struct Plan {
    overlays: Vec<Overlay>,
    names: ToolNames,
    last_turn: Option<u64>,
    /// Seq of the first conversation event of each turn (index = turn).
    first_conversation: Vec<Option<u64>>,
    /// One past the greatest seq observed.
    end: u64,
}

impl Plan {
    /// An empty plan, to observe every event of the log in order.
    pub fn new() -> Self {
        Self {
            names: ToolNames::complete(),
            ..Self::default()
        }
    }

    /// Learns from the next raw event.
    pub fn observe(&mut self, seq: u64, turn: u64, event: &Event) {
        self.last_turn = Some(turn);
        self.end = self.end.max(seq + 1);
        match &event.kind {
            EventKind::Compaction(c) => {
                self.overlays
                    .push(Overlay::from_compaction(seq, event.timestamp, c));
            }
            EventKind::ToolCall { id, name, .. } => {
                self.names.insert(id, name);
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
        let result: Result<Projector, std::convert::Infallible> = Self::assemble(
            self.overlays,
            self.names,
            self.last_turn,
            self.end,
            |turn| Ok(first.get(turn as usize).copied().flatten()),
        );
        match result {
            Ok(projector) => projector,
            Err(never) => match never {},
        }
    }

    /// A projector from what a store already knows, without a first pass:
    /// the overlays, the latest name per call id, the last turn, `end` (the
    /// records projected are `0..end`), and a way to find the first
    /// conversation event of a turn among them (asked only for the first
    /// turns of summary runs, and for the turn after a run with recall
    /// hints).
    pub fn assemble<E>(
        overlays: Vec<Overlay>,
        names: ToolNames,
        last_turn: Option<u64>,
        end: u64,
        first_conversation: impl FnMut(u64) -> Result<Option<u64>, E>,
    ) -> Result<Projector, E> {
        Self::from_resolution(
            resolve(overlays, last_turn),
            names,
            end,
            |_| true,
            first_conversation,
        )
    }

    /// Like [`Plan::assemble`], from overlays already resolved, placing the
    /// summaries of the `wanted` runs only: a projector for some turns
    /// needs only the runs that meet them.
    pub fn from_resolution<E>(
        resolution: Resolution,
        names: ToolNames,
        end: u64,
        wanted: impl Fn(&Run) -> bool,
        mut first_conversation: impl FnMut(u64) -> Result<Option<u64>, E>,
    ) -> Result<Projector, E> {
        // A run's summary goes right before the first event it drops: the
        // first conversation event of its turns.
        let mut run_heads = HashMap::new();
        for (index, run) in resolution.runs.iter().enumerate() {
            if !wanted(run) {
                continue;
            }
            for turn in run.first..=run.last {
                if let Some(seq) = first_conversation(turn)? {
                    // With recall hints, the records the run stands for:
                    // from the first it drops to the last of its last turn
                    // (the one before the next turn's `turn_start`, which
                    // is that turn's first record, or the last projected).
                    let hint = if resolution.overlays[run.overlay].recall_hints {
                        let next = match run.last.checked_add(1) {
                            Some(next) => first_conversation(next)?,
                            None => None,
                        };
                        Some((seq, next.unwrap_or(end).max(seq + 1) - 1))
                    } else {
                        None
                    };
                    run_heads.insert(seq, (index, hint));
                    break;
                }
            }
        }
        let mut heads: Vec<u64> = run_heads.keys().copied().collect();
        heads.sort_unstable();
        Ok(Projector {
            resolution,
            names,
            run_heads,
            heads,
        })
    }
}

/// What the view does with a raw event.
enum Fate<'p> {
    /// Nothing of it is in the view.
    Dropped,
    /// It is the first event its summary run drops: the run's summary takes
    /// its place (with the seqs it stands for, under recall hints).
    Summary(Run, &'p str, Option<(u64, u64)>),
    /// It passes, its calls or results stripped as `tools` says (a stripped
    /// result naming its seq when `hints`).
    Kept {
        tools: Option<&'p ToolPolicy>,
        hints: bool,
    },
}

/// Transforms raw events into view events (SPEC §4). Pure: the same raw
/// event always gives the same view events, so chunks of the stream can be
/// transformed in any order and on any thread.
#[derive(Debug)]
pub struct Projector {
    resolution: Resolution,
    names: ToolNames,
    /// The first event each summary run drops: the run (an index into the
    /// resolution's runs) and, under recall hints, the seqs it stands for.
    run_heads: HashMap<u64, (usize, Option<(u64, u64)>)>,
    /// The keys of `run_heads`, ascending.
    heads: Vec<u64>,
}

impl Projector {
    /// The resolved overlays.
    pub fn resolution(&self) -> &Resolution {
        &self.resolution
    }

    /// The name of the latest call with this id, if any.
    pub fn tool_name(&self, id: &str) -> Option<&str> {
        self.names.get(id)
    }

    /// What the view does with the raw event at `seq` in `turn` of type
    /// `kind`: everything but the stripping of a call or result is decided
    /// by these three alone.
    fn fate(&self, seq: u64, turn: u64, kind: EventType) -> Fate<'_> {
        const PLAIN: Fate<'static> = Fate::Kept {
            tools: None,
            hints: false,
        };
        if kind == EventType::Compaction {
            return Fate::Dropped;
        }
        if !kind.is_conversation() {
            return PLAIN;
        }
        let Some(span) = self.resolution.span(turn) else {
            return PLAIN;
        };
        let overlays = &self.resolution.overlays;
        if let Some(Summary::Text(text)) = span.summary.and_then(|i| overlays[i].summary.as_ref()) {
            return match self.run_heads.get(&seq) {
                Some(&(run, hint)) => Fate::Summary(self.resolution.runs[run], text, hint),
                None => Fate::Dropped,
            };
        }
        let reasoning = span.reasoning.and_then(|i| overlays[i].reasoning);
        let tools = span
            .tool_calls
            .and_then(|i| overlays[i].tool_calls.as_ref());
        let hints = span.tool_calls.is_some_and(|i| overlays[i].recall_hints);
        match kind {
            EventType::Reasoning if reasoning == Some(ReasoningPolicy::Strip) => Fate::Dropped,
            EventType::ToolCall | EventType::ToolResult if tools == Some(&ToolPolicy::Omit) => {
                Fate::Dropped
            }
            _ => Fate::Kept { tools, hints },
        }
    }

    /// Whether the view of the `tool_result` at `seq` in `turn` depends on
    /// the name of its call: it is shown under a strip policy, which names
    /// the tool (and may keep some tools' results). A projector for a few
    /// turns looks up the names of those results only
    /// ([`Projector::with_names`]).
    pub fn names_result(&self, seq: u64, turn: u64) -> bool {
        matches!(
            self.fate(seq, turn, EventType::ToolResult),
            Fate::Kept {
                tools: Some(ToolPolicy::Strip { .. }),
                ..
            }
        )
    }

    /// This projector with `names` as the latest name of each call id.
    #[must_use]
    pub fn with_names(self, names: ToolNames) -> Projector {
        Projector { names, ..self }
    }

    /// Whether the raw event at `seq` in `turn` of type `kind` leaves
    /// nothing in the view, so a reader need not load it.
    pub fn drops(&self, seq: u64, turn: u64, kind: EventType) -> bool {
        matches!(self.fate(seq, turn, kind), Fate::Dropped)
    }

    /// Whether the view drops every conversation event and compaction of
    /// records `seqs`, whose turns are `turns` (inclusive): every one of
    /// those turns is summarized and no summary is placed among them. A
    /// reader that knows them to hold no `config` or `system` event (which
    /// every view keeps) need not read them at all.
    pub fn drops_whole(&self, turns: (u64, u64), seqs: std::ops::Range<u64>) -> bool {
        let Resolution {
            spans, overlays, ..
        } = &self.resolution;
        let summarized = |span: &Span| {
            matches!(
                span.summary.and_then(|i| overlays[i].summary.as_ref()),
                Some(Summary::Text(_))
            )
        };
        let mut turn = turns.0;
        let mut i = spans.partition_point(|s| s.last < turn);
        loop {
            match spans.get(i) {
                Some(span) if span.first <= turn && summarized(span) => {
                    if span.last >= turns.1 {
                        break;
                    }
                    turn = span.last + 1;
                    i += 1;
                }
                _ => return false,
            }
        }
        let at = self.heads.partition_point(|&seq| seq < seqs.start);
        self.heads.get(at).is_none_or(|&seq| seq >= seqs.end)
    }

    /// How a reader should read the raw event at `seq` in `turn` of type
    /// `kind` for this view: not at all when the view drops it; without
    /// its main payload when the view replaces that whatever it holds (a
    /// call whose arguments, or a result whose content, is stripped for
    /// every tool: [`Projector::transform`] writes the replacement);
    /// otherwise whole.
    pub fn reading(&self, seq: u64, turn: u64, kind: EventType) -> Reading {
        let tools = match self.fate(seq, turn, kind) {
            Fate::Dropped => return Reading::Skip,
            Fate::Kept {
                tools: Some(tools), ..
            } => tools,
            Fate::Kept { tools: None, .. } | Fate::Summary(..) => return Reading::Whole,
        };
        let replaced = match kind {
            EventType::ToolCall => tools.strips_every_request(),
            EventType::ToolResult => tools.strips_every_response(),
            _ => false,
        };
        if replaced {
            Reading::WithoutPayload
        } else {
            Reading::Whole
        }
    }

    /// Whether the view shows the payload of the raw event at `seq` in
    /// `turn` (its text, arguments, content or payload) as it is: `false`
    /// when the view drops the event, replaces it with a summary, or
    /// strips that payload.
    pub fn shows_payload(&self, seq: u64, turn: u64, event: &Event) -> bool {
        let tools = match self.fate(seq, turn, event.kind.event_type()) {
            Fate::Dropped | Fate::Summary(..) => return false,
            Fate::Kept { tools, .. } => tools,
        };
        let Some(tools) = tools else {
            return true;
        };
        match &event.kind {
            EventKind::ToolCall { name, .. } => !tools.strips_request(name),
            EventKind::ToolResult { id, .. } => {
                !tools.strips_response(self.tool_name(id).unwrap_or("unknown"))
            }
            _ => true,
        }
    }

    /// Appends the view events of one raw event to `out`.
    pub fn transform(&self, raw: LogEvent, out: &mut Vec<ViewEvent>) {
        self.transform_after(raw, out, &[]);
    }

    /// Appends the view events of `raw`, a run of consecutive raw events
    /// (a chunk's), to `out`. A stripped result names its tool from a call
    /// of the same run when no two calls of the log had its id (then that
    /// call is the latest), so the table of every call id, large and read
    /// at random, is looked up only for the others.
    pub fn transform_run(&self, raw: impl IntoIterator<Item = LogEvent>, out: &mut Vec<ViewEvent>) {
        // Where in `out` the calls of this run are.
        let mut calls: Vec<usize> = Vec::new();
        for event in raw {
            let at = out.len();
            let call = matches!(event.event.kind, EventKind::ToolCall { .. });
            self.transform_after(event, out, &calls);
            if call && out.len() > at {
                calls.push(at);
            }
        }
    }

    /// The name of call `id` from one of the calls at `calls` in `out`,
    /// when that is the latest call with the id.
    fn nearby_name<'a>(&self, id: &str, out: &'a [ViewEvent], calls: &[usize]) -> Option<&'a str> {
        // Results follow their calls closely: a few calls back, or the
        // table.
        const LOOK_BACK: usize = 64;
        if calls.is_empty() || !self.names.never_repeated(id) {
            return None;
        }
        calls
            .iter()
            .rev()
            .take(LOOK_BACK)
            .find_map(|&i| match &out[i].event.kind {
                EventKind::ToolCall { id: call, name, .. } if call == id => Some(name.as_str()),
                _ => None,
            })
    }

    /// [`Projector::transform`], with the calls of the run so far at
    /// `calls` in `out`.
    fn transform_after(&self, raw: LogEvent, out: &mut Vec<ViewEvent>, calls: &[usize]) {
        let LogEvent { seq, turn, event } = raw;
        let (tools, hints) = match self.fate(seq, turn, event.kind.event_type()) {
            Fate::Dropped => return,
            Fate::Summary(run, text, hint) => {
                let inject = |kind| ViewEvent {
                    seq,
                    turn,
                    summary_of: Some((run.first, run.last)),
                    event: Event::new(event.timestamp, kind),
                };
                out.push(inject(EventKind::TurnStart));
                out.push(inject(EventKind::User {
                    text: match hint {
                        Some((from, to)) => recall_summary_header(from, to),
                        None => SUMMARY_HEADER.to_owned(),
                    },
                }));
                out.push(inject(EventKind::Assistant {
                    text: text.to_owned(),
                }));
                return;
            }
            Fate::Kept { tools, hints } => (tools, hints),
        };
        let mut event = event;
        match &mut event.kind {
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
                // The name is looked up only under a tool policy.
                if let Some(tools) = tools {
                    let name = self
                        .nearby_name(id, out, calls)
                        .or_else(|| self.tool_name(id))
                        .unwrap_or("unknown");
                    if tools.strips_response(name) {
                        let status = if *is_error { "error" } else { "success" };
                        *content = if hints {
                            format!("[compacted] {name}: {status} (recall {seq})")
                        } else {
                            format!("[compacted] {name}: {status}")
                        };
                    }
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
