//! Chunks as the log holds them: loaded, or still in a segment file and
//! read by the thread that decodes them ([`RawChunk`], [`ChunkIter`]).

use std::ops::Range;

use crate::backend::SegmentRef;
use crate::backend::{Bytes, KvIter};
use crate::codec::{self, decode_record, record_to_event_with, ChunkLayout, ChunkValue};
use crate::error::{StoreError, StoreResult};
use crate::event::{Event, EventType};
use crate::ids::ConversationId;
use crate::keys;
use crate::layout::Piece;
use crate::store::{KindStats, Store};

use super::in_record;
use super::{event_of, LogRecord};

/// A chunk's bytes: a value the backend holds, or read from a segment
/// file.
pub(crate) enum ChunkBytes {
    Shared(Bytes),
    Owned(Vec<u8>),
}

impl std::ops::Deref for ChunkBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            ChunkBytes::Shared(bytes) => bytes,
            ChunkBytes::Owned(bytes) => bytes,
        }
    }
}

/// A chunk read from the store, with its records located.
pub(crate) struct LoadedChunk {
    pub first_seq: u64,
    pub bytes: ChunkBytes,
    pub layout: ChunkLayout,
}

impl LoadedChunk {
    pub(crate) fn parse(
        id: &ConversationId,
        first_seq: u64,
        bytes: ChunkBytes,
    ) -> StoreResult<Self> {
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

/// A chunk as its key and value give it: loaded, or still in a segment
/// file (read by whichever thread decodes it).
pub(crate) enum Located {
    Loaded(LoadedChunk),
    Segment {
        first_seq: u64,
        at: SegmentRef,
        records: u64,
    },
}

impl Located {
    /// The chunk stored under `key` with value `value` in a database of
    /// format `format`.
    pub(crate) fn new(
        format: u32,
        id: &ConversationId,
        key: &[u8],
        value: Bytes,
    ) -> StoreResult<Self> {
        let first_seq = keys::key_seq(key).ok_or_else(|| StoreError::Corrupt {
            what: format!("conversation {id}: a chunk key is truncated"),
        })?;
        if format < 2 {
            return Ok(Located::Loaded(LoadedChunk::parse(
                id,
                first_seq,
                ChunkBytes::Shared(value),
            )?));
        }
        let what = || format!("conversation {id}: chunk at seq {first_seq}");
        match codec::decode_named(&value, &what)? {
            ChunkValue::Inline(bytes) => {
                let offset = bytes.as_ptr() as usize - value.as_ptr() as usize;
                let bytes = value.slice(offset..offset + bytes.len());
                Ok(Located::Loaded(LoadedChunk::parse(
                    id,
                    first_seq,
                    ChunkBytes::Shared(bytes),
                )?))
            }
            ChunkValue::Segment { at, records } => Ok(Located::Segment {
                first_seq,
                at,
                records,
            }),
        }
    }

    pub(crate) fn first_seq(&self) -> u64 {
        match self {
            Located::Loaded(chunk) => chunk.first_seq,
            Located::Segment { first_seq, .. } => *first_seq,
        }
    }

    pub(crate) fn records(&self) -> usize {
        match self {
            Located::Loaded(chunk) => chunk.layout.entries.len(),
            Located::Segment { records, .. } => *records as usize,
        }
    }

    /// The chunk, read from its segment file if it is not loaded.
    pub(crate) fn load(&self, store: &Store, id: &ConversationId) -> StoreResult<Held<'_>> {
        match self {
            Located::Loaded(chunk) => Ok(Held::Borrowed(chunk)),
            &Located::Segment {
                first_seq,
                at,
                records,
            } => read_segment_chunk(store, id, first_seq, &at, records).map(Held::Owned),
        }
    }

    pub(crate) fn into_loaded(
        self,
        store: &Store,
        id: &ConversationId,
    ) -> StoreResult<LoadedChunk> {
        match self {
            Located::Loaded(chunk) => Ok(chunk),
            Located::Segment {
                first_seq,
                at,
                records,
            } => read_segment_chunk(store, id, first_seq, &at, records),
        }
    }
}

/// Where a chunk was read from: its key and the value the key held.
///
/// A `gc` or `redact` rewrites chunks, then gives their old bytes back to
/// the file system (they read as zeros and fail their checksum) and
/// removes the long texts only the old records held. A read that looked a
/// chunk up before the rewrite and reads those after meets corrupt data in
/// a sound database: it then looks the key up again and, where the value
/// has changed, reads the chunk as it is now ([`ChunkSource::read`]).
#[derive(Debug, Clone)]
pub(crate) struct ChunkSource {
    pub(crate) key: Bytes,
    pub(crate) value: Bytes,
}

impl ChunkSource {
    /// Rewrites of a chunk a read follows before its error stands.
    pub(crate) const MOVES: usize = 3;

    /// The chunk as its key holds it now, read from a value other than
    /// this source's (which it then becomes); `error`, met reading the
    /// chunk as this source gave it, where the key holds the same value or
    /// is gone (as [`Store::unless_deleted`] says).
    pub(crate) fn moved(
        &mut self,
        store: &Store,
        owner: &ConversationId,
        error: StoreError,
    ) -> StoreResult<Located> {
        match store.get(&self.key)? {
            None => Err(store.unless_deleted(owner, error)),
            Some(now) if now == self.value => Err(error),
            Some(now) => {
                self.value = now.clone();
                Located::new(store.format, owner, &self.key, now)
            }
        }
    }

    /// `read` of chunk `first` of `owner` (as this source gave it); where
    /// that meets corrupt data and the chunk has been rewritten since, of
    /// the chunk as it is now.
    pub(crate) fn read<T>(
        &self,
        store: &Store,
        owner: &ConversationId,
        first: &Located,
        mut read: impl FnMut(&LoadedChunk) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let result = first.load(store, owner).and_then(|c| read(&c));
        if !matches!(result, Err(StoreError::Corrupt { .. })) {
            return result;
        }
        self.clone().follow(store, owner, result, |now| {
            now.load(store, owner).and_then(|c| read(&c))
        })
    }

    /// The chunk of `owner` this source gives, loaded (as it is now where
    /// it has been rewritten since).
    pub(crate) fn load(
        &mut self,
        store: &Store,
        owner: &ConversationId,
    ) -> StoreResult<LoadedChunk> {
        let first = Located::new(store.format, owner, &self.key, self.value.clone())?;
        let result = first.into_loaded(store, owner);
        self.follow(store, owner, result, |now| now.into_loaded(store, owner))
    }

    /// `result`, or, while it is corrupt data and the chunk has been
    /// rewritten since ([`ChunkSource::moved`]), `again` of the chunk as it
    /// is now (up to [`ChunkSource::MOVES`] times).
    fn follow<T>(
        &mut self,
        store: &Store,
        owner: &ConversationId,
        mut result: StoreResult<T>,
        mut again: impl FnMut(Located) -> StoreResult<T>,
    ) -> StoreResult<T> {
        for _ in 0..Self::MOVES {
            match result {
                Err(error @ StoreError::Corrupt { .. }) => {
                    result = again(self.moved(store, owner, error)?);
                }
                done => return done,
            }
        }
        result
    }
}

/// Reads a chunk of `records` records from the segment files.
fn read_segment_chunk(
    store: &Store,
    id: &ConversationId,
    first_seq: u64,
    at: &SegmentRef,
    records: u64,
) -> StoreResult<LoadedChunk> {
    let what = || format!("conversation {id}: chunk at seq {first_seq}");
    let bytes = store
        .segments()
        .ok_or_else(|| StoreError::Corrupt {
            what: format!(
                "{}: refers to segment files this database does not have",
                what()
            ),
        })?
        .read(at, &what)
        .map_err(|e| store.unless_deleted(id, e))?;
    let chunk = LoadedChunk::parse(id, first_seq, ChunkBytes::Owned(bytes))?;
    if chunk.layout.entries.len() as u64 != records {
        return Err(StoreError::Corrupt {
            what: format!(
                "{}: holds {} records, its reference says {records}",
                what(),
                chunk.layout.entries.len()
            ),
        });
    }
    Ok(chunk)
}

/// A loaded chunk, borrowed or read for the occasion.
pub(crate) enum Held<'a> {
    Borrowed(&'a LoadedChunk),
    Owned(LoadedChunk),
}

impl std::ops::Deref for Held<'_> {
    type Target = LoadedChunk;

    fn deref(&self) -> &LoadedChunk {
        match self {
            Held::Borrowed(chunk) => chunk,
            Held::Owned(chunk) => chunk,
        }
    }
}

/// Undecoded chunks of a conversation; see [`Store::chunks`].
pub struct ChunkIter<'s> {
    pub(crate) store: &'s Store,
    /// The conversation read.
    pub(crate) id: ConversationId,
    pub(crate) format: u32,
    /// The pieces still to read, the next one last.
    pub(crate) pieces: Vec<(Piece, KvIter<'s>)>,
    pub(crate) current: Option<(Piece, KvIter<'s>)>,
    /// The seq of the next record of the current piece: a chunk starting
    /// past it, or a piece ending before it is reached, leaves records out.
    pub(crate) next: u64,
    /// Set once it has failed: it yields nothing more.
    pub(crate) failed: bool,
    /// Keeps the staged chunks it is to read.
    pub(crate) _pin: crate::staging::ReadPin,
}

impl ChunkIter<'_> {
    /// The next chunk, or the failure to read one; a gap in the records
    /// is damage (or a delete that took the conversation meanwhile).
    fn step(&mut self) -> StoreResult<Option<RawChunk>> {
        loop {
            let Some((piece, chunks)) = &mut self.current else {
                let Some((piece, chunks)) = self.pieces.pop() else {
                    return Ok(None);
                };
                self.next = piece.start;
                self.current = Some((piece, chunks));
                continue;
            };
            let piece = *piece;
            let Some(item) = chunks.next() else {
                if self.next < piece.end {
                    return Err(self.missing());
                }
                self.current = None;
                continue;
            };
            let (key, bytes) = item?;
            let chunk = RawChunk {
                id: piece.owner,
                records: piece.start..piece.end,
                chunk: Located::new(self.format, &piece.owner, &key, bytes.clone())?,
                source: ChunkSource { key, value: bytes },
            };
            let held = chunk.seqs();
            if held.start > self.next {
                return Err(self.missing());
            }
            self.next = self.next.max(held.end);
            return Ok(Some(chunk));
        }
    }

    /// Record `next` is not where the chunks should have it.
    fn missing(&self) -> StoreError {
        let gap = StoreError::Corrupt {
            what: format!(
                "conversation {}: record {} is missing from the log",
                self.id, self.next
            ),
        };
        self.store.unless_deleted(&self.id, gap)
    }
}

impl Iterator for ChunkIter<'_> {
    type Item = StoreResult<RawChunk>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.step().transpose();
        self.failed = matches!(item, Some(Err(_)));
        item
    }
}

/// The turns each chunk of a part of a log spans ([`Store::chunk_turns`]).
#[derive(Debug, Default)]
pub struct ChunkTurns {
    /// (owner, space, first seq) to (first turn, last turn).
    pub(crate) spans: std::collections::HashMap<(ConversationId, keys::Space, u64), (u64, u64)>,
}

/// How a reader of a chunk's events wants a record ([`RawChunk::events_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Not at all.
    Skip,
    /// Whole.
    Whole,
    /// Without its main payload, for a reader that replaces it: a tool
    /// call's arguments read `{}`, a tool result's content `""` (neither
    /// copied nor loaded); other records whole.
    WithoutPayload,
}

/// A chunk of records as stored, cheap to move between threads: a chunk in
/// a segment file is read by the thread that decodes it.
pub struct RawChunk {
    pub(crate) id: ConversationId,
    /// The records of it that belong to the conversation read.
    pub(crate) records: Range<u64>,
    pub(crate) chunk: Located,
    /// Where it was read from, to read it again if it is rewritten.
    pub(crate) source: ChunkSource,
}

impl RawChunk {
    /// The seq of its first record.
    pub fn first_seq(&self) -> u64 {
        self.chunk.first_seq()
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.chunk.records()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.chunk.records() == 0
    }

    /// The conversation whose keys hold it (a fork's parent, for the
    /// records a fork shares).
    pub fn owner(&self) -> &ConversationId {
        &self.id
    }

    /// The seqs of its records that belong to the conversation read.
    pub fn seqs(&self) -> Range<u64> {
        let first = self.first_seq();
        let end = first + self.len() as u64;
        first.max(self.records.start)..end.min(self.records.end)
    }

    /// The first and last turn of its records, as `turns` lists them
    /// (`None` where they do not list it).
    pub fn turns(&self, turns: &ChunkTurns) -> Option<(u64, u64)> {
        let space = keys::Space::of_chunk(&self.source.key)?;
        turns
            .spans
            .get(&(self.id, space, self.first_seq()))
            .copied()
    }

    /// Adds the type and size of each of its records before `end` to
    /// `kinds`, without loading blobs.
    pub(crate) fn count_kinds(
        &self,
        store: &Store,
        end: u64,
        kinds: &mut [KindStats; 10],
    ) -> StoreResult<()> {
        let counted = self.source.read(store, &self.id, &self.chunk, |chunk| {
            let mut counted = [KindStats::default(); 10];
            for i in 0..chunk.layout.entries.len() {
                let seq = chunk.first_seq + i as u64;
                if seq >= end || !self.records.contains(&seq) {
                    continue;
                }
                let bytes = chunk.record_bytes(i);
                let record = decode_record(bytes).map_err(|e| in_record(&self.id, seq, &e))?;
                let size = crate::codec::record_size(bytes, &record);
                let stats = &mut counted[record.body.event_type().index()];
                stats.count += 1;
                stats.bytes += size;
            }
            Ok(counted)
        })?;
        for (total, more) in kinds.iter_mut().zip(counted) {
            total.count += more.count;
            total.bytes += more.bytes;
        }
        Ok(())
    }

    /// Its records with a seq in `start..end` as `(seq, record bytes)`,
    /// undecoded: for copying a log byte for byte (`copy.rs`).
    pub(crate) fn raw_records(
        &self,
        store: &Store,
        start: u64,
        end: u64,
    ) -> StoreResult<Vec<(u64, Vec<u8>)>> {
        self.source.read(store, &self.id, &self.chunk, |chunk| {
            let mut out = Vec::with_capacity(chunk.layout.entries.len());
            for i in 0..chunk.layout.entries.len() {
                let seq = chunk.first_seq + i as u64;
                if seq >= start && seq < end && self.records.contains(&seq) {
                    out.push((seq, chunk.record_bytes(i).to_vec()));
                }
            }
            Ok(out)
        })
    }

    /// Its records with a seq in `start..end` as [`Store::scan`] gives
    /// them: decoded (blobs loaded from `store`), each with its address,
    /// chained from the chunk's stored parent.
    pub fn log_records(&self, store: &Store, start: u64, end: u64) -> StoreResult<Vec<LogRecord>> {
        self.source.read(store, &self.id, &self.chunk, |chunk| {
            let mut out = Vec::with_capacity(chunk.layout.entries.len());
            // The records before `end`, their addresses computed together
            // (the short texts hashed in SIMD lanes).
            let before_end = usize::try_from(end.saturating_sub(chunk.first_seq))
                .unwrap_or(usize::MAX)
                .min(chunk.layout.entries.len());
            let records = (0..before_end).map(|i| chunk.record_bytes(i)).collect();
            let addresses = crate::codec::link_runs(&[(chunk.layout.parent, records)]);
            let addresses = addresses.first().map_or(&[][..], Vec::as_slice);
            for ((i, entry), &address) in chunk.layout.entries.iter().enumerate().zip(addresses) {
                let seq = chunk.first_seq + i as u64;
                let bytes = chunk.record_bytes(i);
                if seq < start || !self.records.contains(&seq) {
                    continue;
                }
                out.push(LogRecord {
                    seq,
                    turn: entry.turn,
                    address,
                    event: event_of(store, &self.id, seq, bytes)?,
                    redaction: super::scan::RecordRedaction::of(bytes)?,
                });
            }
            Ok(out)
        })
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
        self.events_read(store, start, end, |seq, turn, kind| {
            if skip(seq, turn, kind) {
                Reading::Skip
            } else {
                Reading::Whole
            }
        })
    }

    /// [`RawChunk::events`], each record read as `reading(seq, turn, type)`
    /// says.
    pub fn events_read(
        &self,
        store: &Store,
        start: u64,
        end: u64,
        reading: impl Fn(u64, u64, EventType) -> Reading,
    ) -> StoreResult<Vec<(u64, u64, Event)>> {
        self.source.read(store, &self.id, &self.chunk, |chunk| {
            let mut out = Vec::with_capacity(chunk.layout.entries.len());
            for (i, entry) in chunk.layout.entries.iter().enumerate() {
                let seq = chunk.first_seq + i as u64;
                if seq < start || seq >= end || !self.records.contains(&seq) {
                    continue;
                }
                let bytes = chunk.record_bytes(i);
                // A record read not at all is not decoded either.
                let peeked =
                    codec::peek_event_type(bytes).map(|kind| reading(seq, entry.turn, kind));
                if peeked == Some(Reading::Skip) {
                    continue;
                }
                let record = decode_record(bytes).map_err(|e| in_record(&self.id, seq, &e))?;
                debug_assert!(peeked.is_none_or(|_| {
                    codec::peek_event_type(bytes) == Some(record.body.event_type())
                }));
                let read =
                    peeked.unwrap_or_else(|| reading(seq, entry.turn, record.body.event_type()));
                let payload = match read {
                    Reading::Skip => continue,
                    Reading::Whole => true,
                    Reading::WithoutPayload => false,
                };
                let event =
                    record_to_event_with(&record, &mut |blob| store.load_blob(blob), payload)
                        .map_err(|e| {
                            store.unless_deleted(&self.id, in_record(&self.id, seq, &e))
                        })?;
                out.push((seq, entry.turn, event));
            }
            Ok(out)
        })
    }
}
