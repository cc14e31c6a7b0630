//! Appending events: [`Store::append`] and [`Store::create_and_append`].
//!
//! An append is one sled batch: the chunks it writes or extends, their turn
//! index entries and the conversation's new metadata. The blobs it
//! introduces are written just before, to their own tree. The batch is
//! applied atomically, then flushed (unless the caller opts out), so an
//! append is stored whole or not at all and is durable when it returns; a
//! crash can at most leave blobs that nothing references. In a format-3
//! database a small append's records are staged, and the append that
//! brings the staged records to a settled chunk's size writes them again
//! as settled chunks (`staging.rs`).

use std::collections::{BTreeMap, HashSet};

use crate::backend::frames::{self, Frame};
use crate::backend::{Batch, Condition, Keyspace};
use crate::codec::{
    encode, encode_event, encode_event_unhashed, hash_digests, BlobValue, CallDirectory, ChunkRepr,
    ChunkValue, DirectoryOverlay, EncodedRecord, EntryRepr, Layout, OverlayDirectory, OverlayEntry,
    RangeEntry, TurnEntry, CHUNK_MAX_BYTES, CHUNK_MAX_ENTRIES,
};
use crate::error::{StoreError, StoreResult};
use crate::event::{Event, EventType, Timestamp};
use crate::hash::Address;
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::staging::{Staged, Staging, SETTLE_BYTES};
use crate::store::{ConversationMeta, Store};

/// How to append: `AppendOptions::new()`, then what differs from the
/// defaults (a durable, unconditional append).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct AppendOptions {
    /// Append only if the conversation's head is this address (optimistic
    /// concurrency); otherwise fail with [`StoreError::HeadMismatch`] and
    /// store nothing. [`Address::ROOT`] expects an empty conversation.
    pub expect_head: Option<Address>,
    /// Return before the batch is durable: a crash soon after may lose it
    /// (but never part of it). Every 256th such write in a row syncs
    /// the store, so that sled's log does not fall behind (see
    /// `Store::synced_or_counted`).
    pub no_sync: bool,
    /// Store the append once under this key: an append that repeats a key
    /// already stored with the conversation stores nothing and returns
    /// what the first one stored ([`Appended::replayed`]); with another
    /// request's fingerprint it fails with
    /// [`StoreError::IdempotencyKeyReused`].
    pub idempotency: Option<IdempotencyKey>,
}

impl AppendOptions {
    /// A durable, unconditional append.
    pub const fn new() -> AppendOptions {
        AppendOptions {
            expect_head: None,
            no_sync: false,
            idempotency: None,
        }
    }

    /// Only if the head is `head` (see [`AppendOptions::expect_head`]).
    #[must_use]
    pub const fn expecting(mut self, head: Option<Address>) -> AppendOptions {
        self.expect_head = head;
        self
    }

    /// Without waiting for durability when `no_sync`.
    #[must_use]
    pub const fn unsynced(mut self, no_sync: bool) -> AppendOptions {
        self.no_sync = no_sync;
        self
    }

    /// Stored once under `key` (see [`AppendOptions::idempotency`]).
    #[must_use]
    pub const fn idempotent(mut self, key: Option<IdempotencyKey>) -> AppendOptions {
        self.idempotency = key;
        self
    }
}

/// An append's idempotency key, kept with the conversation: the key's
/// hash, and a fingerprint of the request it was first used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdempotencyKey {
    /// blake3 of the key as the client gave it.
    pub key: [u8; 32],
    /// Whatever identifies the request (a hash of its body and options).
    pub fingerprint: [u8; 32],
}

impl IdempotencyKey {
    /// The key `key` for a request whose fingerprint is `fingerprint`.
    pub fn new(key: &str, fingerprint: [u8; 32]) -> IdempotencyKey {
        IdempotencyKey {
            key: *blake3::hash(key.as_bytes()).as_bytes(),
            fingerprint,
        }
    }
}

/// What is kept under an idempotency key: the request's fingerprint and
/// what its append stored.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct Remembered {
    fingerprint: [u8; 32],
    first_seq: u64,
    count: u64,
    head: Address,
    created: bool,
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
    /// Whether this is what an earlier append with the same idempotency
    /// key stored (nothing was stored now).
    pub replayed: bool,
    /// Whether the append (the first, if replayed) created the
    /// conversation.
    pub created: bool,
}

/// One append of [`Store::append_group`].
#[derive(Debug, Clone, Copy)]
pub struct GroupAppend<'a> {
    /// The conversation appended to.
    pub id: &'a ConversationId,
    /// The events.
    pub events: &'a [Event],
    /// As for [`Store::append`] (the group is never synced itself).
    pub options: AppendOptions,
}

impl Store {
    /// What an earlier append of `id` stored under the idempotency key
    /// `key`, if any: `Ok(Some)` for the same request, an
    /// [`StoreError::IdempotencyKeyReused`] for another.
    pub fn idempotent_append(
        &self,
        id: &ConversationId,
        key: &IdempotencyKey,
    ) -> StoreResult<Option<Appended>> {
        let Some(value) = self.get(&keys::idempotency(id, &key.key))? else {
            return Ok(None);
        };
        let remembered: Remembered = crate::codec::decode(&value, "an idempotency key")?;
        if remembered.fingerprint != key.fingerprint {
            return Err(StoreError::IdempotencyKeyReused);
        }
        Ok(Some(Appended {
            first_seq: remembered.first_seq,
            count: remembered.count,
            head: remembered.head,
            replayed: true,
            created: remembered.created,
        }))
    }

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
        self.append_turned(id, events, options, false)
    }

    /// Takes this process's turn at appending to `id`: until the turn is
    /// dropped, the process's other appends to `id` (and its redactions
    /// and retention passes) wait, so that what is planned from `id`'s
    /// head stays true until [`Store::append_in_turn`] stores it. Another
    /// process sharing a database server can still append.
    pub fn hold_appends(&self, id: &ConversationId) -> AppendTurn<'_> {
        AppendTurn {
            id: *id,
            _guard: self.lock_conversation(id),
        }
    }

    /// [`Store::append`] to the conversation whose turn `turn` holds.
    pub fn append_in_turn(
        &self,
        turn: &AppendTurn<'_>,
        events: &[Event],
        options: &AppendOptions,
    ) -> StoreResult<Appended> {
        self.append_turned(&turn.id, events, options, true)
    }

    /// [`Store::append`]; `held`: the caller holds the conversation's turn.
    fn append_turned(
        &self,
        id: &ConversationId,
        events: &[Event],
        options: &AppendOptions,
        held: bool,
    ) -> StoreResult<Appended> {
        if events.is_empty() {
            return Err(StoreError::EmptyAppend);
        }
        let encoded = encode_all(events, self.max_event_bytes(), self.layout())?;
        // Many compactions can cost a key each in one batch, which sled
        // holds whole: they go through a bulk append (one commit too).
        let spans = encoded.iter().filter(|r| r.span.is_some()).count();
        if spans >= crate::bulk::MEMORY_COMPACTIONS
            && options.idempotency.is_none()
            && self.segments().is_some()
            && !self.kv.is_server()
        {
            drop(encoded);
            // This process's other appends to the conversation wait, as
            // for any append: the bulk append's commit would otherwise
            // find the head moved. (Its events go to the segment files,
            // so its commit does not come back here.)
            let _turn = (!held).then(|| self.lock_conversation(id));
            let mut bulk = self.begin_bulk(crate::BulkTarget::Existing(*id), options)?;
            bulk.push(events)?;
            return bulk.commit().map(|(_, appended)| appended);
        }
        // Another process sharing the backend may append between the read
        // of the metadata and the write, which is then not applied: plan
        // again from the new head (or, with an expected head, report it).
        let mut backoff = Backoff::new();
        // Writers of this process take turns per conversation: only other
        // processes' appends can make this one plan again.
        let _turn = (!held).then(|| self.lock_conversation(id));
        loop {
            let guard = self.lock_writes();
            let (appended, writes) = match self.plan(id, &encoded, options)? {
                Ok(planned) => planned,
                Err(earlier) => return Ok(earlier),
            };
            match self.commit(&encoded, writes) {
                Err(StoreError::Conflict { .. }) => {
                    drop(guard);
                    if !backoff.wait() {
                        return Err(StoreError::Conflict {
                            what: format!("conversation {id} kept changing under this append"),
                        });
                    }
                    continue;
                }
                // The answer was lost and others wrote since: the log
                // tells whether these records are in it.
                Err(unknown @ StoreError::OutcomeUnknown { .. }) => {
                    match self.holds(id, &appended) {
                        Ok(true) => {}
                        Ok(false) => {
                            drop(guard);
                            if !backoff.wait() {
                                return Err(StoreError::Conflict {
                                    what: format!(
                                        "conversation {id} kept changing under this append"
                                    ),
                                });
                            }
                            continue;
                        }
                        Err(_) => return Err(unknown),
                    }
                }
                other => other?,
            }
            drop(guard);
            self.synced_or_counted(options.no_sync)?;
            return Ok(appended);
        }
    }

    /// Whether the log holds `appended`'s records: its last record is at
    /// the place and has the address (which chains every record before
    /// it) the append gave it.
    fn holds(&self, id: &ConversationId, appended: &Appended) -> StoreResult<bool> {
        let last = appended.first_seq + appended.count - 1;
        if self.meta(id)?.len <= last {
            return Ok(false);
        }
        Ok(self.record(id, last)?.address == appended.head)
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
        let encoded = encode_all(events, self.max_event_bytes(), self.layout())?;
        let guard = self.lock_writes();
        let (id, meta, mut writes) = self.new_conversation(name)?;
        check_head(options, &meta)?;
        let placement = self.place(&id, &meta, &encoded)?;
        let mut appended = write_records(&id, meta, &encoded, &placement, &mut writes)?;
        appended.created = true;
        if let Some(key) = &options.idempotency {
            writes.remember(&id, key, &appended);
        }
        self.commit(&encoded, writes).map_err(|e| match (e, name) {
            (StoreError::Conflict { .. }, Some(name)) => StoreError::NameTaken {
                name: name.to_owned(),
            },
            (e, _) => e,
        })?;
        drop(guard);
        self.synced_or_counted(options.no_sync)?;
        Ok((id, appended))
    }

    /// Appends to several conversations in one atomic write of the
    /// backend, for a process that gathers many small appends (a server's
    /// group commit): a sled batch costs two writes of its log whatever
    /// its size, so sixteen one-event appends in one batch cost an
    /// eighth of what they cost apart. Each of `items` is checked and
    /// planned as [`Store::append`] would (empty, too large, an expected
    /// head, an idempotency key), and gets the result that call would
    /// give; the appends that pass are stored together or, if their
    /// common write fails, each on its own. Items that cannot share the
    /// write (a second append to the same conversation, many
    /// compactions, a database server) are appended on their own after
    /// it, in order. Nothing is synced: the appends are durable after
    /// the next [`Store::flush`].
    pub fn append_group(&self, items: &[GroupAppend<'_>]) -> Vec<StoreResult<Appended>> {
        let one = |item: &GroupAppend<'_>| {
            self.append(item.id, item.events, &item.options.unsynced(true))
        };
        if self.kv.is_server() || items.len() < 2 {
            return items.iter().map(one).collect();
        }
        let mut results: Vec<Option<StoreResult<Appended>>> = items.iter().map(|_| None).collect();
        let mut shared = Vec::new();
        let mut seen = HashSet::new();
        for (i, item) in items.iter().enumerate() {
            if item.events.is_empty() || !seen.insert(*item.id) {
                continue;
            }
            match encode_all(item.events, self.max_event_bytes(), self.layout()) {
                Err(e) => results[i] = Some(Err(e)),
                Ok(encoded)
                    if encoded.iter().filter(|r| r.span.is_some()).count()
                        >= crate::bulk::MEMORY_COMPACTIONS => {}
                Ok(encoded) => shared.push((i, encoded)),
            }
        }
        let mut planned = Vec::new();
        if !shared.is_empty() {
            // Each conversation's turn, in the locks' order, as an append
            // takes it: this process's other appends to them wait.
            let mut stripes: Vec<usize> = shared
                .iter()
                .map(|(i, _)| self.conversation_stripe(items[*i].id))
                .collect();
            stripes.sort_unstable();
            stripes.dedup();
            let _turns: Vec<_> = stripes.iter().map(|s| self.lock_stripe(*s)).collect();
            let guard = self.lock_writes();
            let mut merged = Writes::new(self);
            merged.keep_in_sled = true;
            let mut joined = Vec::new();
            for (i, encoded) in &shared {
                let item = &items[*i];
                match self.plan(item.id, encoded, &item.options) {
                    Ok(Ok((appended, writes))) if writes.stays_in_sled(self, encoded) => {
                        merged.absorb(writes);
                        joined.push(encoded);
                        planned.push((*i, appended));
                    }
                    // An append whose bodies go to the segment files (one
                    // that settles its staged records) is stored alone.
                    Ok(Ok((appended, writes))) => match self.commit(encoded, writes) {
                        Ok(()) => results[*i] = Some(Ok(appended)),
                        Err(StoreError::OutcomeUnknown { .. })
                            if self.holds(item.id, &appended).unwrap_or(false) =>
                        {
                            results[*i] = Some(Ok(appended));
                        }
                        // Stored nothing (or nothing known): appended on
                        // its own below.
                        Err(StoreError::Conflict { .. } | StoreError::OutcomeUnknown { .. }) => {}
                        Err(e) => results[*i] = Some(Err(e)),
                    },
                    Ok(Err(earlier)) => results[*i] = Some(Ok(earlier)),
                    Err(e) => results[*i] = Some(Err(e)),
                }
            }
            let stored = if planned.is_empty() {
                Ok(())
            } else {
                self.commit(joined.into_iter().flatten(), merged)
            };
            drop(guard);
            match stored {
                Ok(()) => {
                    for (i, appended) in planned.drain(..) {
                        results[i] = Some(Ok(appended));
                    }
                }
                // A write whose outcome is unknown may be stored: the logs
                // tell which appends are in them.
                Err(StoreError::OutcomeUnknown { .. }) => {
                    planned.retain(|(i, appended)| {
                        if self.holds(items[*i].id, appended).unwrap_or(false) {
                            results[*i] = Some(Ok(*appended));
                            false
                        } else {
                            true
                        }
                    });
                }
                // Nothing of the common write was stored: each is
                // appended on its own below, and meets the error itself.
                Err(_) => {}
            }
        }
        drop(shared);
        items
            .iter()
            .zip(results)
            .map(|(item, result)| result.unwrap_or_else(|| one(item)))
            .collect()
    }

    /// Plans the append of `encoded` to `id`, as [`Store::append`] does
    /// under the write lock: what it will store and the writes that store
    /// it, or (`Ok(Err)`) what an earlier append with the same idempotency
    /// key stored.
    fn plan(
        &self,
        id: &ConversationId,
        encoded: &[EncodedRecord<'_>],
        options: &AppendOptions,
    ) -> StoreResult<Result<(Appended, Writes), Appended>> {
        if let Some(key) = &options.idempotency {
            if let Some(earlier) = self.idempotent_append(id, key)? {
                return Ok(Err(earlier));
            }
        }
        let (meta, raw) = self.meta_and_bytes(id)?;
        check_head(options, &meta)?;
        let placement = self.place(id, &meta, encoded)?;
        let mut own = Writes::new(self);
        own.require(keys::conversation(id), Some(raw));
        let appended = write_records(id, meta, encoded, &placement, &mut own)?;
        if let Some(key) = &options.idempotency {
            own.remember(id, key, &appended);
        }
        Ok(Ok((appended, own)))
    }

    /// Stores the blobs `encoded` introduces (each once) and the chunks of
    /// `writes`, then applies its batch: the one write that makes an append
    /// visible. Called after every check of the append has passed.
    ///
    /// In a format-2 database, the bodies of an append of
    /// [`Store::segment_min_bytes`] or more go to the segment files, synced
    /// before the batch that refers to them; smaller ones stay in sled.
    pub(crate) fn commit<'r, 'e: 'r>(
        &self,
        encoded: impl IntoIterator<Item = &'r EncodedRecord<'e>>,
        writes: Writes,
    ) -> StoreResult<()> {
        let Writes {
            mut batch,
            chunks,
            to_segments,
            keep_in_sled,
            conditions,
            format: _,
            overlay_ranges: _,
            retired,
        } = writes;
        let mut seen = HashSet::new();
        let mut blobs = Vec::new();
        for (hash, text) in encoded.into_iter().flat_map(|r| &r.blobs) {
            if seen.insert(*hash) && !self.kv.contains(Keyspace::Blobs, hash.as_bytes())? {
                blobs.push((hash, text.as_bytes()));
            }
        }
        let mut blob_batch = Batch::new();
        let bytes: usize = blobs.iter().map(|(_, b)| b.len()).sum::<usize>()
            + chunks.iter().map(|c| c.body.len()).sum::<usize>();
        let large = bytes as u64 >= self.segment_min_bytes() && !keep_in_sled;
        let segments = self.segments();
        if let Some(segments) = segments.filter(|_| bytes > 0 && (large || to_segments)) {
            let bodies: Vec<&[u8]> = blobs
                .iter()
                .map(|(_, b)| *b)
                .chain(chunks.iter().map(|c| c.body.as_slice()))
                .collect();
            // Each body after a frame saying what it is (`frames.rs`).
            let frames: Vec<Frame<'_>> = blobs
                .iter()
                .map(|(hash, _)| Frame::blob(hash.as_bytes()))
                .chain(chunks.iter().map(|c| Frame::chunk(&c.key, c.records)))
                .collect();
            let places = frames::write(segments, &frames, &bodies)?;
            let (blob_places, chunk_places) = places.split_at(blobs.len());
            for ((hash, _), at) in blobs.iter().zip(blob_places) {
                blob_batch.insert(
                    Keyspace::Blobs,
                    hash.as_bytes(),
                    encode(&BlobValue::Segment(*at)),
                );
            }
            for (chunk, at) in chunks.iter().zip(chunk_places) {
                let value = ChunkValue::Segment {
                    at: *at,
                    records: chunk.records,
                };
                batch.put(chunk.key.as_slice(), encode(&value));
            }
        } else if self.format >= 2 {
            for (hash, text) in &blobs {
                blob_batch.insert(
                    Keyspace::Blobs,
                    hash.as_bytes(),
                    encode(&BlobValue::Inline(text)),
                );
            }
            for chunk in &chunks {
                batch.put(
                    chunk.key.as_slice(),
                    encode(&ChunkValue::Inline(&chunk.body)),
                );
            }
        } else {
            for (hash, text) in &blobs {
                blob_batch.insert(Keyspace::Blobs, hash.as_bytes(), *text);
            }
            for chunk in chunks {
                batch.put(chunk.key, chunk.body);
            }
        }
        // The blobs first (harmless if nothing comes to refer to them),
        // then the append's one atomic, conditional write.
        if !blob_batch.is_empty() {
            self.kv.apply(blob_batch)?;
        }
        if self.kv.apply_if(&conditions, batch)? {
            self.retire(retired);
            Ok(())
        } else {
            Err(StoreError::Conflict {
                what: "another writer changed the conversation first".to_owned(),
            })
        }
    }

    /// The metadata and the first writes of a conversation about to be
    /// created; nothing is written yet.
    fn new_conversation(
        &self,
        name: Option<&str>,
    ) -> StoreResult<(ConversationId, ConversationMeta, Writes)> {
        let (id, meta) = self.prepare_conversation(name)?;
        let mut writes = Writes::new(self);
        writes.require(keys::conversation(&id), None);
        if let Some(name) = name {
            writes.require(keys::name(name), None);
            writes.batch.put(keys::name(name), id.as_bytes().as_slice());
        }
        Ok((id, meta, writes))
    }
}

/// What one append writes: a batch, chunks to place in it (inline or in
/// the segment files; see [`Store::commit`]), and what must still hold
/// when it is applied.
pub(crate) struct Writes {
    pub batch: Batch,
    /// Keys that must still hold what the append was planned from.
    conditions: Vec<Condition>,
    chunks: Vec<PendingChunk>,
    /// Keep the chunks in the segment files whatever their size (format
    /// 2 and later): settled chunks a settle writes, which would otherwise
    /// be values of up to 64 KiB in sled pages that small, often-written
    /// keys share (sled rewrites a page whole, to a file of its own when
    /// it is large).
    to_segments: bool,
    /// Keep the bodies in sled whatever their size (a group of small
    /// appends, each of which would stay in sled on its own).
    keep_in_sled: bool,
    /// The database's format: whether compactions are kept in each chunk's
    /// overlay directory (format 4) rather than a key each, and whether a
    /// staged chunk has a turn index entry (formats before 9).
    format: u32,
    /// File each compaction by its turn range too (format 5).
    overlay_ranges: Option<RangeGroups>,
    /// Staged keys the write settles, to delete once it is applied and no
    /// read may reach them (`staging.rs`).
    retired: Vec<Vec<u8>>,
}

impl Writes {
    /// Nothing yet, for `store`'s format.
    pub(crate) fn new(store: &Store) -> Writes {
        Writes {
            batch: Batch::new(),
            conditions: Vec::new(),
            chunks: Vec::new(),
            to_segments: false,
            keep_in_sled: false,
            format: store.format,
            overlay_ranges: (store.format >= keys::OVERLAY_RANGE_FORMAT)
                .then(|| RangeGroups::new(store.format)),
            retired: Vec::new(),
        }
    }

    /// Whether compactions go to their chunk's overlay directory (format
    /// 4), not a key each.
    fn overlay_directories(&self) -> bool {
        self.format >= keys::OVERLAY_DIRECTORY_FORMAT
    }

    /// Whether a staged chunk gets a turn index entry (formats before 9).
    fn staged_turn_index(&self) -> bool {
        self.format < keys::UNINDEXED_STAGING_FORMAT
    }

    /// Applies only if `key` still holds `expected` (`None`: absent).
    pub(crate) fn require(&mut self, key: Vec<u8>, expected: Option<Vec<u8>>) {
        self.conditions.push(Condition { key, expected });
    }

    /// Keeps what `appended` stored under the idempotency key `key`, on
    /// condition that no other append took the key first.
    fn remember(&mut self, id: &ConversationId, key: &IdempotencyKey, appended: &Appended) {
        let at = keys::idempotency(id, &key.key);
        self.require(at.clone(), None);
        self.batch.put(
            at,
            encode(&Remembered {
                fingerprint: key.fingerprint,
                first_seq: appended.first_seq,
                count: appended.count,
                head: appended.head,
                created: appended.created,
            }),
        );
    }

    /// Adds what `other` writes and requires to these writes.
    fn absorb(&mut self, other: Writes) {
        self.batch.ops.extend(other.batch.ops);
        self.batch.announced.extend(other.batch.announced);
        self.conditions.extend(other.conditions);
        self.chunks.extend(other.chunks);
        self.to_segments |= other.to_segments;
        self.retired.extend(other.retired);
    }

    /// Whether [`Store::commit`] keeps these writes' bodies in sled
    /// whatever blobs `encoded` finds stored already.
    fn stays_in_sled(&self, store: &Store, encoded: &[EncodedRecord<'_>]) -> bool {
        let bytes = encoded
            .iter()
            .flat_map(|r| &r.blobs)
            .map(|(_, text)| text.len())
            .sum::<usize>()
            + self.chunks.iter().map(|c| c.body.len()).sum::<usize>();
        store.segments().is_none()
            || bytes == 0
            || (!self.to_segments && (bytes as u64) < store.segment_min_bytes())
    }

    /// Keeps these writes' chunks in the segment files whatever their
    /// size: for a chunk rewritten from there (a redaction, a retention
    /// pass), which in sled would copy its other texts into sled's own
    /// files, where they would outlive a later redaction.
    pub(crate) fn keep_in_segments(&mut self) {
        self.to_segments = true;
    }

    /// Adds a chunk of `records` records to store under `key`.
    pub(crate) fn push_chunk(&mut self, key: Vec<u8>, body: Vec<u8>, records: u64) {
        self.chunks.push(PendingChunk { key, body, records });
    }
}

/// A chunk of an append, encoded, not yet stored.
struct PendingChunk {
    key: Vec<u8>,
    body: Vec<u8>,
    records: u64,
}

/// How an append waits before planning again after another writer sharing
/// the backend changed the conversation first. Every such conflict means
/// another append was stored, so writers as a whole always progress; the
/// randomized, growing pause keeps one writer from losing every race, and
/// the time limit turns a conversation that never stops changing into an
/// error rather than a wait without end.
pub(crate) struct Backoff {
    started: std::time::Instant,
    pause_us: u64,
}

impl Backoff {
    /// How long an append keeps retrying.
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(30);
    /// The longest single pause.
    const MAX_PAUSE_US: u64 = 20_000;

    pub(crate) fn new() -> Backoff {
        Backoff {
            started: std::time::Instant::now(),
            pause_us: 50,
        }
    }

    /// Pauses before the next attempt; false once the time limit is spent.
    pub(crate) fn wait(&mut self) -> bool {
        if self.started.elapsed() > Self::LIMIT {
            return false;
        }
        let mut random = [0u8; 8];
        // Without randomness the pause is still bounded and growing.
        let _ = getrandom::getrandom(&mut random);
        let jitter = u64::from_le_bytes(random) % self.pause_us.max(1);
        std::thread::sleep(std::time::Duration::from_micros(self.pause_us / 2 + jitter));
        self.pause_us = (self.pause_us * 2).min(Self::MAX_PAUSE_US);
        true
    }
}

/// Fails with [`StoreError::HeadMismatch`] unless the conversation's head
/// is the one `options` expects, if any.
pub(crate) fn check_head(options: &AppendOptions, meta: &ConversationMeta) -> StoreResult<()> {
    match options.expect_head {
        Some(expected) if expected != meta.head => Err(StoreError::HeadMismatch {
            expected,
            actual: meta.head,
        }),
        _ => Ok(()),
    }
}

/// Where an append puts its records (see `staging.rs`).
pub(crate) enum Placement {
    /// In settled chunks; the staging state to store, if the conversation
    /// has one.
    Settled(Option<Staging>),
    /// In a staged chunk, with the staging state after it.
    Staged(Staging),
    /// In settled chunks after the staged records, settled with them.
    Settle(Staged, Staging),
}

impl Store {
    /// Where an append of `encoded` to `id` (metadata `meta`) puts its
    /// records. Called with the write lock held.
    pub(crate) fn place(
        &self,
        id: &ConversationId,
        meta: &ConversationMeta,
        encoded: &[EncodedRecord<'_>],
    ) -> StoreResult<Placement> {
        if self.format < keys::STAGING_FORMAT {
            return Ok(Placement::Settled(None));
        }
        let staging = self.staging(id)?;
        let (settled, staged_bytes) = match staging {
            Some(s) if s.settled < meta.len => (s.settled, s.bytes),
            _ => (meta.len, 0),
        };
        let records = meta.len - settled + encoded.len() as u64;
        let bytes = staged_bytes + encoded.iter().map(|r| r.bytes.len() as u64).sum::<u64>();
        if records < self.settle_records() && bytes < SETTLE_BYTES {
            return Ok(Placement::Staged(Staging { settled, bytes }));
        }
        let after = Staging {
            settled: meta.len + encoded.len() as u64,
            bytes: 0,
        };
        if settled == meta.len {
            return Ok(Placement::Settled(staging.map(|_| after)));
        }
        let staged = self.load_staged(id, settled, meta.len, meta.head)?;
        Ok(Placement::Settle(staged, after))
    }
}

/// Chains `encoded` after the conversation's head and adds the chunks,
/// turn index entries and metadata to `writes`, where `placement` says
/// (with the staged records first when it settles them).
pub(crate) fn write_records(
    id: &ConversationId,
    mut meta: ConversationMeta,
    encoded: &[EncodedRecord<'_>],
    placement: &Placement,
    writes: &mut Writes,
) -> StoreResult<Appended> {
    // Chain each record, assign its turn and place it in a chunk. Chunks
    // are always new: an append never rewrites a stored value, which keeps
    // sled's log from churning (see ARCHITECTURE.md, "sled").
    let first_seq = meta.len;
    let mut parent = meta.head;
    let (space, staging) = match placement {
        Placement::Settled(staging) => (Space::Settled, *staging),
        Placement::Staged(staging) => (Space::Staged, Some(*staging)),
        Placement::Settle(_, staging) => (Space::Settled, Some(*staging)),
    };
    let mut chunk = ChunkBuilder::new(space, first_seq, parent);
    if let Placement::Settle(staged, _) = placement {
        writes.to_segments = true;
        writes.retired = staged.keys(id, writes.staged_turn_index());
        let start = staged
            .chunks
            .first()
            .map_or(first_seq, |s| s.chunk.first_seq);
        let mut address = staged
            .chunks
            .first()
            .map_or(parent, |s| s.chunk.layout.parent);
        chunk = ChunkBuilder::new(space, start, address);
        let mut calls = staged.calls()?.into_iter().peekable();
        let mut overlays = staged.overlays()?.into_iter().peekable();
        for (seq, (turn, check, record)) in (start..).zip(staged.records()) {
            let entry = EntryRepr {
                turn,
                check,
                record,
            };
            chunk.push(id, writes, seq, address, entry);
            while let Some(call) = calls.next_if(|c| c.0 <= seq) {
                if call.0 == seq {
                    chunk.calls.calls.push(call);
                }
            }
            while let Some(overlay) = overlays.next_if(|o| o.seq <= seq) {
                if overlay.seq == seq {
                    chunk.overlays.overlays.push(overlay);
                }
            }
            address = crate::codec::link(&address, record);
        }
    }
    for (i, record) in encoded.iter().enumerate() {
        let seq = first_seq + i as u64;
        let address = record.address_after(&parent);
        let turn = meta.turns.next(record.event_type);
        let compaction = record.event_type == EventType::Compaction;
        if compaction && !writes.overlay_directories() {
            let entry = OverlayEntry {
                turn,
                record: &record.bytes,
            };
            writes.batch.put(keys::overlay(id, seq), encode(&entry));
        }
        if let (Some(span), Some(ranges)) = (record.span, &mut writes.overlay_ranges) {
            ranges.add(seq, span, turn, record.timestamp);
        }
        let stats = &mut meta.kinds[record.event_type.index()];
        stats.count += 1;
        stats.bytes += record.size;
        let entry = EntryRepr {
            turn,
            check: address.check(),
            record: &record.bytes,
        };
        chunk.push(id, writes, seq, parent, entry);
        if let Some((call_id, name)) = record.call {
            chunk.calls.calls.push((seq, call_id, name));
        }
        if compaction && writes.overlay_directories() {
            chunk.overlays.overlays.push(DirectoryOverlay {
                seq,
                turn,
                record: &record.bytes,
            });
        }
        parent = address;
    }
    chunk.write(id, writes);
    if let Some(ranges) = &mut writes.overlay_ranges {
        let record_of = |seq: u64| {
            let i = usize::try_from(seq.checked_sub(first_seq)?).ok()?;
            encoded.get(i).map(|r| r.bytes.as_slice())
        };
        for pair in ranges.take(id, record_of) {
            let (key, value) = pair?;
            writes.batch.put(key, value);
        }
    }
    if let Some(staging) = staging {
        writes.batch.put(keys::staging(id), encode(&staging));
    }

    let count = encoded.len() as u64;
    meta.len += count;
    meta.head = parent;
    writes.batch.put(keys::conversation(id), encode(&meta));
    writes.batch.announce(*id, meta.len);
    Ok(Appended {
        first_seq,
        count,
        head: parent,
        replayed: false,
        created: false,
    })
}

/// The size an event counts for against the limit of an append: its
/// record's bytes and the texts it stores as blobs.
pub fn event_size(event: &Event) -> u64 {
    // The measure does not depend on the layout (`codec::record_size`).
    encode_event(event, Layout::Plain).size
}

/// Events encoded on one thread at a time, their short texts hashed
/// together.
const ENCODE_RUN: usize = 256;

/// Batches of at least this many events are encoded in parallel.
const PARALLEL_ENCODE: usize = 512;

/// Encodes `events`, none larger than `limit` bytes (an empty list is
/// fine here; appends refuse it).
pub(crate) fn encode_all(
    events: &[Event],
    limit: u64,
    layout: Layout,
) -> StoreResult<Vec<EncodedRecord<'_>>> {
    // Hashing the texts and encoding the records is most of an append's
    // work, and each event's is its own: a long batch is encoded on
    // rayon's threads (chaining the records stays in order, after).
    // The short texts' hashes of a run of records are computed together,
    // side by side in SIMD lanes ([`hash_digests`]).
    let encoded: Vec<EncodedRecord<'_>> = if events.len() >= PARALLEL_ENCODE {
        use rayon::prelude::*;
        let mut encoded: Vec<EncodedRecord<'_>> = events
            .par_iter()
            .map(|e| encode_event_unhashed(e, layout))
            .collect();
        encoded.par_chunks_mut(ENCODE_RUN).for_each(hash_digests);
        encoded
    } else {
        let mut encoded: Vec<EncodedRecord<'_>> = events
            .iter()
            .map(|e| encode_event_unhashed(e, layout))
            .collect();
        hash_digests(&mut encoded);
        encoded
    };
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
    space: Space,
    first_seq: u64,
    repr: ChunkRepr<'a>,
    calls: CallDirectory<'a>,
    overlays: OverlayDirectory<'a>,
    bytes: usize,
}

impl<'a> ChunkBuilder<'a> {
    fn new(space: Space, first_seq: u64, parent: Address) -> Self {
        ChunkBuilder {
            space,
            first_seq,
            repr: ChunkRepr {
                parent,
                entries: Vec::new(),
            },
            calls: CallDirectory { calls: Vec::new() },
            overlays: OverlayDirectory::default(),
            bytes: 0,
        }
    }

    fn is_full(&self, next_record: usize) -> bool {
        let entries = self.repr.entries.len();
        entries > 0 && (entries >= CHUNK_MAX_ENTRIES || self.bytes + next_record > CHUNK_MAX_BYTES)
    }

    /// Adds record `seq`, the child of `parent`; when it does not fit,
    /// first adds the chunk to `writes` and starts the next one with it.
    fn push(
        &mut self,
        id: &ConversationId,
        writes: &mut Writes,
        seq: u64,
        parent: Address,
        entry: EntryRepr<'a>,
    ) {
        if self.is_full(entry.record.len()) {
            self.write(id, writes);
            *self = ChunkBuilder::new(self.space, seq, parent);
        }
        self.bytes += entry.record.len();
        self.repr.entries.push(entry);
    }

    /// Adds the chunk, its call directory and its turn index entry (none
    /// for a staged chunk from format 9 on) to `writes`.
    fn write(&self, id: &ConversationId, writes: &mut Writes) {
        writes.push_chunk(
            keys::chunk(self.space, id, self.first_seq),
            encode(&self.repr),
            self.repr.entries.len() as u64,
        );
        let at = (self.space, id, self.first_seq);
        let turns = self.space == Space::Settled || writes.staged_turn_index();
        let index = chunk_index(at, &self.repr.entries, &self.calls, &self.overlays, turns);
        for (key, value) in index {
            writes.batch.put(key, value);
        }
    }
}

/// Compactions to file by turn range (format 5), gathered so that each
/// level and bucket an append meets gets one key, however many of its
/// compactions fall there (a key each would put a key per compaction in
/// one batch, which sled holds in memory whole). Only where each
/// compaction is filed is kept: in format 5, whose range keys hold the
/// records too, each record is looked up when the values are encoded,
/// from where the append keeps it anyway.
#[derive(Debug)]
pub(crate) struct RangeGroups {
    groups: BTreeMap<(u8, u64), Vec<Gathered>>,
    /// The database's format: from it, whether the values hold the
    /// records (format 5) and the timestamps (format 8).
    format: u32,
}

/// A compaction [`RangeGroups`] holds: seq, turns covered, turn,
/// timestamp.
#[derive(Debug)]
struct Gathered {
    seq: u64,
    from: u64,
    to: u64,
    turn: u64,
    timestamp: Timestamp,
}

impl RangeGroups {
    /// None yet, for a database of format `format` (5 or later).
    pub(crate) fn new(format: u32) -> RangeGroups {
        RangeGroups {
            groups: BTreeMap::new(),
            format,
        }
    }

    /// Adds compaction `seq`, covering turns `from..=to`, in turn `turn`,
    /// timestamped `timestamp`.
    pub(crate) fn add(
        &mut self,
        seq: u64,
        (from, to): (u64, u64),
        turn: u64,
        timestamp: Timestamp,
    ) {
        let level = keys::overlay_range_level(from, to);
        let bucket = keys::overlay_range_bucket(from, level);
        self.groups
            .entry((level, bucket))
            .or_default()
            .push(Gathered {
                seq,
                from,
                to,
                turn,
                timestamp,
            });
    }

    /// The keys and values of the compactions gathered, one group at a
    /// time, each compaction's record bytes (format 5) from `record_of`;
    /// they are then forgotten.
    pub(crate) fn take<'r>(
        &mut self,
        id: &ConversationId,
        record_of: impl Fn(u64) -> Option<&'r [u8]>,
    ) -> impl Iterator<Item = StoreResult<(Vec<u8>, Vec<u8>)>> {
        let id = *id;
        let format = self.format;
        let records = format < keys::BARE_RANGE_FORMAT;
        std::mem::take(&mut self.groups)
            .into_iter()
            .map(move |((level, bucket), gathered)| {
                let mut entries = Vec::with_capacity(gathered.len());
                for e in &gathered {
                    let record = if records {
                        record_of(e.seq).ok_or_else(|| StoreError::Corrupt {
                            what: format!(
                                "conversation {id}: compaction {} is missing from its append",
                                e.seq
                            ),
                        })?
                    } else {
                        &[]
                    };
                    entries.push(RangeEntry {
                        seq: e.seq,
                        from_turn: e.from,
                        to_turn: e.to,
                        turn: e.turn,
                        timestamp: Some(e.timestamp),
                        record,
                    });
                }
                let first = gathered.first().map_or(0, |e| e.seq);
                Ok((
                    keys::overlay_range(&id, level, bucket, first),
                    crate::codec::encode_range_group(format, &entries),
                ))
            })
    }
}

/// What is stored beside a chunk of `entries` (in `space`, of
/// conversation `id`, from `first_seq`), as keys and values: its turn index
/// entry if `turns`, its call directory if it has calls and its overlay
/// directory if it has compactions (format 4).
pub(crate) fn chunk_index(
    (space, id, first_seq): (Space, &ConversationId, u64),
    entries: &[EntryRepr<'_>],
    calls: &CallDirectory<'_>,
    overlays: &OverlayDirectory<'_>,
    turns: bool,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::with_capacity(3);
    if turns {
        let first_turn = entries.first().map_or(0, |e| e.turn);
        let last_turn = entries.last().map_or(0, |e| e.turn);
        out.push((
            keys::turn(space, id, last_turn, first_seq),
            encode(&TurnEntry {
                first_turn,
                entries: entries.len() as u64,
            }),
        ));
    }
    if !calls.calls.is_empty() {
        out.push((keys::call_directory(space, id, first_seq), encode(calls)));
    }
    if !overlays.overlays.is_empty() {
        let key = keys::overlay_directory(space, id, first_seq);
        out.push((key, encode(overlays)));
    }
    out
}

/// This process's turn at appending to one conversation
/// ([`Store::hold_appends`]).
#[must_use = "the turn ends when it is dropped"]
pub struct AppendTurn<'s> {
    id: ConversationId,
    _guard: std::sync::MutexGuard<'s, ()>,
}
