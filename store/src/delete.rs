//! Deleting conversations for good: [`Store::delete`].
//!
//! A deletion is decided by one conditional batch: each conversation's
//! metadata (`C`) and name (`N`) go, and a tombstone (`D` id: its name,
//! length, the time and, once known, the segment files holding its bodies)
//! takes their place. From then on no reader finds the conversation and no
//! write to it applies (writes are conditional on its metadata). The rest
//! is removal, which the next open finishes if a process dies during it
//! ([`Store::finish_deletions`]):
//!
//! 1. the blobs only the deleted records and views refer to (their hashes
//!    looked for in every remaining conversation's records and views),
//! 2. every key under the conversations' ids, in groups,
//! 3. the segment files that held their bodies: what other conversations
//!    still refer to moves to another file, then the file goes,
//! 4. the tombstones, last.
//!
//! Blobs are content-addressed and shared: a text another conversation
//! also holds stays. A database server (PostgreSQL) shares the database
//! with other processes' appends, which take no lock of this one: there
//! the keys go but blobs stay (an append elsewhere may have found one
//! stored and relied on it).

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::backend::frames::Frame;
use crate::backend::{frames, Batch, Condition, Keyspace, SegmentRef};
use crate::bulk::remove_in_groups;
use crate::codec::{decode, decode_record, encode, BlobValue, ChunkValue, TextRepr};
use crate::error::{StoreError, StoreResult};
use crate::event::Timestamp;
use crate::fork::ForkPoint;
use crate::hash::BlobHash;
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::log::Located;
use crate::store::Store;

/// What a deleted conversation's tombstone holds until its keys are gone.
#[derive(Debug, Serialize, Deserialize)]
struct Tombstone {
    name: Option<String>,
    len: u64,
    deleted: Timestamp,
    /// The segment files that held the deleted bodies, once known.
    files: Vec<u32>,
}

/// A conversation [`Store::delete`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deleted {
    /// Its id.
    pub id: ConversationId,
    /// Its name, if it had one.
    pub name: Option<String>,
    /// Its length (a fork's counts the records it shared).
    pub len: u64,
    /// The conversation it was forked from, if it was a fork...
    pub parent: Option<ConversationId>,
    /// ...and how many of its records were its parent's (they stay).
    pub shared: u64,
}

/// What [`Store::delete`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deletion {
    /// The conversations: the one asked for first, then its forks (parents
    /// before their forks).
    pub conversations: Vec<Deleted>,
    /// Keys removed, besides blobs.
    pub keys: u64,
    /// Blobs (long texts) removed: those no remaining record or view
    /// holds.
    pub blobs: u64,
    /// Segment files removed (the bodies other conversations still held
    /// moved to another file first)...
    pub segment_files: u64,
    /// ...and the bytes the segment files took less afterwards.
    pub segment_bytes: u64,
    /// What could not be reclaimed, and why (a damaged segment file stays
    /// as it is; a failed write leaves the rest to the next open): the
    /// conversations are deleted all the same.
    pub problems: Vec<String>,
    /// Whether the conversations' data keys were deleted from the keyring
    /// (an encrypted database): every copy of their records is unreadable.
    pub keys_shredded: bool,
}

impl Store {
    /// Deletes conversation `id` for good: its records, everything stored
    /// beside them, its views, and the blobs and segment files nothing
    /// else refers to. A conversation with forks is refused
    /// ([`StoreError::HasForks`]) unless `with_forks`, which deletes them
    /// too (a fork reads its parent's records: to keep one, copy it to a
    /// database first, `convstore copy`).
    ///
    /// Once this returns the deletion is durable; a process killed during
    /// it leaves either the conversation whole or a deletion that the next
    /// open of the database finishes.
    pub fn delete(&self, id: &ConversationId, with_forks: bool) -> StoreResult<Deletion> {
        let guard = self.lock_writes();
        let deleted = self.decide_deletion(id, with_forks)?;
        let mut deletion = self.purge().unwrap_or_else(|e| Deletion {
            problems: vec![format!(
                "{e}; the next open of the database finishes removing what is left"
            )],
            ..Deletion::default()
        });
        drop(guard);
        deletion.conversations = deleted;
        // Each one's key deleted (else a problem above says the deletion
        // is left to the next open).
        deletion.keys_shredded = self.is_encrypted()
            && deletion.problems.is_empty()
            && deletion
                .conversations
                .iter()
                .all(|d| self.is_shredded(&d.id).unwrap_or(false));
        Ok(deletion)
    }

    /// The batch that deletes `id` (and its forks): metadata and names
    /// replaced by tombstones, durably. Called under the write lock.
    pub(crate) fn decide_deletion(
        &self,
        id: &ConversationId,
        with_forks: bool,
    ) -> StoreResult<Vec<Deleted>> {
        let mut doomed = vec![*id];
        doomed.extend(self.forks_of(id)?);
        if doomed.len() > 1 && !with_forks {
            let label = |id: &ConversationId| -> StoreResult<String> {
                Ok(self.meta(id)?.name.unwrap_or_else(|| id.hex()))
            };
            return Err(StoreError::HasForks {
                conversation: label(id)?,
                forks: doomed[1..].iter().map(label).collect::<StoreResult<_>>()?,
            });
        }
        let mut batch = Batch::new();
        let mut conditions = Vec::new();
        let mut deleted = Vec::new();
        let mut records = 0;
        for d in &doomed {
            let (meta, raw) = self.meta_and_bytes(d)?;
            conditions.push(Condition {
                key: keys::conversation(d),
                expected: Some(raw),
            });
            batch.delete(keys::conversation(d));
            if let Some(name) = &meta.name {
                batch.delete(keys::name(name));
            }
            let tombstone = Tombstone {
                name: meta.name.clone(),
                len: meta.len,
                deleted: Timestamp::now(),
                files: Vec::new(),
            };
            batch.put(keys::deleted(d), encode(&tombstone));
            records += meta.len;
            let point = self.fork_point(d)?;
            deleted.push(Deleted {
                id: *d,
                name: meta.name,
                len: meta.len,
                parent: point.map(|p| p.parent),
                shared: point.map_or(0, |p| p.at),
            });
        }
        self.kv.forgetting(doomed.len() as u64, records)?;
        if !self.kv.apply_if(&conditions, batch)? {
            return Err(StoreError::Conflict {
                what: format!("conversation {id} changed while it was being deleted"),
            });
        }
        self.sync()?;
        Ok(deleted)
    }

    /// The forks of `id`, and theirs, parents before their forks: what
    /// [`Store::delete`] with `with_forks` deletes besides `id`.
    pub fn forks_of(&self, id: &ConversationId) -> StoreResult<Vec<ConversationId>> {
        let mut children: Vec<(ConversationId, ConversationId)> = Vec::new();
        for pair in self.scan_prefix([keys::LINEAGE]) {
            let (key, value) = pair?;
            let Some(child) = keys::conversation_of(&key) else {
                continue;
            };
            let point: ForkPoint = decode(&value, &format!("lineage of conversation {child}"))?;
            children.push((point.parent, child));
        }
        let mut out: Vec<ConversationId> = Vec::new();
        let mut next = 0;
        let mut parents = vec![*id];
        while let Some(parent) = parents.get(next).copied() {
            next += 1;
            let mut forks: Vec<ConversationId> = children
                .iter()
                .filter(|(p, child)| *p == parent && *child != *id && !out.contains(child))
                .map(|&(_, child)| child)
                .collect();
            // Siblings in the order they were made (their ids are random).
            forks.sort_by_cached_key(|fork| (self.meta(fork).ok().map(|m| m.created), *fork));
            parents.extend(&forks);
            out.extend(forks);
        }
        Ok(out)
    }

    /// Finishes deletions a process left unfinished (killed after the
    /// batch that decided them): run when a database is opened, before
    /// any write. Best effort: a deletion that cannot be finished now (a
    /// full disk) stays decided, its conversations unseen, and the next
    /// open tries again.
    pub(crate) fn finish_deletions(&self) {
        if self.scan_prefix([keys::DELETED]).next().is_some() {
            let _ = self.purge();
        }
    }

    /// Removes what the tombstoned conversations left (see the module
    /// documentation), the tombstones last. Called under the write lock.
    fn purge(&self) -> StoreResult<Deletion> {
        let mut doomed = Vec::new();
        let mut files = BTreeSet::new();
        for pair in self.scan_prefix([keys::DELETED]) {
            let (key, value) = pair?;
            let Some(id) = keys::conversation_of(&key) else {
                continue;
            };
            let tombstone: Tombstone = decode(&value, &format!("tombstone of {id}"))?;
            files.extend(tombstone.files.iter().copied());
            doomed.push((id, tombstone));
        }
        let ids: Vec<ConversationId> = doomed.iter().map(|(id, _)| *id).collect();
        let mut deletion = Deletion::default();
        // 1. What the deleted records and views refer to: blobs, of which
        // those nothing else holds go, and segment files.
        let mut blobs = HashSet::new();
        // (An encrypted database has neither, and its deleted
        // conversations' keys are gone already.)
        for id in ids.iter().filter(|_| !self.is_encrypted()) {
            // What cannot be read of them keeps its blobs.
            self.own_references(id, &mut blobs, &mut files)?;
        }
        let mut dead = Vec::new();
        if !self.kv.is_server() && !blobs.is_empty() {
            if !self.keep_referenced(&ids, &mut blobs)? {
                deletion.problems.push(
                    "some records of other conversations cannot be read (`convstore verify` \
                     names them): no long text was removed"
                        .to_owned(),
                );
            }
            for hash in blobs {
                if let Some(value) = self.kv.get(Keyspace::Blobs, hash.as_bytes())? {
                    if self.format >= 2 {
                        if let Ok(BlobValue::Segment(at)) = decode::<BlobValue>(&value, "blob") {
                            files.insert(at.file);
                        }
                    }
                    dead.push(hash);
                }
            }
        }
        // The files go into the tombstones before the keys that name them
        // go: a deletion finished by a later open still empties them.
        if !files.is_empty() {
            let mut batch = Batch::new();
            for (id, tombstone) in &mut doomed {
                tombstone.files = files.iter().copied().collect();
                batch.put(keys::deleted(id), encode(&*tombstone));
            }
            self.kv.apply(batch)?;
            self.sync()?;
        }
        if !dead.is_empty() {
            self.sweeping_blobs();
            deletion.blobs = remove_in_groups(
                self,
                dead.iter()
                    .map(|hash| Ok((Keyspace::Blobs, hash.as_bytes().to_vec()))),
            )?;
        }
        // 2. Every key under their ids.
        for id in &ids {
            for tag in keys::CONVERSATION_TAGS {
                let mut prefix = vec![*tag];
                prefix.extend_from_slice(id.as_bytes());
                let keys = self
                    .scan_keys(prefix)
                    .map(|key| key.map(|key| (Keyspace::Main, key.to_vec())));
                deletion.keys += remove_in_groups(self, keys)?;
            }
        }
        self.sync()?;
        // 3. The segment files that held their bodies: the bodies other
        // conversations still refer to move to another file, then the file
        // goes.
        if let Some(segments) = self.segments().filter(|_| self.format >= 2) {
            let before = segments.size_on_disk();
            // No body moves into a file still to be emptied: it would not
            // be among the bodies found below, and would go with it.
            for &number in &files {
                segments.retire(number);
            }
            let mut held = self.bodies_in(&files)?;
            for number in files {
                let bodies = held.remove(&number).unwrap_or_default();
                match self.empty_segment_file(number, bodies) {
                    Ok(removed) => deletion.segment_files += u64::from(removed),
                    // A body that cannot be read stays where it is, with
                    // its file.
                    Err(StoreError::Corrupt { what }) => deletion.problems.push(format!(
                        "segment file {number:08} was not emptied: {what} (`convstore verify` \
                         names what it holds; `convstore salvage` copies out what can be read)"
                    )),
                    Err(e) => return Err(e),
                }
            }
            deletion.segment_bytes = before.saturating_sub(segments.size_on_disk());
        }
        // 4. The tombstones.
        let mut batch = Batch::new();
        for id in &ids {
            batch.delete(keys::deleted(id));
        }
        self.kv.apply(batch)?;
        self.sync()?;
        self.overlay_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(id, _), _| !ids.contains(id));
        self.kv.forgotten();
        Ok(deletion)
    }

    /// The bodies in segment files `files` that chunks and blobs refer
    /// to, by file: one read of every chunk and blob reference.
    fn bodies_in(&self, files: &BTreeSet<u32>) -> StoreResult<HashMap<u32, Vec<Held>>> {
        let mut held: HashMap<u32, Vec<Held>> = HashMap::new();
        if files.is_empty() {
            return Ok(held);
        }
        for tag in [keys::CHUNK, Space::Staged.chunk_tag()] {
            for pair in self.scan_prefix([tag]) {
                let (key, value) = pair?;
                let Some(id) = keys::conversation_of(&key) else {
                    continue;
                };
                if let Ok(Located::Segment { at, records, .. }) =
                    Located::new(self.format, &id, &key, value)
                {
                    if files.contains(&at.file) {
                        held.entry(at.file).or_default().push(Held {
                            key: key.to_vec(),
                            at,
                            records: Some(records),
                        });
                    }
                }
            }
        }
        for pair in self
            .kv
            .scan(Keyspace::Blobs, crate::backend::prefixed(Vec::new()), false)
        {
            let (hash, value) = pair?;
            if hash.len() == 32 {
                if let Ok(BlobValue::Segment(at)) = decode::<BlobValue>(&value, "blob") {
                    if files.contains(&at.file) {
                        held.entry(at.file).or_default().push(Held {
                            key: hash.to_vec(),
                            at,
                            records: None,
                        });
                    }
                }
            }
        }
        Ok(held)
    }

    /// Moves `bodies` (those chunks and blobs still refer to) out of
    /// segment file `number`, retired, then removes it; returns whether it
    /// was there. Called under the write lock.
    fn empty_segment_file(&self, number: u32, mut moving: Vec<Held>) -> StoreResult<bool> {
        let Some(segments) = self.segments() else {
            return Ok(false);
        };
        if !moving.is_empty() {
            // In groups of about 16 MiB: each group's bodies written (and
            // synced) to the current file, then its references rewritten.
            while !moving.is_empty() {
                let mut take = 0;
                let mut bytes = 0;
                while take < moving.len() && (take == 0 || bytes < MOVE_BYTES) {
                    bytes += moving[take].at.len;
                    take += 1;
                }
                let group: Vec<Held> = moving.drain(..take).collect();
                let mut bodies = Vec::with_capacity(group.len());
                for Held { key, at, records } in &group {
                    let what = || match (records, keys::conversation_of(key), keys::key_seq(key)) {
                        (Some(_), Some(id), Some(seq)) => {
                            format!("conversation {id}: chunk at seq {seq}")
                        }
                        _ => format!("long text {}", crate::hash::hex(key)),
                    };
                    bodies.push(segments.read(at, &what)?);
                }
                let frames: Vec<Frame<'_>> = group
                    .iter()
                    .map(|Held { key, records, .. }| match records {
                        Some(records) => Frame::chunk(key, *records),
                        None => Frame::blob(key),
                    })
                    .collect();
                let parts: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
                let places = frames::write(segments, &frames, &parts)?;
                let mut batch = Batch::new();
                for (Held { key, at, records }, to) in group.iter().zip(places) {
                    match records {
                        Some(records) => batch.put(
                            key.clone(),
                            encode(&ChunkValue::Segment {
                                at: to,
                                records: *records,
                            }),
                        ),
                        None => batch.insert(
                            Keyspace::Blobs,
                            key.clone(),
                            encode(&BlobValue::Segment(to)),
                        ),
                    }
                    segments.moved(at, to);
                }
                self.kv.apply(batch)?;
            }
            self.sync()?;
        }
        let mut batch = Batch::new();
        batch.delete(keys::segment_file(number));
        batch.remove(Keyspace::Blobs, keys::segment_file(number));
        self.kv.apply(batch)?;
        self.sync()?;
        Ok(segments.remove(&[number])? > 0)
    }

    /// Adds the blobs `id`'s own records and views refer to to `blobs`,
    /// and the segment files its chunks are in to `files`. A chunk that
    /// cannot be read is passed over (its blobs stay).
    fn own_references(
        &self,
        id: &ConversationId,
        blobs: &mut HashSet<BlobHash>,
        files: &mut BTreeSet<u32>,
    ) -> StoreResult<bool> {
        let mut complete = true;
        for space in [Space::Settled, Space::Staged] {
            for pair in self.scan_prefix(keys::chunks(space, id)) {
                let (key, value) = pair?;
                let Ok(located) = Located::new(self.format, id, &key, value) else {
                    complete = false;
                    continue;
                };
                if let Located::Segment { at, .. } = &located {
                    files.insert(at.file);
                }
                match located.into_loaded(self, id) {
                    Ok(chunk) => {
                        for i in 0..chunk.layout.entries.len() {
                            complete &= add_blobs(chunk.record_bytes(i), blobs);
                        }
                    }
                    Err(_) => complete = false,
                }
            }
        }
        let mut blocks = vec![keys::VIEW_BLOCK];
        blocks.extend_from_slice(id.as_bytes());
        for pair in self.scan_prefix(blocks) {
            match crate::views::block_records(&pair?.1) {
                Ok(records) => {
                    for record in records {
                        complete &= add_blobs(record, blobs);
                    }
                }
                Err(_) => complete = false,
            }
        }
        Ok(complete)
    }

    /// Removes from `candidates` every blob a conversation other than
    /// `doomed` refers to (in its records or its views); if a record or
    /// view cannot be read, every candidate (and returns `false`).
    pub(crate) fn keep_referenced(
        &self,
        doomed: &[ConversationId],
        candidates: &mut HashSet<BlobHash>,
    ) -> StoreResult<bool> {
        let mut live = Vec::new();
        for pair in self.scan_prefix([keys::CONVERSATION]) {
            let (key, _) = pair?;
            if let Some(id) = keys::conversation_of(&key).filter(|id| !doomed.contains(id)) {
                live.push(id);
            }
        }
        let mut found = HashSet::new();
        let mut files = BTreeSet::new();
        for id in &live {
            if candidates.is_empty() {
                break;
            }
            found.clear();
            if !self.own_references(id, &mut found, &mut files)? {
                candidates.clear();
                return Ok(false);
            }
            candidates.retain(|hash| !found.contains(hash));
        }
        Ok(true)
    }
}

/// A body in a segment file that a chunk (`records` of them) or a blob
/// refers to, under `key`.
struct Held {
    key: Vec<u8>,
    at: SegmentRef,
    records: Option<u64>,
}

/// Bytes of bodies moved out of a segment file per group, about.
const MOVE_BYTES: u64 = 16 << 20;

/// Adds the blobs record `bytes` refers to to `blobs`; `false` if it does
/// not decode.
fn add_blobs(bytes: &[u8], blobs: &mut HashSet<BlobHash>) -> bool {
    let Ok(record) = decode_record(bytes) else {
        return false;
    };
    for text in record.texts() {
        if let TextRepr::Blob(blob) = text {
            blobs.insert(blob.hash);
        }
    }
    true
}
