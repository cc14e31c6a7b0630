//! Frames: a small header before each body in the segment files, saying
//! what the body is, so that the files can be read without sled.
//!
//! sled keeps a [`SegmentRef`] (file, offset, length, checksum) in a
//! chunk's or blob's place and readers fetch exactly those bytes: they
//! never look at what lies between bodies. Since frames were added, each
//! body is written after a header of [`HEADER_LEN`] bytes:
//!
//! | bytes | what |
//! |---|---|
//! | 0..8 | [`MAGIC`] |
//! | 8 | kind: 1 a chunk, 2 a blob |
//! | 9 | the key's length (at most 40) |
//! | 10..50 | the key, zero-padded: a chunk's sled key (`c` or `s`, conversation id, first seq), a blob's hash |
//! | 50..58 | the body's length, u64 little-endian |
//! | 58..66 | a chunk's record count (0 for a blob), u64 little-endian |
//! | 66..74 | the first 8 bytes of blake3 of bytes 0..66 |
//!
//! The reference points past the header, so readers are unaffected, files
//! written before frames existed stay readable, and a database with frames
//! opens in any build that reads its format. Salvage (`salvage.rs`) finds
//! bodies by their headers when sled's files are damaged; a body is still
//! checked on its own (a chunk re-hashes along its address chain, a blob
//! against its hash), since a header says only what the body should be.

use std::ops::Range;

use crate::backend::sled::segments::{SegmentRef, Segments};
use crate::error::StoreResult;

/// Bytes a header takes before its body.
pub(crate) const HEADER_LEN: usize = 74;
/// What every header starts with.
pub(crate) const MAGIC: &[u8; 8] = b"CVSFRAME";
/// The longest key a header holds.
const KEY_MAX: usize = 40;

/// Tests only (`testing::write_unframed`): write bodies without frames, as
/// convstore did before frames existed.
pub(crate) static UNFRAMED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// What a framed body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameKind {
    /// A chunk of records, under the sled key in the header.
    Chunk,
    /// A blob's text, under the hash in the header.
    Blob,
}

/// The header of one body to write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame<'a> {
    pub kind: FrameKind,
    /// A chunk's sled key or a blob's hash.
    pub key: &'a [u8],
    /// A chunk's record count.
    pub records: u64,
}

impl<'a> Frame<'a> {
    pub(crate) fn chunk(key: &'a [u8], records: u64) -> Self {
        Frame {
            kind: FrameKind::Chunk,
            key,
            records,
        }
    }

    pub(crate) fn blob(hash: &'a [u8]) -> Self {
        Frame {
            kind: FrameKind::Blob,
            key: hash,
            records: 0,
        }
    }

    /// The header of a body of `len` bytes.
    fn header(&self, len: u64) -> [u8; HEADER_LEN] {
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(MAGIC);
        header[8] = match self.kind {
            FrameKind::Chunk => 1,
            FrameKind::Blob => 2,
        };
        let key = &self.key[..self.key.len().min(KEY_MAX)];
        header[9] = key.len() as u8;
        header[10..10 + key.len()].copy_from_slice(key);
        header[50..58].copy_from_slice(&len.to_le_bytes());
        header[58..66].copy_from_slice(&self.records.to_le_bytes());
        let check = blake3::hash(&header[..66]);
        header[66..74].copy_from_slice(&check.as_bytes()[..8]);
        header
    }
}

/// Writes `bodies` to the segment files, each after its frame's header,
/// in one write (see `Segments::write`); returns the bodies' references,
/// which point past the headers.
pub(crate) fn write(
    segments: &Segments,
    frames: &[Frame<'_>],
    bodies: &[&[u8]],
) -> StoreResult<Vec<SegmentRef>> {
    if UNFRAMED.load(std::sync::atomic::Ordering::Relaxed) {
        return segments.write(bodies);
    }
    let headers: Vec<[u8; HEADER_LEN]> = frames
        .iter()
        .zip(bodies)
        .map(|(frame, body)| frame.header(body.len() as u64))
        .collect();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(bodies.len() * 2);
    for (header, body) in headers.iter().zip(bodies) {
        parts.push(header);
        parts.push(body);
    }
    let refs = segments.write(&parts)?;
    Ok(refs.into_iter().skip(1).step_by(2).collect())
}

/// A header found in a segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundFrame {
    pub kind: FrameKind,
    pub key: Vec<u8>,
    pub records: u64,
    /// Where its body is in the file (it may run past the file's end).
    pub body: Range<u64>,
}

/// The header at the start of `bytes`, if there is a sound one.
pub(crate) fn parse(bytes: &[u8], at: u64) -> Option<FoundFrame> {
    let header = bytes.get(..HEADER_LEN)?;
    if &header[..8] != MAGIC {
        return None;
    }
    let check = blake3::hash(&header[..66]);
    if header[66..74] != check.as_bytes()[..8] {
        return None;
    }
    let kind = match header[8] {
        1 => FrameKind::Chunk,
        2 => FrameKind::Blob,
        _ => return None,
    };
    let key_len = usize::from(header[9]);
    if key_len > KEY_MAX {
        return None;
    }
    let len = u64::from_le_bytes(header[50..58].try_into().ok()?);
    let records = u64::from_le_bytes(header[58..66].try_into().ok()?);
    let start = at + HEADER_LEN as u64;
    Some(FoundFrame {
        kind,
        key: header[10..10 + key_len].to_vec(),
        records,
        body: start..start.checked_add(len)?,
    })
}

/// The frames in the bytes of a segment file, in order, and the regions
/// between them that no frame covers (bodies written before frames
/// existed, or the torn end of a failed write), to be searched otherwise.
pub(crate) fn scan(bytes: &[u8]) -> (Vec<FoundFrame>, Vec<Range<usize>>) {
    let mut frames = Vec::new();
    let mut unframed = Vec::new();
    let mut pos = 0usize;
    let mut gap_start = 0usize;
    let finder = memchr::memmem::Finder::new(MAGIC);
    while pos < bytes.len() {
        let Some(found) = finder.find(&bytes[pos..]).map(|i| pos + i) else {
            break;
        };
        match parse(&bytes[found..], found as u64) {
            Some(frame) => {
                if found > gap_start {
                    unframed.push(gap_start..found);
                }
                // A body cut short (a failed write) is still reported; what
                // follows its header is searched like any unframed bytes.
                let next = if frame.body.end <= bytes.len() as u64 {
                    frame.body.end as usize
                } else {
                    found + HEADER_LEN
                };
                gap_start = next;
                pos = next;
                frames.push(frame);
            }
            None => pos = found + 1,
        }
    }
    if gap_start < bytes.len() {
        unframed.push(gap_start..bytes.len());
    }
    (frames, unframed)
}

#[cfg(test)]
mod tests {
    use super::{parse, scan, write, Frame, FrameKind, HEADER_LEN};
    use crate::backend::sled::segments::Segments;

    #[test]
    fn bodies_read_back_through_their_references_and_frames_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let segments = Segments::new(dir.path());
        let key = b"c0123456789abcdef01234567".to_vec();
        let hash = [7u8; 32];
        let bodies: [&[u8]; 2] = [b"a chunk body", b"a blob body, longer"];
        let frames = [Frame::chunk(&key, 3), Frame::blob(&hash)];
        let refs = write(&segments, &frames, &bodies).unwrap();
        let what = String::new;
        for (body, at) in bodies.iter().zip(&refs) {
            assert_eq!(&segments.read(at, &what).unwrap(), body);
        }
        assert_eq!(refs[0].offset, HEADER_LEN as u64);
        let file = std::fs::read(dir.path().join("segments/00000001")).unwrap();
        // Old, unframed bytes before and after are reported as such.
        let mut bytes = b"old bytes".to_vec();
        bytes.extend_from_slice(&file);
        bytes.extend_from_slice(b"torn");
        let (found, unframed) = scan(&bytes);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].kind, FrameKind::Chunk);
        assert_eq!(found[0].key, key);
        assert_eq!(found[0].records, 3);
        let body = &bytes[found[1].body.start as usize..found[1].body.end as usize];
        assert_eq!(body, bodies[1]);
        assert_eq!(found[1].key, hash);
        assert_eq!(unframed, vec![0..9, bytes.len() - 4..bytes.len()]);
        // A damaged header is not a frame.
        let mut damaged = file.clone();
        damaged[20] ^= 1;
        assert!(parse(&damaged, 0).is_none());
        assert_eq!(scan(&damaged).0.len(), 1);
    }
}
