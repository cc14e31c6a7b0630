//! Removing one text of one record for good, keeping the chain
//! verifiable: [`Store::redact`].
//!
//! A redacted record is stored as an envelope (`codec::Envelope`): the
//! record's address as it was, when and why it was redacted, and its
//! encoding with the text replaced by `TextRepr::Redacted` (the text's
//! hash and length). Every later record hashes the redacted record's
//! address, so `verify` still proves every record that is not redacted
//! untouched; of the redacted record it can prove only that its address is
//! the one the chain was built on, not that its other fields are as they
//! were (their bytes went into that address with the text).
//!
//! A redaction is decided by one batch: the chunks holding the record (the
//! settled one, and a staged copy left from before it settled) and the
//! view blocks showing its text rewritten, and a pending-redaction key
//! (`Z` id seq) naming what else must go. Then: the blob holding a long
//! text, unless another record or view refers to it; the old bodies in the
//! segment files, overwritten with zeros; and last, in one batch, the
//! redaction event appended (a `config` event whose delta is
//! `{"redaction": {...}}`) and the pending key removed. The next open
//! finishes a redaction a process left pending.
//!
//! sled keeps the overwritten values in its own files until it reuses
//! their space; so does PostgreSQL until a vacuum. Redaction is refused on
//! a database server for now: another process's append may have found the
//! blob stored and relied on it (as for `delete`).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::append::{encode_all, write_records, Appended, Writes};
use crate::backend::{Batch, Keyspace, SegmentRef};
use crate::codec::{
    decode, decode_record, encode, encode_redacted, envelope, link, BlobRef, BlobValue, BodyRepr,
    ChunkRepr, Envelope, RecordRepr, TextRepr,
};
use crate::error::{StoreError, StoreResult};
use crate::event::{Event, EventKind, Json, Timestamp};
use crate::hash::BlobHash;
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::log::Located;
use crate::store::Store;

/// Which text of a record a redaction removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedactField {
    /// The `text` of a `user`, `assistant`, `reasoning` or `system` event.
    Text,
    /// The `content` of a `tool_result`.
    Content,
    /// The `arguments` of a `tool_call`.
    Arguments,
    /// The `payload` of an `extension`.
    Payload,
    /// The `delta` of a `config` event.
    Delta,
    /// The `meta` of any event.
    Meta,
}

impl RedactField {
    /// Every field, in the order of their names.
    pub const ALL: [RedactField; 6] = [
        RedactField::Text,
        RedactField::Content,
        RedactField::Arguments,
        RedactField::Payload,
        RedactField::Delta,
        RedactField::Meta,
    ];

    /// Its name in events (`text`, `content`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RedactField::Text => "text",
            RedactField::Content => "content",
            RedactField::Arguments => "arguments",
            RedactField::Payload => "payload",
            RedactField::Delta => "delta",
            RedactField::Meta => "meta",
        }
    }

    /// The field named `name`.
    pub fn parse(name: &str) -> Option<RedactField> {
        RedactField::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

/// What [`Store::redact`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Redaction {
    /// The conversation whose log holds the record (a fork's parent, for a
    /// record the fork shares).
    pub owner: ConversationId,
    /// The record.
    pub seq: u64,
    /// The text removed.
    pub field: RedactField,
    /// The text's length in bytes...
    pub len: u64,
    /// ...and its blake3 hash, which the record keeps.
    pub hash: BlobHash,
    /// Whether the text was stored apart, as a blob (a long text of an
    /// unencrypted database)...
    pub blob: bool,
    /// ...that nothing else referred to, and went.
    pub blob_removed: bool,
    /// View blocks rewritten.
    pub view_blocks: u64,
    /// The redaction event appended to the conversation asked for.
    pub event: Appended,
}

/// A redaction decided and not finished (`Z` id seq).
#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    by: [u8; 16],
    field: String,
    reason: String,
    time: Timestamp,
    /// Bodies in the segment files that held the text.
    scrub: Vec<SegmentRef>,
    /// The blob that held it, to remove unless something else refers to
    /// it.
    blob: Option<[u8; 32]>,
}

impl Store {
    /// Removes `field` (by default the record's main text) of record `seq`
    /// of `id` for good: from the record, a staged copy, the views showing
    /// it, its blob if nothing else refers to it, and the segment files;
    /// then appends a redaction event to `id` saying so. The record reads
    /// as `[redacted]` (a JSON field as `{"redacted":true}`).
    ///
    /// Once this returns the redaction is durable; a process killed during
    /// it leaves the record either whole or redacted (the next open
    /// finishes what is left).
    pub fn redact(
        &self,
        id: &ConversationId,
        seq: u64,
        field: Option<RedactField>,
        reason: &str,
    ) -> StoreResult<Redaction> {
        self.redaction(id, seq, field, reason, false)?
            .ok_or_else(|| StoreError::Corrupt {
                what: format!("conversation {id}: record {seq}: the redaction did not run"),
            })
    }

    /// The error [`Store::redact`] would refuse with now, if any, without
    /// changing anything: for a caller with work to do before a redaction
    /// that a refusal would waste (the engine drops the search index's
    /// documents first).
    pub fn check_redactable(
        &self,
        id: &ConversationId,
        seq: u64,
        field: Option<RedactField>,
        reason: &str,
    ) -> StoreResult<()> {
        self.redaction(id, seq, field, reason, true).map(|_| ())
    }

    /// [`Store::redact`], or with `check` its refusals alone (`None`).
    fn redaction(
        &self,
        id: &ConversationId,
        seq: u64,
        field: Option<RedactField>,
        reason: &str,
        check: bool,
    ) -> StoreResult<Option<Redaction>> {
        let refuse = |why: String| StoreError::NotRedactable { seq, why };
        if self.kv.is_server() {
            return Err(refuse(
                "redaction is not supported on a database server yet".to_owned(),
            ));
        }
        if reason.trim().is_empty() {
            return Err(refuse("a reason is required".to_owned()));
        }
        // The redaction event holds the reason: kept short and plain, the
        // event stays one inline text, which is how `redact` knows it
        // (and refuses to redact the audit trail).
        if reason.len() > REASON_MAX {
            return Err(refuse(format!(
                "the reason is {} bytes, more than {REASON_MAX}",
                reason.len()
            )));
        }
        if reason.chars().any(char::is_control) || crate::store::has_hidden(reason) {
            return Err(refuse(
                "the reason holds a control or invisible character: give it as one line of text"
                    .to_owned(),
            ));
        }
        let _turn = self.lock_conversation(id);
        let guard = self.lock_writes();
        let len = self.meta(id)?.len;
        if seq >= len {
            return Err(StoreError::NoSuchRecord { seq, len });
        }
        let owner = self.owner_of(id, seq)?;
        let time = Timestamp::now();
        // The chunks holding the record: the live one first, then a staged
        // copy left from before it settled.
        let pin = self.pin_read();
        let live = Store::space_of(seq, self.settled(&owner, &pin)?);
        let mut holding = Vec::new();
        for space in [live, other(live)] {
            holding.extend(self.chunk_holding(space, &owner, seq)?);
        }
        let Some(first) = holding.first() else {
            return Err(StoreError::Corrupt {
                what: format!("conversation {owner}: no chunk holds record {seq}"),
            });
        };
        let repr: ChunkRepr<'_> = decode(&first.chunk.bytes, "chunk")?;
        let bytes = repr.entries[first.index].record;
        if envelope(bytes)?.is_some() {
            return Err(refuse("it is already redacted".to_owned()));
        }
        let address = repr.entries[..=first.index]
            .iter()
            .fold(repr.parent, |parent, entry| link(&parent, entry.record));
        let record = decode_record(bytes)?;
        if is_redaction_event(&record) {
            return Err(refuse(
                "it is a redaction event: the audit trail of a redaction stays".to_owned(),
            ));
        }
        let field = match field {
            Some(f) => f,
            None => main_field(&record).ok_or_else(|| {
                refuse(format!(
                    "a {} event has no text to redact",
                    record.body.event_type().as_str()
                ))
            })?,
        };
        let (redacted, text, was_blob) =
            redact_field(&record, field).map_err(|why| refuse(why.to_owned()))?;
        if check {
            return Ok(None);
        }
        let inner = encode_redacted(&redacted, bytes);
        let stored = Envelope {
            address,
            time,
            by: *id.as_bytes(),
            reason,
            record: &inner,
        }
        .stored();
        let mut writes = Writes::new(self);
        let mut scrub = Vec::new();
        for held in holding {
            let repr: ChunkRepr<'_> = decode(&held.chunk.bytes, "chunk")?;
            let mut entries = repr.entries.clone();
            entries[held.index].record = &stored;
            let rewritten = ChunkRepr {
                parent: repr.parent,
                entries,
            };
            writes.push_chunk(held.key, encode(&rewritten), rewritten.entries.len() as u64);
            if held.at.is_some() {
                writes.keep_in_segments();
            }
            scrub.extend(held.at);
        }
        let mut view_blocks = 0;
        for holder in self.sharing(&owner, seq)? {
            view_blocks +=
                self.redact_view_blocks(&holder, &mut writes.batch, &|at, _, bytes| {
                    if at != seq {
                        return None;
                    }
                    let record = decode_record(bytes).ok()?;
                    let (redacted, shown, _) = redact_field(&record, field).ok()?;
                    (shown == text).then(|| encode_redacted(&redacted, bytes))
                })?;
        }
        let pending = Pending {
            by: *id.as_bytes(),
            field: field.as_str().to_owned(),
            reason: reason.to_owned(),
            time,
            scrub,
            blob: was_blob.then_some(*text.hash.as_bytes()),
        };
        let marker = keys::redacting(&owner, seq);
        writes.batch.put(marker.clone(), encode(&pending));
        self.commit(&[], writes)?;
        self.sync()?;
        let blob_removed = self.finish_redaction(&marker, pending)?;
        let event = self.redaction_event(id, &marker, seq, field, reason, time)?;
        drop(guard);
        self.sync()?;
        Ok(Some(Redaction {
            owner,
            seq,
            field,
            len: text.len,
            hash: text.hash,
            blob: was_blob,
            blob_removed,
            view_blocks,
            event,
        }))
    }

    /// The chunk of `id` in `space` holding record `seq`, if one does.
    pub(crate) fn chunk_holding(
        &self,
        space: Space,
        id: &ConversationId,
        seq: u64,
    ) -> StoreResult<Option<Held>> {
        let found = self
            .kv
            .scan(
                Keyspace::Main,
                crate::backend::through(keys::chunks(space, id), keys::chunk(space, id, seq)),
                true,
            )
            .next()
            .transpose()?;
        let Some((key, value)) = found else {
            return Ok(None);
        };
        let located = Located::new(self.format, id, &key, value)?;
        let at = match &located {
            Located::Segment { at, .. } => Some(*at),
            Located::Loaded(_) => None,
        };
        let chunk = located.into_loaded(self, id)?;
        let index = usize::try_from(seq - chunk.first_seq).unwrap_or(usize::MAX);
        Ok((index < chunk.layout.entries.len()).then(|| Held {
            key: key.to_vec(),
            chunk,
            index,
            at,
        }))
    }

    /// Adds to `batch` every stored view block of `holder` that `redact`
    /// rewrites (see `views::redact_block`); returns how many.
    pub(crate) fn redact_view_blocks(
        &self,
        holder: &ConversationId,
        batch: &mut Batch,
        redact: &crate::views::RedactEvent<'_>,
    ) -> StoreResult<u64> {
        let mut prefix = vec![keys::VIEW_BLOCK];
        prefix.extend_from_slice(holder.as_bytes());
        let mut rewritten = 0;
        for pair in self.scan_prefix(prefix) {
            let (key, value) = pair?;
            if let Some(block) = crate::views::redact_block(&value, redact)? {
                batch.put(key.to_vec(), block);
                rewritten += 1;
            }
        }
        Ok(rewritten)
    }

    /// `owner` and every fork (of a fork...) of it that shares record
    /// `seq` of its log.
    fn sharing(&self, owner: &ConversationId, seq: u64) -> StoreResult<Vec<ConversationId>> {
        let mut out = vec![*owner];
        out.extend(
            self.sharing_forks(owner)?
                .into_iter()
                .filter(|&(_, shared)| seq < shared)
                .map(|(fork, _)| fork),
        );
        Ok(out)
    }

    /// Removes the blob and scrubs the bodies `pending` names (the event,
    /// which removes the pending key, is appended after). Returns whether
    /// the blob went. Called under the write lock.
    fn finish_redaction(&self, marker: &[u8], mut pending: Pending) -> StoreResult<bool> {
        let mut removed = false;
        if let Some(hash) = pending.blob.take() {
            let hash = BlobHash::from_bytes(hash);
            let mut candidates = HashSet::from([hash]);
            if self.keep_referenced(&[], &mut candidates)? && !candidates.is_empty() {
                if let Some(value) = self.kv.get(Keyspace::Blobs, hash.as_bytes())? {
                    if self.format >= 2 {
                        if let Ok(BlobValue::Segment(at)) = decode(&value, "blob") {
                            // Named before the blob goes, so that an open
                            // after a kill still scrubs its body.
                            pending.scrub.push(at);
                            let mut batch = Batch::new();
                            batch.put(marker.to_vec(), encode(&pending));
                            self.kv.apply(batch)?;
                        }
                    }
                    let mut batch = Batch::new();
                    batch.remove(Keyspace::Blobs, hash.as_bytes().to_vec());
                    self.kv.apply(batch)?;
                    self.sync()?;
                    removed = true;
                }
            }
        }
        if let Some(segments) = self.segments() {
            for at in &pending.scrub {
                segments.scrub(at)?;
            }
        }
        Ok(removed)
    }

    /// Appends the redaction event to `by` and removes the pending key of
    /// the redaction, in one batch, unsynced. Called under the write lock
    /// and `by`'s turn.
    fn redaction_event(
        &self,
        by: &ConversationId,
        marker: &[u8],
        seq: u64,
        field: RedactField,
        reason: &str,
        time: Timestamp,
    ) -> StoreResult<Appended> {
        let delta = serde_json::json!({
            "redaction": { "seq": seq, "field": field.as_str(), "reason": reason }
        });
        let events = [Event::new(
            time,
            EventKind::Config {
                delta: Json::from_value(&delta),
            },
        )];
        let encoded = encode_all(&events, u64::MAX, self.layout())?;
        let (meta, raw) = self.meta_and_bytes(by)?;
        let placement = self.place(by, &meta, &encoded)?;
        let mut writes = Writes::new(self);
        writes.require(keys::conversation(by), Some(raw));
        let appended = write_records(by, meta, &encoded, &placement, &mut writes)?;
        writes.batch.delete(marker.to_vec());
        self.commit(&encoded, writes)?;
        Ok(appended)
    }

    /// The conversation whose own log holds record `seq` of `id`: `id`, or
    /// for a record a fork shares, the ancestor it comes from.
    pub fn owner_of(&self, id: &ConversationId, seq: u64) -> StoreResult<ConversationId> {
        let mut owner = *id;
        while let Some(point) = self.fork_point(&owner)? {
            if seq >= point.at {
                break;
            }
            owner = point.parent;
        }
        Ok(owner)
    }

    /// Finishes redactions a process left pending (killed after the batch
    /// that decided them): run when a database is opened, before any
    /// write. Best effort, like [`Store::finish_deletions`].
    pub(crate) fn finish_redactions(&self) {
        let pending: Vec<_> = self
            .scan_prefix([keys::REDACTING])
            .filter_map(Result::ok)
            .map(|(k, v)| (k.to_vec(), v))
            .collect();
        for (key, value) in pending {
            let (Ok(p), Some(seq)) = (
                decode::<Pending>(&value, "pending redaction"),
                keys::key_seq(&key),
            ) else {
                continue;
            };
            let by = ConversationId::from_bytes(p.by);
            let field = RedactField::parse(&p.field).unwrap_or(RedactField::Text);
            let (reason, time) = (p.reason.clone(), p.time);
            let _turn = self.lock_conversation(&by);
            let _guard = self.lock_writes();
            if self.finish_redaction(&key, p).is_err() {
                continue;
            }
            let _ = if self.meta(&by).is_ok() {
                self.redaction_event(&by, &key, seq, field, &reason, time)
                    .map(drop)
            } else {
                // The conversation that asked is gone: the record is
                // redacted all the same.
                let mut batch = Batch::new();
                batch.delete(key.clone());
                self.kv.apply(batch)
            };
            let _ = self.sync();
        }
    }
}

fn other(space: Space) -> Space {
    match space {
        Space::Settled => Space::Staged,
        Space::Staged => Space::Settled,
    }
}

/// The longest reason a redaction takes, in bytes: its event's delta,
/// JSON-escaped (a quote or backslash doubles), stays under
/// [`crate::INLINE_MAX`].
pub const REASON_MAX: usize = 400;

/// Whether `record` is a redaction event: a config event whose delta is
/// exactly what [`Store::redact`] appends, `{"redaction": {"seq": N,
/// "field": F, "reason": R}}` (a config event that only mentions a
/// redaction is a text like any other, and can be redacted).
fn is_redaction_event(record: &RecordRepr<'_>) -> bool {
    let BodyRepr::Config(TextRepr::Inline(delta)) = record.body else {
        return false;
    };
    if !delta.starts_with(r#"{"redaction":"#) {
        return false;
    }
    let Ok(serde_json::Value::Object(outer)) = serde_json::from_str(delta) else {
        return false;
    };
    let Some(serde_json::Value::Object(inner)) = outer.get("redaction") else {
        return false;
    };
    outer.len() == 1
        && inner.len() == 3
        && inner.get("seq").is_some_and(serde_json::Value::is_u64)
        && inner
            .get("field")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|f| RedactField::ALL.iter().any(|k| k.as_str() == f))
        && inner
            .get("reason")
            .is_some_and(serde_json::Value::is_string)
}

/// The field a redaction of `record` removes when none is named.
pub(crate) fn main_field(record: &RecordRepr<'_>) -> Option<RedactField> {
    match record.body {
        BodyRepr::User(_)
        | BodyRepr::Assistant(_)
        | BodyRepr::Reasoning(_)
        | BodyRepr::System(_) => Some(RedactField::Text),
        BodyRepr::ToolCall { .. } => Some(RedactField::Arguments),
        BodyRepr::ToolResult { .. } => Some(RedactField::Content),
        BodyRepr::Extension { .. } => Some(RedactField::Payload),
        BodyRepr::Config(_) => Some(RedactField::Delta),
        BodyRepr::TurnStart | BodyRepr::Compaction(_) => None,
    }
}

/// The text `field` of `record`, to read or replace.
pub(crate) fn slot<'r, 'a>(
    record: &'r mut RecordRepr<'a>,
    field: RedactField,
) -> Result<&'r mut TextRepr<'a>, &'static str> {
    match (field, &mut record.body) {
        (RedactField::Meta, _) => record.meta.as_mut().ok_or("it has no meta"),
        (
            RedactField::Text,
            BodyRepr::User(t)
            | BodyRepr::Assistant(t)
            | BodyRepr::Reasoning(t)
            | BodyRepr::System(t),
        )
        | (RedactField::Arguments, BodyRepr::ToolCall { arguments: t, .. })
        | (RedactField::Content, BodyRepr::ToolResult { content: t, .. })
        | (RedactField::Payload, BodyRepr::Extension { payload: t, .. })
        | (RedactField::Delta, BodyRepr::Config(t)) => Ok(t),
        (_, BodyRepr::Compaction(_)) => {
            Err("a compaction cannot be redacted (append one that replaces its summary)")
        }
        _ => Err("its event has no such field"),
    }
}

/// `record` with `field` replaced by its hash and length; that hash and
/// length, and whether the text was a blob.
pub(crate) fn redact_field<'a>(
    record: &RecordRepr<'a>,
    field: RedactField,
) -> Result<(RecordRepr<'a>, BlobRef, bool), &'static str> {
    let mut out = record.clone();
    let text = slot(&mut out, field)?;
    let (blob, was_blob) = match *text {
        TextRepr::Inline(s) => (
            BlobRef {
                hash: BlobHash::of(s.as_bytes()),
                len: s.len() as u64,
            },
            false,
        ),
        TextRepr::Blob(blob) => (blob, true),
        TextRepr::Redacted(_) | TextRepr::Beside => return Err("that field is already redacted"),
    };
    *text = TextRepr::Redacted(blob);
    Ok((out, blob, was_blob))
}

/// A chunk holding a record: its key, the chunk, the record's index in it
/// and where its body is in the segment files, if it is there.
pub(crate) struct Held {
    pub key: Vec<u8>,
    pub chunk: crate::log::LoadedChunk,
    pub index: usize,
    pub at: Option<SegmentRef>,
}

/// A redacted record, as [`Store::redactions`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedactedRecord {
    /// The record.
    pub seq: u64,
    /// The texts removed from it.
    pub fields: Vec<RedactField>,
    /// When.
    pub time: Timestamp,
    /// Why.
    pub reason: String,
    /// The conversation whose log holds the redaction event.
    pub by: ConversationId,
}

impl Store {
    /// The redacted records of `id`'s log, in order; `own` leaves out
    /// those a fork shares with its parent.
    pub fn redactions(&self, id: &ConversationId, own: bool) -> StoreResult<Vec<RedactedRecord>> {
        let mut out = Vec::new();
        self.each_redacted(id, own, |seq, bytes, envelope| {
            let mut record = decode_record(bytes)?;
            let fields = RedactField::ALL
                .into_iter()
                .filter(|&f| matches!(slot(&mut record, f), Ok(TextRepr::Redacted(_))))
                .collect();
            out.push(RedactedRecord {
                seq,
                fields,
                time: envelope.time,
                reason: envelope.reason.to_owned(),
                by: ConversationId::from_bytes(envelope.by),
            });
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` with the seq, stored bytes and envelope of each redacted
    /// record of `id`'s log (its own only, if `own`), in order.
    pub(crate) fn each_redacted(
        &self,
        id: &ConversationId,
        own: bool,
        mut f: impl FnMut(u64, &[u8], Envelope<'_>) -> StoreResult<()>,
    ) -> StoreResult<()> {
        let len = self.meta(id)?.len;
        let start = if own {
            self.fork_point(id)?.map_or(0, |p| p.at)
        } else {
            0
        };
        for chunk in self.chunks(id, start, len)? {
            for (seq, bytes) in chunk?.raw_records(self, start, len)? {
                if let Some(envelope) = envelope(&bytes)? {
                    f(seq, &bytes, envelope)?;
                }
            }
        }
        Ok(())
    }
}

/// Redacted records of one log that were redacted together: by one
/// `redact`, or one retention pass (same time, reason and conversation
/// asking). See [`Store::redaction_groups`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedactionGroup {
    /// How many records.
    pub records: u64,
    /// The first of them...
    pub first_seq: u64,
    /// ...and the last.
    pub last_seq: u64,
    /// When.
    pub time: Timestamp,
    /// Why.
    pub reason: String,
    /// The conversation that asked.
    pub by: ConversationId,
}

impl Store {
    /// The redactions of `id`'s own records (not those a fork shares with
    /// its parent), grouped as they were made, oldest first. Memory grows
    /// with the groups, not the records.
    pub fn redaction_groups(&self, id: &ConversationId) -> StoreResult<Vec<RedactionGroup>> {
        self.redaction_groups_before(id, u64::MAX)
    }

    /// [`Store::redaction_groups`] of `id`'s own records before `end`:
    /// those a fork at `end` shares.
    pub fn redaction_groups_before(
        &self,
        id: &ConversationId,
        end: u64,
    ) -> StoreResult<Vec<RedactionGroup>> {
        let mut groups: Vec<RedactionGroup> = Vec::new();
        let mut index = std::collections::HashMap::new();
        self.each_redacted(id, true, |seq, _, envelope| {
            if seq >= end {
                return Ok(());
            }
            let key = (envelope.time, envelope.reason.to_owned(), envelope.by);
            if let Some(&i) = index.get(&key) {
                let group: &mut RedactionGroup = &mut groups[i];
                group.records += 1;
                group.last_seq = seq;
            } else {
                index.insert(key, groups.len());
                groups.push(RedactionGroup {
                    records: 1,
                    first_seq: seq,
                    last_seq: seq,
                    time: envelope.time,
                    reason: envelope.reason.to_owned(),
                    by: ConversationId::from_bytes(envelope.by),
                });
            }
            Ok(())
        })?;
        groups.sort_by_key(|g| (g.time, g.first_seq));
        Ok(groups)
    }
}
