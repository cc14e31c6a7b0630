//! Appending events: [`Store::append`] and [`Store::create_and_append`].
//!
//! An append is one sled batch: the chunks it writes or extends, their turn
//! index entries and the conversation's new metadata. The blobs it
//! introduces are written just before, to their own tree. The batch is
//! applied atomically, then flushed (unless the caller opts out), so an
//! append is stored whole or not at all and is durable when it returns; a
//! crash can at most leave blobs that nothing references.

use std::collections::HashSet;

use crate::codec::{
    encode, encode_event, CallDirectory, ChunkRepr, EncodedRecord, EntryRepr, CHUNK_MAX_BYTES,
    CHUNK_MAX_ENTRIES,
};
use crate::error::{StoreError, StoreResult};
use crate::event::{Event, EventType};
use crate::hash::Address;
use crate::ids::ConversationId;
use crate::keys;
use crate::store::{ConversationMeta, Store};

/// How to append.
#[derive(Debug, Clone, Copy, Default)]
pub struct AppendOptions {
    /// Append only if the conversation's head is this address (optimistic
    /// concurrency); otherwise fail with [`StoreError::HeadMismatch`] and
    /// store nothing. [`Address::ROOT`] expects an empty conversation.
    pub expect_head: Option<Address>,
    /// Return before the batch is durable: a crash soon after may lose it
    /// (but never part of it).
    pub no_sync: bool,
}

/// What an append stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The seq of the first event appended.
    pub first_seq: u64,
    /// How many events were appended.
    pub count: u64,
    /// The conversation's new head.
    pub head: Address,
}

/// The value of an overlay entry: the compaction's turn and record bytes.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct OverlayEntry<'a> {
    pub turn: u64,
    #[serde(with = "serde_bytes")]
    pub record: &'a [u8],
}

/// The value of a turn index entry: where the chunk starts.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct TurnEntry {
    pub first_turn: u64,
    pub entries: u64,
}

impl Store {
    /// Appends `events` to a conversation, atomically.
    ///
    /// Fails with [`StoreError::EmptyAppend`] for no events and
    /// [`StoreError::HeadMismatch`] when `options.expect_head` is not the
    /// head; nothing is stored then.
    pub fn append(
        &self,
        id: &ConversationId,
        events: &[Event],
        options: &AppendOptions,
    ) -> StoreResult<Appended> {
        if events.is_empty() {
            return Err(StoreError::EmptyAppend);
        }
        let encoded = encode_all(events, self.max_event_bytes())?;
        let guard = self.lock_writes();
        let meta = self.meta(id)?;
        let mut batch = sled::Batch::default();
        let appended = write_records(id, meta, &encoded, options, &mut batch)?;
        self.write_blobs(&encoded)?;
        self.db.apply_batch(batch)?;
        drop(guard);
        if !options.no_sync {
            self.db.flush()?;
        }
        Ok(appended)
    }

    /// Creates a conversation (named `name`, if given) holding `events`, in
    /// one atomic write: if the append fails, the conversation does not
    /// exist either.
    pub fn create_and_append(
        &self,
        name: Option<&str>,
        events: &[Event],
        options: &AppendOptions,
    ) -> StoreResult<(ConversationId, Appended)> {
        if events.is_empty() {
            return Err(StoreError::EmptyAppend);
        }
        let encoded = encode_all(events, self.max_event_bytes())?;
        let guard = self.lock_writes();
        let (id, meta, mut batch) = self.new_conversation(name)?;
        let appended = write_records(&id, meta, &encoded, options, &mut batch)?;
        self.write_blobs(&encoded)?;
        self.db.apply_batch(batch)?;
        drop(guard);
        if !options.no_sync {
            self.db.flush()?;
        }
        Ok((id, appended))
    }

    /// Stores each blob the records introduce, once. Called after every
    /// check of the append has passed and before its records are written.
    pub(crate) fn write_blobs(&self, encoded: &[EncodedRecord<'_>]) -> StoreResult<()> {
        let mut seen = HashSet::new();
        let mut batch = sled::Batch::default();
        let mut any = false;
        for (hash, text) in encoded.iter().flat_map(|r| &r.blobs) {
            if seen.insert(*hash) && !self.blobs.contains_key(hash.as_bytes())? {
                batch.insert(hash.as_bytes(), text.as_bytes());
                any = true;
            }
        }
        if any {
            self.blobs.apply_batch(batch)?;
        }
        Ok(())
    }

    /// The metadata and the first writes of a conversation about to be
    /// created; nothing is written yet.
    fn new_conversation(
        &self,
        name: Option<&str>,
    ) -> StoreResult<(ConversationId, ConversationMeta, sled::Batch)> {
        let (id, meta) = self.prepare_conversation(name)?;
        let mut batch = sled::Batch::default();
        if let Some(name) = name {
            batch.insert(keys::name(name), id.as_bytes().as_slice());
        }
        Ok((id, meta, batch))
    }
}

/// Chains `encoded` after the conversation's head and adds the chunks,
/// turn index entries and metadata to `batch`.
pub(crate) fn write_records(
    id: &ConversationId,
    mut meta: ConversationMeta,
    encoded: &[EncodedRecord<'_>],
    options: &AppendOptions,
    batch: &mut sled::Batch,
) -> StoreResult<Appended> {
    if let Some(expected) = options.expect_head {
        if expected != meta.head {
            return Err(StoreError::HeadMismatch {
                expected,
                actual: meta.head,
            });
        }
    }
    // Chain each record, assign its turn and place it in a chunk. Chunks
    // are always new: an append never rewrites a stored value, which keeps
    // sled's log from churning (see ARCHITECTURE.md, "sled").
    let first_seq = meta.len;
    let mut parent = meta.head;
    let mut chunk = ChunkBuilder::new(first_seq, parent);
    for (i, record) in encoded.iter().enumerate() {
        let seq = first_seq + i as u64;
        if chunk.is_full(record.bytes.len()) {
            chunk.write(id, batch);
            chunk = ChunkBuilder::new(seq, parent);
        }
        let address = parent.child(&record.bytes);
        let turn = meta.turns.next(record.event_type);
        if record.event_type == EventType::Compaction {
            let entry = OverlayEntry {
                turn,
                record: &record.bytes,
            };
            batch.insert(keys::overlay(id, seq), encode(&entry));
        }
        let stats = &mut meta.kinds[record.event_type.index()];
        stats.count += 1;
        stats.bytes += record.size;
        chunk.bytes += record.bytes.len();
        chunk.repr.entries.push(EntryRepr {
            turn,
            check: address.check(),
            record: &record.bytes,
        });
        if let Some((call_id, name)) = record.call {
            chunk.calls.calls.push((seq, call_id, name));
        }
        parent = address;
    }
    chunk.write(id, batch);

    let count = encoded.len() as u64;
    meta.len += count;
    meta.head = parent;
    batch.insert(keys::conversation(id), encode(&meta));
    Ok(Appended {
        first_seq,
        count,
        head: parent,
    })
}

/// Encodes `events`, none larger than `limit` bytes (an empty list is
/// fine here; appends refuse it).
pub(crate) fn encode_all(events: &[Event], limit: u64) -> StoreResult<Vec<EncodedRecord<'_>>> {
    let encoded: Vec<EncodedRecord<'_>> = events.iter().map(encode_event).collect();
    if let Some((index, record)) = encoded.iter().enumerate().find(|(_, r)| r.size > limit) {
        return Err(StoreError::EventTooLarge {
            index,
            size: record.size,
            limit,
        });
    }
    Ok(encoded)
}

/// A chunk being assembled, with its call directory.
struct ChunkBuilder<'a> {
    first_seq: u64,
    repr: ChunkRepr<'a>,
    calls: CallDirectory<'a>,
    bytes: usize,
}

impl ChunkBuilder<'_> {
    fn new(first_seq: u64, parent: Address) -> Self {
        ChunkBuilder {
            first_seq,
            repr: ChunkRepr {
                parent,
                entries: Vec::new(),
            },
            calls: CallDirectory { calls: Vec::new() },
            bytes: 0,
        }
    }

    fn is_full(&self, next_record: usize) -> bool {
        let entries = self.repr.entries.len();
        entries > 0 && (entries >= CHUNK_MAX_ENTRIES || self.bytes + next_record > CHUNK_MAX_BYTES)
    }

    /// Adds the chunk, its call directory and its turn index entry to
    /// `batch`.
    fn write(&self, id: &ConversationId, batch: &mut sled::Batch) {
        let entries = &self.repr.entries;
        let first_turn = entries.first().map_or(0, |e| e.turn);
        let last_turn = entries.last().map_or(0, |e| e.turn);
        batch.insert(keys::chunk(id, self.first_seq), encode(&self.repr));
        if !self.calls.calls.is_empty() {
            batch.insert(
                keys::call_directory(id, self.first_seq),
                encode(&self.calls),
            );
        }
        batch.insert(
            keys::turn(id, last_turn, self.first_seq),
            encode(&TurnEntry {
                first_turn,
                entries: entries.len() as u64,
            }),
        );
    }
}
