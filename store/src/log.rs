//! Reading the log: [`Store::scan`], [`Store::record`], and the turn index
//! ([`Store::turn_of`], [`Store::first_seq_of_turn`]).

use std::ops::Range;

use crate::append::{OverlayEntry, TurnEntry};
use crate::backend::{self, Bytes, Keyspace, KvIter};
use crate::codec::{
    self, decode_record, record_to_event, BlobRef, BlobValue, CallDirectory, ChunkLayout,
    ChunkValue, TextRepr,
};
use crate::error::{StoreError, StoreResult};
use crate::event::{Event, EventType, Timestamp};
use crate::fork::Piece;
use crate::hash::{Address, BlobHash};
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::names::ToolNames;
use crate::segments::SegmentRef;
use crate::store::{KindStats, Store};

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
    fn parse(id: &ConversationId, first_seq: u64, bytes: ChunkBytes) -> StoreResult<Self> {
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

    fn first_seq(&self) -> u64 {
        match self {
            Located::Loaded(chunk) => chunk.first_seq,
            Located::Segment { first_seq, .. } => *first_seq,
        }
    }

    fn records(&self) -> usize {
        match self {
            Located::Loaded(chunk) => chunk.layout.entries.len(),
            Located::Segment { records, .. } => *records as usize,
        }
    }

    /// The chunk, read from its segment file if it is not loaded.
    fn load(&self, store: &Store, id: &ConversationId) -> StoreResult<Held<'_>> {
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
        .read(at, &what)?;
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

impl Store {
    /// The records of a conversation whose seq is in `seqs`, in order.
    pub fn scan(&self, id: &ConversationId, seqs: Range<u64>) -> StoreResult<LogIter<'_>> {
        let len = self.meta(id)?.len;
        let end = seqs.end.min(len);
        let start = seqs.start.min(end);
        Ok(LogIter {
            store: self,
            id: *id,
            pieces: self.piece_chunks(id, start, end)?.into_iter(),
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
    fn piece_chunks(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
    ) -> StoreResult<Vec<(Piece, KvIter<'_>)>> {
        let mut out = Vec::new();
        for (space, piece) in self.spaced_pieces(id, start, end)? {
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
    /// under one owner's keys in one space, in log order.
    fn spaced_pieces(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
    ) -> StoreResult<Vec<(Space, Piece)>> {
        let mut out = Vec::new();
        for piece in self.pieces(id, end)? {
            if piece.end <= start {
                continue;
            }
            let first = start.max(piece.start);
            let settled = self.settled(&piece.owner)?.clamp(first, piece.end);
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
    fn piece_of(&self, id: &ConversationId, seq: u64) -> StoreResult<Option<Piece>> {
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
    fn chunk_start(&self, space: Space, id: &ConversationId, seq: u64) -> StoreResult<u64> {
        let found = self
            .kv
            .scan(
                Keyspace::Main,
                backend::through(keys::chunks(space, id), keys::chunk(space, id, seq)),
                true,
            )
            .next()
            .transpose()?;
        Ok(found.and_then(|(key, _)| keys::key_seq(&key)).unwrap_or(0))
    }

    fn load_chunk(
        &self,
        space: Space,
        id: &ConversationId,
        first_seq: u64,
    ) -> StoreResult<LoadedChunk> {
        let key = keys::chunk(space, id, first_seq);
        let bytes = self.get(&key)?.ok_or_else(|| StoreError::Corrupt {
            what: format!("conversation {id}: chunk at seq {first_seq} is missing"),
        })?;
        self.read_chunk(id, &key, bytes)
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

    /// The turn of record `seq`, from the chunk that holds it: O(log n).
    pub fn turn_of(&self, id: &ConversationId, seq: u64) -> StoreResult<u64> {
        let Some(piece) = self.piece_of(id, seq)? else {
            return Err(StoreError::NoSuchRecord {
                seq,
                len: self.meta(id)?.len,
            });
        };
        let owner = &piece.owner;
        let space = Store::space_of(seq, self.settled(owner)?);
        let chunk = self.load_chunk(space, owner, self.chunk_start(space, owner, seq)?)?;
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
        let len = self.meta(id)?.len;
        for piece in self.pieces(id, len)? {
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

    /// The seqs of the records of turns `first..=last` among records
    /// `0..end`: empty (`end..end`) when turn `first` has none there.
    pub fn turn_records(
        &self,
        id: &ConversationId,
        first: u64,
        last: u64,
        end: u64,
    ) -> StoreResult<Range<u64>> {
        let Some(start) = self.first_seq_of_turn(id, first)?.filter(|&s| s < end) else {
            return Ok(end..end);
        };
        let stop = match last.checked_add(1) {
            Some(next) => self
                .first_seq_of_turn(id, next)?
                .map_or(end, |s| s.min(end)),
            None => end,
        };
        Ok(start..stop)
    }

    /// [`Store::first_seq_of_turn`] among the records stored under
    /// `owner`'s own keys: in its settled chunks, else in its staged ones
    /// (from where they start: staged chunks before it are settled
    /// already, and never read).
    fn owned_first_seq_of_turn(
        &self,
        owner: &ConversationId,
        turn: u64,
    ) -> StoreResult<Option<u64>> {
        let settled = self.settled(owner)?;
        for space in [Space::Settled, Space::Staged] {
            let index = self.scan_range(
                keys::turn(space, owner, turn, 0),
                keys::turn(space, owner, u64::MAX, u64::MAX),
            );
            for item in index {
                let (key, value) = item?;
                let (_, first_seq) = keys::turn_parts(&key).ok_or_else(|| StoreError::Corrupt {
                    what: format!("conversation {owner}: a turn index key is truncated"),
                })?;
                if space == Space::Staged && first_seq < settled {
                    continue;
                }
                let entry: TurnEntry = codec::decode(&value, "turn index entry")?;
                if entry.first_turn > turn {
                    // The turn falls between chunks: it has no record.
                    return Ok(None);
                }
                let chunk = self.load_chunk(space, owner, first_seq)?;
                return Ok(chunk
                    .layout
                    .entries
                    .iter()
                    .position(|e| e.turn == turn)
                    .map(|i| first_seq + i as u64));
            }
        }
        Ok(None)
    }

    /// The compaction overlays among records `0..end`, in log order.
    pub fn overlays(&self, id: &ConversationId, end: u64) -> StoreResult<Vec<StoredOverlay>> {
        let mut out = Vec::new();
        for piece in self.pieces(id, end)? {
            let owner = &piece.owner;
            let entries = self.scan_range(
                keys::overlay(owner, piece.start),
                keys::overlay(owner, piece.end),
            );
            for item in entries {
                let (key, value) = item?;
                let seq = keys::key_seq(&key).ok_or_else(|| StoreError::Corrupt {
                    what: format!("conversation {owner}: an overlay key is truncated"),
                })?;
                if let Some(hit) = self.cached_overlay(owner, seq) {
                    out.push(hit);
                    continue;
                }
                let entry: OverlayEntry<'_> = codec::decode(&value, "overlay entry")?;
                let record = decode_record(entry.record).map_err(|e| in_record(owner, seq, &e))?;
                let event = record_to_event(&record, &mut |blob| self.load_blob(blob))
                    .map_err(|e| in_record(owner, seq, &e))?;
                let overlay = StoredOverlay {
                    seq,
                    turn: entry.turn,
                    event,
                };
                self.cache_overlay(owner, &overlay);
                out.push(overlay);
            }
        }
        Ok(out)
    }

    fn cached_overlay(&self, owner: &ConversationId, seq: u64) -> Option<StoredOverlay> {
        let cache = self
            .overlay_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.get(&(*owner, seq)).cloned()
    }

    fn cache_overlay(&self, owner: &ConversationId, overlay: &StoredOverlay) {
        let mut cache = self
            .overlay_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= crate::store::OVERLAY_CACHE_MAX {
            cache.clear();
        }
        cache.insert((*owner, overlay.seq), overlay.clone());
    }

    /// The tool calls among records `start..end` as `(seq, call id, name)`,
    /// in log order, from the chunks' call directories (no record is
    /// decoded).
    pub fn tool_calls(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
    ) -> StoreResult<Vec<(u64, String, String)>> {
        let mut out = Vec::new();
        self.visit_tool_calls(id, start, end, |seq, call, name| {
            out.push((seq, call.to_owned(), name.to_owned()));
        })?;
        Ok(out)
    }

    /// The name of the latest tool call with each id among records `0..end`,
    /// from the chunks' call directories (no record is decoded).
    /// The directories are read once; each of rayon's threads decodes them
    /// all and keeps the ids of its hash shard.
    pub fn tool_names(&self, id: &ConversationId, end: u64) -> StoreResult<ToolNames> {
        let mut directories = Vec::new();
        self.visit_call_directories(id, 0, end, |records, value| {
            directories.push((records, value));
        })?;
        ToolNames::par_build(rayon::current_num_threads(), |insert| {
            for (records, value) in &directories {
                visit_directory(records, value, &mut |_, call, name| insert(call, name))?;
            }
            Ok(())
        })
    }

    /// Calls `visit(seq, call id, name)` for each tool call among records
    /// `start..end`, in log order, from the chunks' call directories.
    fn visit_tool_calls(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
        mut visit: impl FnMut(u64, &str, &str),
    ) -> StoreResult<()> {
        let mut failed = Ok(());
        self.visit_call_directories(id, start, end, |records, value| {
            if failed.is_ok() {
                failed = visit_directory(&records, &value, &mut visit);
            }
        })?;
        failed
    }

    /// Calls `visit(records, directory)` for each call directory of the
    /// chunks holding records `start..end`, in log order, with the seqs of
    /// its calls that belong to them.
    fn visit_call_directories(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
        mut visit: impl FnMut(Range<u64>, Bytes),
    ) -> StoreResult<()> {
        for (space, piece) in self.spaced_pieces(id, start, end)? {
            let owner = &piece.owner;
            let from = self.chunk_start(space, owner, piece.start)?;
            let directories = self.scan_range(
                keys::call_directory(space, owner, from),
                keys::call_directory(space, owner, piece.end),
            );
            for item in directories {
                let (_, value) = item?;
                visit(piece.start..piece.end, value);
            }
        }
        Ok(())
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

    /// The chunks holding records `start..end`, in order, undecoded: for
    /// readers that decode them in parallel ([`RawChunk::events`]). A chunk
    /// shared with a fork's parent yields only the fork's records.
    pub fn chunks(&self, id: &ConversationId, start: u64, end: u64) -> StoreResult<ChunkIter<'_>> {
        let mut pieces = self.piece_chunks(id, start, end)?;
        pieces.reverse();
        Ok(ChunkIter {
            format: self.format,
            pieces,
            current: None,
        })
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

    /// The text of a blob.
    pub(crate) fn load_blob(&self, blob: BlobRef) -> StoreResult<String> {
        let bytes = self
            .blob_bytes(&blob.hash)?
            .ok_or_else(|| StoreError::Corrupt {
                what: format!("blob {} is missing", blob.hash),
            })?;
        String::from_utf8(bytes).map_err(|_| StoreError::Corrupt {
            what: format!("blob {} is not UTF-8", blob.hash),
        })
    }

    /// The stored bytes of the blob with this hash, if it is stored (read
    /// from its segment file, checked against the file's checksum; not
    /// against `hash`).
    pub(crate) fn blob_bytes(&self, hash: &BlobHash) -> StoreResult<Option<Vec<u8>>> {
        let Some(value) = self.kv.get(Keyspace::Blobs, hash.as_bytes())? else {
            return Ok(None);
        };
        if self.format < 2 {
            return Ok(Some(value.to_vec()));
        }
        let what = format!("blob {hash}");
        match codec::decode(&value, &what)? {
            BlobValue::Inline(bytes) => Ok(Some(bytes.to_vec())),
            BlobValue::Segment(at) => match self.segments() {
                Some(segments) => segments.read(&at, &|| what.clone()).map(Some),
                None => Err(StoreError::Corrupt {
                    what: format!("{what}: refers to segment files this database does not have"),
                }),
            },
        }
    }
}

/// Undecoded chunks of a conversation; see [`Store::chunks`].
pub struct ChunkIter<'s> {
    format: u32,
    /// The pieces still to read, the next one last.
    pieces: Vec<(Piece, KvIter<'s>)>,
    current: Option<(Piece, KvIter<'s>)>,
}

impl Iterator for ChunkIter<'_> {
    type Item = StoreResult<RawChunk>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((piece, chunks)) = &mut self.current {
                if let Some(item) = chunks.next() {
                    let piece = *piece;
                    let format = self.format;
                    return Some(item.and_then(|(key, bytes)| {
                        Ok(RawChunk {
                            id: piece.owner,
                            records: piece.start..piece.end,
                            chunk: Located::new(format, &piece.owner, &key, bytes)?,
                        })
                    }));
                }
            }
            self.current = Some(self.pieces.pop()?);
        }
    }
}

/// A chunk of records as stored, cheap to move between threads: a chunk in
/// a segment file is read by the thread that decodes it.
pub struct RawChunk {
    id: ConversationId,
    /// The records of it that belong to the conversation read.
    records: Range<u64>,
    chunk: Located,
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

    /// Adds the type and size of each of its records before `end` to
    /// `kinds`, without loading blobs.
    pub(crate) fn count_kinds(
        &self,
        store: &Store,
        end: u64,
        kinds: &mut [KindStats; 10],
    ) -> StoreResult<()> {
        let chunk = self.chunk.load(store, &self.id)?;
        for i in 0..chunk.layout.entries.len() {
            let seq = chunk.first_seq + i as u64;
            if seq >= end || !self.records.contains(&seq) {
                continue;
            }
            let bytes = chunk.record_bytes(i);
            let record = decode_record(bytes).map_err(|e| in_record(&self.id, seq, &e))?;
            let mut size = bytes.len() as u64;
            for text in record.texts() {
                if let TextRepr::Blob(blob) = text {
                    size += blob.len;
                }
            }
            let stats = &mut kinds[record.body.event_type().index()];
            stats.count += 1;
            stats.bytes += size;
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
        let chunk = self.chunk.load(store, &self.id)?;
        let mut out = Vec::with_capacity(chunk.layout.entries.len());
        for i in 0..chunk.layout.entries.len() {
            let seq = chunk.first_seq + i as u64;
            if seq >= start && seq < end && self.records.contains(&seq) {
                out.push((seq, chunk.record_bytes(i).to_vec()));
            }
        }
        Ok(out)
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
        let chunk = self.chunk.load(store, &self.id)?;
        let mut out = Vec::with_capacity(chunk.layout.entries.len());
        for (i, entry) in chunk.layout.entries.iter().enumerate() {
            let seq = chunk.first_seq + i as u64;
            if seq < start || seq >= end || !self.records.contains(&seq) {
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
    /// The pieces still to read.
    pieces: std::vec::IntoIter<(Piece, KvIter<'s>)>,
    chunks: Option<(Piece, KvIter<'s>)>,
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
            let piece_end = self.chunks.as_ref().map_or(0, |(p, _)| p.end);
            if self.next_seq >= piece_end {
                // On to the next piece (a fork's own records after its
                // parent's).
                self.current = None;
                self.chunks = self.pieces.next();
                if self.chunks.is_none() {
                    return Err(StoreError::Corrupt {
                        what: format!(
                            "conversation {}: the log ends before record {}",
                            self.id, self.next_seq
                        ),
                    });
                }
                continue;
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
            let Some((piece, chunks)) = &mut self.chunks else {
                continue;
            };
            let Some(item) = chunks.next() else {
                return Err(StoreError::Corrupt {
                    what: format!(
                        "conversation {}: the log ends before record {}",
                        self.id, self.next_seq
                    ),
                });
            };
            let (key, bytes) = item?;
            let chunk = self.store.read_chunk(&piece.owner, &key, bytes)?;
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

/// Calls `visit(seq, call id, name)` for each call of a call directory
/// whose seq is in `records`.
fn visit_directory(
    records: &Range<u64>,
    value: &[u8],
    visit: &mut dyn FnMut(u64, &str, &str),
) -> StoreResult<()> {
    let directory: CallDirectory<'_> = codec::decode(value, "call directory")?;
    for (seq, call, name) in directory.calls {
        if records.contains(&seq) {
            visit(seq, call, name);
        }
    }
    Ok(())
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
