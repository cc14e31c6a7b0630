//! Dropping many records' payloads at once, for a retention policy:
//! [`Store::drop_payloads`].
//!
//! Each record chosen is redacted as `redact` redacts one (`redact.rs`):
//! its main text replaced by the text's hash and length, the record kept
//! in an envelope with its address, so `verify` still proves every other
//! record untouched and names each record dropped (with when and why). No
//! event is appended: a retention pass leaves the conversation's length,
//! head and view as they were (the envelopes are its audit trail).
//!
//! The pass goes chunk by chunk under the write lock. The rewritten chunks
//! are committed in batches of about 16 MiB, each with a pending key
//! (`Y` id seq) naming the old bodies in the segment files and the blobs
//! the batch stopped referring to. Then, in order: the stored view blocks
//! showing a dropped text are rewritten (for every redacted record of the
//! log, so the step can be run again from the log alone); the blobs
//! nothing refers to any more are removed; the old bodies' blocks are
//! given back to the file system (holes punched); the pending keys go.
//! A process killed anywhere leaves each record whole or dropped, and the
//! next open finishes what the pending keys name.

use std::collections::{BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use crate::append::Writes;
use crate::backend::{Batch, Keyspace, SegmentRef};
use crate::codec::{
    decode, decode_record, encode, encode_redacted, envelope, link, BlobValue, ChunkRepr, Envelope,
    TextRepr,
};
use crate::error::StoreResult;
use crate::event::{EventType, Timestamp};
use crate::hash::BlobHash;
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::log::Located;
use crate::redact::{main_field, redact_field, slot, RedactField};
use crate::store::Store;

/// What [`Store::drop_payloads`] dropped (or, dry, would drop) from one
/// conversation's own records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DroppedPayloads {
    /// Records whose payload went.
    pub records: u64,
    /// The bytes of those payloads.
    pub bytes: u64,
    /// The first and last such record.
    pub seqs: Option<(u64, u64)>,
    /// Long texts (blobs) removed, nothing else referring to them (0 in a
    /// dry run: [`Store::blobs_removed_together`] counts them from
    /// `would_drop`, for one conversation or several).
    pub blobs_removed: u64,
    /// Stored view blocks rewritten (0 in a dry run).
    pub view_blocks: u64,
    /// Why the pass could not finish removing what the dropped payloads
    /// left (old segment bodies, long texts, view blocks), if it could
    /// not: the records are dropped all the same, and the next open tries
    /// again ([`Store::pending_purges`]).
    pub unfinished: Option<String>,
    /// In a dry run, what the pass would drop, for
    /// [`Store::blobs_removed_together`].
    pub would_drop: Option<WouldDrop>,
}

/// The records a dry run of [`Store::drop_payloads`] would drop from one
/// conversation, and the long texts they refer to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WouldDrop {
    /// Their seqs, sorted.
    seqs: Vec<u64>,
    /// The blobs their dropped texts are.
    blobs: HashSet<BlobHash>,
}

/// A retention pass decided and not finished (`Y` id seq).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Pending {
    /// Bodies in the segment files the rewritten chunks (and removed
    /// blobs) left.
    scrub: Vec<SegmentRef>,
    /// Blobs the dropped payloads referred to: removed unless something
    /// else refers to them.
    blobs: Vec<[u8; 32]>,
}

/// Rewritten chunk bytes committed per batch, about.
const BATCH_BYTES: usize = 16 << 20;

/// Which records a retention pass drops: given a record's seq, time and
/// type, whether its payload goes.
pub type Select<'a> = dyn Fn(u64, Timestamp, EventType) -> bool + Sync + 'a;

impl Store {
    /// Drops the payload (the main text: `text`, `arguments`, `content` or
    /// `payload`) of every record of `id`'s own log (not those a fork
    /// shares with its parent) that `select` picks, among those that have
    /// one and are not redacted already; `config` events (settings, and
    /// the audit trail of redactions) and compactions keep theirs. Each
    /// record is redacted as [`Store::redact`] does (the reason given),
    /// without a redaction event: the log's length, head and every
    /// record's address stay.
    ///
    /// `expected` names conversations and the lengths `select` was
    /// planned for: if one differs under the write lock, nothing is done
    /// and `None` is returned (plan again). `before_write` is called once,
    /// before the first write, if there is anything to drop. A dry run
    /// only counts.
    pub fn drop_payloads(
        &self,
        id: &ConversationId,
        expected: &[(ConversationId, u64)],
        select: &Select<'_>,
        reason: &str,
        dry_run: bool,
        before_write: &mut dyn FnMut() -> StoreResult<()>,
    ) -> StoreResult<Option<DroppedPayloads>> {
        if self.kv.is_server() && !dry_run {
            return Err(crate::StoreError::Unsupported {
                what: "dropping payloads (gc)".to_owned(),
            });
        }
        let _turn = self.lock_conversation(id);
        let guard = self.lock_writes();
        for (other, len) in expected {
            if self.meta(other)?.len != *len {
                return Ok(None);
            }
        }
        let len = self.meta(id)?.len;
        let start = self.fork_point(id)?.map_or(0, |p| p.at);
        let time = Timestamp::now();
        let mut out = DroppedPayloads::default();
        // Each dropped record's seq, and its text's hash (for the view
        // blocks) and length; a record both settled and staged is in both.
        let mut dropped: Vec<(u64, BlobHash, u64)> = Vec::new();
        let mut batch = Pass::new(self, time, 0);
        // A dry run's blobs: those that would go unless referred to.
        let mut batch_blobs: HashSet<BlobHash> = HashSet::new();
        let mut wrote = false;
        for space in [Space::Settled, Space::Staged] {
            let found: Vec<_> = self
                .scan_prefix(keys::chunks(space, id))
                .collect::<StoreResult<_>>()?;
            for (key, value) in found {
                let located = Located::new(self.format, id, &key, value)?;
                let at = match &located {
                    Located::Segment { at, .. } => Some(*at),
                    Located::Loaded(_) => None,
                };
                let chunk = located.into_loaded(self, id)?;
                let repr: ChunkRepr<'_> = decode(&chunk.bytes, "chunk")?;
                let mut address = repr.parent;
                let mut stored: Vec<Option<Vec<u8>>> = vec![None; repr.entries.len()];
                for (i, entry) in repr.entries.iter().enumerate() {
                    address = link(&address, entry.record);
                    let seq = chunk.first_seq + i as u64;
                    if seq < start || seq >= len || envelope(entry.record)?.is_some() {
                        continue;
                    }
                    let record = decode_record(entry.record)?;
                    let kind = record.body.event_type();
                    let Some(field) = main_field(&record).filter(|f| *f != RedactField::Delta)
                    else {
                        continue;
                    };
                    if !select(seq, record.timestamp, kind) {
                        continue;
                    }
                    if reads_as_stripped(&mut record.clone(), field) {
                        continue;
                    }
                    let Ok((redacted, text, was_blob)) = redact_field(&record, field) else {
                        continue;
                    };
                    dropped.push((seq, text.hash, text.len));
                    if was_blob {
                        batch.pending.blobs.push(*text.hash.as_bytes());
                        if dry_run {
                            batch_blobs.insert(text.hash);
                        }
                    }
                    let inner = encode_redacted(&redacted, entry.record);
                    stored[i] = Some(
                        Envelope {
                            address,
                            time,
                            by: *id.as_bytes(),
                            reason,
                            record: &inner,
                        }
                        .stored(),
                    );
                }
                if stored.iter().all(Option::is_none) {
                    continue;
                }
                let mut entries = repr.entries.clone();
                for (entry, new) in entries.iter_mut().zip(&stored) {
                    if let Some(new) = new {
                        entry.record = new;
                    }
                }
                let rewritten = ChunkRepr {
                    parent: repr.parent,
                    entries,
                };
                let body = encode(&rewritten);
                batch.bytes += body.len();
                batch
                    .writes
                    .push_chunk(key.to_vec(), body, rewritten.entries.len() as u64);
                if at.is_some() {
                    batch.writes.keep_in_segments();
                }
                batch.pending.scrub.extend(at);
                batch.first.get_or_insert(chunk.first_seq);
                if batch.bytes >= BATCH_BYTES {
                    batch = batch.commit(self, id, dry_run, &mut wrote, before_write)?;
                }
            }
        }
        batch.commit(self, id, dry_run, &mut wrote, before_write)?;
        dropped.sort_unstable_by_key(|d| d.0);
        dropped.dedup_by_key(|d| d.0);
        out.records = dropped.len() as u64;
        out.bytes = dropped.iter().map(|d| d.2).sum();
        out.seqs = dropped.first().zip(dropped.last()).map(|(a, b)| (a.0, b.0));
        if dry_run {
            out.would_drop = Some(WouldDrop {
                seqs: dropped.iter().map(|d| d.0).collect(),
                blobs: batch_blobs,
            });
            return Ok(Some(out));
        }
        if !wrote {
            return Ok(Some(out));
        }
        // The records are dropped: from here on a failure (a full disk, a
        // file that cannot be written) leaves the rest to the next open.
        let dropped: Vec<(u64, BlobHash)> = dropped.iter().map(|d| (d.0, d.1)).collect();
        let finished = self.redact_views(id, &dropped).and_then(|blocks| {
            out.view_blocks = blocks;
            self.finish_drops(id)
        });
        match finished {
            Ok(blobs) => out.blobs_removed = blobs,
            Err(e) => out.unfinished = Some(e.to_string()),
        }
        drop(guard);
        Ok(Some(out))
    }

    /// Rewrites every stored view block of `id` (and of the forks sharing
    /// its records) that shows the text of a record in `dropped` (seq and
    /// text hash, sorted), as the record now reads. Returns the blocks
    /// rewritten. Called under the write lock.
    fn redact_views(&self, id: &ConversationId, dropped: &[(u64, BlobHash)]) -> StoreResult<u64> {
        if dropped.is_empty() {
            return Ok(0);
        }
        let mut holders = vec![(*id, u64::MAX)];
        holders.extend(self.sharing_forks(id)?);
        let mut rewritten = 0;
        for (holder, shared) in holders {
            let redact = |seq: u64, injected: bool, bytes: &[u8]| -> Option<Vec<u8>> {
                if injected || seq >= shared {
                    return None;
                }
                let at = dropped.partition_point(|d| d.0 < seq);
                let hashes: Vec<BlobHash> = dropped[at..]
                    .iter()
                    .take_while(|d| d.0 == seq)
                    .map(|d| d.1)
                    .collect();
                if hashes.is_empty() {
                    return None;
                }
                let record = decode_record(bytes).ok()?;
                let field = main_field(&record)?;
                let (redacted, shown, _) = redact_field(&record, field).ok()?;
                hashes
                    .contains(&shown.hash)
                    .then(|| encode_redacted(&redacted, bytes))
            };
            let mut batch = Batch::new();
            rewritten += self.redact_view_blocks(&holder, &mut batch, &redact)?;
            if !batch.is_empty() {
                self.kv.apply(batch)?;
            }
        }
        self.sync()?;
        Ok(rewritten)
    }

    /// How many long texts each of `passes` (conversations and what a dry
    /// run of [`Store::drop_payloads`] said it would drop from each) would
    /// remove, were they run in that order: a text goes with the last pass
    /// that drops a record referring to it, once no record left (of any
    /// conversation) and no view of a conversation not cleaned refers to
    /// it. Counts nothing if a record or view of another conversation
    /// cannot be read.
    pub fn blobs_removed_together(
        &self,
        passes: &[(ConversationId, &WouldDrop)],
    ) -> StoreResult<Vec<u64>> {
        let mut counts = vec![0; passes.len()];
        let mut left: HashSet<BlobHash> = passes
            .iter()
            .flat_map(|(_, w)| w.blobs.iter().copied())
            .collect();
        let cleaned: Vec<ConversationId> = passes.iter().map(|(id, _)| *id).collect();
        if left.is_empty() || !self.keep_referenced(&cleaned, &mut left)? {
            return Ok(counts);
        }
        // The records the passes keep, each conversation's own.
        for (id, would) in passes {
            for space in [Space::Settled, Space::Staged] {
                for pair in self.scan_prefix(keys::chunks(space, id)) {
                    let (key, value) = pair?;
                    let chunk =
                        Located::new(self.format, id, &key, value)?.into_loaded(self, id)?;
                    for i in 0..chunk.layout.entries.len() {
                        let seq = chunk.first_seq + i as u64;
                        if would.seqs.binary_search(&seq).is_ok() {
                            continue;
                        }
                        for text in decode_record(chunk.record_bytes(i))?.texts() {
                            if let TextRepr::Blob(blob) = text {
                                left.remove(&blob.hash);
                            }
                        }
                    }
                }
            }
        }
        for blob in left {
            if let Some(last) = passes.iter().rposition(|(_, w)| w.blobs.contains(&blob)) {
                counts[last] += 1;
            }
        }
        Ok(counts)
    }

    /// How many retention batches and redactions still have texts to
    /// remove from disk (their records are dropped or redacted; a process
    /// stopped before it finished, or could not write the files): the
    /// next open tries again.
    pub fn pending_purges(&self) -> StoreResult<u64> {
        let mut count = 0;
        for tag in [keys::COLLECTING, keys::REDACTING] {
            for pair in self.scan_prefix([tag]) {
                pair?;
                count += 1;
            }
        }
        Ok(count)
    }

    /// Every fork (of a fork...) of `id` and how many of `id`'s records it
    /// shares (its records below that are `id`'s).
    pub fn sharing_forks(&self, id: &ConversationId) -> StoreResult<Vec<(ConversationId, u64)>> {
        let mut out = Vec::new();
        for fork in self.forks_of(id)? {
            let mut at = fork;
            let mut shared = u64::MAX;
            while at != *id {
                let Some(point) = self.fork_point(&at)? else {
                    shared = 0;
                    break;
                };
                shared = shared.min(point.at);
                at = point.parent;
            }
            if shared > 0 {
                out.push((fork, shared));
            }
        }
        Ok(out)
    }

    /// Finishes what the pending keys of `id` name: the blobs nothing
    /// refers to any more removed, the old bodies scrubbed, the keys
    /// removed. Returns the blobs removed. Called under the write lock.
    fn finish_drops(&self, id: &ConversationId) -> StoreResult<u64> {
        let prefix = keys::collecting_prefix(id);
        let found: Vec<(Vec<u8>, Pending)> = self
            .scan_prefix(prefix)
            .map(|pair| {
                let (key, value) = pair?;
                Ok((key.to_vec(), decode(&value, "pending retention pass")?))
            })
            .collect::<StoreResult<_>>()?;
        if found.is_empty() {
            return Ok(0);
        }
        let mut candidates: HashSet<BlobHash> = found
            .iter()
            .flat_map(|(_, p)| &p.blobs)
            .map(|h| BlobHash::from_bytes(*h))
            .collect();
        let mut scrub: Vec<SegmentRef> = found.iter().flat_map(|(_, p)| p.scrub.clone()).collect();
        let mut removed = 0;
        if !candidates.is_empty() && self.keep_referenced(&[], &mut candidates)? {
            let mut remove = Batch::new();
            let mut named = Vec::new();
            for hash in &candidates {
                let Some(value) = self.kv.get(Keyspace::Blobs, hash.as_bytes())? else {
                    continue;
                };
                if self.format >= 2 {
                    if let Ok(BlobValue::Segment(at)) = decode(&value, "blob") {
                        named.push(at);
                    }
                }
                remove.remove(Keyspace::Blobs, hash.as_bytes().to_vec());
                removed += 1;
            }
            if !named.is_empty() {
                // Named before the blobs go, so that an open after a kill
                // still scrubs their bodies.
                let (key, pending) = &found[0];
                let mut batch = Batch::new();
                let mut scrubs = pending.scrub.clone();
                scrubs.extend(&named);
                batch.put(
                    key.clone(),
                    encode(&Pending {
                        scrub: scrubs,
                        blobs: pending.blobs.clone(),
                    }),
                );
                self.kv.apply(batch)?;
                scrub.extend(named);
            }
            if !remove.is_empty() {
                self.kv.apply(remove)?;
            }
            self.sync()?;
        }
        if let Some(segments) = self.segments() {
            segments.scrub_all(&scrub)?;
        }
        let mut done = Batch::new();
        for (key, _) in &found {
            done.delete(key.clone());
        }
        self.kv.apply(done)?;
        self.sync()?;
        Ok(removed)
    }

    /// Finishes the retention passes a process left pending (killed after
    /// a batch that dropped payloads): run when a database is opened,
    /// before any write. Best effort, like [`Store::finish_redactions`].
    pub(crate) fn finish_retention(&self) {
        let owners: BTreeSet<ConversationId> = self
            .scan_prefix([keys::COLLECTING])
            .filter_map(Result::ok)
            .filter_map(|(key, _)| keys::conversation_of(&key))
            .collect();
        for id in owners {
            let _turn = self.lock_conversation(&id);
            let _guard = self.lock_writes();
            let Ok(dropped) = self.dropped_texts(&id) else {
                continue;
            };
            if self.redact_views(&id, &dropped).is_ok() {
                let _ = self.finish_drops(&id);
            }
        }
    }

    /// The seq and text hash of every redacted text of `id`'s own
    /// records, sorted.
    fn dropped_texts(&self, id: &ConversationId) -> StoreResult<Vec<(u64, BlobHash)>> {
        let mut out = Vec::new();
        self.each_redacted(id, true, |seq, bytes, _| {
            let mut record = decode_record(bytes)?;
            for field in RedactField::ALL {
                if let Ok(TextRepr::Redacted(blob)) = slot(&mut record, field) {
                    out.push((seq, blob.hash));
                }
            }
            Ok(())
        })?;
        Ok(out)
    }
}

/// Whether `field` of `record` reads as a view's stripped form of it (a
/// call's arguments `{}`, a result's `[compacted] ...`): a stored view
/// cannot tell such a payload from a stripped one, so it is kept (there
/// is nothing in it to drop).
fn reads_as_stripped(record: &mut crate::codec::RecordRepr<'_>, field: RedactField) -> bool {
    match (field, slot(record, field)) {
        (RedactField::Arguments, Ok(TextRepr::Inline(text))) => *text == "{}",
        (RedactField::Content, Ok(TextRepr::Inline(text))) => text.starts_with("[compacted] "),
        _ => false,
    }
}

/// The writes of one batch of a pass, not yet committed.
struct Pass {
    /// The pass's time and this batch's number: its pending key's.
    time: Timestamp,
    number: u64,
    writes: Writes,
    pending: Pending,
    bytes: usize,
    /// The first seq of the first chunk rewritten, if one was.
    first: Option<u64>,
}

impl Pass {
    fn new(store: &Store, time: Timestamp, number: u64) -> Pass {
        Pass {
            time,
            number,
            writes: Writes::new(store),
            pending: Pending::default(),
            bytes: 0,
            first: None,
        }
    }

    /// Commits the batch (with its pending key) and syncs, unless it is
    /// empty or the pass is dry; returns the next batch.
    fn commit(
        self,
        store: &Store,
        id: &ConversationId,
        dry_run: bool,
        wrote: &mut bool,
        before_write: &mut dyn FnMut() -> StoreResult<()>,
    ) -> StoreResult<Pass> {
        let next = Pass::new(store, self.time, self.number + 1);
        if self.first.is_none() || dry_run {
            return Ok(next);
        }
        if !*wrote {
            before_write()?;
            *wrote = true;
        }
        let mut writes = self.writes;
        writes.batch.put(
            keys::collecting(id, self.time.as_micros() as u64, self.number),
            encode(&self.pending),
        );
        store.commit(&[], writes)?;
        store.sync()?;
        Ok(next)
    }
}
