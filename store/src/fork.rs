//! Forks: [`Store::fork`] makes a conversation that shares a prefix of
//! another's log without copying it.
//!
//! A fork's records are numbered on from its fork point: records
//! `0..at` are its parent's (themselves perhaps its grandparent's), and
//! its own appends are stored under its own id from seq `at` on, chained
//! after the parent's record `at - 1`. So every read walks the log as a
//! list of [`Piece`]s, each a seq range stored under one conversation's
//! keys. Creating a fork writes three small values, whatever the parent's
//! length.

use serde::{Deserialize, Serialize};

use crate::append::{encode_all, write_records, Writes};
use crate::codec::{decode_named, encode};
use crate::error::{StoreError, StoreResult};
use crate::event::TurnTracker;
use crate::event::{Event, EventType};
use crate::hash::Address;
use crate::ids::ConversationId;
use crate::keys;
use crate::layout::Piece;
use crate::position::{Seq, Turn};
use crate::store::{KindStats, Store};

/// Where a fork branches from its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkPoint {
    /// The conversation it was forked from.
    pub parent: ConversationId,
    /// How many of the parent's records it shares: records `0..at`.
    pub at: u64,
    /// The address of the parent's record `at - 1` ([`Address::ROOT`] when
    /// `at` is 0): the parent of the fork's first own record.
    pub base: Address,
    /// The turn state after the shared records.
    pub turns: TurnTracker,
}

impl Store {
    /// Where `id` was forked from, if it is a fork.
    pub fn fork_point(&self, id: &ConversationId) -> StoreResult<Option<ForkPoint>> {
        match self.get(&keys::lineage(id))? {
            Some(bytes) => Ok(Some(decode_named(&bytes, &|| {
                format!("lineage of conversation {id}")
            })?)),
            None => Ok(None),
        }
    }

    /// The ancestry of `id`: `id` itself first, then its parent, and so on
    /// to a conversation that is not a fork; each with its fork point.
    pub fn lineage(
        &self,
        id: &ConversationId,
    ) -> StoreResult<Vec<(ConversationId, Option<ForkPoint>)>> {
        let mut out = Vec::new();
        let mut current = *id;
        loop {
            let point = self.fork_point(&current)?;
            out.push((current, point));
            match point {
                Some(point) => {
                    if out.iter().any(|(seen, _)| *seen == point.parent) {
                        return Err(StoreError::Corrupt {
                            what: format!("conversation {id}: its lineage loops"),
                        });
                    }
                    current = point.parent;
                }
                None => return Ok(out),
            }
        }
    }

    /// The pieces holding records `0..end` of `id`, in log order, none
    /// empty.
    pub(crate) fn pieces(&self, id: &ConversationId, end: u64) -> StoreResult<Vec<Piece>> {
        Ok(self
            .pieces_and_last_turns(id, end)?
            .into_iter()
            .map(|(piece, _)| piece)
            .collect())
    }

    /// [`Store::pieces`], each with the last turn it holds: an ancestor's,
    /// the turn of the last record a fork shares; `None` for `id`'s own.
    pub(crate) fn pieces_and_last_turns(
        &self,
        id: &ConversationId,
        end: u64,
    ) -> StoreResult<Vec<(Piece, Option<u64>)>> {
        let mut pieces = Vec::new();
        let (mut limit, mut last) = (end, None);
        for (owner, point) in self.lineage(id)? {
            let start = point.map_or(0, |p| p.at);
            if limit > start {
                let piece = Piece {
                    owner,
                    start,
                    end: limit,
                };
                pieces.push((piece, last));
            }
            limit = limit.min(start);
            if let Some(point) = point {
                let turn = point.turns.current();
                last = Some(last.map_or(turn, |l: u64| l.min(turn)));
            }
        }
        pieces.reverse();
        Ok(pieces)
    }

    /// The address of record `at - 1` of `parent` and the turn state after
    /// it: what a fork sharing records `0..at` continues from.
    pub(crate) fn fork_base(
        &self,
        parent: &ConversationId,
        at: u64,
    ) -> StoreResult<(Address, TurnTracker)> {
        match at.checked_sub(1) {
            None => Ok((Address::ROOT, TurnTracker::new())),
            Some(last) => {
                let record = self.record(parent, last)?;
                let holds = self
                    .first_conversation_seq(parent, Turn(record.turn), Seq(at))?
                    .is_some();
                Ok((record.address, TurnTracker::resumed(record.turn, holds)))
            }
        }
    }

    /// Whether record `at - 1` of `parent`, the last a fork at `at`
    /// shares, is committed (`codec::Layout`): then so must every record
    /// of the fork be.
    pub(crate) fn base_committed(&self, parent: &ConversationId, at: u64) -> StoreResult<bool> {
        let Some(last) = at.checked_sub(1) else {
            return Ok(false);
        };
        let owner = self.owner_of(parent, last)?;
        let pin = self.pin_read();
        let space = Store::space_of(last, self.settled(&owner, &pin)?);
        let held = self
            .chunk_holding(space, &owner, last)?
            .ok_or(StoreError::NoSuchRecord { seq: last, len: at })?;
        let bytes = held.chunk.record_bytes(held.index);
        Ok(crate::codec::Layout::of_stored(bytes) == crate::codec::Layout::Committed)
    }

    /// Counts per event type of the whole log of `id`. For a conversation
    /// that is not a fork this is [`ConversationInfo::kinds`], kept with it;
    /// a fork adds its shared records', counted by reading them.
    ///
    /// [`ConversationInfo::kinds`]: crate::ConversationInfo::kinds
    pub fn kind_stats(&self, id: &ConversationId) -> StoreResult<[KindStats; 10]> {
        let mut kinds = self.meta(id)?.kinds;
        let Some(point) = self.fork_point(id)? else {
            return Ok(kinds);
        };
        for chunk in self.chunks(id, 0, point.at)? {
            chunk?.count_kinds(self, point.at, &mut kinds)?;
        }
        Ok(kinds)
    }

    /// For each conversation whose own keys hold part of records `0..end`
    /// of `id` (a fork's parents, then `id`), how many of all its own
    /// records are of one of `kinds`: from the counts kept per
    /// conversation (a parent's count all its records, past the fork point
    /// too).
    pub fn kind_counts(
        &self,
        id: &ConversationId,
        end: u64,
        kinds: &[EventType],
    ) -> StoreResult<Vec<(ConversationId, u64)>> {
        let mut counts = Vec::new();
        for piece in self.pieces(id, end)? {
            let stats = self.meta(&piece.owner)?.kinds;
            let count = kinds.iter().map(|kind| stats[kind.index()].count).sum();
            counts.push((piece.owner, count));
        }
        Ok(counts)
    }

    /// Creates a conversation (named `name`, if given) that shares the
    /// records `0..at` of `parent`, then holds `events` (none is fine), in
    /// one atomic write. Constant in the parent's length: it reads the one
    /// chunk holding record `at - 1` and writes the new conversation's
    /// metadata, lineage and records.
    ///
    /// Fails with [`StoreError::NoSuchRecord`] when `at` exceeds the
    /// parent's length; nothing is stored then.
    pub fn fork(
        &self,
        parent: &ConversationId,
        at: u64,
        name: Option<&str>,
        events: &[Event],
    ) -> StoreResult<(ConversationId, Address)> {
        let encoded = encode_all(events, self.max_event_bytes(), self.layout())?;
        let guard = self.lock_writes();
        let len = self.meta(parent)?.len;
        if at > len {
            return Err(StoreError::NoSuchRecord { seq: at - 1, len });
        }
        let (base, turns) = self.fork_base(parent, at)?;
        let (id, mut meta) = self.prepare_conversation(name)?;
        meta.head = base;
        meta.len = at;
        meta.turns = turns;
        let point = ForkPoint {
            parent: *parent,
            at,
            base,
            turns,
        };
        let mut writes = Writes::new(self);
        // The fork exists only if neither its id nor its name appeared
        // meanwhile.
        writes.require(keys::conversation(&id), None);
        writes.batch.put(keys::lineage(&id), encode(&point));
        if let Some(name) = name {
            writes.require(keys::name(name), None);
            writes.batch.put(keys::name(name), id.as_bytes().as_slice());
        }
        let head = if encoded.is_empty() {
            writes.batch.put(keys::conversation(&id), encode(&meta));
            base
        } else {
            let placement = self.place(&id, &meta, &encoded)?;
            write_records(&id, meta, &encoded, &placement, &mut writes)?.head
        };
        self.commit(&encoded, writes).map_err(|e| match (e, name) {
            (StoreError::Conflict { .. }, Some(name)) => StoreError::NameTaken {
                name: name.to_owned(),
            },
            (e, _) => e,
        })?;
        drop(guard);
        self.sync()?;
        Ok((id, head))
    }
}
