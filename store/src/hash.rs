//! Content addresses: [`Address`] (a record's place in the hash chain) and
//! [`BlobHash`] (a payload's content hash). The only file that names blake3.
//!
//! A record's address is `blake3(parent_address || record_bytes)`, where
//! `record_bytes` is the record's canonical encoding (see `codec.rs`) and the
//! first record's parent is [`Address::ROOT`] (32 zero bytes). Equal
//! histories therefore have equal heads.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The address of a record in a conversation's hash chain; the address of
/// the last record is the conversation's *head*.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Address([u8; 32]);

impl Address {
    /// The parent of every chain's first record: 32 zero bytes. The head of
    /// an empty conversation.
    pub const ROOT: Address = Address([0; 32]);

    /// The address of a record whose canonical bytes are `record` and whose
    /// parent is `self`.
    #[must_use]
    pub fn child(&self, record: &[u8]) -> Address {
        let mut hasher = self.hasher();
        hasher.update(record);
        Address::from_hasher(&hasher)
    }

    /// A hasher started with this address, for a child whose bytes come in
    /// pieces; see [`Address::from_hasher`].
    pub(crate) fn hasher(&self) -> blake3::Hasher {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&self.0);
        hasher
    }

    /// The address of a record whose hashed bytes, its parent's address
    /// first, are `hashed` (what [`Address::child`] hashes, written out).
    pub(crate) fn of_hashed(hashed: &[u8]) -> Address {
        Address(*blake3::hash(hashed).as_bytes())
    }

    /// The address a [`Address::hasher`] gives.
    pub(crate) fn from_hasher(hasher: &blake3::Hasher) -> Address {
        Address(*hasher.finalize().as_bytes())
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// From raw bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The first eight bytes: what a chunk stores per record to name the
    /// first corrupt one.
    pub(crate) fn check(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        b
    }

    /// Lower-case hex, 64 characters.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }

    /// Parses 64 hex characters.
    pub fn from_hex(text: &str) -> Option<Self> {
        from_hex(text).map(Self)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Address({})", self.hex())
    }
}

/// The content hash of a stored payload: `blake3(payload bytes)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlobHash([u8; 32]);

impl BlobHash {
    /// The hash of `payload`.
    pub fn of(payload: &[u8]) -> Self {
        Self(*blake3::hash(payload).as_bytes())
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// From raw bytes (a hash read back, not computed).
    pub(crate) fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Lower-case hex, 64 characters.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

impl fmt::Display for BlobHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for BlobHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobHash({})", self.hex())
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// Decodes an even-length hex string; invalid digits decode as zero.
pub(crate) fn from_hex_prefix(text: &str) -> Vec<u8> {
    text.as_bytes()
        .chunks_exact(2)
        .map(|pair| {
            let digit = |c: u8| char::from(c).to_digit(16).unwrap_or(0);
            (digit(pair[0]) * 16 + digit(pair[1])) as u8
        })
        .collect()
}

pub(crate) fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let text = text.as_bytes();
    if text.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        let digit = |c: u8| char::from(c).to_digit(16);
        out[i] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(out)
}

/// blake3 of each of `inputs` into `out`, many at once: side by side in
/// SIMD lanes where the CPU has them (`convstore_lanes`).
pub(crate) fn hash_many(inputs: &[&[u8]], out: &mut [[u8; 32]]) {
    convstore_lanes::hash_many(inputs, out);
}
