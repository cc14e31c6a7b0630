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
//! its address hashes a *skeleton* in which every text is its blake3 hash
//! and length, and the short texts' bytes follow the skeleton, outside what
//! is hashed. A redaction can then remove a text and leave every other
//! field provable. Readers tell the layouts apart by the first byte
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
    /// In a committed record's skeleton only: a short text's hash and
    /// length, its bytes after the skeleton. [`decode_record`] never
    /// returns it.
    Hashed(HashedText<'a>),
}

/// A short text in a committed record's skeleton: its blake3 hash (as
/// length-prefixed bytes, which decode as one slice where a `[u8; 32]`
/// decodes byte by byte) and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HashedText<'a> {
    #[serde(with = "serde_bytes")]
    pub hash: &'a [u8],
    pub len: u64,
}

impl HashedText<'_> {
    /// As a reference to the text; `None` if the hash is not 32 bytes.
    fn blob(&self) -> Option<BlobRef> {
        Some(BlobRef {
            hash: BlobHash::from_bytes(self.hash.try_into().ok()?),
            len: self.len,
        })
    }
}

/// What a skeleton's hashed text counts for in [`record_size`] beyond its
/// bytes' length in a plain record: the hash, its length prefix, less the
/// length prefix of the text (the same in both).
const HASHED_EXTRA: u64 = 33;

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

/// After [`COMMITTED_MARK`] and the skeleton, each text in field order
/// starts with one of these: present (a short text's bytes follow; a long
/// one is in the blob store), or removed by a redaction.
const TEXT_PRESENT: u8 = 0;
const TEXT_REDACTED: u8 = 1;

/// How a record's bytes are laid out, and so what its address commits to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Formats 1 to 6: the bincode of [`RecordRepr`], short texts inline;
    /// the address hashes every byte.
    Plain,
    /// Format 7: [`COMMITTED_MARK`], the skeleton's length (a varint), the
    /// skeleton (the bincode of [`RecordRepr`] with each short text as
    /// [`TextRepr::Hashed`]), then per text a tag and a short text's bytes.
    /// The address hashes the skeleton only, so it commits to each text
    /// through its hash.
    Committed,
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

/// A bincode varint at the start of `bytes`: its value and length.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let wide = |n: usize| -> Option<u64> {
        let mut value = [0u8; 8];
        value[..n].copy_from_slice(bytes.get(1..=n)?);
        Some(u64::from_le_bytes(value))
    };
    match *bytes.first()? {
        b @ 0..=250 => Some((u64::from(b), 1)),
        251 => Some((wide(2)?, 3)),
        252 => Some((wide(4)?, 5)),
        253 => Some((wide(8)?, 9)),
        _ => None,
    }
}

/// A committed record's skeleton and what follows it (`rest`: the bytes
/// after [`COMMITTED_MARK`]).
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
        Some((&COMMITTED_MARK, rest)) => match split_committed(rest) {
            Some((skeleton, _)) => parent.child(skeleton),
            // Not a record: `verify` names it when it fails to decode.
            None => parent.child(bytes),
        },
        _ => parent.child(bytes),
    }
}

/// [`link`] for a reader that takes bytes on trust only if they check
/// (salvage): `None` when a committed record's texts do not match the
/// hashes its address commits to (see [`check_committed`]), where [`link`]
/// would give the address all the same.
pub(crate) fn link_checked(parent: &Address, bytes: &[u8]) -> Option<Address> {
    let checked = !matches!(bytes.first(), Some(&(COMMITTED_MARK | REDACTED_MARK)))
        || check_committed(parent, bytes).is_ok();
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
    pub(crate) fn texts(&self) -> impl Iterator<Item = TextRepr<'_>> {
        let body: [Option<TextRepr<'_>>; 2] = match &self.body {
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
pub(crate) fn encode_record(record: &RecordRepr<'_>, layout: Layout) -> Vec<u8> {
    match layout {
        Layout::Plain => encode(record),
        Layout::Committed => encode_committed(record),
    }
}

fn encode_committed(record: &RecordRepr<'_>) -> Vec<u8> {
    // Each text's hash: the skeleton borrows them.
    let hashes: Vec<BlobHash> = record
        .texts()
        .map(|text| match text {
            TextRepr::Inline(s) => BlobHash::of(s.as_bytes()),
            TextRepr::Blob(blob) | TextRepr::Redacted(blob) => blob.hash,
            TextRepr::Hashed(h) => h.blob().map_or(BlobHash::from_bytes([0; 32]), |b| b.hash),
        })
        .collect();
    let mut skeleton: RecordRepr<'_> = record.clone();
    let mut after: Vec<(u8, &str)> = Vec::with_capacity(3);
    for (text, hash) in skeleton.texts_mut().zip(&hashes) {
        let hashed = |len: u64| {
            TextRepr::Hashed(HashedText {
                hash: hash.as_bytes(),
                len,
            })
        };
        let (tag, bytes, stored) = match *text {
            TextRepr::Inline(s) => (TEXT_PRESENT, s, hashed(s.len() as u64)),
            TextRepr::Blob(blob) => (TEXT_PRESENT, "", TextRepr::Blob(blob)),
            TextRepr::Redacted(blob) if blob.len > INLINE_MAX as u64 => {
                (TEXT_REDACTED, "", TextRepr::Blob(blob))
            }
            TextRepr::Redacted(BlobRef { len, .. }) | TextRepr::Hashed(HashedText { len, .. }) => {
                (TEXT_REDACTED, "", hashed(len))
            }
        };
        *text = stored;
        after.push((tag, bytes));
    }
    let skeleton = encode(&skeleton);
    let len = encode(&(skeleton.len() as u64));
    let texts: usize = after.iter().map(|(_, s)| 1 + s.len()).sum();
    let mut out = Vec::with_capacity(1 + len.len() + skeleton.len() + texts);
    out.push(COMMITTED_MARK);
    out.extend_from_slice(&len);
    out.extend_from_slice(&skeleton);
    for (tag, bytes) in after {
        out.push(tag);
        out.extend_from_slice(bytes.as_bytes());
    }
    out
}

/// Decodes a committed record (`rest`: its bytes after
/// [`COMMITTED_MARK`]): the skeleton, its short texts put back inline.
fn decode_committed(rest: &[u8]) -> StoreResult<RecordRepr<'_>> {
    let corrupt = |why: &str| StoreError::Corrupt {
        what: format!("record: {why}"),
    };
    let (skeleton, mut after) =
        split_committed(rest).ok_or_else(|| corrupt("its skeleton is cut short"))?;
    let mut record: RecordRepr<'_> = decode(skeleton, "record")?;
    for text in record.texts_mut() {
        let (&tag, rest) = after
            .split_first()
            .ok_or_else(|| corrupt("a text is missing"))?;
        after = rest;
        *text = match (*text, tag) {
            (TextRepr::Hashed(hashed), TEXT_PRESENT) => {
                let len = usize::try_from(hashed.len)
                    .ok()
                    .filter(|&n| n <= after.len())
                    .ok_or_else(|| corrupt("a text is cut short"))?;
                let (bytes, rest) = after.split_at(len);
                after = rest;
                let text =
                    std::str::from_utf8(bytes).map_err(|_| corrupt("a text is not valid UTF-8"))?;
                TextRepr::Inline(text)
            }
            (TextRepr::Blob(blob), TEXT_PRESENT) => TextRepr::Blob(blob),
            (TextRepr::Hashed(hashed), TEXT_REDACTED) => TextRepr::Redacted(
                hashed
                    .blob()
                    .ok_or_else(|| corrupt("a text's hash is not 32 bytes"))?,
            ),
            (TextRepr::Blob(blob), TEXT_REDACTED) => TextRepr::Redacted(blob),
            _ => return Err(corrupt("a text is neither hashed nor a blob")),
        };
    }
    if !after.is_empty() {
        return Err(corrupt("bytes after its last text"));
    }
    Ok(record)
}

/// For a committed record stored as `bytes` after `parent`: checks each
/// short text present against the hash its skeleton commits to and, if the
/// record is redacted, that the skeleton still hashes to the address its
/// envelope keeps (every field but the removed text is then proven). A
/// plain record is left to the chain, whose address hashes its texts.
/// Returns whether a redacted record's remaining fields are proven (always
/// for a committed one; for a plain one, see [`plain_redaction_proven`]).
pub(crate) fn check_committed(parent: &Address, bytes: &[u8]) -> Result<bool, String> {
    let envelope = envelope(bytes).map_err(|e| e.to_string())?;
    let inner = envelope.as_ref().map_or(bytes, |e| e.record);
    let Some((&COMMITTED_MARK, rest)) = inner.split_first() else {
        return Ok(envelope
            .as_ref()
            .is_none_or(|e| plain_redaction_proven(parent, e, inner)));
    };
    let (skeleton, mut after) =
        split_committed(rest).ok_or_else(|| "its skeleton is cut short".to_owned())?;
    let hashed: RecordRepr<'_> = decode(skeleton, "record").map_err(|e| e.to_string())?;
    for (i, text) in hashed.texts().enumerate() {
        let Some((&tag, rest)) = after.split_first() else {
            return Err("a text is missing".to_owned());
        };
        after = rest;
        if let (TextRepr::Hashed(hashed), TEXT_PRESENT) = (text, tag) {
            let len = usize::try_from(hashed.len).unwrap_or(usize::MAX);
            let Some(text) = after.get(..len) else {
                return Err("a text is cut short".to_owned());
            };
            after = &after[len..];
            if BlobHash::of(text).as_bytes()[..] != *hashed.hash {
                return Err(format!("text {} does not match its hash", i + 1));
            }
        }
    }
    if let Some(envelope) = envelope {
        if parent.child(skeleton) != envelope.address {
            return Err(
                "redacted, and its remaining fields do not hash to the address it keeps".to_owned(),
            );
        }
    }
    Ok(true)
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
            TextRepr::Redacted(_) | TextRepr::Hashed(_) => return false,
            TextRepr::Inline(_) | TextRepr::Blob(_) => {}
        }
    }
    parent.child(&encode(&record)) == envelope.address
}

/// A record ready to store: its canonical bytes and the texts it moved out.
pub(crate) struct EncodedRecord<'e> {
    pub bytes: Vec<u8>,
    pub event_type: EventType,
    pub blobs: Vec<(BlobHash, &'e str)>,
    /// The record's bytes plus the lengths of its blobs.
    pub size: u64,
    /// For a tool call: its id and name.
    pub call: Option<(&'e str, &'e str)>,
    /// For a compaction: the turns it covers, `from_turn..=to_turn`.
    pub span: Option<(u64, u64)>,
}

/// Encodes `event` canonically in `layout`, moving long texts out as
/// blobs.
pub(crate) fn encode_event(event: &Event, layout: Layout) -> EncodedRecord<'_> {
    let mut blobs = Vec::new();
    let mut text = |s| text_repr(s, &mut blobs);
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
    let bytes = encode_record(&record, layout);
    let size = match layout {
        Layout::Plain => {
            bytes.len() as u64 + blobs.iter().map(|(_, s)| s.len() as u64).sum::<u64>()
        }
        Layout::Committed => record_size(&bytes, &record),
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
        event_type: event.kind.event_type(),
        blobs,
        size,
        call,
        span,
    }
}

/// `s` inline, or as a blob (added to `blobs`) when it is long.
fn text_repr<'e>(s: &'e str, blobs: &mut Vec<(BlobHash, &'e str)>) -> TextRepr<'e> {
    if s.len() > INLINE_MAX {
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
/// its plain encoding would (its skeleton, each hashed short text counted
/// as its bytes rather than its hash), so sizes and limits do not depend
/// on the format.
pub(crate) fn record_size(bytes: &[u8], record: &RecordRepr<'_>) -> u64 {
    let inner = inner_record(bytes).unwrap_or(bytes);
    let (base, committed) = match inner.split_first() {
        Some((&COMMITTED_MARK, rest)) => (
            split_committed(rest).map_or(inner.len(), |(skeleton, _)| skeleton.len()),
            true,
        ),
        _ => (inner.len(), false),
    };
    record.texts().fold(base as u64, |size, text| match text {
        TextRepr::Inline(s) if committed => (size + s.len() as u64).saturating_sub(HASHED_EXTRA),
        TextRepr::Inline(_) => size,
        // Stored inline, it took its bytes where the hash now is.
        TextRepr::Redacted(blob) if blob.len <= INLINE_MAX as u64 => {
            let extra = if committed { HASHED_EXTRA } else { 32 };
            (size + blob.len).saturating_sub(extra)
        }
        TextRepr::Blob(blob) | TextRepr::Redacted(blob) => size + blob.len,
        TextRepr::Hashed(hashed) => (size + hashed.len).saturating_sub(HASHED_EXTRA),
    })
}

/// Decodes a record's canonical bytes (a redacted record's, from its
/// envelope).
pub(crate) fn decode_record(bytes: &[u8]) -> StoreResult<RecordRepr<'_>> {
    let inner = inner_record(bytes)?;
    let record: RecordRepr<'_> = if let Some((&COMMITTED_MARK, rest)) = inner.split_first() {
        decode_committed(rest)?
    } else {
        let record: RecordRepr<'_> = decode(inner, "record")?;
        if record.texts().any(|t| matches!(t, TextRepr::Hashed(_))) {
            return Err(StoreError::Corrupt {
                what: "record: a hashed text outside a committed record".to_owned(),
            });
        }
        record
    };
    if Timestamp::from_micros(record.timestamp.as_micros()).is_none() {
        return Err(StoreError::Corrupt {
            what: "record: timestamp out of range".to_owned(),
        });
    }
    Ok(record)
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
            TextRepr::Redacted(_) | TextRepr::Hashed(_) => Ok(redacted.to_owned()),
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
/// its own turn and its record bytes (format 5; empty from format 6 on,
/// where they are read from the overlay directory of the compaction's
/// chunk).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RangeEntry<'a> {
    pub seq: u64,
    pub from_turn: u64,
    pub to_turn: u64,
    pub turn: u64,
    #[serde(with = "serde_bytes", borrow)]
    pub record: &'a [u8],
}

/// The value of an overlay range key: the compactions an append files
/// under one level and bucket, in log order.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct RangeGroup<'a> {
    #[serde(borrow)]
    pub entries: Vec<RangeEntry<'a>>,
}

/// The value of a turn index entry: where the chunk starts.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct TurnEntry {
    pub first_turn: u64,
    pub entries: u64,
}
