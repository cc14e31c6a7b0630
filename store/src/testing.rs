//! Hooks for tests and fuzzers that damage a database on purpose. Not part
//! of the supported API.

use crate::append::Writes;
use crate::codec::{decode, encode, ChunkRepr};
use crate::error::{StoreError, StoreResult};
use crate::ids::ConversationId;
use crate::keys;
use crate::redact::Held;
use crate::store::Store;

/// The canonical bytes of record `seq`.
pub fn record_bytes(store: &Store, id: &ConversationId, seq: u64) -> StoreResult<Vec<u8>> {
    let held = chunk_of(store, id, seq)?;
    Ok(held.chunk.record_bytes(held.index).to_vec())
}

/// Flips bit pattern `mask` in byte `byte` of record `seq`'s stored bytes,
/// bypassing every check.
pub fn flip_record_byte(
    store: &Store,
    id: &ConversationId,
    seq: u64,
    byte: usize,
    mask: u8,
) -> StoreResult<()> {
    rewrite_record(store, id, seq, |record| record[byte] ^= mask)
}

/// Rewrites record `seq`'s stored bytes with `change`, bypassing every
/// check (as a hand with write access to the files could).
pub fn rewrite_record(
    store: &Store,
    id: &ConversationId,
    seq: u64,
    change: impl FnOnce(&mut Vec<u8>),
) -> StoreResult<()> {
    let Held {
        key, chunk, index, ..
    } = chunk_of(store, id, seq)?;
    let chunk: ChunkRepr<'_> = decode(&chunk.bytes, "chunk")?;
    let mut record = chunk.entries[index].record.to_vec();
    change(&mut record);
    let mut entries = chunk.entries.clone();
    entries[index].record = &record;
    let damaged = ChunkRepr {
        parent: chunk.parent,
        entries,
    };
    // Stored where an append would store it, so that only the record is
    // wrong, not its chunk's checksum.
    let mut writes = Writes::new(store);
    writes.push_chunk(key, encode(&damaged), damaged.entries.len() as u64);
    store.commit(&[], writes)?;
    store.sync()?;
    Ok(())
}

/// A change to a record's bytes that keeps its address, as a hand with
/// write access to the files could make it: what `verify` must find.
#[derive(Debug, Clone, Copy)]
pub enum Forgery {
    /// A record's main text turned into its hash and length, without a
    /// redaction's envelope.
    HashOutsideRedaction,
    /// A redacted record's meta removed too, under the same envelope.
    SecondTextRedacted,
    /// A redacted committed record rewritten as a plain one (whose
    /// redaction proves only its address), its timestamp changed.
    PassedOffAsPlain,
    /// A redacted committed record's timestamp changed, kept committed.
    TimestampChanged,
}

/// Applies `forgery` to record `seq` (see [`Forgery`]).
pub fn forge(store: &Store, id: &ConversationId, seq: u64, forgery: Forgery) -> StoreResult<()> {
    use crate::codec::{decode_record, encode_record, encode_redacted, envelope, Envelope, Layout};
    use crate::redact::{main_field, redact_field, RedactField};
    let mut result = Ok(());
    rewrite_record(store, id, seq, |bytes| {
        let forged = (|| -> StoreResult<Vec<u8>> {
            let mut record = decode_record(bytes)?;
            let bad = |what: &str| StoreError::Corrupt {
                what: format!("cannot forge: {what}"),
            };
            let Some(kept) = envelope(bytes)? else {
                let field = main_field(&record).ok_or_else(|| bad("no text"))?;
                let (redacted, _, _) = redact_field(&record, field).map_err(bad)?;
                return Ok(encode_redacted(&redacted, bytes));
            };
            let layout = match forgery {
                Forgery::HashOutsideRedaction => return Err(bad("already redacted")),
                Forgery::SecondTextRedacted => {
                    record = redact_field(&record, RedactField::Meta).map_err(bad)?.0;
                    Layout::Committed
                }
                Forgery::PassedOffAsPlain | Forgery::TimestampChanged => {
                    record.timestamp =
                        crate::event::Timestamp::from_micros(0).ok_or_else(|| bad("timestamp"))?;
                    if matches!(forgery, Forgery::PassedOffAsPlain) {
                        Layout::Plain
                    } else {
                        Layout::Committed
                    }
                }
            };
            let inner = encode_record(&record, layout);
            Ok(Envelope {
                address: kept.address,
                time: kept.time,
                by: kept.by,
                reason: kept.reason,
                record: &inner,
            }
            .stored())
        })();
        match forged {
            Ok(forged) => *bytes = forged,
            Err(e) => result = Err(e),
        }
    })?;
    result
}

fn chunk_of(store: &Store, id: &ConversationId, seq: u64) -> StoreResult<Held> {
    let pin = store.pin_read();
    let space = Store::space_of(seq, store.settled(id, &pin)?);
    store
        .chunk_holding(space, id, seq)?
        .ok_or(StoreError::NoSuchRecord { seq, len: 0 })
}

/// Makes every store in this process write segment bodies without frames
/// (`frames.rs`), as convstore did before frames existed; `false` again
/// restores them.
pub fn write_unframed(unframed: bool) {
    crate::backend::frames::UNFRAMED.store(unframed, std::sync::atomic::Ordering::Relaxed);
}

/// Overwrites the database's format version, as a newer convstore would.
pub fn set_format_version(path: &std::path::Path, version: u32) -> StoreResult<()> {
    use crate::backend::{Backend as _, Batch};
    let backend = crate::backend::SledBackend::open(path, std::time::Duration::ZERO)?;
    let mut batch = Batch::new();
    batch.put(keys::FORMAT, version.to_be_bytes());
    backend.apply(batch)?;
    backend.sync()
}

/// Decodes any bytes as a record; on success, encodes the event again and
/// decodes that, returning both decoded events (texts stored as blobs come
/// back as their hashes' hex). For fuzzing: it must never panic, and the two
/// events must be equal.
pub fn record_roundtrip(bytes: &[u8]) -> Option<(crate::Event, crate::Event)> {
    use crate::codec::{decode_record, encode_event, record_to_event};
    let stand_in = |blob: crate::BlobRef| Ok(blob.hash.hex());
    let record = decode_record(bytes).ok()?;
    let first = record_to_event(&record, &mut { stand_in }).ok()?;
    let encoded = encode_event(&first, crate::codec::Layout::of(bytes));
    let again = decode_record(&encoded.bytes).ok()?;
    let second = record_to_event(&again, &mut { stand_in }).ok()?;
    Some((first, second))
}

/// How a conversation's compactions are kept: the number of overlay
/// directory keys (one per chunk that holds compactions, settled and
/// staged; format 4) and of single-compaction keys (formats 1 to 3).
pub fn overlay_keys(store: &Store, id: &ConversationId) -> StoreResult<(usize, usize)> {
    let count = |prefix| count_keys(store, prefix);
    let directories = count(keys::overlay_directories(keys::Space::Settled, id))?
        + count(keys::overlay_directories(keys::Space::Staged, id))?;
    Ok((directories, count(keys::overlays(id))?))
}

/// The number of a conversation's overlay range keys (format 5): one per
/// level and bucket an append filed compactions under.
pub fn overlay_range_keys(store: &Store, id: &ConversationId) -> StoreResult<usize> {
    count_keys(store, keys::overlay_ranges(id))
}

/// The number of keys under `prefix`.
fn count_keys(store: &Store, prefix: Vec<u8>) -> StoreResult<usize> {
    let mut n = 0;
    for entry in store.scan_prefix(prefix) {
        entry?;
        n += 1;
    }
    Ok(n)
}

/// Deletes a conversation's first overlay range key, as damage would.
pub fn drop_an_overlay_range_key(store: &Store, id: &ConversationId) -> StoreResult<()> {
    if let Some(entry) = store.scan_prefix(keys::overlay_ranges(id)).next() {
        let mut batch = crate::backend::Batch::new();
        batch.delete(entry?.0.to_vec());
        store.kv.apply(batch)?;
    }
    Ok(())
}

/// Bulk appends committed on this thread from now on stop before the batch
/// that would make them visible (after writing their blob references and,
/// for a new conversation, its records): with `as_a_kill`, leaving what
/// they wrote as a killed process would; else taking it back at once.
/// `None`: commits run again.
pub fn interrupt_bulk_commits(how: Option<bool>) {
    let mode = match how {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    };
    crate::bulk::interrupt::MODE.with(|m| m.set(mode));
}

/// Deletes a conversation's settled chunk key number `nth` (in log order),
/// as damage would; returns the seq it started at.
pub fn drop_a_chunk(store: &Store, id: &ConversationId, nth: usize) -> StoreResult<Option<u64>> {
    drop_chunk_key(store, keys::chunks(keys::Space::Settled, id), nth)
}

/// [`drop_a_chunk`] among the conversation's staged chunk keys (settled
/// ones not yet deleted included).
pub fn drop_a_staged_chunk(
    store: &Store,
    id: &ConversationId,
    nth: usize,
) -> StoreResult<Option<u64>> {
    drop_chunk_key(store, keys::chunks(keys::Space::Staged, id), nth)
}

fn drop_chunk_key(store: &Store, prefix: Vec<u8>, nth: usize) -> StoreResult<Option<u64>> {
    let Some(entry) = store.scan_prefix(prefix).nth(nth) else {
        return Ok(None);
    };
    let key = entry?.0.to_vec();
    let mut batch = crate::backend::Batch::new();
    batch.delete(key.clone());
    store.kv.apply(batch)?;
    Ok(keys::key_seq(&key))
}

/// Deletes `id` as a process killed right after the batch deciding it
/// would: tombstoned, nothing removed yet (the next open finishes it).
pub fn decide_deletion(store: &Store, id: &ConversationId) -> StoreResult<()> {
    store.decide_deletion(id, true).map(|_| ())
}

/// Loads the settled chunk of `id` starting at `first_seq`, as a reader
/// that found `id` before a delete took it goes on to do.
pub fn load_settled_chunk(store: &Store, id: &ConversationId, first_seq: u64) -> StoreResult<()> {
    store
        .load_chunk(keys::Space::Settled, id, first_seq)
        .map(|_| ())
}

/// A conversation's staging state (`T`: where its staged records start,
/// and their bytes), if it has one.
pub fn staging_state(store: &Store, id: &ConversationId) -> StoreResult<Option<(u64, u64)>> {
    Ok(store.staging(id)?.map(|s| (s.settled, s.bytes)))
}

/// The number of a conversation's staged turn index entries (`u`):
/// written by formats 3 to 8 only.
pub fn staged_turn_keys(store: &Store, id: &ConversationId) -> StoreResult<usize> {
    count_keys(store, keys::turns(keys::Space::Staged, id))
}

/// The number of a conversation's staged chunk keys (`staging.rs`): the
/// chunks of records not settled yet, and copies of settled ones that a
/// running read may still reach.
pub fn staged_chunk_keys(store: &Store, id: &ConversationId) -> StoreResult<usize> {
    count_keys(store, keys::chunks(keys::Space::Staged, id))
}
