//! The stored forms of records and chunks. The only file that names bincode.
//!
//! A *record* is the canonical encoding of one event: bincode (varint
//! integers, little-endian) of [`RecordRepr`]. Its bytes are what the hash
//! chain hashes. A text longer than [`INLINE_MAX`] bytes is not in the record:
//! the record holds its [`BlobRef`] (blake3 hash and length) and the text is
//! stored once under its hash. Records are grouped in *chunks* (one stored
//! value each: in sled, or in a segment file) of up to [`CHUNK_MAX_ENTRIES`]
//! entries; an entry holds the record's
//! turn, the first eight bytes of its address (to name the first corrupt
//! record) and the record bytes.
//!
//! From format 7 on a record is stored *committed* ([`Layout::Committed`]):
//! its address hashes its *frame* (the record without its short texts) and
//! each short text's blake3 hash, not the texts' bytes. A redaction can
//! then remove a text, keep its hash, and leave every other field
//! provable. Readers tell the layouts apart by the first byte
//! ([`COMMITTED_MARK`]), so a database holds both: records copied from an
//! older database keep their bytes and their addresses.

use std::borrow::Cow;
use std::ops::Range;

use bincode::Options;
use serde::{Deserialize, Serialize};

use crate::backend::SegmentRef;
use crate::error::{StoreError, StoreResult};
use crate::event::{
    Compaction, Event, EventKind, EventType, ReasoningPolicy, Timestamp, ToolCallPolicy,
};
use crate::hash::{Address, BlobHash};
use crate::json::Json;
use crate::keys;

mod chains;
pub(crate) use chains::link_runs;

/// Texts longer than this many bytes are stored as blobs, once per content.
pub const INLINE_MAX: usize = 1024;
/// A chunk holds at most this many records.
pub(crate) const CHUNK_MAX_ENTRIES: usize = 1024;
/// A chunk stops growing once its records pass this many bytes.
pub(crate) const CHUNK_MAX_BYTES: usize = 256 * 1024;
/// The largest value the decoder accepts (a record, chunk or metadata).
const DECODE_LIMIT: u64 = 1 << 30;

fn options() -> impl Options {
    bincode::DefaultOptions::new()
        .with_varint_encoding()
        .with_little_endian()
        .reject_trailing_bytes()
}

/// Encodes a stored value.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs into a Vec cannot fail.
    options().serialize(value).unwrap_or_default()
}

/// Decodes a stored value; `what` names it in the error.
pub(crate) fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8], what: &str) -> StoreResult<T> {
    decode_named(bytes, &|| what.to_owned())
}

/// [`decode`], naming the value only if it fails: for values decoded by
/// the million, where formatting a name each time would cost more than
/// the decoding.
pub(crate) fn decode_named<'a, T: Deserialize<'a>>(
    bytes: &'a [u8],
    what: &dyn Fn() -> String,
) -> StoreResult<T> {
    options()
        .with_limit(DECODE_LIMIT)
        .deserialize(bytes)
        .map_err(|e| StoreError::Corrupt {
            what: format!("{}: {e}", what()),
        })
}

/// A text in a record: inline, or a reference to a stored blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum TextRepr<'a> {
    /// The text itself.
    Inline(&'a str),
    /// A text stored by content hash.
    Blob(BlobRef),
    /// A text removed by a redaction: what its hash and length were (see
    /// [`Envelope`]).
    Redacted(BlobRef),
    /// In a committed record's frame only: a short text, stored after the
    /// frame. [`decode_record`] never returns it.
    Beside,
}

/// The text a redacted text field reads as.
pub const REDACTED_TEXT: &str = "[redacted]";
/// The JSON a redacted JSON field (arguments, delta, payload, meta) reads
/// as.
pub const REDACTED_JSON: &str = r#"{"redacted":true}"#;

/// The first byte of a redacted record's stored bytes. A record's own
/// encoding starts with its timestamp as a bincode varint, whose first
/// byte is never 255.
pub(crate) const REDACTED_MARK: u8 = 0xFF;

/// The first byte of a committed record's bytes ([`Layout::Committed`]):
/// like [`REDACTED_MARK`], never the first byte of a timestamp's varint
/// (254 would announce a 128-bit integer).
pub(crate) const COMMITTED_MARK: u8 = 0xFE;

/// After [`COMMITTED_MARK`] and the frame, one entry per text in field
/// order, starting with one of these: a short text present (its length
/// and bytes follow) or redacted (its hash and length follow); a long text
/// present or redacted (its reference is in the frame; nothing follows).
const SHORT_PRESENT: u8 = 0;
const SHORT_REDACTED: u8 = 1;
const BLOB_PRESENT: u8 = 2;
const BLOB_REDACTED: u8 = 3;

/// How a record's bytes are laid out, and so what its address commits to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Formats 1 to 6: the bincode of [`RecordRepr`], short texts inline;
    /// the address hashes every byte.
    Plain,
    /// Format 7: [`COMMITTED_MARK`], the frame's length (a varint), the
    /// frame (the bincode of [`RecordRepr`] with each short text as
    /// [`TextRepr::Beside`]), then an entry per text. The address hashes
    /// the frame and each short text's hash and length
    /// ([`committed_address`]), so it commits to every text through its
    /// hash.
    Committed,
    /// An encrypted database's records ([`crate::crypto`]): stored as
    /// [`Layout::Committed`], with every text beside the frame, none as a
    /// blob, however long. A blob is shared by content with every
    /// conversation that holds the text, so it could not be encrypted
    /// under one conversation's key; kept in the record, a text is
    /// encrypted, and shredded, with its conversation. Only new records
    /// are encoded so: reading one, [`Layout::of`] says `Committed`.
    Sealed,
    /// An encrypted database's view records: [`Layout::Plain`], with every
    /// text in the record (a view's records are plain, so that a view
    /// can show a text redacted outside a redaction's envelope).
    SealedView,
}

impl Layout {
    /// The layout a database of `format` writes new records in.
    pub(crate) fn of_format(format: u32) -> Layout {
        if format >= crate::keys::COMMITTED_FORMAT {
            Layout::Committed
        } else {
            Layout::Plain
        }
    }

    /// The layout of a record stored as `bytes`: its own, or for a
    /// redacted record that of the record its envelope keeps.
    pub(crate) fn of_stored(bytes: &[u8]) -> Layout {
        Layout::of(inner_record(bytes).unwrap_or(bytes))
    }

    /// The layout of a record's own bytes (a redacted record's: those in
    /// its envelope).
    pub(crate) fn of(record: &[u8]) -> Layout {
        if record.first() == Some(&COMMITTED_MARK) {
            Layout::Committed
        } else {
            Layout::Plain
        }
    }
}

/// A bincode varint at the start of `bytes`: its value and length. Only
/// the shortest encoding of a value is taken (the one bincode writes): a
/// committed record's address hashes the lengths its varints give, not
/// their bytes, so a longer encoding of the same length would be other
/// stored bytes under the same address.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let wide = |n: usize, above: u64| -> Option<u64> {
        let mut value = [0u8; 8];
        value[..n].copy_from_slice(bytes.get(1..=n)?);
        let value = u64::from_le_bytes(value);
        (value > above).then_some(value)
    };
    match *bytes.first()? {
        b @ 0..=250 => Some((u64::from(b), 1)),
        251 => Some((wide(2, 250)?, 3)),
        252 => Some((wide(4, u64::from(u16::MAX))?, 5)),
        253 => Some((wide(8, u64::from(u32::MAX))?, 9)),
        _ => None,
    }
}

/// A committed record's frame and its entries (`rest`: the bytes after
/// [`COMMITTED_MARK`]).
fn split_committed(rest: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, n) = varint(rest)?;
    let end = n.checked_add(usize::try_from(len).ok()?)?;
    Some((rest.get(n..end)?, rest.get(end..)?))
}

/// How a redacted record is stored: [`REDACTED_MARK`], then this. The
/// record's address can no longer be computed from its bytes (a text it
/// hashed is gone), so it is kept here; the next record's address, which
/// hashes it, is what binds it to the chain.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Envelope<'a> {
    /// The record's address, as computed before the redaction.
    pub address: Address,
    /// When it was redacted.
    pub time: Timestamp,
    /// The conversation whose log holds the redaction event.
    pub by: [u8; 16],
    /// Why, as given.
    pub reason: &'a str,
    /// The record's encoding with its redacted text replaced by
    /// [`TextRepr::Redacted`].
    #[serde(with = "serde_bytes")]
    pub record: &'a [u8],
}

impl Envelope<'_> {
    /// The bytes a redacted record is stored as: [`REDACTED_MARK`], then
    /// the envelope.
    pub(crate) fn stored(&self) -> Vec<u8> {
        let mut bytes = vec![REDACTED_MARK];
        bytes.extend(encode(self));
        bytes
    }
}

/// The envelope of `bytes` if the record is redacted.
pub(crate) fn envelope(bytes: &[u8]) -> StoreResult<Option<Envelope<'_>>> {
    match bytes.split_first() {
        Some((&REDACTED_MARK, rest)) => match read_envelope(rest) {
            Some(envelope) => Ok(Some(envelope)),
            None => Ok(Some(decode(rest, "redacted record")?)),
        },
        _ => Ok(None),
    }
}

/// An envelope (`rest`: what follows the mark) read by hand: a redacted
/// record is read by the million, and bincode reads the envelope's fixed
/// arrays a byte at a time. `None` where it does not parse as the
/// encoding of [`Envelope`] (varint lengths, little endian: `options`);
/// [`envelope`] then decodes it with bincode, which says why.
fn read_envelope(rest: &[u8]) -> Option<Envelope<'_>> {
    // The address (32 bytes), the time (a zigzag varint), the
    // conversation (16 bytes), the reason and the record (each a length
    // and its bytes).
    let address = Address::from_bytes(rest.get(..32)?.try_into().ok()?);
    let (zigzag, n) = varint(rest.get(32..)?)?;
    let micros = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
    let time = Timestamp::from_micros(micros)?;
    let mut at = 32 + n;
    let by: [u8; 16] = rest.get(at..at + 16)?.try_into().ok()?;
    at += 16;
    let mut field = || -> Option<&[u8]> {
        let (len, n) = varint(rest.get(at..)?)?;
        let start = at.checked_add(n)?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        at = end;
        rest.get(start..end)
    };
    let reason = std::str::from_utf8(field()?).ok()?;
    let record = field()?;
    (at == rest.len()).then_some(Envelope {
        address,
        time,
        by,
        reason,
        record,
    })
}

/// The record bytes of `bytes`: its own, or a redacted record's from its
/// envelope.
fn inner_record(bytes: &[u8]) -> StoreResult<&[u8]> {
    Ok(envelope(bytes)?.map_or(bytes, |e| e.record))
}

/// The address of the record stored as `bytes` after `parent`: the chain
/// step, or the address a redacted record keeps.
pub(crate) fn link(parent: &Address, bytes: &[u8]) -> Address {
    match bytes.split_first() {
        Some((&REDACTED_MARK, rest)) if rest.len() >= 32 => {
            let mut address = [0u8; 32];
            address.copy_from_slice(&rest[..32]);
            Address::from_bytes(address)
        }
        // Not a record if it does not parse: `verify` names it when it
        // fails to decode.
        Some((&COMMITTED_MARK, rest)) => {
            committed_address(parent, rest).unwrap_or_else(|| parent.child(bytes))
        }
        _ => parent.child(bytes),
    }
}

/// The address of a committed record (`rest`: its bytes after
/// [`COMMITTED_MARK`]) after `parent`: blake3 of the parent, the mark, the
/// frame and, for each short text in field order, its blake3 hash and its
/// length (u64, little-endian). The mark keeps it apart from any plain
/// record's address, so a committed record cannot be passed off as plain
/// (whose redactions prove less) under the same address. A redacted short text's entry holds that hash and
/// length, so the address stays computable without the text. `None` where
/// the entries do not parse.
fn committed_address(parent: &Address, rest: &[u8]) -> Option<Address> {
    let (frame, mut entries) = split_committed(rest)?;
    let mut hasher = frame_hasher(parent, frame);
    while !entries.is_empty() {
        match next_entry(&mut entries)? {
            Entry::Short(text) => {
                hasher.update(BlobHash::of(text).as_bytes());
                hasher.update(&(text.len() as u64).to_le_bytes());
            }
            Entry::ShortRedacted(blob) => {
                hasher.update(blob.hash.as_bytes());
                hasher.update(&blob.len.to_le_bytes());
            }
            Entry::Blob | Entry::BlobRedacted => {}
        }
    }
    Some(Address::from_hasher(&hasher))
}

/// A hasher of a committed record's address after `parent`, given the
/// mark and `frame`: the texts' digests follow ([`committed_address`]).
fn frame_hasher(parent: &Address, frame: &[u8]) -> blake3::Hasher {
    let mut hasher = parent.hasher();
    hasher.update(&[COMMITTED_MARK]);
    hasher.update(frame);
    hasher
}

/// An entry after a committed record's frame (see [`Layout::Committed`]).
enum Entry<'b> {
    /// A short text's bytes.
    Short(&'b [u8]),
    /// A short text redacted: its hash and length.
    ShortRedacted(BlobRef),
    /// A long text, referred to by the frame.
    Blob,
    /// A long text redacted.
    BlobRedacted,
}

/// The entry at the start of `entries`, which moves past it; `None` if it
/// is cut short or of no known kind. The one parser of entries, for the
/// address and the decoding alike.
fn next_entry<'b>(entries: &mut &'b [u8]) -> Option<Entry<'b>> {
    let (&tag, rest) = entries.split_first()?;
    let (entry, rest) = match tag {
        SHORT_PRESENT => {
            let (len, n) = varint(rest)?;
            let end = n.checked_add(usize::try_from(len).ok()?)?;
            (Entry::Short(rest.get(n..end)?), rest.get(end..)?)
        }
        SHORT_REDACTED => {
            let hash: [u8; 32] = rest.get(..32)?.try_into().ok()?;
            let (len, n) = varint(&rest[32..])?;
            let blob = BlobRef {
                hash: BlobHash::from_bytes(hash),
                len,
            };
            (Entry::ShortRedacted(blob), rest.get(32 + n..)?)
        }
        BLOB_PRESENT => (Entry::Blob, rest),
        BLOB_REDACTED => (Entry::BlobRedacted, rest),
        _ => return None,
    };
    *entries = rest;
    Some(entry)
}

/// [`link`] for a reader that takes bytes on trust only if they check
/// (salvage): `None` for a redacted record whose envelope does not hash to
/// the address it keeps (see [`redaction_proven`]), where [`link`] would
/// give that address all the same.
pub(crate) fn link_checked(parent: &Address, bytes: &[u8]) -> Option<Address> {
    let checked = bytes.first() != Some(&REDACTED_MARK) || redaction_proven(parent, bytes).is_ok();
    checked.then(|| link(parent, bytes))
}

/// A reference to a stored text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlobRef {
    /// blake3 of the text's bytes.
    pub hash: BlobHash,
    /// Its length in bytes.
    pub len: u64,
}

/// The canonical encoding of an event. Field and variant order are part of
/// the format.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RecordRepr<'a> {
    pub timestamp: Timestamp,
    #[serde(borrow)]
    pub meta: Option<TextRepr<'a>>,
    #[serde(borrow)]
    pub body: BodyRepr<'a>,
}

/// Variants in the order of [`EventType::ALL`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum BodyRepr<'a> {
    TurnStart,
    User(#[serde(borrow)] TextRepr<'a>),
    Assistant(#[serde(borrow)] TextRepr<'a>),
    Reasoning(#[serde(borrow)] TextRepr<'a>),
    ToolCall {
        id: &'a str,
        name: &'a str,
        #[serde(borrow)]
        arguments: TextRepr<'a>,
    },
    ToolResult {
        id: &'a str,
        #[serde(borrow)]
        content: TextRepr<'a>,
        is_error: bool,
    },
    System(#[serde(borrow)] TextRepr<'a>),
    Config(#[serde(borrow)] TextRepr<'a>),
    Extension {
        name: &'a str,
        #[serde(borrow)]
        payload: TextRepr<'a>,
    },
    Compaction(#[serde(borrow)] CompactionRepr<'a>),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CompactionRepr<'a> {
    pub from_turn: u64,
    pub to_turn: u64,
    #[serde(borrow)]
    pub summary: Option<TextRepr<'a>>,
    pub reasoning: Option<ReasoningPolicy>,
    pub tool_calls: Option<Cow<'a, ToolCallPolicy>>,
    pub revert: Option<bool>,
    #[serde(borrow)]
    pub info: Option<TextRepr<'a>>,
}

impl BodyRepr<'_> {
    /// For a compaction: the turns it covers, `from_turn..=to_turn`.
    pub(crate) fn compaction_span(&self) -> Option<(u64, u64)> {
        match self {
            BodyRepr::Compaction(c) => Some((c.from_turn, c.to_turn)),
            _ => None,
        }
    }

    pub(crate) fn event_type(&self) -> EventType {
        match self {
            BodyRepr::TurnStart => EventType::TurnStart,
            BodyRepr::User(_) => EventType::User,
            BodyRepr::Assistant(_) => EventType::Assistant,
            BodyRepr::Reasoning(_) => EventType::Reasoning,
            BodyRepr::ToolCall { .. } => EventType::ToolCall,
            BodyRepr::ToolResult { .. } => EventType::ToolResult,
            BodyRepr::System(_) => EventType::System,
            BodyRepr::Config(_) => EventType::Config,
            BodyRepr::Extension { .. } => EventType::Extension,
            BodyRepr::Compaction(_) => EventType::Compaction,
        }
    }
}

impl<'a> RecordRepr<'a> {
    /// Every text of the record, in field order.
    pub(crate) fn texts(&self) -> impl Iterator<Item = TextRepr<'a>> + '_ {
        let body: [Option<TextRepr<'a>>; 2] = match &self.body {
            BodyRepr::TurnStart => [None, None],
            BodyRepr::User(t)
            | BodyRepr::Assistant(t)
            | BodyRepr::Reasoning(t)
            | BodyRepr::System(t)
            | BodyRepr::Config(t)
            | BodyRepr::ToolCall { arguments: t, .. }
            | BodyRepr::ToolResult { content: t, .. }
            | BodyRepr::Extension { payload: t, .. } => [Some(*t), None],
            BodyRepr::Compaction(c) => [c.summary, c.info],
        };
        self.meta.into_iter().chain(body.into_iter().flatten())
    }

    /// Every text of the record, in field order, to replace.
    pub(crate) fn texts_mut(&mut self) -> impl Iterator<Item = &mut TextRepr<'a>> {
        let body: [Option<&mut TextRepr<'a>>; 2] = match &mut self.body {
            BodyRepr::TurnStart => [None, None],
            BodyRepr::User(t)
            | BodyRepr::Assistant(t)
            | BodyRepr::Reasoning(t)
            | BodyRepr::System(t)
            | BodyRepr::Config(t)
            | BodyRepr::ToolCall { arguments: t, .. }
            | BodyRepr::ToolResult { content: t, .. }
            | BodyRepr::Extension { payload: t, .. } => [Some(t), None],
            BodyRepr::Compaction(c) => [c.summary.as_mut(), c.info.as_mut()],
        };
        self.meta
            .as_mut()
            .into_iter()
            .chain(body.into_iter().flatten())
    }
}

/// The stored bytes of `record` in `layout`. Its texts are inline, blobs
/// or redacted (a redacted text's length says whether it was a blob).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn encode_record(record: &RecordRepr<'_>, layout: Layout) -> Vec<u8> {
    match layout {
        Layout::Plain | Layout::SealedView => encode(record),
        Layout::Committed => encode_committed(record, None, None),
        // No text long: a sealed record's are all short entries.
        Layout::Sealed => encode_committed(record, None, Some(&[])),
    }
}

/// Encodes `record`, a redacted copy of the record stored as `original`
/// (its own bytes or a redaction's envelope), in the original's layout;
/// in a committed one each redacted text keeps the entry kind (short or
/// long) its text had there, which its length alone does not tell for a
/// [`Layout::Sealed`] record's long texts.
pub(crate) fn encode_redacted(record: &RecordRepr<'_>, original: &[u8]) -> Vec<u8> {
    let inner = inner_record(original).unwrap_or(original);
    match inner.split_first() {
        Some((&COMMITTED_MARK, rest)) => {
            let long = entry_kinds(rest);
            encode_committed(record, None, long.as_deref())
        }
        _ => encode(record),
    }
}

/// For each text of a committed record (`rest`: its bytes after
/// [`COMMITTED_MARK`]), in field order: whether it is a long text (its
/// reference in the frame). `None` where the entries do not parse.
fn entry_kinds(rest: &[u8]) -> Option<Vec<bool>> {
    let (_, mut entries) = split_committed(rest)?;
    let mut long = Vec::new();
    while !entries.is_empty() {
        long.push(matches!(
            next_entry(&mut entries)?,
            Entry::Blob | Entry::BlobRedacted
        ));
    }
    Some(long)
}

/// Appends `n` as a bincode varint.
fn push_varint(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=250 => out.push(n as u8),
        251..=0xFFFF => {
            out.push(251);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xFFFF_FFFF => {
            out.push(252);
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        _ => {
            out.push(253);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// A committed record's bytes; with `digests`, also what its address
/// hashes after the frame (each short text's hash and length), gathered
/// there so that chaining it costs one hash.
///
/// A redacted text is written as a long one's entry where `long` says so
/// for its field, or else (no `long`) where its length is over
/// [`INLINE_MAX`].
fn encode_committed<'e>(
    record: &RecordRepr<'e>,
    mut digests: Option<&mut Digests<'e>>,
    long: Option<&[bool]>,
) -> Vec<u8> {
    let was_long = |index: usize, blob: BlobRef| match long {
        Some(long) => long.get(index).copied().unwrap_or(false),
        None => blob.len > INLINE_MAX as u64,
    };
    // The frame: each short text gives its place to a tag.
    let mut frame: RecordRepr<'_> = record.clone();
    let (mut entries_len, mut digested) = (0, 0);
    for (index, text) in frame.texts_mut().enumerate() {
        match *text {
            TextRepr::Inline(s) => {
                *text = TextRepr::Beside;
                entries_len += 10 + s.len();
                digested += 1;
            }
            TextRepr::Redacted(blob) if was_long(index, blob) => *text = TextRepr::Blob(blob),
            TextRepr::Redacted(_) => {
                *text = TextRepr::Beside;
                entries_len += 42;
                digested += 1;
            }
            TextRepr::Blob(_) | TextRepr::Beside => entries_len += 1,
        }
    }
    // Written once, into a buffer of the right size: this runs for every
    // record an import stores.
    let frame_len = options().serialized_size(&frame).unwrap_or_default();
    let mut out = Vec::with_capacity(10 + frame_len as usize + entries_len);
    out.push(COMMITTED_MARK);
    push_varint(&mut out, frame_len);
    // Serializing these plain structs into a Vec cannot fail.
    let _ = options().serialize_into(&mut out, &frame);
    if let Some(digests) = digests.as_deref_mut() {
        digests.bytes.reserve(40 * digested);
    }
    // The entries, from the texts as given, in the same order.
    for (index, text) in record.texts().enumerate() {
        match text {
            TextRepr::Inline(s) => {
                out.push(SHORT_PRESENT);
                push_varint(&mut out, s.len() as u64);
                out.extend_from_slice(s.as_bytes());
                if let Some(digests) = digests.as_deref_mut() {
                    digests.text(s.as_bytes());
                }
            }
            TextRepr::Blob(_) => out.push(BLOB_PRESENT),
            TextRepr::Redacted(blob) if was_long(index, blob) => out.push(BLOB_REDACTED),
            TextRepr::Redacted(blob) => {
                out.push(SHORT_REDACTED);
                out.extend_from_slice(blob.hash.as_bytes());
                push_varint(&mut out, blob.len);
                if let Some(digests) = digests.as_deref_mut() {
                    digests.known(blob);
                }
            }
            // Never given: decoding puts every short text back inline.
            TextRepr::Beside => out.push(SHORT_REDACTED),
        }
    }
    out
}

/// Decodes a committed record (`rest`: its bytes after
/// [`COMMITTED_MARK`]): the frame, its short texts put back inline.
fn decode_committed(rest: &[u8]) -> StoreResult<RecordRepr<'_>> {
    let corrupt = |why: &str| StoreError::Corrupt {
        what: format!("record: {why}"),
    };
    let (frame, mut entries) =
        split_committed(rest).ok_or_else(|| corrupt("its frame is cut short"))?;
    let mut record: RecordRepr<'_> = decode(frame, "record")?;
    for text in record.texts_mut() {
        let entry = next_entry(&mut entries)
            .ok_or_else(|| corrupt("a text's entry is missing, cut short or of no known kind"))?;
        *text = match (*text, entry) {
            (TextRepr::Beside, Entry::Short(bytes)) => TextRepr::Inline(
                std::str::from_utf8(bytes).map_err(|_| corrupt("a text is not valid UTF-8"))?,
            ),
            (TextRepr::Beside, Entry::ShortRedacted(blob))
            | (TextRepr::Blob(blob), Entry::BlobRedacted) => TextRepr::Redacted(blob),
            (TextRepr::Blob(blob), Entry::Blob) => TextRepr::Blob(blob),
            _ => return Err(corrupt("a text's entry does not match its frame")),
        };
    }
    if !entries.is_empty() {
        return Err(corrupt("bytes after its last text"));
    }
    Ok(record)
}

/// Checks a decoded log record's texts: none left as a frame's tag, and
/// a text redacted only in a redaction's envelope (`enveloped`), exactly
/// one there. Outside an envelope a committed record cannot hold one (an
/// entry turned into its hash would keep the address and remove the text
/// unseen); a plain one can, as a view shows it.
fn check_texts(record: &RecordRepr<'_>, enveloped: bool, committed: bool) -> StoreResult<()> {
    let (mut beside, mut redacted) = (0, 0);
    for text in record.texts() {
        match text {
            TextRepr::Beside => beside += 1,
            TextRepr::Redacted(_) => redacted += 1,
            TextRepr::Inline(_) | TextRepr::Blob(_) => {}
        }
    }
    let why = if beside > 0 {
        "a text kept beside outside a committed record"
    } else if enveloped && redacted != 1 {
        "a redacted record must have exactly one text redacted"
    } else if !enveloped && committed && redacted > 0 {
        "a text is redacted but the record is not"
    } else {
        return Ok(());
    };
    Err(StoreError::Corrupt {
        what: format!("record: {why}"),
    })
}

/// For a redacted record stored as `bytes` after `parent`: whether its
/// remaining fields are proven, that is whether what its envelope keeps
/// still hashes to the address it keeps. A committed record's always must
/// (`Err` if not: changed under its kept address); a plain one's can only
/// if the texts it lost were blobs ([`plain_redaction_proven`]). A record
/// that is not redacted is proven by its own address: `Ok(true)`.
pub(crate) fn redaction_proven(parent: &Address, bytes: &[u8]) -> Result<bool, String> {
    let Some(envelope) = envelope(bytes).map_err(|e| e.to_string())? else {
        return Ok(true);
    };
    match envelope.record.split_first() {
        Some((&COMMITTED_MARK, rest)) => {
            if committed_address(parent, rest) == Some(envelope.address) {
                Ok(true)
            } else {
                Err("redacted, and what it keeps does not hash to its address".to_owned())
            }
        }
        _ => Ok(plain_redaction_proven(parent, &envelope, envelope.record)),
    }
}

/// Whether a plain record's redaction is proven all the same: when every
/// text it lost was a blob, the record as appended held only the blob's
/// hash, so putting the reference back gives its bytes.
fn plain_redaction_proven(parent: &Address, envelope: &Envelope<'_>, inner: &[u8]) -> bool {
    let Ok(mut record) = decode::<RecordRepr<'_>>(inner, "record") else {
        return false;
    };
    for text in record.texts_mut() {
        match *text {
            TextRepr::Redacted(blob) if blob.len > INLINE_MAX as u64 => {
                *text = TextRepr::Blob(blob);
            }
            TextRepr::Redacted(_) | TextRepr::Beside => return false,
            TextRepr::Inline(_) | TextRepr::Blob(_) => {}
        }
    }
    parent.child(&encode(&record)) == envelope.address
}

/// A record ready to store: its canonical bytes and the texts it moved out.
pub(crate) struct EncodedRecord<'e> {
    pub bytes: Vec<u8>,
    /// For a committed record, what its address hashes after its frame
    /// (see [`committed_address`]), computed before the records are
    /// chained, in order (its texts' hashes by [`hash_digests`], many
    /// records' at once); empty otherwise.
    pub digests: Digests<'e>,
    pub event_type: EventType,
    pub blobs: Vec<(BlobHash, &'e str)>,
    /// The record's bytes plus the lengths of its blobs.
    pub size: u64,
    /// For a tool call: its id and name.
    pub call: Option<(&'e str, &'e str)>,
    /// For a compaction: the turns it covers, `from_turn..=to_turn`.
    pub span: Option<(u64, u64)>,
    /// The event's timestamp.
    pub timestamp: Timestamp,
}

/// What a committed record's address hashes after its frame: each short
/// text's hash and length. The texts' hashes are left to
/// [`hash_digests`], which computes those of many records at once.
#[derive(Default)]
pub(crate) struct Digests<'e> {
    bytes: Vec<u8>,
    /// The texts still to hash, with where their hash goes in `bytes`.
    unhashed: Vec<(usize, &'e [u8])>,
}

impl<'e> Digests<'e> {
    /// Adds the digest of `text`, its hash left to [`hash_digests`].
    fn text(&mut self, text: &'e [u8]) {
        self.unhashed.push((self.bytes.len(), text));
        self.bytes.extend_from_slice(&[0; 32]);
        self.bytes
            .extend_from_slice(&(text.len() as u64).to_le_bytes());
    }

    /// Adds the digest of a redacted text, whose hash is kept.
    fn known(&mut self, blob: BlobRef) {
        self.bytes.extend_from_slice(blob.hash.as_bytes());
        self.bytes.extend_from_slice(&blob.len.to_le_bytes());
    }
}

/// Hashes the texts `records` left unhashed ([`encode_event_unhashed`]),
/// all at once ([`crate::hash::hash_many`]).
pub(crate) fn hash_digests(records: &mut [EncodedRecord<'_>]) {
    let texts: Vec<&[u8]> = records
        .iter()
        .flat_map(|r| r.digests.unhashed.iter().map(|u| u.1))
        .collect();
    let mut hashes = vec![[0u8; 32]; texts.len()];
    crate::hash::hash_many(&texts, &mut hashes);
    let mut hashes = hashes.iter();
    for record in records {
        let digests = &mut record.digests;
        for (at, _) in digests.unhashed.drain(..) {
            if let Some(hash) = hashes.next() {
                digests.bytes[at..at + 32].copy_from_slice(hash);
            }
        }
    }
}

/// Encodes `event` canonically in `layout`, moving long texts out as
/// blobs.
pub(crate) fn encode_event(event: &Event, layout: Layout) -> EncodedRecord<'_> {
    let mut record = encode_event_unhashed(event, layout);
    hash_digests(std::slice::from_mut(&mut record));
    record
}

/// [`encode_event`] with its short texts' hashes still to compute:
/// [`hash_digests`] must run before its address is.
pub(crate) fn encode_event_unhashed(event: &Event, layout: Layout) -> EncodedRecord<'_> {
    let mut blobs = Vec::new();
    let most = match layout {
        Layout::Sealed | Layout::SealedView => usize::MAX,
        Layout::Plain | Layout::Committed => INLINE_MAX,
    };
    let mut text = |s| text_repr(s, most, &mut blobs);
    let meta = event.meta.as_ref().map(|m| text(m.as_str()));
    let body = match &event.kind {
        EventKind::TurnStart => BodyRepr::TurnStart,
        EventKind::User { text: t } => BodyRepr::User(text(t)),
        EventKind::Assistant { text: t } => BodyRepr::Assistant(text(t)),
        EventKind::Reasoning { text: t } => BodyRepr::Reasoning(text(t)),
        EventKind::ToolCall {
            id,
            name,
            arguments,
        } => BodyRepr::ToolCall {
            id,
            name,
            arguments: text(arguments.as_str()),
        },
        EventKind::ToolResult {
            id,
            content,
            is_error,
        } => BodyRepr::ToolResult {
            id,
            content: text(content),
            is_error: *is_error,
        },
        EventKind::System { text: t } => BodyRepr::System(text(t)),
        EventKind::Config { delta } => BodyRepr::Config(text(delta.as_str())),
        EventKind::Extension { name, payload } => BodyRepr::Extension {
            name,
            payload: text(payload.as_str()),
        },
        EventKind::Compaction(c) => BodyRepr::Compaction(CompactionRepr {
            from_turn: c.from_turn,
            to_turn: c.to_turn,
            summary: c.summary.as_deref().map(&mut text),
            reasoning: c.reasoning,
            tool_calls: c.tool_calls.as_ref().map(Cow::Borrowed),
            revert: c.revert,
            info: c.info.as_ref().map(|i| text(i.as_str())),
        }),
    };
    let record = RecordRepr {
        timestamp: event.timestamp,
        meta,
        body,
    };
    let mut digests = Digests::default();
    let bytes = match layout {
        Layout::Plain | Layout::SealedView => encode(&record),
        Layout::Committed => encode_committed(&record, Some(&mut digests), None),
        Layout::Sealed => encode_committed(&record, Some(&mut digests), Some(&[])),
    };
    let size = match layout {
        Layout::Plain | Layout::SealedView => {
            bytes.len() as u64 + blobs.iter().map(|(_, s)| s.len() as u64).sum::<u64>()
        }
        Layout::Committed | Layout::Sealed => record_size(&bytes, &record),
    };
    let call = match &event.kind {
        EventKind::ToolCall { id, name, .. } => Some((id.as_str(), name.as_str())),
        _ => None,
    };
    let span = match &event.kind {
        EventKind::Compaction(c) => Some((c.from_turn, c.to_turn)),
        _ => None,
    };
    EncodedRecord {
        bytes,
        digests,
        event_type: event.kind.event_type(),
        blobs,
        size,
        call,
        span,
        timestamp: event.timestamp,
    }
}

impl EncodedRecord<'_> {
    /// Its address after `parent`: [`link`], from the digests gathered
    /// when it was encoded if it has them.
    pub(crate) fn address_after(&self, parent: &Address) -> Address {
        match self.bytes.split_first() {
            Some((&COMMITTED_MARK, rest)) if !self.digests.bytes.is_empty() => {
                debug_assert!(self.digests.unhashed.is_empty(), "texts left unhashed");
                match split_committed(rest) {
                    Some((frame, _)) => {
                        let mut hasher = frame_hasher(parent, frame);
                        hasher.update(&self.digests.bytes);
                        Address::from_hasher(&hasher)
                    }
                    None => link(parent, &self.bytes),
                }
            }
            _ => link(parent, &self.bytes),
        }
    }
}

/// `s` inline, or as a blob (added to `blobs`) when it is longer than
/// `most` bytes.
fn text_repr<'e>(s: &'e str, most: usize, blobs: &mut Vec<(BlobHash, &'e str)>) -> TextRepr<'e> {
    if s.len() > most {
        let blob = BlobRef {
            hash: BlobHash::of(s.as_bytes()),
            len: s.len() as u64,
        };
        blobs.push((blob.hash, s));
        TextRepr::Blob(blob)
    } else {
        TextRepr::Inline(s)
    }
}

/// The size an event stored as `bytes` (decoded: `record`) counts for:
/// its record's encoding plus its blobs' lengths, as when it was appended
/// (a redacted text counts as it did).
///
/// The measure is the same in both layouts: a committed record counts as
/// its plain encoding would (its frame with each short text's length and
/// bytes where the frame has a tag alone), so sizes and limits do not
/// depend on the format.
pub(crate) fn record_size(bytes: &[u8], record: &RecordRepr<'_>) -> u64 {
    let inner = inner_record(bytes).unwrap_or(bytes);
    let (base, entries) = match inner.split_first() {
        Some((&COMMITTED_MARK, rest)) => (
            split_committed(rest).map_or(inner.len(), |(frame, _)| frame.len()),
            Some(rest),
        ),
        _ => (inner.len(), None),
    };
    let committed = entries.is_some();
    // Whether a redacted text was a short one in the committed record: its
    // entry says (a sealed record's texts are all short, however long).
    // Read only for a record that has one: appends size every record.
    let kinds = entries
        .filter(|_| record.texts().any(|t| matches!(t, TextRepr::Redacted(_))))
        .and_then(entry_kinds);
    let short = |index: usize, blob: &BlobRef| match kinds.as_ref().and_then(|k| k.get(index)) {
        Some(&long) => !long,
        None => blob.len <= INLINE_MAX as u64,
    };
    record
        .texts()
        .enumerate()
        .fold(base as u64, |size, (index, text)| match text {
            // In a frame, a short text is its variant's tag alone.
            TextRepr::Inline(s) if committed => size + varint_len(s.len() as u64) + s.len() as u64,
            TextRepr::Inline(_) | TextRepr::Beside => size,
            TextRepr::Redacted(blob) if committed && short(index, &blob) => {
                size + varint_len(blob.len) + blob.len
            }
            // Stored inline, it took its bytes where the hash now is.
            TextRepr::Redacted(blob) if blob.len <= INLINE_MAX as u64 => {
                (size + blob.len).saturating_sub(32)
            }
            TextRepr::Blob(blob) | TextRepr::Redacted(blob) => size + blob.len,
        })
}

/// The length of `n` as a bincode varint.
fn varint_len(n: u64) -> u64 {
    match n {
        0..=250 => 1,
        251..=0xFFFF => 3,
        0x1_0000..=0xFFFF_FFFF => 5,
        _ => 9,
    }
}

/// Decodes a record's canonical bytes (a redacted record's, from its
/// envelope).
pub(crate) fn decode_record(bytes: &[u8]) -> StoreResult<RecordRepr<'_>> {
    let enveloped = bytes.first() == Some(&REDACTED_MARK);
    let inner = inner_record(bytes)?;
    let (record, committed) = match inner.split_first() {
        Some((&COMMITTED_MARK, rest)) => (decode_committed(rest)?, true),
        _ => (decode::<RecordRepr<'_>>(inner, "record")?, false),
    };
    check_texts(&record, enveloped, committed)?;
    if Timestamp::from_micros(record.timestamp.as_micros()).is_none() {
        return Err(StoreError::Corrupt {
            what: "record: timestamp out of range".to_owned(),
        });
    }
    Ok(record)
}

/// The event type of the record stored as `bytes`, read from its first
/// fields alone (no text checked, nothing allocated), for a reader that
/// skips most records by their type: a projection drops every
/// conversation event of a summarized turn. `None` where those fields do
/// not parse; [`decode_record`] then says why. The chunk's bytes were
/// checked against its checksum when read, as for any record.
pub(crate) fn peek_event_type(bytes: &[u8]) -> Option<EventType> {
    let inner = match bytes.split_first()? {
        (&REDACTED_MARK, rest) => read_envelope(rest)?.record,
        _ => bytes,
    };
    let plain = match inner.split_first()? {
        (&COMMITTED_MARK, rest) => split_committed(rest)?.0,
        _ => inner,
    };
    // The timestamp, then the meta (an `Option` tag, then a text), then
    // the body's variant.
    let mut at = varint(plain)?.1;
    match *plain.get(at)? {
        0 => at += 1,
        1 => at += 1 + text_repr_len(plain.get(at + 1..)?)?,
        _ => return None,
    }
    let (variant, _) = varint(plain.get(at..)?)?;
    EventType::ALL.get(usize::try_from(variant).ok()?).copied()
}

/// The length of the [`TextRepr`] encoded at the start of `bytes`.
fn text_repr_len(bytes: &[u8]) -> Option<usize> {
    let (variant, n) = varint(bytes)?;
    match variant {
        0 => {
            let (len, m) = varint(bytes.get(n..)?)?;
            (n + m).checked_add(usize::try_from(len).ok()?)
        }
        1 | 2 => Some(n + 32 + varint(bytes.get(n + 32..)?)?.1),
        3 => Some(n),
        _ => None,
    }
}

/// Rebuilds the event of a decoded record; `load` fetches blob texts.
pub(crate) fn record_to_event(
    record: &RecordRepr<'_>,
    load: &mut dyn FnMut(BlobRef) -> StoreResult<String>,
) -> StoreResult<Event> {
    record_to_event_with(record, load, true)
}

/// [`record_to_event`]; without `payload`, a tool call's arguments read
/// `{}` and a tool result's content `""`, neither copied nor loaded (for
/// a reader that replaces them).
pub(crate) fn record_to_event_with(
    record: &RecordRepr<'_>,
    load: &mut dyn FnMut(BlobRef) -> StoreResult<String>,
    payload: bool,
) -> StoreResult<Event> {
    let mut read = |t: TextRepr<'_>, redacted: &str| -> StoreResult<String> {
        match t {
            TextRepr::Inline(s) => Ok(s.to_owned()),
            TextRepr::Blob(blob) => load(blob),
            TextRepr::Redacted(_) | TextRepr::Beside => Ok(redacted.to_owned()),
        }
    };
    let meta = match record.meta {
        Some(t) => Some(Json::from_stored(read(t, REDACTED_JSON)?)),
        None => None,
    };
    let kind = match &record.body {
        BodyRepr::TurnStart => EventKind::TurnStart,
        BodyRepr::User(t) => EventKind::User {
            text: read(*t, REDACTED_TEXT)?,
        },
        BodyRepr::Assistant(t) => EventKind::Assistant {
            text: read(*t, REDACTED_TEXT)?,
        },
        BodyRepr::Reasoning(t) => EventKind::Reasoning {
            text: read(*t, REDACTED_TEXT)?,
        },
        BodyRepr::ToolCall {
            id,
            name,
            arguments,
        } => EventKind::ToolCall {
            id: (*id).to_owned(),
            name: (*name).to_owned(),
            arguments: if payload {
                Json::from_stored(read(*arguments, REDACTED_JSON)?)
            } else {
                Json::empty_object()
            },
        },
        BodyRepr::ToolResult {
            id,
            content,
            is_error,
        } => EventKind::ToolResult {
            id: (*id).to_owned(),
            content: if payload {
                read(*content, REDACTED_TEXT)?
            } else {
                String::new()
            },
            is_error: *is_error,
        },
        BodyRepr::System(t) => EventKind::System {
            text: read(*t, REDACTED_TEXT)?,
        },
        BodyRepr::Config(t) => EventKind::Config {
            delta: Json::from_stored(read(*t, REDACTED_JSON)?),
        },
        BodyRepr::Extension { name, payload } => EventKind::Extension {
            name: (*name).to_owned(),
            payload: Json::from_stored(read(*payload, REDACTED_JSON)?),
        },
        BodyRepr::Compaction(c) => EventKind::Compaction(Compaction {
            from_turn: c.from_turn,
            to_turn: c.to_turn,
            summary: c.summary.map(|t| read(t, REDACTED_TEXT)).transpose()?,
            reasoning: c.reasoning,
            tool_calls: c.tool_calls.as_ref().map(|p| p.clone().into_owned()),
            revert: c.revert,
            info: c
                .info
                .map(|t| read(t, REDACTED_JSON))
                .transpose()?
                .map(Json::from_stored),
        }),
    };
    Ok(Event {
        timestamp: record.timestamp,
        meta,
        kind,
    })
}

/// One sled value: consecutive records of a conversation.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ChunkRepr<'a> {
    /// The address before the chunk's first record.
    pub parent: Address,
    #[serde(borrow)]
    pub entries: Vec<EntryRepr<'a>>,
}

/// A record in a chunk, with what is derived from the log around it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct EntryRepr<'a> {
    /// The record's turn (derived: not hashed).
    pub turn: u64,
    /// The first eight bytes of the record's address.
    pub check: [u8; 8],
    /// The record's canonical bytes.
    #[serde(with = "serde_bytes")]
    pub record: &'a [u8],
}

/// A chunk's value in a format-2 database: the chunk itself (a small
/// append), or where it is in the segment files and how many records it
/// holds (so a reader can plan without reading it).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ChunkValue<'a> {
    Inline(#[serde(with = "serde_bytes")] &'a [u8]),
    Segment { at: SegmentRef, records: u64 },
}

/// A blob's value in a format-2 database: the text's bytes, or where they
/// are in the segment files.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum BlobValue<'a> {
    Inline(#[serde(with = "serde_bytes")] &'a [u8]),
    Segment(SegmentRef),
}

/// The tool calls of a chunk: `(seq, id, name)` in log order. Stored beside
/// the chunk so that a projection learns every call's name without decoding
/// the records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CallDirectory<'a> {
    #[serde(borrow)]
    pub calls: Vec<(u64, &'a str, &'a str)>,
}

/// Where a chunk's entries are, so a reader can keep the chunk's bytes and
/// decode records one at a time.
pub(crate) struct ChunkLayout {
    pub parent: Address,
    pub entries: Vec<EntryPos>,
}

/// An entry of a chunk: its turn, check and the byte range of its record.
#[derive(Debug, Clone)]
pub(crate) struct EntryPos {
    pub turn: u64,
    pub check: [u8; 8],
    pub record: Range<usize>,
}

impl ChunkLayout {
    pub(crate) fn read(bytes: &[u8], what: &dyn Fn() -> String) -> StoreResult<Self> {
        let chunk: ChunkRepr<'_> = decode_named(bytes, what)?;
        let base = bytes.as_ptr() as usize;
        let entries = chunk
            .entries
            .iter()
            .map(|e| {
                let start = e.record.as_ptr() as usize - base;
                EntryPos {
                    turn: e.turn,
                    check: e.check,
                    record: start..start + e.record.len(),
                }
            })
            .collect();
        Ok(Self {
            parent: chunk.parent,
            entries,
        })
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;

/// The compactions of a chunk (format 4), in log order: stored beside the
/// chunk, like its call directory, so that a projection reads every overlay
/// without scanning the log, and a large append of compactions writes one
/// key per chunk rather than one per compaction.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct OverlayDirectory<'a> {
    #[serde(borrow)]
    pub overlays: Vec<DirectoryOverlay<'a>>,
}

/// A compaction in an [`OverlayDirectory`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DirectoryOverlay<'a> {
    pub seq: u64,
    pub turn: u64,
    #[serde(with = "serde_bytes", borrow)]
    pub record: &'a [u8],
}

/// The value of an overlay entry (formats 1-3): the compaction's turn and
/// record bytes.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct OverlayEntry<'a> {
    pub turn: u64,
    #[serde(with = "serde_bytes")]
    pub record: &'a [u8],
}

/// A compaction in an overlay range group: its seq, the turns it covers,
/// its own turn, its timestamp (format 8; `None` before) and its record
/// bytes (format 5; empty from format 6 on, where they are read from the
/// overlay directory of the compaction's chunk). With the timestamp, the
/// compactions that outrank one (SPEC: greatest timestamp, then later in
/// the log) are told from those that do not without reading them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RangeEntry<'a> {
    pub seq: u64,
    pub from_turn: u64,
    pub to_turn: u64,
    pub turn: u64,
    pub timestamp: Option<Timestamp>,
    pub record: &'a [u8],
}

/// A [`RangeEntry`] as stored: `timestamp` is a [`Timestamp`] from format
/// 8 on, `()` before (which bincode writes as nothing, so formats 5-7 read
/// as they were written).
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredEntry<'a, T> {
    seq: u64,
    from_turn: u64,
    to_turn: u64,
    turn: u64,
    timestamp: T,
    #[serde(with = "serde_bytes", borrow)]
    record: &'a [u8],
}

/// What a stored range entry keeps of a compaction's timestamp: a
/// [`Timestamp`] (format 8 on), or nothing (`()`, formats 5-7).
trait StoredRank: Sized {
    fn of(timestamp: Option<Timestamp>) -> Self;
    fn timestamp(&self) -> Option<Timestamp>;
}

impl StoredRank for () {
    fn of(_: Option<Timestamp>) -> Self {}

    fn timestamp(&self) -> Option<Timestamp> {
        None
    }
}

impl StoredRank for Timestamp {
    fn of(timestamp: Option<Timestamp>) -> Self {
        timestamp.unwrap_or(Timestamp::EARLIEST)
    }

    fn timestamp(&self) -> Option<Timestamp> {
        Some(*self)
    }
}

/// The value of an overlay range key: the compactions an append files
/// under one level and bucket, in log order.
#[derive(serde::Serialize, serde::Deserialize)]
struct RangeGroup<E> {
    entries: Vec<E>,
}

impl<'a, T: StoredRank + Serialize + Deserialize<'a>> RangeGroup<StoredEntry<'a, T>> {
    fn encode(entries: &[RangeEntry<'a>]) -> Vec<u8> {
        let entries = entries
            .iter()
            .map(|e| StoredEntry {
                seq: e.seq,
                from_turn: e.from_turn,
                to_turn: e.to_turn,
                turn: e.turn,
                timestamp: T::of(e.timestamp),
                record: e.record,
            })
            .collect();
        encode(&RangeGroup { entries })
    }

    fn decode(bytes: &'a [u8]) -> StoreResult<Vec<RangeEntry<'a>>> {
        let group: Self = decode(bytes, "overlay range group")?;
        let entries = group.entries.into_iter();
        Ok(entries
            .map(|e| RangeEntry {
                seq: e.seq,
                from_turn: e.from_turn,
                to_turn: e.to_turn,
                turn: e.turn,
                timestamp: e.timestamp.timestamp(),
                record: e.record,
            })
            .collect())
    }
}

/// The value of an overlay range key holding `entries`, in a database of
/// format `format` (5 or later): their timestamps are kept from format 8
/// on, and must then be given.
pub(crate) fn encode_range_group(format: u32, entries: &[RangeEntry<'_>]) -> Vec<u8> {
    if format >= keys::RANKED_RANGE_FORMAT {
        RangeGroup::<StoredEntry<'_, Timestamp>>::encode(entries)
    } else {
        RangeGroup::<StoredEntry<'_, ()>>::encode(entries)
    }
}

/// The compactions of an overlay range key's value, in a database of
/// format `format`.
pub(crate) fn decode_range_group(format: u32, bytes: &[u8]) -> StoreResult<Vec<RangeEntry<'_>>> {
    if format >= keys::RANKED_RANGE_FORMAT {
        RangeGroup::<StoredEntry<'_, Timestamp>>::decode(bytes)
    } else {
        RangeGroup::<StoredEntry<'_, ()>>::decode(bytes)
    }
}

/// The value of a turn index entry: where the chunk starts.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct TurnEntry {
    pub first_turn: u64,
    pub entries: u64,
}
