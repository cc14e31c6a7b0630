//! Bulk appends: [`Store::begin_bulk`] and [`BulkAppend`].
//!
//! An append is one sled batch built in memory, so appending a large input
//! in one call holds all of it, and appending it in many calls stores it in
//! pieces: a process killed part-way leaves part of it. A bulk append takes
//! events a batch at a time ([`BulkAppend::push`]) and makes them visible
//! at once ([`BulkAppend::commit`]): afterwards the conversation holds all of
//! them, or none (a new conversation does not exist).
//!
//! Until its events reach [`Store::bulk_memory_bytes`] (or
//! [`MEMORY_COMPACTIONS`] compactions) a bulk append keeps them in memory
//! and commits them as one [`Store::append`] (or
//! [`Store::create_and_append`]). Past that (format 2 and later), it chains
//! and encodes them as they come and writes the bodies of their chunks and
//! new blobs to segment files of its own (`NNNNNNNN.bulk`, see
//! `segments.rs`), unsynced; what it keeps in memory is the sled batch that
//! will refer to them: a few keys per chunk of 1,024 records (reference,
//! turn index entry, call directory), the compactions' overlay entries, and
//! a reference per new blob. Its commit syncs the files, then, under the
//! write lock, checks that the conversation is still as it was when the
//! bulk append began (its head and length; a new conversation's name still
//! free), applies the blob references to the blob tree and then everything
//! else, with the conversation's metadata, to the default tree, both also
//! recording the files as committed (`keys::segment_file`). Where it keeps
//! the commit atomic, that is in batches of 512 keys (see `commit`): one
//! sled batch holds everything it replaces until it ends. The overlay range
//! keys (format 5) go in such batches first even for an existing
//! conversation: they name seqs past its length, which readers skip.
//!
//! A bulk append dropped without committing deletes its files; one whose
//! process died leaves them, and the next [`Store::open`] deletes them (or,
//! if its commit was applied, gives them their plain names).
//!
//! In a format-3 database, the records staged before a bulk append are
//! written again in its settled chunks, first, as an append that settles
//! them would (`staging.rs`).

use std::collections::{HashMap, HashSet};

use crate::append::{check_head, chunk_index, encode_all, AppendOptions, Appended, RangeGroups};
use crate::backend::{Batch, Condition, Keyspace};
use crate::backend::{BulkFile, SegmentRef};
use crate::codec::OverlayEntry;
use crate::codec::{
    decode, encode, BlobValue, CallDirectory, ChunkRepr, ChunkValue, DirectoryOverlay,
    EncodedRecord, EntryRepr, OverlayDirectory, CHUNK_MAX_BYTES, CHUNK_MAX_ENTRIES,
};
use crate::error::{StoreError, StoreResult};
use crate::event::{Event, EventType};
use crate::hash::{Address, BlobHash};
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::staging::Staging;
use crate::store::{ConversationMeta, Store};

/// A bulk append keeps at most this many compactions in memory (then
/// writes to the segment files like one past [`Store::bulk_memory_bytes`]):
/// each can cost a key of its own in one batch, however small.
pub const MEMORY_COMPACTIONS: usize = 4096;

/// Bodies are written to the bulk files once this many bytes wait.
const WRITE_BYTES: usize = 1024 * 1024;

/// What a bulk append adds to.
#[derive(Debug, Clone, Copy)]
pub enum BulkTarget<'a> {
    /// A new conversation, named `name` if given, created by the commit.
    New {
        /// Its unique name, if any.
        name: Option<&'a str>,
    },
    /// An existing conversation.
    Existing(ConversationId),
}

/// [`BulkTarget`], owned.
enum Target {
    New { name: Option<String> },
    Existing,
}

/// An append of any number of events, made visible at once by
/// [`BulkAppend::commit`]; see [`Store::begin_bulk`].
pub struct BulkAppend<'s> {
    store: &'s Store,
    id: ConversationId,
    /// Whether the commit creates the conversation.
    target: Target,
    /// The conversation when the bulk append began: the commit checks it
    /// is still so.
    base: ConversationMeta,
    /// Its metadata's stored bytes then (none for a new conversation): the
    /// commit is conditional on them.
    base_bytes: Option<Vec<u8>>,
    no_sync: bool,
    /// Events pushed.
    count: u64,
    /// Events kept in memory, while they are few, and their encoded size.
    pending: Vec<Event>,
    pending_bytes: u64,
    /// The compactions among them.
    pending_spans: usize,
    /// Once they are not: what was written to the segment files.
    spill: Option<Box<Spill>>,
    /// On a database server, once they are not: a store over one
    /// transaction, into which the events are appended as they come, and
    /// what its last append returned (the commit commits it).
    through: Option<(Store, Option<Appended>)>,
    /// Set once a write failed: the bulk append can only be dropped.
    failed: bool,
    /// Set once a commit batch was applied or tried: the files are then
    /// left to the commit (or, if it failed, to the next open).
    applied: bool,
    /// [`Store::blob_sweeps`] when it began: blobs it found stored (and so
    /// did not write) may have been deleted since if it moved.
    sweeps: u64,
}

impl Store {
    /// Begins a bulk append to `target`, with the options of an append:
    /// `expect_head` is checked now and again at the commit, against the
    /// head at this call; `no_sync` makes the commit return before it is
    /// durable. A new conversation's name is checked now (and again at the
    /// commit); it is created by the commit only.
    ///
    /// Nothing is visible before the commit. A commit fails with
    /// [`StoreError::HeadMismatch`] if the conversation changed meanwhile.
    pub fn begin_bulk(
        &self,
        target: BulkTarget<'_>,
        options: &AppendOptions,
    ) -> StoreResult<BulkAppend<'_>> {
        let (id, base, base_bytes, target) = match target {
            BulkTarget::New { name } => {
                let (id, meta) = self.prepare_conversation(name)?;
                let name = name.map(str::to_owned);
                (id, meta, None, Target::New { name })
            }
            BulkTarget::Existing(id) => {
                let (meta, bytes) = self.meta_and_bytes(&id)?;
                (id, meta, Some(bytes), Target::Existing)
            }
        };
        check_head(options, &base)?;
        Ok(BulkAppend {
            store: self,
            id,
            target,
            base,
            base_bytes,
            no_sync: options.no_sync,
            count: 0,
            pending: Vec::new(),
            pending_bytes: 0,
            pending_spans: 0,
            spill: None,
            through: None,
            failed: false,
            applied: false,
            sweeps: self.blob_sweeps(),
        })
    }
}

impl BulkAppend<'_> {
    /// How many events were pushed.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether no event was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds `events` after those pushed before. Fails with
    /// [`StoreError::EventTooLarge`] (its index counted from the first
    /// event pushed) like an append, or with an I/O error writing the
    /// segment files; the bulk append can then only be dropped.
    pub fn push(&mut self, events: &[Event]) -> StoreResult<()> {
        if self.failed {
            return Err(failed());
        }
        if events.is_empty() {
            return Ok(());
        }
        let store = self.store;
        if self.spill.is_some() && events.len() >= 2 * SPILL_PART {
            let added = self.spill_overlapped(events);
            return self.written(events.len(), added);
        }
        let encoded = encode_at(store, self.count, events, 0)?;
        if store.kv.is_server() {
            // A database server: past the limit, the events go into one
            // transaction as they come (see `write_through`).
            let bytes: u64 = encoded.iter().map(|r| r.size).sum();
            self.pending.extend_from_slice(events);
            self.pending_bytes += bytes;
            self.count += events.len() as u64;
            if self.pending_bytes >= store.bulk_memory_bytes() {
                let written = self.write_through();
                if written.is_err() {
                    self.failed = true;
                }
                written?;
            }
            return Ok(());
        }
        if self.spill.is_none() {
            let bytes: u64 = encoded.iter().map(|r| r.size).sum();
            let in_memory = self.pending_bytes + bytes;
            // Compactions can cost a key each in one batch (format 5's
            // range keys, when their turn ranges spread apart), whatever
            // their size: they count too.
            let spans = encoded.iter().filter(|r| r.span.is_some()).count();
            let spans = self.pending_spans + spans;
            if store.segments().is_none()
                || (in_memory < store.bulk_memory_bytes() && spans < MEMORY_COMPACTIONS)
            {
                self.pending.extend_from_slice(events);
                self.pending_bytes = in_memory;
                self.pending_spans = spans;
                self.count += events.len() as u64;
                return Ok(());
            }
        }
        let added = self.spill(&encoded);
        self.written(events.len(), added)
    }

    /// Counts `len` events pushed once `added` says they were written; a
    /// failure leaves the bulk append failed.
    fn written(&mut self, len: usize, added: StoreResult<()>) -> StoreResult<()> {
        if added.is_err() {
            self.failed = true;
        }
        added?;
        self.count += len as u64;
        Ok(())
    }

    /// Appends the events in memory to the conversation inside the bulk
    /// append's transaction (begun by the first call), as ordinary appends
    /// that nobody else sees before the commit. The first holds the
    /// conversation's metadata row (an existing conversation's, locked; a
    /// new one's, inserted), so another writer of it waits for the commit
    /// and then finds it changed; a process that dies is rolled back by
    /// the database.
    fn write_through(&mut self) -> StoreResult<()> {
        let store = self.store;
        let events = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        if events.is_empty() {
            return Ok(());
        }
        let options = AppendOptions::new().unsynced(true);
        if let Some((inside, last)) = &mut self.through {
            *last = Some(inside.append(&self.id, &events, &options)?);
            return Ok(());
        }
        let backend = store
            .kv
            .begin_transaction()
            .ok_or_else(|| StoreError::Corrupt {
                what: "a database server without transactions".to_owned(),
            })??;
        let inside = Store::with_backend(backend)?;
        inside.set_max_event_bytes(store.max_event_bytes());
        inside.set_settle_records(store.settle_records());
        let first = match &self.target {
            Target::New { name } => {
                let (id, appended) =
                    inside.create_and_append(name.as_deref(), &events, &options)?;
                self.id = id;
                appended
            }
            Target::Existing => {
                inside.append(&self.id, &events, &options.expecting(Some(self.base.head)))?
            }
        };
        self.through = Some((inside, Some(first)));
        Ok(())
    }

    /// Spills `events` a part at a time, each part encoded (on rayon's
    /// threads) while the one before is written: the records are chained
    /// and written in order on one thread, which no longer waits for the
    /// encoding of the next part.
    fn spill_overlapped(&mut self, events: &[Event]) -> StoreResult<()> {
        let (store, count, id) = (self.store, self.count, self.id);
        let spill = self.spill.as_mut().expect("spilling");
        let parts: Vec<&[Event]> = events.chunks(SPILL_PART).collect();
        let mut ready = encode_at(store, count, parts[0], 0)?;
        let mut offset = 0;
        for (index, part) in parts.iter().enumerate() {
            offset += part.len();
            let next = parts.get(index + 1).copied();
            let (encoded, spilled) = rayon::join(
                || next.map(|next| encode_at(store, count, next, offset)),
                || spill.add(store, &id, &ready),
            );
            spilled?;
            match encoded {
                Some(encoded) => ready = encoded?,
                None => break,
            }
        }
        Ok(())
    }

    /// Chains `encoded` after what was pushed, writing what is in memory
    /// first if nothing was written yet.
    fn spill(&mut self, encoded: &[EncodedRecord<'_>]) -> StoreResult<()> {
        let store = self.store;
        if self.spill.is_none() {
            let new = matches!(self.target, Target::New { .. });
            let mut spill = Box::new(Spill::start(store, &self.id, &self.base, new)?);
            let pending = std::mem::take(&mut self.pending);
            let earlier = encode_all(&pending, u64::MAX, store.layout())?;
            spill.add(store, &self.id, &earlier)?;
            self.pending_bytes = 0;
            self.spill = Some(spill);
        }
        let spill = self.spill.as_mut().expect("started above");
        spill.add(store, &self.id, encoded)
    }

    /// Makes every event pushed visible at once, and durable unless the
    /// options said `no_sync`: the conversation's id and what was appended.
    ///
    /// Fails with [`StoreError::EmptyAppend`] if nothing was pushed,
    /// [`StoreError::HeadMismatch`] if the conversation changed since
    /// [`Store::begin_bulk`], [`StoreError::NameTaken`] if a new
    /// conversation's name was taken meanwhile; nothing is stored then.
    pub fn commit(mut self) -> StoreResult<(ConversationId, Appended)> {
        if self.failed {
            return Err(failed());
        }
        if self.count == 0 {
            return Err(StoreError::EmptyAppend);
        }
        let store = self.store;
        if self.through.is_some() {
            self.write_through()?;
            let Some((inside, Some(last))) = self.through.take() else {
                return Err(failed());
            };
            inside.backend().commit_transaction()?;
            return Ok((
                self.id,
                Appended {
                    first_seq: self.base.len,
                    count: last.first_seq + last.count - self.base.len,
                    head: last.head,
                    replayed: false,
                    created: matches!(self.target, Target::New { .. }),
                },
            ));
        }
        if self.spill.is_none() {
            let pending = std::mem::take(&mut self.pending);
            let options = AppendOptions::new()
                .expecting(Some(self.base.head))
                .unsynced(self.no_sync);
            return match &self.target {
                Target::New { name } => {
                    store.create_and_append(name.as_deref(), &pending, &options)
                }
                Target::Existing => Ok((self.id, store.append(&self.id, &pending, &options)?)),
            };
        }
        let id = self.id;
        let spill = self.spill.as_mut().expect("checked above");
        let closed = spill.close(store, &id);
        if closed.is_err() {
            self.failed = true;
        }
        closed?;
        let spill = self.spill.as_mut().expect("checked above");
        let numbers: Vec<u32> = spill.files.iter().map(|f| f.number).collect();

        let guard = store.lock_writes();
        let writes = std::mem::take(&mut spill.writes);
        let ranges = spill.overlay_ranges.take();
        let mut last = Vec::new();
        match &self.target {
            Target::New { name } => {
                if let Some(name) = name {
                    if store.contains(&keys::name(name))? {
                        return Err(StoreError::NameTaken { name: name.clone() });
                    }
                    last.push((keys::name(name), id.as_bytes().to_vec()));
                }
                if store.contains(&keys::conversation(&id))? {
                    return Err(StoreError::Corrupt {
                        what: format!(
                            "conversation {id} appeared during a bulk append creating it"
                        ),
                    });
                }
            }
            Target::Existing => {
                let now = store.meta(&id)?;
                if now.head != self.base.head || now.len != self.base.len {
                    return Err(StoreError::HeadMismatch {
                        expected: self.base.head,
                        actual: now.head,
                    });
                }
            }
        }
        if store.blob_sweeps() != self.sweeps {
            // A deletion removed blobs since this began: those it found
            // stored must still be.
            let written: HashSet<BlobHash> = spill.blobs.iter().map(|(h, _)| *h).collect();
            for hash in spill.seen.iter().filter(|h| !written.contains(h)) {
                if !store.kv.contains(Keyspace::Blobs, hash.as_bytes())? {
                    return Err(StoreError::Conflict {
                        what: "a text the bulk append holds was deleted with another \
                               conversation meanwhile"
                            .to_owned(),
                    });
                }
            }
        }
        // The blob references, the files' keys first.
        let mut blobs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for (hash, at) in &spill.blobs {
            // Another append may have stored the same text meanwhile: its
            // value stays (values are never rewritten), ours is garbage.
            if !store.kv.contains(Keyspace::Blobs, hash.as_bytes())? {
                if blobs.is_empty() {
                    blobs.extend(numbers.iter().map(|&n| (keys::segment_file(n), Vec::new())));
                }
                blobs.push((hash.as_bytes().to_vec(), encode(&BlobValue::Segment(*at))));
            }
        }
        let meta = &spill.meta;
        last.extend(numbers.iter().map(|&n| (keys::segment_file(n), Vec::new())));
        if spill.staging {
            let staging = Staging {
                settled: meta.len,
                bytes: 0,
            };
            last.push((keys::staging(&id), encode(&staging)));
        }
        last.push((keys::conversation(&id), encode(meta)));
        let appended = Appended {
            first_seq: self.base.len,
            count: meta.len - self.base.len,
            head: meta.head,
            replayed: false,
            created: matches!(self.target, Target::New { .. }),
        };
        // sled holds everything a batch replaces until the batch ends, so
        // one batch of a million events' keys costs several times their
        // size in memory. Blob references are harmless unreferenced, once
        // the files they point into stay, which the first group's keys
        // ensure: they go in groups. A new conversation's keys are
        // invisible until its metadata exists: they go in groups too, the
        // metadata in a last one. (sled recovers a prefix of its log, so a
        // crash between groups leaves only keys nothing refers to.) An
        // existing conversation's keys go in one batch with its metadata:
        // readers and its next append would meet them.
        self.applied = true;
        // Until the batch that makes it visible, what the groups below
        // write is garbage if the process dies: the marker says what to
        // take back (at the next open, `discard_pending`), and that batch
        // removes it.
        let marker = keys::pending_bulk(&id);
        let mut pending = vec![u8::from(matches!(self.target, Target::New { .. }))];
        for number in &numbers {
            pending.extend_from_slice(&number.to_be_bytes());
        }
        let mut batch = Batch::new();
        batch.put(marker.clone(), pending);
        store.kv.apply(batch)?;
        let groups = Groups {
            blobs,
            ranges,
            writes,
            last,
        };
        let committed = self.commit_groups(store, &id, groups, &numbers, marker);
        if committed.is_err() && !interrupt::as_a_kill() {
            // Taken back now, under the write lock (or at the next open).
            let _ = discard_pending(store);
        }
        let appended = committed.map(|()| appended)?;
        let retired = std::mem::take(&mut self.spill.as_mut().expect("checked above").retired);
        store.retire(retired);
        drop(guard);
        if !self.no_sync {
            store.sync()?;
        }
        Ok((id, appended))
    }

    /// The groups of a bulk append's commit, the last one making it
    /// visible (and removing `marker`).
    fn commit_groups(
        &self,
        store: &Store,
        id: &ConversationId,
        groups: Groups,
        numbers: &[u32],
        marker: Vec<u8>,
    ) -> StoreResult<()> {
        let id = *id;
        let Groups {
            blobs,
            ranges,
            mut writes,
            last,
        } = groups;
        let segments = segment_files(store)?;
        if !blobs.is_empty() {
            apply_in_groups(store, Keyspace::Blobs, blobs.into_iter().map(Ok))?;
            // Blob references to the files are stored: they stay.
            segments.committed(numbers.iter().copied());
        }
        if let Some(mut ranges) = ranges {
            // The overlay range keys go in groups too, even for an existing
            // conversation of format 6: readers take only the compactions
            // below its length, and the marker takes them back (they all
            // name seqs past its length) if the batch making them visible
            // never comes. One batch would hold a key per compaction when
            // their turn ranges spread apart. A format-5 build takes back
            // only a new conversation's keys: a format-5 database's range
            // keys of an existing conversation stay in that batch.
            let bare = store.format >= keys::BARE_RANGE_FORMAT;
            // Format 5's values hold the records, found in the directories.
            let records = if bare {
                HashMap::new()
            } else {
                directory_records(&id, &writes)?
            };
            let pairs = ranges.take(&id, |seq| records.get(&seq).copied());
            if bare || matches!(self.target, Target::New { .. }) {
                apply_in_groups(store, Keyspace::Main, pairs)?;
            } else {
                let pairs: Vec<_> = pairs.collect::<StoreResult<_>>()?;
                drop(records);
                writes.extend(pairs);
            }
            interrupt::check()?;
        }
        writes.sort_unstable();
        interrupt::check()?;
        let (group, conditions) = match &self.target {
            Target::New { name } => {
                apply_in_groups(store, Keyspace::Main, writes.into_iter().map(Ok))?;
                interrupt::check()?;
                let mut conditions = vec![Condition {
                    key: keys::conversation(&id),
                    expected: None,
                }];
                if let Some(name) = name {
                    conditions.push(Condition {
                        key: keys::name(name),
                        expected: None,
                    });
                }
                (last, conditions)
            }
            Target::Existing => {
                let mut writes = writes;
                writes.extend(last);
                let condition = Condition {
                    key: keys::conversation(&id),
                    expected: self.base_bytes.clone(),
                };
                (writes, vec![condition])
            }
        };
        // The one write that makes it visible, on condition that nobody
        // changed the conversation (or took the id or name) meanwhile.
        let mut batch = Batch::new();
        for (key, value) in group {
            batch.put(key, value);
        }
        batch.delete(marker);
        if !store.kv.apply_if(&conditions, batch)? {
            return Err(match &self.target {
                Target::New { name: Some(name) } => StoreError::NameTaken { name: name.clone() },
                _ => StoreError::HeadMismatch {
                    expected: self.base.head,
                    actual: store.meta(&id).map_or(self.base.head, |m| m.head),
                },
            });
        }
        segments.committed(numbers.iter().copied());
        Ok(())
    }
}

/// Takes back what bulk appends whose commit was cut short (a process
/// killed, a write failed) wrote before the batch that would have made
/// them visible: a new conversation's keys, the blob references into
/// their segment files, and the files. Run when a database is opened,
/// before any write (and by a failed commit, under the write lock): no
/// append can have come to rely on those blobs meanwhile. Returns the
/// conversations taken back.
pub(crate) fn discard_pending(store: &Store) -> StoreResult<Vec<ConversationId>> {
    let markers = store
        .scan_prefix([keys::PENDING_BULK])
        .collect::<StoreResult<Vec<_>>>()?;
    let mut discarded = Vec::new();
    for (key, value) in markers {
        let (Some(id), Some((&new, files))) = (keys::conversation_of(&key), value.split_first())
        else {
            return Err(StoreError::Corrupt {
                what: "a pending bulk append's marker does not decode".to_owned(),
            });
        };
        let numbers: Vec<u32> = files
            .chunks_exact(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let mut deletes: Vec<(Keyspace, Vec<u8>)> = Vec::new();
        if new == 1 {
            if store.contains(&keys::conversation(&id))? {
                return Err(StoreError::Corrupt {
                    what: format!(
                        "conversation {id} exists, yet a bulk append creating it is marked \
                         as not committed"
                    ),
                });
            }
            for tag in keys::CONVERSATION_TAGS {
                let mut prefix = vec![*tag];
                prefix.extend_from_slice(id.as_bytes());
                for pair in store.scan_prefix(prefix) {
                    deletes.push((Keyspace::Main, pair?.0.to_vec()));
                }
            }
        } else {
            // An existing conversation's overlay range keys, written before
            // the batch that would have made them visible: those past its
            // length.
            let len = store.meta(&id)?.len;
            for pair in store.scan_prefix(keys::overlay_ranges(&id)) {
                let (key, _) = pair?;
                if keys::overlay_range_parts(&key).is_some_and(|(_, _, first)| first >= len) {
                    deletes.push((Keyspace::Main, key.to_vec()));
                }
            }
        }
        for pair in store
            .kv
            .scan(Keyspace::Blobs, crate::backend::prefixed(Vec::new()), false)
        {
            let (hash, value) = pair?;
            if hash.len() != 32 {
                continue;
            }
            if let Ok(BlobValue::Segment(at)) = crate::codec::decode::<BlobValue>(&value, "blob") {
                if numbers.contains(&at.file) {
                    deletes.push((Keyspace::Blobs, hash.to_vec()));
                }
            }
        }
        for &number in &numbers {
            deletes.push((Keyspace::Main, keys::segment_file(number)));
            deletes.push((Keyspace::Blobs, keys::segment_file(number)));
        }
        remove_in_groups(store, deletes.into_iter().map(Ok))?;
        // The marker last: until it goes, the next open takes back again
        // (finding less each time).
        store.kv.sync()?;
        if let Some(segments) = store.segments() {
            let _ = segments.remove(&numbers)?;
        }
        let mut batch = Batch::new();
        batch.delete(key.to_vec());
        store.kv.apply(batch)?;
        store.kv.sync()?;
        discarded.push(id);
    }
    Ok(discarded)
}

impl Drop for BulkAppend<'_> {
    /// Deletes the segment files of a bulk append that was not committed.
    fn drop(&mut self) {
        if let (Some(spill), false, Some(segments)) =
            (&self.spill, self.applied, self.store.segments())
        {
            segments.abandon(spill.files.iter().map(|f| f.number));
        }
    }
}

/// Keys in a group of [`apply_in_groups`], at most...
const GROUP_KEYS: usize = 512;
/// ...and bytes, about.
const GROUP_BYTES: usize = 1 << 20;

/// Applies `writes` to `space` in order, in batches of at most
/// [`GROUP_KEYS`] keys and about [`GROUP_BYTES`] bytes.
fn apply_in_groups(
    store: &Store,
    space: Keyspace,
    writes: impl IntoIterator<Item = StoreResult<(Vec<u8>, Vec<u8>)>>,
) -> StoreResult<()> {
    let mut batch = Batch::new();
    let (mut count, mut bytes) = (0, 0);
    for pair in writes {
        let (key, value) = pair?;
        if count == GROUP_KEYS || bytes >= GROUP_BYTES {
            store.kv.apply(std::mem::take(&mut batch))?;
            (count, bytes) = (0, 0);
        }
        count += 1;
        bytes += key.len() + value.len();
        batch.insert(space, key, value);
    }
    if count > 0 {
        store.kv.apply(batch)?;
    }
    Ok(())
}

/// Removes `keys` in order, in batches of at most [`GROUP_KEYS`] keys;
/// returns how many.
pub(crate) fn remove_in_groups(
    store: &Store,
    keys: impl IntoIterator<Item = StoreResult<(Keyspace, Vec<u8>)>>,
) -> StoreResult<u64> {
    let mut batch = Batch::new();
    let mut removed = 0;
    for key in keys {
        let (space, key) = key?;
        if batch.len() == GROUP_KEYS {
            store.kv.apply(std::mem::take(&mut batch))?;
        }
        batch.remove(space, key);
        removed += 1;
    }
    if !batch.is_empty() {
        store.kv.apply(batch)?;
    }
    Ok(removed)
}

/// What a bulk append's commit writes: blob references, the compactions
/// to file by turn range (format 5), the default tree's writes and the
/// keys of the batch making it visible.
struct Groups {
    blobs: Vec<(Vec<u8>, Vec<u8>)>,
    ranges: Option<RangeGroups>,
    writes: Vec<(Vec<u8>, Vec<u8>)>,
    last: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The compaction records of the overlay directories among `writes` (a
/// bulk append's own, of conversation `id`), by seq.
fn directory_records<'w>(
    id: &ConversationId,
    writes: &'w [(Vec<u8>, Vec<u8>)],
) -> StoreResult<HashMap<u64, &'w [u8]>> {
    let prefix = keys::overlay_directories(Space::Settled, id);
    let mut records = HashMap::new();
    for (key, value) in writes {
        if key.starts_with(&prefix) {
            let directory: OverlayDirectory<'w> = decode(value, "overlay directory")?;
            for overlay in directory.overlays {
                records.insert(overlay.seq, overlay.record);
            }
        }
    }
    Ok(records)
}

fn failed() -> StoreError {
    StoreError::Io(std::io::Error::other(
        "an earlier write of this bulk append failed",
    ))
}

/// A bulk append past the memory limit.
struct Spill {
    /// The conversation's metadata with the records chained so far.
    meta: ConversationMeta,
    /// The staged keys of the records it settles (`staging.rs`).
    retired: Vec<Vec<u8>>,
    /// Whether the conversation has a staging state, which the commit moves
    /// past the new records.
    staging: bool,
    chunk: OpenChunk,
    /// Whether compactions go in overlay directories (format 4) rather
    /// than a key each.
    overlay_directories: bool,
    /// Compactions to file by turn range (format 5).
    overlay_ranges: Option<RangeGroups>,
    /// Bodies waiting to be written, and their bytes.
    bodies: Vec<Body>,
    body_bytes: usize,
    /// The default tree's writes but the metadata: chunk references, turn
    /// index entries, call directories, overlay entries.
    writes: Vec<(Vec<u8>, Vec<u8>)>,
    /// The blobs written, with where they are.
    blobs: Vec<(BlobHash, SegmentRef)>,
    /// Every blob hash met, written or already stored.
    seen: hashbrown::HashSet<BlobHash>,
    /// The files written, the last one being written.
    files: Vec<BulkFile>,
}

/// A body to write to the segment files.
enum Body {
    Chunk {
        key: Vec<u8>,
        records: u64,
        bytes: Vec<u8>,
    },
    Blob {
        hash: BlobHash,
        bytes: Vec<u8>,
    },
}

impl Body {
    fn bytes(&self) -> &[u8] {
        match self {
            Body::Chunk { bytes, .. } | Body::Blob { bytes, .. } => bytes,
        }
    }
}

impl Spill {
    /// Starts after `base`, with the conversation's staged records first
    /// (format 3), read back and checked.
    fn start(
        store: &Store,
        id: &ConversationId,
        base: &ConversationMeta,
        new: bool,
    ) -> StoreResult<Self> {
        let staging = if new || store.format < keys::STAGING_FORMAT {
            None
        } else {
            store.staging(id)?
        };
        let mut spill = Spill {
            meta: base.clone(),
            retired: Vec::new(),
            staging: staging.is_some(),
            chunk: OpenChunk::new(base.len, base.head),
            overlay_directories: store.format >= keys::OVERLAY_DIRECTORY_FORMAT,
            overlay_ranges: (store.format >= keys::OVERLAY_RANGE_FORMAT)
                .then(|| RangeGroups::new(store.format)),
            bodies: Vec::new(),
            body_bytes: 0,
            writes: Vec::new(),
            blobs: Vec::new(),
            seen: hashbrown::HashSet::new(),
            files: Vec::new(),
        };
        let Some(staging) = staging.filter(|s| s.settled < base.len) else {
            return Ok(spill);
        };
        let staged = store.load_staged(id, staging.settled, base.len, base.head)?;
        spill.retired = staged.keys(id, store.format < keys::UNINDEXED_STAGING_FORMAT);
        let (start, mut address) = staged.chunks.first().map_or((base.len, base.head), |s| {
            (s.chunk.first_seq, s.chunk.layout.parent)
        });
        spill.chunk = OpenChunk::new(start, address);
        let mut calls = staged.calls()?.into_iter().peekable();
        let mut overlays = staged.overlays()?.into_iter().peekable();
        for (seq, (turn, check, record)) in (start..).zip(staged.records()) {
            let mut call = None;
            while let Some(c) = calls.next_if(|c| c.0 <= seq) {
                if c.0 == seq {
                    call = Some((c.1, c.2));
                }
            }
            let mut compaction = false;
            while let Some(o) = overlays.next_if(|o| o.seq <= seq) {
                compaction |= o.seq == seq;
            }
            let entry = (turn, check, record);
            spill.push_record(store, id, seq, address, entry, call, compaction)?;
            address = crate::codec::link(&address, record);
        }
        Ok(spill)
    }

    /// Chains `encoded` after the records so far.
    fn add(
        &mut self,
        store: &Store,
        id: &ConversationId,
        encoded: &[EncodedRecord<'_>],
    ) -> StoreResult<()> {
        for record in encoded {
            let seq = self.meta.len;
            let parent = self.meta.head;
            let address = record.address_after(&parent);
            let turn = self.meta.turns.next(record.event_type);
            let compaction = record.event_type == EventType::Compaction;
            if compaction && !self.overlay_directories {
                let entry = OverlayEntry {
                    turn,
                    record: &record.bytes,
                };
                self.writes.push((keys::overlay(id, seq), encode(&entry)));
            }
            if let (Some(span), Some(ranges)) = (record.span, &mut self.overlay_ranges) {
                ranges.add(seq, span, turn, record.timestamp);
            }
            let stats = &mut self.meta.kinds[record.event_type.index()];
            stats.count += 1;
            stats.bytes += record.size;
            for (hash, text) in &record.blobs {
                if self.seen.insert(*hash)
                    && !store.kv.contains(Keyspace::Blobs, hash.as_bytes())?
                {
                    self.add_body(
                        store,
                        Body::Blob {
                            hash: *hash,
                            bytes: text.as_bytes().to_vec(),
                        },
                    )?;
                }
            }
            let entry = (turn, address.check(), record.bytes.as_slice());
            let in_directory = compaction && self.overlay_directories;
            self.push_record(store, id, seq, parent, entry, record.call, in_directory)?;
            self.meta.len += 1;
            self.meta.head = address;
        }
        Ok(())
    }

    /// Adds record `seq` (turn, check, bytes), the child of `parent`, to the
    /// open chunk, first closing it if the record does not fit; `call` is
    /// its tool call, `compaction` whether it goes in the chunk's overlay
    /// directory.
    #[allow(clippy::too_many_arguments)] // the record and what indexes it
    fn push_record(
        &mut self,
        store: &Store,
        id: &ConversationId,
        seq: u64,
        parent: Address,
        (turn, check, record): (u64, [u8; 8], &[u8]),
        call: Option<(&str, &str)>,
        compaction: bool,
    ) -> StoreResult<()> {
        if self.chunk.is_full(record.len()) {
            self.close_chunk(store, id)?;
            self.chunk.restart(seq, parent);
        }
        let chunk = &mut self.chunk;
        if compaction {
            chunk.overlays.push((seq, chunk.entries.len()));
        }
        chunk.bytes.extend_from_slice(record);
        chunk.entries.push((turn, check, chunk.bytes.len()));
        if let Some((call_id, name)) = call {
            chunk.call_text.push_str(call_id);
            let id_end = chunk.call_text.len();
            chunk.call_text.push_str(name);
            chunk.calls.push((seq, id_end, chunk.call_text.len()));
        }
        Ok(())
    }

    /// Encodes the open chunk into a body to write, with its turn index
    /// entry and call directory in the batch.
    fn close_chunk(&mut self, store: &Store, id: &ConversationId) -> StoreResult<()> {
        let chunk = &self.chunk;
        if chunk.entries.is_empty() {
            return Ok(());
        }
        let mut start = 0;
        let entries: Vec<EntryRepr<'_>> = chunk
            .entries
            .iter()
            .map(|&(turn, check, end)| {
                let record = &chunk.bytes[start..end];
                start = end;
                EntryRepr {
                    turn,
                    check,
                    record,
                }
            })
            .collect();
        let calls = CallDirectory {
            calls: chunk.calls(),
        };
        let overlays = OverlayDirectory {
            overlays: chunk
                .overlays
                .iter()
                .map(|&(seq, i)| DirectoryOverlay {
                    seq,
                    turn: entries[i].turn,
                    record: entries[i].record,
                })
                .collect(),
        };
        let at = (Space::Settled, id, chunk.first_seq);
        self.writes
            .extend(chunk_index(at, &entries, &calls, &overlays, true));
        let body = Body::Chunk {
            key: keys::chunk(Space::Settled, id, chunk.first_seq),
            records: entries.len() as u64,
            bytes: encode(&ChunkRepr {
                parent: chunk.parent,
                entries,
            }),
        };
        self.chunk.restart(0, Address::ROOT);
        self.add_body(store, body)
    }

    fn add_body(&mut self, store: &Store, body: Body) -> StoreResult<()> {
        self.body_bytes += body.bytes().len();
        self.bodies.push(body);
        if self.body_bytes >= WRITE_BYTES {
            self.write_bodies(store)?;
        }
        Ok(())
    }

    /// Writes the waiting bodies to the last bulk file (a new one if it is
    /// full) and adds their references to the batch.
    fn write_bodies(&mut self, store: &Store) -> StoreResult<()> {
        if self.bodies.is_empty() {
            return Ok(());
        }
        let total = self.body_bytes as u64;
        let segments = segment_files(store)?;
        let fits = self
            .files
            .last()
            .is_some_and(|f| f.len == 0 || f.len + total <= segments.max_bytes);
        if !fits {
            self.files.push(segments.bulk_file()?);
        }
        let file = self.files.last_mut().expect("pushed above");
        let slices: Vec<&[u8]> = self.bodies.iter().map(Body::bytes).collect();
        let refs = file.write(&slices)?;
        for (body, at) in self.bodies.drain(..).zip(refs) {
            match body {
                Body::Chunk { key, records, .. } => {
                    let value = encode(&ChunkValue::Segment { at, records });
                    self.writes.push((key, value));
                }
                Body::Blob { hash, .. } => self.blobs.push((hash, at)),
            }
        }
        self.body_bytes = 0;
        Ok(())
    }

    /// Closes the open chunk, writes every body and syncs the files.
    fn close(&mut self, store: &Store, id: &ConversationId) -> StoreResult<()> {
        self.close_chunk(store, id)?;
        self.write_bodies(store)?;
        for file in &self.files {
            file.sync()?;
        }
        Ok(())
    }
}

/// A chunk being assembled across pushes: its records end to end, each
/// entry's turn, check and end, and its tool calls.
struct OpenChunk {
    first_seq: u64,
    parent: Address,
    bytes: Vec<u8>,
    entries: Vec<(u64, [u8; 8], usize)>,
    /// The tool calls: seq, and where their id and name end in
    /// `call_text` (each starts where the one before it ends).
    calls: Vec<(u64, usize, usize)>,
    call_text: String,
    /// The compactions: seq and index among the entries.
    overlays: Vec<(u64, usize)>,
}

impl OpenChunk {
    fn new(first_seq: u64, parent: Address) -> Self {
        OpenChunk {
            first_seq,
            parent,
            bytes: Vec::new(),
            entries: Vec::new(),
            calls: Vec::new(),
            call_text: String::new(),
            overlays: Vec::new(),
        }
    }

    /// Empties it for the next chunk, keeping its buffers (a bulk append
    /// fills thousands of chunks of the same size).
    fn restart(&mut self, first_seq: u64, parent: Address) {
        self.first_seq = first_seq;
        self.parent = parent;
        self.bytes.clear();
        self.entries.clear();
        self.calls.clear();
        self.call_text.clear();
        self.overlays.clear();
    }

    /// The tool calls as the chunk's call directory lists them.
    fn calls(&self) -> Vec<(u64, &str, &str)> {
        let mut start = 0;
        self.calls
            .iter()
            .map(|&(seq, id_end, name_end)| {
                let call = (
                    seq,
                    &self.call_text[start..id_end],
                    &self.call_text[id_end..name_end],
                );
                start = name_end;
                call
            })
            .collect()
    }

    /// Whether a record of `next` bytes must start the next chunk: as
    /// `append.rs` groups records.
    fn is_full(&self, next: usize) -> bool {
        let entries = self.entries.len();
        entries > 0 && (entries >= CHUNK_MAX_ENTRIES || self.bytes.len() + next > CHUNK_MAX_BYTES)
    }
}

/// The segment files a bulk append writes to (it spills only when the
/// backend has them).
fn segment_files(store: &Store) -> StoreResult<&crate::backend::Segments> {
    store.segments().ok_or_else(|| StoreError::Corrupt {
        what: "a bulk append wrote to segment files this database does not have".to_owned(),
    })
}

/// Commits cut short on purpose, for tests (feature `testing`): see
/// `testing::interrupt_bulk_commits`.
pub(crate) mod interrupt {
    use crate::error::{StoreError, StoreResult};

    #[cfg(feature = "testing")]
    thread_local! {
        /// 0: commits run; 1: a commit fails before its last batch and
        /// takes back what it wrote; 2: it fails as a killed process
        /// would, taking back nothing.
        pub(crate) static MODE: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
    }

    fn mode() -> u8 {
        #[cfg(feature = "testing")]
        return MODE.with(std::cell::Cell::get);
        #[cfg(not(feature = "testing"))]
        0
    }

    /// An error where a commit is to be cut short.
    pub(crate) fn check() -> StoreResult<()> {
        match mode() {
            0 => Ok(()),
            _ => Err(StoreError::Io(std::io::Error::other(
                "the commit was cut short (testing)",
            ))),
        }
    }

    /// Whether a commit cut short is to leave what it wrote.
    pub(crate) fn as_a_kill() -> bool {
        mode() == 2
    }
}

/// Events a spill encodes at a time while it writes the part before.
const SPILL_PART: usize = 2048;

/// `events` encoded for a bulk append that holds `count` events, the first
/// being the `offset`th of the push (an event too large is named by its
/// index among all the bulk append's events).
fn encode_at<'e>(
    store: &Store,
    count: u64,
    events: &'e [Event],
    offset: usize,
) -> StoreResult<Vec<EncodedRecord<'e>>> {
    encode_all(events, store.max_event_bytes(), store.layout()).map_err(|e| match e {
        StoreError::EventTooLarge { index, size, limit } => StoreError::EventTooLarge {
            index: index + offset + count as usize,
            size,
            limit,
        },
        other => other,
    })
}
