//! Reading the log: [`Store::scan`], [`Store::record`], and the turn index
//! ([`Store::turn_of`], [`Store::first_seq_of_turn`]).

use std::collections::HashMap;
use std::ops::Range;

use crate::append::{OverlayEntry, TurnEntry};
use crate::codec::{self, decode_record, record_to_event, BlobRef, CallDirectory, ChunkLayout};
use crate::error::{StoreError, StoreResult};
use crate::event::{Event, EventType};
use crate::hash::Address;
use crate::ids::ConversationId;
use crate::keys;
use crate::store::Store;

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
}

/// A compaction overlay, read from the overlay entries without scanning the
/// log.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredOverlay {
    /// The compaction record's seq.
    pub seq: u64,
    /// Its turn.
    pub turn: u64,
    /// The compaction event.
    pub event: Event,
}

/// A chunk read from the store, with its records located.
pub(crate) struct LoadedChunk {
    pub first_seq: u64,
    pub bytes: sled::IVec,
    pub layout: ChunkLayout,
}

impl LoadedChunk {
    pub(crate) fn read(id: &ConversationId, key: &[u8], bytes: sled::IVec) -> StoreResult<Self> {
        let first_seq = keys::key_seq(key).ok_or_else(|| StoreError::Corrupt {
            what: format!("conversation {id}: a chunk key is truncated"),
        })?;
        let layout = ChunkLayout::read(&bytes, &|| {
            format!("conversation {id}: chunk at seq {first_seq}")
        })?;
        Ok(Self {
            first_seq,
            bytes,
            layout,
        })
    }

    pub(crate) fn record_bytes(&self, index: usize) -> &[u8] {
        &self.bytes[self.layout.entries[index].record.clone()]
    }
}

impl Store {
    /// The records of a conversation whose seq is in `seqs`, in order.
    pub fn scan(&self, id: &ConversationId, seqs: Range<u64>) -> StoreResult<LogIter<'_>> {
        let len = self.meta(id)?.len;
        let end = seqs.end.min(len);
        let start = seqs.start.min(end);
        let from = self.chunk_start(id, start)?;
        let chunks = self
            .db
            .range(keys::chunk(id, from)..keys::chunk(id, u64::MAX));
        Ok(LogIter {
            store: self,
            id: *id,
            chunks,
            current: None,
            next_seq: start,
            end_seq: end,
            failed: false,
        })
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

    /// The first seq of the chunk that holds `seq` (0 for an empty log).
    fn chunk_start(&self, id: &ConversationId, seq: u64) -> StoreResult<u64> {
        let found = self
            .db
            .range(keys::chunks(id)..=keys::chunk(id, seq))
            .next_back()
            .transpose()?;
        Ok(found.and_then(|(key, _)| keys::key_seq(&key)).unwrap_or(0))
    }

    fn load_chunk(&self, id: &ConversationId, first_seq: u64) -> StoreResult<LoadedChunk> {
        let key = keys::chunk(id, first_seq);
        let bytes = self.db.get(&key)?.ok_or_else(|| StoreError::Corrupt {
            what: format!("conversation {id}: chunk at seq {first_seq} is missing"),
        })?;
        LoadedChunk::read(id, &key, bytes)
    }

    /// The turn of record `seq`, from the chunk that holds it: O(log n).
    pub fn turn_of(&self, id: &ConversationId, seq: u64) -> StoreResult<u64> {
        let len = self.meta(id)?.len;
        if seq >= len {
            return Err(StoreError::NoSuchRecord { seq, len });
        }
        let chunk = self.load_chunk(id, self.chunk_start(id, seq)?)?;
        let index = (seq - chunk.first_seq) as usize;
        chunk
            .layout
            .entries
            .get(index)
            .map(|e| e.turn)
            .ok_or_else(|| StoreError::Corrupt {
                what: format!("conversation {id}: record {seq} is missing from its chunk"),
            })
    }

    /// The seq of the first record of `turn`, or `None` if the log has no
    /// such turn: O(log n), through the turn index (each chunk is indexed
    /// under its last turn, so the first chunk indexed at or after `turn`
    /// holds the turn's first record).
    pub fn first_seq_of_turn(&self, id: &ConversationId, turn: u64) -> StoreResult<Option<u64>> {
        let found = self
            .db
            .range(keys::turn(id, turn, 0)..keys::turn(id, u64::MAX, u64::MAX))
            .next()
            .transpose()?;
        let Some((key, value)) = found else {
            return Ok(None);
        };
        let (_, first_seq) = keys::turn_parts(&key).ok_or_else(|| StoreError::Corrupt {
            what: format!("conversation {id}: a turn index key is truncated"),
        })?;
        let entry: TurnEntry = codec::decode(&value, "turn index entry")?;
        if entry.first_turn > turn {
            // The turn falls between chunks: it has no record.
            return Ok(None);
        }
        let chunk = self.load_chunk(id, first_seq)?;
        Ok(chunk
            .layout
            .entries
            .iter()
            .position(|e| e.turn == turn)
            .map(|i| first_seq + i as u64))
    }

    /// The compaction overlays among records `0..end`, in log order.
    pub fn overlays(&self, id: &ConversationId, end: u64) -> StoreResult<Vec<StoredOverlay>> {
        let mut out = Vec::new();
        for item in self.db.range(keys::overlay(id, 0)..keys::overlay(id, end)) {
            let (key, value) = item?;
            let seq = keys::key_seq(&key).ok_or_else(|| StoreError::Corrupt {
                what: format!("conversation {id}: an overlay key is truncated"),
            })?;
            let entry: OverlayEntry<'_> = codec::decode(&value, "overlay entry")?;
            let record = decode_record(entry.record).map_err(|e| in_record(id, seq, &e))?;
            let event = record_to_event(&record, &mut |blob| self.load_blob(blob))
                .map_err(|e| in_record(id, seq, &e))?;
            out.push(StoredOverlay {
                seq,
                turn: entry.turn,
                event,
            });
        }
        Ok(out)
    }

    /// The name of the latest tool call with each id among records `0..end`,
    /// from the chunks' call directories (no record is decoded).
    pub fn tool_names(
        &self,
        id: &ConversationId,
        end: u64,
    ) -> StoreResult<HashMap<String, String>> {
        let mut names = HashMap::new();
        for item in self
            .db
            .range(keys::call_directory(id, 0)..keys::call_directory(id, end))
        {
            let (_, value) = item?;
            let directory: CallDirectory<'_> = codec::decode(&value, "call directory")?;
            for (seq, call, name) in directory.calls {
                if seq < end {
                    names.insert(call.to_owned(), name.to_owned());
                }
            }
        }
        Ok(names)
    }

    /// The seq of the first conversation event (any kind but `config`,
    /// `system` and `compaction`) of `turn` among records `0..end`. For a
    /// turn after the first that is the `turn_start` opening it, found
    /// through the turn index.
    pub fn first_conversation_seq(
        &self,
        id: &ConversationId,
        turn: u64,
        end: u64,
    ) -> StoreResult<Option<u64>> {
        let Some(start) = self.first_seq_of_turn(id, turn)? else {
            return Ok(None);
        };
        if start >= end {
            return Ok(None);
        }
        let mut chunks = self.chunks(id, start, end)?;
        while let Some(raw) = chunks.next().transpose()? {
            let chunk = &raw.chunk;
            for (i, entry) in chunk.layout.entries.iter().enumerate() {
                let seq = chunk.first_seq + i as u64;
                if seq < start {
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

    /// The chunks holding records `start..end`, in order, undecoded: for
    /// readers that decode them in parallel ([`RawChunk::events`]).
    pub fn chunks(&self, id: &ConversationId, start: u64, end: u64) -> StoreResult<ChunkIter> {
        let from = self.chunk_start(id, start)?;
        Ok(ChunkIter {
            id: *id,
            inner: self
                .db
                .range(keys::chunk(id, from)..keys::chunk(id, end.max(from + 1))),
        })
    }

    /// The text of a blob.
    pub(crate) fn load_blob(&self, blob: BlobRef) -> StoreResult<String> {
        let bytes = self
            .blobs
            .get(blob.hash.as_bytes())?
            .ok_or_else(|| StoreError::Corrupt {
                what: format!("blob {} is missing", blob.hash),
            })?;
        String::from_utf8(bytes.to_vec()).map_err(|_| StoreError::Corrupt {
            what: format!("blob {} is not UTF-8", blob.hash),
        })
    }
}

/// Undecoded chunks of a conversation; see [`Store::chunks`].
pub struct ChunkIter {
    id: ConversationId,
    inner: sled::Iter,
}

impl Iterator for ChunkIter {
    type Item = StoreResult<RawChunk>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.next()?;
        Some(item.map_err(StoreError::from).and_then(|(key, bytes)| {
            Ok(RawChunk {
                id: self.id,
                chunk: LoadedChunk::read(&self.id, &key, bytes)?,
            })
        }))
    }
}

/// A chunk of records as stored, cheap to move between threads.
pub struct RawChunk {
    id: ConversationId,
    chunk: LoadedChunk,
}

impl RawChunk {
    /// The seq of its first record.
    pub fn first_seq(&self) -> u64 {
        self.chunk.first_seq
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.chunk.layout.entries.len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.chunk.layout.entries.is_empty()
    }

    /// Its records with a seq in `start..end`, decoded (blobs loaded from
    /// `store`) as `(seq, turn, event)`, without their addresses; records
    /// for which `skip(seq, turn, type)` holds are left out before their
    /// texts are read.
    pub fn events(
        &self,
        store: &Store,
        start: u64,
        end: u64,
        skip: impl Fn(u64, u64, EventType) -> bool,
    ) -> StoreResult<Vec<(u64, u64, Event)>> {
        let chunk = &self.chunk;
        let mut out = Vec::with_capacity(chunk.layout.entries.len());
        for (i, entry) in chunk.layout.entries.iter().enumerate() {
            let seq = chunk.first_seq + i as u64;
            if seq < start || seq >= end {
                continue;
            }
            let record =
                decode_record(chunk.record_bytes(i)).map_err(|e| in_record(&self.id, seq, &e))?;
            if skip(seq, entry.turn, record.body.event_type()) {
                continue;
            }
            let event = record_to_event(&record, &mut |blob| store.load_blob(blob))
                .map_err(|e| in_record(&self.id, seq, &e))?;
            out.push((seq, entry.turn, event));
        }
        Ok(out)
    }
}

/// The records of a conversation in order; see [`Store::scan`].
pub struct LogIter<'s> {
    store: &'s Store,
    id: ConversationId,
    chunks: sled::Iter,
    current: Option<(LoadedChunk, usize, Address)>,
    next_seq: u64,
    end_seq: u64,
    failed: bool,
}

impl LogIter<'_> {
    fn step(&mut self) -> StoreResult<Option<LogRecord>> {
        loop {
            if self.next_seq >= self.end_seq {
                return Ok(None);
            }
            if let Some((chunk, index, parent)) = &mut self.current {
                if *index < chunk.layout.entries.len() {
                    let seq = chunk.first_seq + *index as u64;
                    let bytes = chunk.record_bytes(*index);
                    let address = parent.child(bytes);
                    let turn = chunk.layout.entries[*index].turn;
                    *parent = address;
                    *index += 1;
                    if seq < self.next_seq {
                        continue;
                    }
                    let record = decode_record(bytes).map_err(|e| in_record(&self.id, seq, &e))?;
                    let store = self.store;
                    let event = record_to_event(&record, &mut |blob| store.load_blob(blob))
                        .map_err(|e| in_record(&self.id, seq, &e))?;
                    self.next_seq = seq + 1;
                    return Ok(Some(LogRecord {
                        seq,
                        turn,
                        address,
                        event,
                    }));
                }
            }
            let Some(item) = self.chunks.next() else {
                return Err(StoreError::Corrupt {
                    what: format!(
                        "conversation {}: the log ends before record {}",
                        self.id, self.next_seq
                    ),
                });
            };
            let (key, bytes) = item?;
            let chunk = LoadedChunk::read(&self.id, &key, bytes)?;
            if chunk.first_seq > self.next_seq {
                return Err(StoreError::Corrupt {
                    what: format!(
                        "conversation {}: record {} is missing (next chunk starts at {})",
                        self.id, self.next_seq, chunk.first_seq
                    ),
                });
            }
            let parent = chunk.layout.parent;
            self.current = Some((chunk, 0, parent));
        }
    }
}

fn in_record(id: &ConversationId, seq: u64, error: &StoreError) -> StoreError {
    StoreError::Corrupt {
        what: format!("conversation {id}: record {seq}: {error}"),
    }
}

impl Iterator for LogIter<'_> {
    type Item = StoreResult<LogRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.step().transpose();
        if matches!(item, Some(Err(_))) {
            self.failed = true;
        }
        item
    }
}
