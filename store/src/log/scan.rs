//! Reading records in order: [`Store::scan`], [`Store::record`], and
//! where a conversation's records are ([`Store::chunks`]).

use std::ops::Range;

use crate::backend::{self, Bytes, Keyspace, KvIter};
use crate::error::{StoreError, StoreResult};
use crate::event::Event;
use crate::hash::Address;
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::layout::Piece;
use crate::staging::ReadPin;
use crate::store::Store;

use super::{event_of, ChunkIter, ChunkSource, LoadedChunk, Located};

/// A record of a conversation's log, as `log` prints it.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord {
    /// Its position in the log (0-based).
    pub seq: u64,
    /// Its turn.
    pub turn: u64,
    /// Its address in the hash chain.
    pub address: Address,
    /// The event.
    pub event: Event,
    /// When and why a text of it was removed, if one was (the event reads
    /// `[redacted]` there).
    pub redaction: Option<RecordRedaction>,
}

/// When and why a record was redacted: by `redact`, or a retention pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRedaction {
    /// When.
    pub time: crate::event::Timestamp,
    /// Why.
    pub reason: String,
}

impl RecordRedaction {
    /// The redaction of a record stored as `bytes`, if it is redacted.
    pub(crate) fn of(bytes: &[u8]) -> StoreResult<Option<RecordRedaction>> {
        Ok(crate::codec::envelope(bytes)?.map(|e| RecordRedaction {
            time: e.time,
            reason: e.reason.to_owned(),
        }))
    }
}

impl Store {
    /// The records of a conversation whose seq is in `seqs`, in order.
    pub fn scan(&self, id: &ConversationId, seqs: Range<u64>) -> StoreResult<LogIter<'_>> {
        let len = self.meta(id)?.len;
        let end = seqs.end.min(len);
        let start = seqs.start.min(end);
        let pin = self.pin_read();
        Ok(LogIter {
            store: self,
            id: *id,
            pieces: self.piece_chunks(id, start, end, &pin)?.into_iter(),
            _pin: pin,
            chunks: None,
            current: None,
            next_seq: start,
            end_seq: end,
            failed: false,
        })
    }

    /// For each piece holding part of records `start..end`, split where
    /// its owner's staged records start: its records in that range and an
    /// iterator over the chunks holding them, from the one holding the
    /// first of them.
    /// The chunks are there for as long as `pin` is held.
    pub(crate) fn piece_chunks(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
        pin: &ReadPin,
    ) -> StoreResult<Vec<(Piece, KvIter<'_>)>> {
        let mut out = Vec::new();
        for (space, piece) in self.spaced_pieces(id, start, end, pin)? {
            let owner = &piece.owner;
            let from = self.chunk_start(space, owner, piece.start)?;
            let chunks = self.scan_range(
                keys::chunk(space, owner, from),
                keys::chunk(space, owner, piece.end),
            );
            out.push((piece, chunks));
        }
        Ok(out)
    }

    /// The non-empty parts of records `start..end` of `id`, each stored
    /// under one owner's keys in one space, in log order; the staged ones
    /// are there for as long as `pin` is held.
    pub(crate) fn spaced_pieces(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
        pin: &ReadPin,
    ) -> StoreResult<Vec<(Space, Piece)>> {
        let mut out = Vec::new();
        for piece in self.pieces(id, end)? {
            if piece.end <= start {
                continue;
            }
            let first = start.max(piece.start);
            let settled = self.settled(&piece.owner, pin)?.clamp(first, piece.end);
            for (space, start, end) in [
                (Space::Settled, first, settled),
                (Space::Staged, settled, piece.end),
            ] {
                if start < end {
                    out.push((
                        space,
                        Piece {
                            start,
                            end,
                            ..piece
                        },
                    ));
                }
            }
        }
        Ok(out)
    }

    /// The piece holding record `seq`, if any.
    pub(crate) fn piece_of(&self, id: &ConversationId, seq: u64) -> StoreResult<Option<Piece>> {
        let len = self.meta(id)?.len;
        Ok(self
            .pieces(id, len)?
            .into_iter()
            .find(|p| (p.start..p.end).contains(&seq)))
    }

    /// The record at `seq`.
    pub fn record(&self, id: &ConversationId, seq: u64) -> StoreResult<LogRecord> {
        match self.scan(id, seq..seq.saturating_add(1))?.next() {
            Some(record) => record,
            None => Err(StoreError::NoSuchRecord {
                seq,
                len: self.meta(id)?.len,
            }),
        }
    }

    /// The first seq of the chunk in `space` that holds `seq` (0 for an
    /// empty log).
    pub(crate) fn chunk_start(
        &self,
        space: Space,
        id: &ConversationId,
        seq: u64,
    ) -> StoreResult<u64> {
        Ok(self.chunk_at_or_before(space, id, seq)?.unwrap_or(0))
    }

    /// The first seq of the last chunk in `space` starting at or before
    /// `seq`: `None` if there is none.
    pub(crate) fn chunk_at_or_before(
        &self,
        space: Space,
        id: &ConversationId,
        seq: u64,
    ) -> StoreResult<Option<u64>> {
        let found = self
            .kv
            .scan(
                Keyspace::Main,
                backend::through(keys::chunks(space, id), keys::chunk(space, id, seq)),
                true,
            )
            .next()
            .transpose()?;
        Ok(found.and_then(|(key, _)| keys::key_seq(&key)))
    }

    pub(crate) fn load_chunk(
        &self,
        space: Space,
        id: &ConversationId,
        first_seq: u64,
    ) -> StoreResult<LoadedChunk> {
        let key = keys::chunk(space, id, first_seq);
        let bytes = self.get(&key)?.ok_or_else(|| StoreError::Corrupt {
            what: format!("conversation {id}: chunk at seq {first_seq} is missing"),
        });
        // A chunk found missing because a delete took its conversation
        // meanwhile says the conversation is gone, not that it is damaged.
        bytes
            .and_then(|bytes| self.read_chunk(id, &key, bytes))
            .map_err(|e| self.unless_deleted(id, e))
    }

    /// The chunk stored under `key` with value `value`, loaded.
    pub(crate) fn read_chunk(
        &self,
        id: &ConversationId,
        key: &[u8],
        value: Bytes,
    ) -> StoreResult<LoadedChunk> {
        Located::new(self.format, id, key, value)?.into_loaded(self, id)
    }

    /// The chunks holding records `start..end`, in order, undecoded: for
    /// readers that decode them in parallel ([`RawChunk::events`]). A chunk
    /// shared with a fork's parent yields only the fork's records.
    pub fn chunks(&self, id: &ConversationId, start: u64, end: u64) -> StoreResult<ChunkIter<'_>> {
        // Records past the end are not asked for, but missing.
        let end = end.min(self.meta(id)?.len);
        let start = start.min(end);
        let pin = self.pin_read();
        let mut pieces = self.piece_chunks(id, start, end, &pin)?;
        pieces.reverse();
        Ok(ChunkIter {
            store: self,
            id: *id,
            _pin: pin,
            format: self.format,
            pieces,
            current: None,
            next: start,
            failed: false,
        })
    }
}

/// The records of a conversation in order; see [`Store::scan`].
pub struct LogIter<'s> {
    store: &'s Store,
    id: ConversationId,
    /// The pieces still to read.
    pieces: std::vec::IntoIter<(Piece, KvIter<'s>)>,
    chunks: Option<(Piece, KvIter<'s>)>,
    current: Option<Current>,
    next_seq: u64,
    end_seq: u64,
    failed: bool,
    /// Keeps the staged chunks it is to read.
    _pin: ReadPin,
}

/// The chunk a [`LogIter`] is in.
struct Current {
    chunk: LoadedChunk,
    /// The next record's index in it.
    index: usize,
    /// The address of the record before that one.
    parent: Address,
    source: ChunkSource,
    /// Where the chunk was read from, for a record read again (in the
    /// chunk as it is now) once a rewrite has made it unreadable.
    owner: ConversationId,
    /// Rewrites followed.
    moves: usize,
}

impl LogIter<'_> {
    pub(crate) fn step(&mut self) -> StoreResult<Option<LogRecord>> {
        loop {
            if self.next_seq >= self.end_seq {
                return Ok(None);
            }
            let piece_end = self.chunks.as_ref().map_or(0, |(p, _)| p.end);
            if self.next_seq >= piece_end {
                // On to the next piece (a fork's own records after its
                // parent's).
                self.current = None;
                self.chunks = self.pieces.next();
                if self.chunks.is_none() {
                    return Err(StoreError::Corrupt {
                        what: format!(
                            "conversation {}: record {} is missing from the log",
                            self.id, self.next_seq
                        ),
                    });
                }
                continue;
            }
            if let Some(current) = &mut self.current {
                let chunk = &current.chunk;
                let index = current.index;
                if index < chunk.layout.entries.len() {
                    let seq = chunk.first_seq + index as u64;
                    let bytes = chunk.record_bytes(index);
                    let address = crate::codec::link(&current.parent, bytes);
                    let turn = chunk.layout.entries[index].turn;
                    if seq < self.next_seq {
                        current.parent = address;
                        current.index += 1;
                        continue;
                    }
                    let read = event_of(self.store, &self.id, seq, bytes)
                        .and_then(|event| Ok((event, RecordRedaction::of(bytes)?)));
                    let (event, redaction) = match read {
                        Ok(read) => read,
                        Err(error @ StoreError::Corrupt { .. })
                            if current.moves < ChunkSource::MOVES =>
                        {
                            // Rewritten since it was read (gc, redact):
                            // this record again, in the chunk as it is now.
                            let now = current.source.moved(self.store, &current.owner, error)?;
                            current.chunk = now.into_loaded(self.store, &current.owner)?;
                            current.moves += 1;
                            continue;
                        }
                        Err(error) => return Err(error),
                    };
                    current.parent = address;
                    current.index += 1;
                    self.next_seq = seq + 1;
                    return Ok(Some(LogRecord {
                        seq,
                        turn,
                        address,
                        event,
                        redaction,
                    }));
                }
            }
            let Some((piece, chunks)) = &mut self.chunks else {
                continue;
            };
            let Some(item) = chunks.next() else {
                return Err(StoreError::Corrupt {
                    what: format!(
                        "conversation {}: record {} is missing from the log",
                        self.id, self.next_seq
                    ),
                });
            };
            let (key, value) = item?;
            let mut source = ChunkSource { key, value };
            let chunk = source.load(self.store, &piece.owner)?;
            if chunk.first_seq > self.next_seq {
                return Err(StoreError::Corrupt {
                    what: format!(
                        "conversation {}: record {} is missing (next chunk starts at {})",
                        self.id, self.next_seq, chunk.first_seq
                    ),
                });
            }
            self.current = Some(Current {
                parent: chunk.layout.parent,
                chunk,
                index: 0,
                source,
                owner: piece.owner,
                moves: 0,
            });
        }
    }
}

impl Iterator for LogIter<'_> {
    type Item = StoreResult<LogRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self
            .step()
            .map_err(|e| self.store.unless_deleted(&self.id, e))
            .transpose();
        if matches!(item, Some(Err(_))) {
            self.failed = true;
        }
        item
    }
}
