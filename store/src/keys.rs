//! The key layout of the single sled tree that holds a database.
//!
//! Everything of a database but the blobs lives in one tree, so that one
//! `apply_batch` writes an append atomically. The first byte says what a
//! key holds:
//!
//! | key | value |
//! |---|---|
//! | `F` | format version, u32 big-endian |
//! | `I` | the database's id (16 random bytes), made when first asked for |
//! | `C` id(16) | conversation metadata |
//! | `N` name | conversation id (16 bytes) |
//! | `c` id(16) first_seq(8 BE) | a chunk of records |
//! | `t` id(16) last_turn(8 BE) first_seq(8 BE) | turn index entry for a chunk |
//! | `s`, `u`, `j`, `q` | as `c`, `t`, `k` and `O`, for staged chunks (`staging.rs`) |
//! | `T` id(16) | where a conversation's staged records start, and their bytes |
//! | `o` id(16) seq(8 BE) | formats 1-3: a compaction overlay: its turn and record bytes |
//! | `O` id(16) first_seq(8 BE) | format 4: the compactions of a chunk that has any: (seq, turn, record bytes) |
//! | `R` id(16) level(1) bucket(8 BE) first_seq(8 BE) | format 5: the compactions an append files under one level and bucket of their turn ranges (`overlay_range_level`): seq, turn range, turn and record bytes of each (format 6: no record bytes; format 8: and the timestamp) |
//! | `k` id(16) first_seq(8 BE) | the tool calls of a chunk: (seq, id, name) |
//! | `v` id(16) view(8) | a materialized view's state (view = blake3 of its name) |
//! | `w` id(16) view(8) first_turn(8 BE) | a block of a view's events |
//! | `x` id(16) view(8) bucket(2 BE) | a view's call index: ids, names, orphan results |
//! | `P` id(16) | a conversation's pinned turn ranges (automatic compaction never covers them) |
//! | `A` id(16) | automatic compaction's state: whether a summarizer failed since the last manual compaction |
//! | `K` id(16) key(32) | an append's idempotency key (blake3 of it): the request's fingerprint and what it stored |
//! | `L` id(16) | a fork's lineage: parent id, records shared, base address and turn state |
//! | `S` file(4 BE) | segment file `file` was written by a bulk append that committed (empty value; also in the blob tree, see `segments.rs`) |
//! | `D` id(16) | a deleted conversation whose keys are still being removed (`delete.rs`): its name, length and when it was deleted |
//! | `Z` id(16) seq(8 BE) | a redaction of record `seq` decided and not finished (`redact.rs`): the blob and segment bodies still to remove, and the redaction event still to append |
//! | `B` id(16) | a bulk append's commit under way (`bulk.rs`): whether it creates the conversation, and its segment files (4 BE each); removed by the batch that makes it visible |
//!
//! Blobs (long texts, by content hash) live in the tree [`BLOBS`], keyed by
//! their 32-byte hash: sled keeps values inside its B-tree pages, so a long
//! value beside small, often-rewritten keys would be rewritten with them. An
//! append writes its new blobs before its records; a crash between the two
//! leaves only unreferenced blobs.
//!
//! In a format-2 database the values of `c` keys and of blobs say where
//! the bytes are: inline, or in the segment files (`segments.rs`) for
//! large appends.

use crate::ids::ConversationId;

pub(crate) const FORMAT: &[u8] = b"F";
/// The database's id ([`crate::Store::database_id`]): 16 bytes.
pub(crate) const DATABASE_ID: &[u8] = b"I";
/// Present in an encrypted database ([`crate::crypto`]): the check of its
/// master key.
pub(crate) const ENCRYPTION: &[u8] = b"E";
pub(crate) const CONVERSATION: u8 = b'C';
pub(crate) const NAME: u8 = b'N';
pub(crate) const CHUNK: u8 = b'c';
pub(crate) const TURN: u8 = b't';
pub(crate) const OVERLAY: u8 = b'o';
pub(crate) const OVERLAYS: u8 = b'O';
pub(crate) const OVERLAY_RANGES: u8 = b'R';
pub(crate) const CALLS: u8 = b'k';
pub(crate) const LINEAGE: u8 = b'L';
pub(crate) const IDEMPOTENCY: u8 = b'K';
pub(crate) const STAGING: u8 = b'T';
pub(crate) const PINS: u8 = b'P';
pub(crate) const AUTO: u8 = b'A';
pub(crate) const SEGMENT_FILE: u8 = b'S';
pub(crate) const PENDING_BULK: u8 = b'B';
/// A deleted conversation whose keys are still being removed (`delete.rs`).
pub(crate) const DELETED: u8 = b'D';
/// The tags of every key under a conversation's id (all but its name).
pub(crate) const CONVERSATION_TAGS: &[u8] = b"CctsujqToORkvwxPAKLBZ";
/// A redaction decided and not finished (`redact.rs`), by conversation and
/// seq.
pub(crate) const REDACTING: u8 = b'Z';
/// A retention pass's batch whose blobs and old bodies are not yet
/// removed (`retain.rs`), by conversation, time and batch.
pub(crate) const COLLECTING: u8 = b'Y';
pub(crate) const VIEW: u8 = b'v';
pub(crate) const VIEW_BLOCK: u8 = b'w';
pub(crate) const VIEW_CALLS: u8 = b'x';
/// The name of the tree that holds blobs.
pub(crate) const BLOBS: &str = "blobs";

/// The format version this build writes to new databases. It reads and
/// writes formats 1 and 2 too: format 1 keeps chunks and blobs inside
/// sled; format 2 keeps the bodies of large appends in segment files
/// (`segments.rs`); format 3 also stages small appends (`staging.rs`),
/// which a build that reads only format 2 would not see; format 4 keeps
/// compactions in a directory per chunk rather than a key each; format 5
/// also files each compaction by its turn range, so that the compactions
/// meeting some turns are found without reading the others; format 6 files
/// them there without their record bytes, which are read from the overlay
/// directories; format 7 stores new records committed (`codec::Layout`),
/// which a format-6 build would misread; format 8 files each compaction's
/// timestamp beside its turn range, so that the compactions outranking one
/// are found without reading the others; format 9 writes no turn index
/// entry for a staged chunk (readers take a staged chunk's turns from the
/// chunk itself), which a format-8 build would miss.
pub const FORMAT_VERSION: u32 = 9;

/// The first format version that stages small appends.
pub(crate) const STAGING_FORMAT: u32 = 3;

/// The first format version that keeps a chunk's compactions in one
/// overlay directory beside it (earlier ones: a key per compaction).
pub(crate) const OVERLAY_DIRECTORY_FORMAT: u32 = 4;

/// The first format version that files compactions by turn range
/// ([`overlay_range`]).
pub(crate) const OVERLAY_RANGE_FORMAT: u32 = 5;

/// The first format version whose overlay range keys leave each
/// compaction's record bytes to its chunk's overlay directory.
pub(crate) const BARE_RANGE_FORMAT: u32 = 6;

/// The first format version that stores new records committed: their
/// addresses hash each text's hash rather than its bytes.
pub(crate) const COMMITTED_FORMAT: u32 = 7;

/// The first format version whose overlay range keys hold each
/// compaction's timestamp ([`crate::codec::RangeEntry`]).
pub(crate) const RANKED_RANGE_FORMAT: u32 = 8;

/// The first format version that writes no turn index entries for staged
/// chunks (`u`): a staged log is at most a few hundred records, and an
/// entry per one-event append was a quarter of the keys it wrote.
pub(crate) const UNINDEXED_STAGING_FORMAT: u32 = 9;

/// The oldest format version this build reads and writes.
pub(crate) const OLDEST_FORMAT: u32 = 1;

pub(crate) fn conversation(id: &ConversationId) -> Vec<u8> {
    prefixed(CONVERSATION, id.as_bytes())
}

pub(crate) fn pins(id: &ConversationId) -> Vec<u8> {
    prefixed(PINS, id.as_bytes())
}

pub(crate) fn auto(id: &ConversationId) -> Vec<u8> {
    prefixed(AUTO, id.as_bytes())
}

pub(crate) fn idempotency(id: &ConversationId, key: &[u8; 32]) -> Vec<u8> {
    let mut k = prefixed(IDEMPOTENCY, id.as_bytes());
    k.extend_from_slice(key);
    k
}

pub(crate) fn lineage(id: &ConversationId) -> Vec<u8> {
    prefixed(LINEAGE, id.as_bytes())
}

/// The key recording that bulk-written segment file `number` is committed:
/// in the default tree and, when the commit stores blob references, in the
/// blob tree (whose other keys are 32-byte hashes).
pub(crate) fn segment_file(number: u32) -> Vec<u8> {
    prefixed(SEGMENT_FILE, &number.to_be_bytes())
}

/// A bulk append's commit under way for conversation `id`.
pub(crate) fn pending_bulk(id: &ConversationId) -> Vec<u8> {
    prefixed(PENDING_BULK, id.as_bytes())
}

/// The conversation id of a key `tag` id(16) ..., if it is that long.
pub(crate) fn conversation_of(key: &[u8]) -> Option<ConversationId> {
    key.get(1..17)
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
        .map(ConversationId::from_bytes)
}

pub(crate) fn redacting(id: &ConversationId, seq: u64) -> Vec<u8> {
    numbered(REDACTING, id, &[seq])
}

pub(crate) fn collecting(id: &ConversationId, time: u64, batch: u64) -> Vec<u8> {
    numbered(COLLECTING, id, &[time, batch])
}

pub(crate) fn collecting_prefix(id: &ConversationId) -> Vec<u8> {
    numbered(COLLECTING, id, &[])
}

pub(crate) fn deleted(id: &ConversationId) -> Vec<u8> {
    prefixed(DELETED, id.as_bytes())
}

pub(crate) fn name(name: &str) -> Vec<u8> {
    prefixed(NAME, name.as_bytes())
}

/// Where a chunk and its side data are kept: among the settled chunks, or
/// the staged ones (`staging.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Space {
    Settled,
    Staged,
}

impl Space {
    /// The tags of its chunk, turn index, call directory and overlay
    /// directory keys.
    fn tags(self) -> (u8, u8, u8, u8) {
        match self {
            Space::Settled => (CHUNK, TURN, CALLS, OVERLAYS),
            Space::Staged => (b's', b'u', b'j', b'q'),
        }
    }

    /// The tag of its chunk keys.
    pub(crate) fn chunk_tag(self) -> u8 {
        self.tags().0
    }

    /// The space of chunk key `key`.
    pub(crate) fn of_chunk(key: &[u8]) -> Option<Space> {
        [Space::Settled, Space::Staged]
            .into_iter()
            .find(|space| key.first() == Some(&space.chunk_tag()))
    }
}

pub(crate) fn staging(id: &ConversationId) -> Vec<u8> {
    prefixed(STAGING, id.as_bytes())
}

/// The prefix of every chunk key of a conversation in `space`.
pub(crate) fn chunks(space: Space, id: &ConversationId) -> Vec<u8> {
    numbered(space.tags().0, id, &[])
}

pub(crate) fn chunk(space: Space, id: &ConversationId, first_seq: u64) -> Vec<u8> {
    numbered(space.tags().0, id, &[first_seq])
}

/// The prefix of every turn index key of a conversation in `space`.
pub(crate) fn turns(space: Space, id: &ConversationId) -> Vec<u8> {
    numbered(space.tags().1, id, &[])
}

pub(crate) fn turn(space: Space, id: &ConversationId, last_turn: u64, first_seq: u64) -> Vec<u8> {
    numbered(space.tags().1, id, &[last_turn, first_seq])
}

/// The (last turn, first seq) of a turn index key.
pub(crate) fn turn_parts(key: &[u8]) -> Option<(u64, u64)> {
    Some((be_u64(key.get(17..25)?)?, be_u64(key.get(25..33)?)?))
}

/// The prefix of every call directory key of a conversation in `space`.
pub(crate) fn call_directories(space: Space, id: &ConversationId) -> Vec<u8> {
    numbered(space.tags().2, id, &[])
}

pub(crate) fn call_directory(space: Space, id: &ConversationId, first_seq: u64) -> Vec<u8> {
    numbered(space.tags().2, id, &[first_seq])
}

/// The prefix of every overlay directory key of a conversation in `space`
/// (format 4).
pub(crate) fn overlay_directories(space: Space, id: &ConversationId) -> Vec<u8> {
    numbered(space.tags().3, id, &[])
}

pub(crate) fn overlay_directory(space: Space, id: &ConversationId, first_seq: u64) -> Vec<u8> {
    numbered(space.tags().3, id, &[first_seq])
}

/// The level of a compaction covering turns `from..=to` in the overlay
/// range keys: the number of bits of `to - from`, 0 to 64. Its range
/// starts in bucket [`overlay_range_bucket`]`(from, level)`, whose turns
/// are a multiple of `2^level` wide, and ends in that bucket or the next:
/// the ranges meeting turns `a..=b` are, at each level, among those filed
/// in the buckets of `a` (less one) to `b`.
pub(crate) fn overlay_range_level(from: u64, to: u64) -> u8 {
    (64 - to.saturating_sub(from).leading_zeros()) as u8
}

/// The bucket of turn `turn` at level `level`: `2^(level + 4)` turns wide,
/// so that the compactions an append files at a level share few keys.
pub(crate) fn overlay_range_bucket(turn: u64, level: u8) -> u64 {
    turn.checked_shr(u32::from(level) + OVERLAY_RANGE_BUCKET_BITS)
        .unwrap_or(0)
}

/// A bucket is `2^(level + 4)` turns wide.
const OVERLAY_RANGE_BUCKET_BITS: u32 = 4;

/// The key of the compactions of `id` an append files at `level` and
/// `bucket`, the first of them being record `first_seq` (format 5).
pub(crate) fn overlay_range(
    id: &ConversationId,
    level: u8,
    bucket: u64,
    first_seq: u64,
) -> Vec<u8> {
    let mut key = overlay_range_prefix(id, level);
    key.extend_from_slice(&bucket.to_be_bytes());
    key.extend_from_slice(&first_seq.to_be_bytes());
    key
}

/// The number of overlay range levels (0 to 64).
pub(crate) const OVERLAY_RANGE_LEVELS: u8 = 65;

/// The prefix of every overlay range key of `id` at `level`.
pub(crate) fn overlay_range_prefix(id: &ConversationId, level: u8) -> Vec<u8> {
    let mut key = prefixed(OVERLAY_RANGES, id.as_bytes());
    key.push(level);
    key
}

/// The prefix of every overlay range key of `id`.
pub(crate) fn overlay_ranges(id: &ConversationId) -> Vec<u8> {
    prefixed(OVERLAY_RANGES, id.as_bytes())
}

/// The (level, bucket, first seq) of an overlay range key.
pub(crate) fn overlay_range_parts(key: &[u8]) -> Option<(u8, u64, u64)> {
    if key.len() != 34 {
        return None;
    }
    Some((key[17], be_u64(&key[18..26])?, be_u64(&key[26..34])?))
}

/// The prefix of every overlay key of a conversation (formats 1-3).
pub(crate) fn overlays(id: &ConversationId) -> Vec<u8> {
    numbered(OVERLAY, id, &[])
}

pub(crate) fn overlay(id: &ConversationId, seq: u64) -> Vec<u8> {
    numbered(OVERLAY, id, &[seq])
}

/// The prefix of every view state key of a conversation.
pub(crate) fn views(id: &ConversationId) -> Vec<u8> {
    numbered(VIEW, id, &[])
}

pub(crate) fn view(id: &ConversationId, view: [u8; 8]) -> Vec<u8> {
    let mut key = numbered(VIEW, id, &[]);
    key.extend_from_slice(&view);
    key
}

/// The prefix of every block key of a view.
pub(crate) fn view_blocks(id: &ConversationId, view: [u8; 8]) -> Vec<u8> {
    let mut key = numbered(VIEW_BLOCK, id, &[]);
    key.extend_from_slice(&view);
    key
}

pub(crate) fn view_block(id: &ConversationId, view: [u8; 8], first_turn: u64) -> Vec<u8> {
    let mut key = view_blocks(id, view);
    key.extend_from_slice(&first_turn.to_be_bytes());
    key
}

/// The prefix of every call index key of a view.
pub(crate) fn view_calls_all(id: &ConversationId, view: [u8; 8]) -> Vec<u8> {
    let mut key = numbered(VIEW_CALLS, id, &[]);
    key.extend_from_slice(&view);
    key
}

pub(crate) fn view_calls(id: &ConversationId, view: [u8; 8], bucket: u16) -> Vec<u8> {
    let mut key = view_calls_all(id, view);
    key.extend_from_slice(&bucket.to_be_bytes());
    key
}

/// The first turn of a view block key.
pub(crate) fn view_block_turn(key: &[u8]) -> Option<u64> {
    be_u64(key.get(25..33)?)
}

/// The first number after the conversation id of a chunk, call directory,
/// overlay directory or overlay key: the seq it is keyed by.
pub(crate) fn key_seq(key: &[u8]) -> Option<u64> {
    be_u64(key.get(17..25)?)
}

/// `tag`, the conversation id, then each number big-endian (so keys sort
/// by the numbers).
fn numbered(tag: u8, id: &ConversationId, numbers: &[u64]) -> Vec<u8> {
    let mut key = prefixed(tag, id.as_bytes());
    for n in numbers {
        key.extend_from_slice(&n.to_be_bytes());
    }
    key
}

fn prefixed(tag: u8, rest: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + rest.len() + 16);
    key.push(tag);
    key.extend_from_slice(rest);
    key
}

fn be_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}
