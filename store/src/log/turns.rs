//! The turn index: which turn a record is in, and where a turn starts.

use std::ops::{Range, RangeInclusive};

use crate::codec::TurnEntry;
use crate::codec::{self, decode_record};
use crate::error::{StoreError, StoreResult};
use crate::event::Timestamp;
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::position::{Seq, Turn};
use crate::store::Store;

use super::{in_record, ChunkTurns, LoadedChunk, Located};

/// The seq of the first record of `turn` in `chunk`, if it has one.
fn position_of_turn(chunk: &LoadedChunk, turn: u64) -> Option<u64> {
    chunk
        .layout
        .entries
        .iter()
        .position(|e| e.turn == turn)
        .map(|i| chunk.first_seq + i as u64)
}

impl Store {
    /// The turn of record `seq`, from the chunk that holds it: O(log n).
    pub fn turn_of(&self, id: &ConversationId, seq: Seq) -> StoreResult<Turn> {
        self.turn_of_seq(id, seq.0).map(Turn)
    }

    fn turn_of_seq(&self, id: &ConversationId, seq: u64) -> StoreResult<u64> {
        let Some(piece) = self.piece_of(id, seq)? else {
            return Err(StoreError::NoSuchRecord {
                seq,
                len: self.meta(id)?.len,
            });
        };
        let owner = &piece.owner;
        let pin = self.pin_read();
        let space = Store::space_of(seq, self.settled(owner, &pin)?);
        let missing = || {
            self.unless_deleted(
                id,
                StoreError::Corrupt {
                    what: format!("conversation {id}: record {seq} is missing from the log"),
                },
            )
        };
        // No chunk at or before the record: the record is named, not a
        // chunk it never was in.
        let Some(start) = self.chunk_at_or_before(space, owner, seq)? else {
            return Err(missing());
        };
        let chunk = self.load_chunk(space, owner, start)?;
        let index = (seq - chunk.first_seq) as usize;
        chunk
            .layout
            .entries
            .get(index)
            .map(|e| e.turn)
            .ok_or_else(missing)
    }

    /// The seq of the first record of `turn`, or `None` if the log has no
    /// such turn: O(log n), through the turn index (each chunk is indexed
    /// under its last turn, so the first chunk indexed at or after `turn`
    /// holds the turn's first record).
    pub fn first_seq_of_turn(&self, id: &ConversationId, turn: Turn) -> StoreResult<Option<Seq>> {
        Ok(self.first_of_turn(id, turn.0)?.map(Seq))
    }

    fn first_of_turn(&self, id: &ConversationId, turn: u64) -> StoreResult<Option<u64>> {
        let len = self.meta(id)?.len;
        // An ancestor is not asked for a turn past the fork point: the
        // fork shares none of its records there (nor any damage in them).
        for (piece, last) in self.pieces_and_last_turns(id, len)? {
            if last.is_some_and(|last| turn > last) {
                continue;
            }
            match self.owned_first_seq_of_turn(&piece.owner, turn)? {
                Some(seq) if seq < piece.start => {
                    return Err(StoreError::Corrupt {
                        what: format!("conversation {id}: the turn index of a fork's parent points before the fork"),
                    })
                }
                Some(seq) if seq < piece.end => return Ok(Some(seq)),
                _ => {}
            }
        }
        Ok(None)
    }

    /// The seqs of the records of `turns` among records before `end`:
    /// empty (`end..end`) when its first turn has none there.
    pub fn turn_records(
        &self,
        id: &ConversationId,
        turns: RangeInclusive<Turn>,
        end: Seq,
    ) -> StoreResult<Range<u64>> {
        let (first, last, end) = (turns.start().0, turns.end().0, end.0);
        let Some(start) = self.first_of_turn(id, first)?.filter(|&s| s < end) else {
            return Ok(end..end);
        };
        let stop = match last.checked_add(1) {
            Some(next) => self.first_of_turn(id, next)?.map_or(end, |s| s.min(end)),
            None => end,
        };
        Ok(start..stop)
    }

    /// [`Store::first_seq_of_turn`] among the records stored under
    /// `owner`'s own keys: in its settled chunks, else in its staged ones
    /// (from where they start: staged chunks before it are settled
    /// already, and never read).
    pub(crate) fn owned_first_seq_of_turn(
        &self,
        owner: &ConversationId,
        turn: u64,
    ) -> StoreResult<Option<u64>> {
        let pin = self.pin_read();
        // The length first: a settle after it leaves no staged record
        // before it unread (the settled index is read after the boundary).
        let len = self.meta(owner)?.len;
        let settled = self.settled(owner, &pin)?;
        let index = self.scan_range(
            keys::turn(Space::Settled, owner, turn, 0),
            keys::turn(Space::Settled, owner, u64::MAX, u64::MAX),
        );
        if let Some(item) = index.into_iter().next() {
            let (key, value) = item?;
            let (_, first_seq) = keys::turn_parts(&key).ok_or_else(|| StoreError::Corrupt {
                what: format!("conversation {owner}: a turn index key is truncated"),
            })?;
            let entry: TurnEntry = codec::decode(&value, "turn index entry")?;
            if entry.first_turn > turn {
                // The turn falls between chunks: it has no record.
                return Ok(None);
            }
            let chunk = self.load_chunk(Space::Settled, owner, first_seq)?;
            return Ok(position_of_turn(&chunk, turn));
        }
        // Past the settled chunks: the first staged chunk reaching `turn`.
        for chunk in self.staged_chunks(owner, settled, len)? {
            if chunk.layout.entries.last().is_some_and(|e| e.turn >= turn) {
                return Ok(position_of_turn(&chunk, turn));
            }
        }
        Ok(None)
    }

    /// `owner`'s staged chunks holding its records `from..end` (`from` the
    /// first seq of one of them), read whole, in log order: a staged
    /// chunk's turns are read from the chunk itself (format 9 indexes no
    /// staged chunk; the staged records are a few hundred at most). A
    /// chunk missing among them fails as corrupt, naming it, as reading it
    /// would: an answer without its records would be wrong.
    fn staged_chunks(
        &self,
        owner: &ConversationId,
        from: u64,
        end: u64,
    ) -> StoreResult<Vec<LoadedChunk>> {
        if from >= end {
            return Ok(Vec::new());
        }
        let found = self.scan_range(
            keys::chunk(Space::Staged, owner, from),
            keys::chunk(Space::Staged, owner, end),
        );
        let missing = |seq: u64| StoreError::Corrupt {
            what: format!("conversation {owner}: chunk at seq {seq} is missing"),
        };
        let mut chunks = Vec::new();
        let mut next = from;
        for item in found {
            let chunk = item
                .and_then(|(key, value)| {
                    Located::new(self.format, owner, &key, value)?.into_loaded(self, owner)
                })
                .and_then(|chunk| {
                    if chunk.first_seq == next {
                        Ok(chunk)
                    } else {
                        Err(missing(next))
                    }
                })
                .map_err(|e| self.unless_deleted(owner, e))?;
            next = chunk.first_seq + chunk.layout.entries.len() as u64;
            chunks.push(chunk);
        }
        if next < end {
            return Err(self.unless_deleted(owner, missing(next)));
        }
        Ok(chunks)
    }

    /// The turns each chunk holding part of records `start..end` of `id`
    /// spans, from the turn index alone for settled chunks (staged ones, a
    /// few hundred records at most, are read: format 9 indexes none): for readers
    /// that pass over the chunks a view drops whole ([`RawChunk::turns`]).
    /// A fork's parent's chunks are listed whole, past the fork point too.
    pub fn chunk_turns(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
    ) -> StoreResult<ChunkTurns> {
        let pin = self.pin_read();
        let mut turns = ChunkTurns::default();
        for (space, piece) in self.spaced_pieces(id, start, end, &pin)? {
            let owner = &piece.owner;
            if space == Space::Staged {
                // From where the staged records start, so that a missing
                // chunk is told from one the piece does not reach.
                let settled = self.settled(owner, &pin)?;
                for chunk in self.staged_chunks(owner, settled, piece.end)? {
                    let (Some(first), Some(last)) =
                        (chunk.layout.entries.first(), chunk.layout.entries.last())
                    else {
                        continue;
                    };
                    if chunk.first_seq + (chunk.layout.entries.len() as u64) <= piece.start {
                        continue;
                    }
                    turns
                        .spans
                        .insert((*owner, space, chunk.first_seq), (first.turn, last.turn));
                }
                continue;
            }
            let from = self.chunk_start(space, owner, piece.start)?;
            // Keyed by last turn, then first seq: in log order, from the
            // first chunk that can hold the piece's first turn.
            let first_turn = self.turn_of_seq(id, piece.start)?;
            let index = self.scan_range(
                keys::turn(space, owner, first_turn, 0),
                keys::turn(space, owner, u64::MAX, u64::MAX),
            );
            for item in index {
                let (key, value) = item?;
                let (last_turn, first_seq) =
                    keys::turn_parts(&key).ok_or_else(|| StoreError::Corrupt {
                        what: format!("conversation {owner}: a turn index key is truncated"),
                    })?;
                if first_seq >= piece.end {
                    break;
                }
                if first_seq < from {
                    continue;
                }
                let entry: TurnEntry = codec::decode(&value, "turn index entry")?;
                turns
                    .spans
                    .insert((*owner, space, first_seq), (entry.first_turn, last_turn));
            }
        }
        Ok(turns)
    }

    /// The seq of the first conversation event (any kind but `config`,
    /// `system` and `compaction`) of `turn` among records `0..end`. For a
    /// turn after the first that is the `turn_start` opening it, found
    /// through the turn index.
    pub fn first_conversation_seq(
        &self,
        id: &ConversationId,
        turn: Turn,
        end: Seq,
    ) -> StoreResult<Option<Seq>> {
        Ok(self.first_conversation(id, turn.0, end.0)?.map(Seq))
    }

    fn first_conversation(
        &self,
        id: &ConversationId,
        turn: u64,
        end: u64,
    ) -> StoreResult<Option<u64>> {
        let Some(start) = self.first_of_turn(id, turn)? else {
            return Ok(None);
        };
        if start >= end {
            return Ok(None);
        }
        let mut chunks = self.chunks(id, start, end)?;
        while let Some(raw) = chunks.next().transpose()? {
            let chunk = raw.chunk.load(self, id)?;
            for (i, entry) in chunk.layout.entries.iter().enumerate() {
                let seq = chunk.first_seq + i as u64;
                if seq < start || !raw.records.contains(&seq) {
                    continue;
                }
                if seq >= end || entry.turn != turn {
                    return Ok(None);
                }
                let record =
                    decode_record(chunk.record_bytes(i)).map_err(|e| in_record(id, seq, &e))?;
                if record.body.event_type().is_conversation() {
                    return Ok(Some(seq));
                }
            }
        }
        Ok(None)
    }

    /// The seq of the newest record at or before `time`: the greatest
    /// timestamp not after it, the later in the log among equal ones; `None`
    /// when every record is newer. Reads every record's timestamp (records
    /// may carry any time), without loading blobs.
    pub fn newest_at_or_before(
        &self,
        id: &ConversationId,
        time: Timestamp,
    ) -> StoreResult<Option<u64>> {
        let len = self.meta(id)?.len;
        let mut best: Option<(Timestamp, u64)> = None;
        for raw in self.chunks(id, 0, len)? {
            let raw = raw?;
            let chunk = raw.chunk.load(self, id)?;
            for i in 0..chunk.layout.entries.len() {
                let seq = chunk.first_seq + i as u64;
                if !raw.records.contains(&seq) {
                    continue;
                }
                let record =
                    decode_record(chunk.record_bytes(i)).map_err(|e| in_record(id, seq, &e))?;
                let stamp = record.timestamp;
                if stamp <= time && best.is_none_or(|(t, _)| stamp >= t) {
                    best = Some((stamp, seq));
                }
            }
        }
        Ok(best.map(|(_, seq)| seq))
    }
}
