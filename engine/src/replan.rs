//! Planning a compaction again when another client appends to the
//! conversation between the plan and its write (through a server): what
//! `compact` and automatic compaction share.
//!
//! Each attempt plans from the head it reads and appends on condition
//! that the head is still that one. A later attempt keeps what the first
//! decided (the turns), and the summary a summarizer wrote when the raw
//! events of its turns read the same (a redaction meanwhile changes them,
//! not their addresses). The last attempt holds this process's turn at
//! appending to the conversation ([`Store::hold_appends`]) from its plan
//! to its write, so a steady stream of appends cannot starve it; it lets
//! the turn go if a summarizer must run, since appends never wait on one.

use convstore_projection::LogEvent;
use convstore_store::{
    AppendOptions, AppendTurn, Appended, ConversationId, Event, Store, StoreResult,
};
use serde_json::{Map, Value};

use crate::error::Result;

/// What the attempts of one compaction pass on, `D` being what the first
/// decided.
pub(crate) struct Replan<'s, D> {
    /// What the first attempt decided, kept by the later ones.
    pub decided: Option<D>,
    /// The summary written, if one was.
    written: Option<Written>,
    /// The conversation's turn, held by the last attempt.
    turn: Option<AppendTurn<'s>>,
}

/// A summary a summarizer wrote, and the raw events (turns `from..=to`)
/// it was written from.
pub(crate) struct Written {
    from: u64,
    to: u64,
    raw: Vec<LogEvent>,
    /// Its text.
    pub text: String,
    /// What the summarizer records of itself.
    pub provenance: Map<String, Value>,
}

impl<'s, D> Replan<'s, D> {
    /// Runs `attempt` until it stores or fails otherwise than by a
    /// conflict, at most `attempts` times; the last conflict is returned.
    pub fn run<T>(
        store: &'s Store,
        id: &ConversationId,
        attempts: usize,
        mut attempt: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let mut replan = Replan {
            decided: None,
            written: None,
            turn: None,
        };
        let mut number = 1;
        loop {
            if number == attempts {
                replan.turn = Some(store.hold_appends(id));
            }
            match attempt(&mut replan) {
                Err(e) if e.is_conflict() && number < attempts => number += 1,
                other => return other,
            }
        }
    }

    /// The summary of `raw`, the raw events of turns `from..=to`: the one
    /// written before if it came from the same events, else what `write`
    /// writes (the conversation's turn let go first).
    pub fn summary(
        &mut self,
        from: u64,
        to: u64,
        raw: Vec<LogEvent>,
        write: impl FnOnce(&[LogEvent]) -> Result<(String, Map<String, Value>)>,
    ) -> Result<&Written> {
        let written = match self.written.take() {
            Some(w) if (w.from, w.to) == (from, to) && w.raw == raw => w,
            _ => {
                self.turn = None;
                let (text, provenance) = write(&raw)?;
                Written {
                    from,
                    to,
                    raw,
                    text,
                    provenance,
                }
            }
        };
        Ok(self.written.insert(written))
    }

    /// Appends `events` to `id`, within the turn if this attempt holds it.
    pub fn append(
        &self,
        store: &Store,
        id: &ConversationId,
        events: &[Event],
        options: &AppendOptions,
    ) -> StoreResult<Appended> {
        match &self.turn {
            Some(turn) => store.append_in_turn(turn, events, options),
            None => store.append(id, events, options),
        }
    }
}
