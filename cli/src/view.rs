//! Streams a stored conversation through the projection engine.
//!
//! Two passes over the log: the first feeds a [`Plan`], the second reads the
//! records again in windows, transforms each window's chunks in parallel and
//! hands the view events, in order, to a sink. Memory is bounded by the
//! window, not by the log.

use anyhow::Result;
use convstore_projection::{estimate_chars, LogEvent, Plan, Projector, ViewEvent};
use convstore_store::{ConversationId, Event, EventType, Store};

/// Records per parallel task.
const CHUNK: usize = 1024;
/// Chunks read before they are transformed together.
const WINDOW: usize = 64;

/// Which part of the log to project.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope {
    /// Records `0..end`.
    pub end: u64,
}

/// Builds the plan of the records in `scope`, plus `extra` (an event that
/// would be appended next, for dry runs).
pub(crate) fn plan(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    extra: Option<(u64, u64, &Event)>,
) -> Result<Projector> {
    let mut plan = Plan::new();
    for record in store.scan(id, 0..scope.end)? {
        let record = record?;
        plan.observe(record.seq, record.turn, &record.event);
    }
    if let Some((seq, turn, event)) = extra {
        plan.observe(seq, turn, event);
    }
    Ok(plan.finish())
}

/// Projects the records in `scope` with `projector`, calling `sink` with
/// each view event in order.
pub(crate) fn stream(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    projector: &Projector,
    mut sink: impl FnMut(&ViewEvent) -> Result<()>,
) -> Result<()> {
    let mut records = store.scan(id, 0..scope.end)?;
    loop {
        let mut chunks: Vec<Vec<LogEvent>> = Vec::with_capacity(WINDOW);
        let mut chunk = Vec::with_capacity(CHUNK);
        for record in records.by_ref() {
            let record = record?;
            chunk.push(LogEvent {
                seq: record.seq,
                turn: record.turn,
                event: record.event,
            });
            if chunk.len() == CHUNK {
                chunks.push(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)));
                if chunks.len() == WINDOW {
                    break;
                }
            }
        }
        if !chunk.is_empty() {
            chunks.push(chunk);
        }
        if chunks.is_empty() {
            return Ok(());
        }
        for view in projector.transform_chunks(chunks) {
            for event in &view {
                sink(event)?;
            }
        }
    }
}

/// The view's events and characters per kind, with `extra` appended.
pub(crate) fn tally(
    store: &Store,
    id: &ConversationId,
    scope: Scope,
    extra: Option<(u64, u64, &Event)>,
) -> Result<Tally> {
    let projector = plan(store, id, scope, extra)?;
    let mut tally = Tally::default();
    stream(store, id, scope, &projector, |v| {
        tally.add(&v.event);
        Ok(())
    })?;
    Ok(tally)
}

/// Events and characters of a view, per event type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub events: [u64; 10],
    pub chars: [u64; 10],
}

impl Tally {
    pub(crate) fn add(&mut self, event: &Event) {
        let i = event.kind.event_type().index();
        self.events[i] += 1;
        self.chars[i] += estimate_chars(event);
    }

    pub(crate) fn total_chars(&self) -> u64 {
        self.chars.iter().sum()
    }

    pub(crate) fn of(&self, kind: EventType) -> (u64, u64) {
        (self.events[kind.index()], self.chars[kind.index()])
    }
}
