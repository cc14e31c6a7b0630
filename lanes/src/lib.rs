//! blake3 of many short inputs at once.
//!
//! A conversation's log hashes each short text on its own (see the store's
//! `codec.rs`): a million records mean millions of one-chunk blake3 hashes,
//! each a few compressions of one 64-byte block after another. One such
//! hash cannot use more than one SIMD lane; [`hash_many`] lays up to
//! sixteen inputs side by side, one per 32-bit lane of a 512-bit register,
//! and compresses a block of each at once. On a CPU with AVX-512 that is
//! about six times the throughput of hashing them one by one.
//!
//! The result is exactly `blake3::hash` of each input: inputs of up to one
//! chunk (1,024 bytes) go through the lanes, longer ones (and every input
//! on a CPU without AVX-512, or with [`set_enabled`]`(false)`) through
//! the `blake3` crate.
//!
//! ```
//! let inputs: [&[u8]; 3] = [b"", b"abc", &[7; 1000]];
//! let mut out = [[0u8; 32]; 3];
//! convstore_lanes::hash_many(&inputs, &mut out);
//! for (input, hash) in inputs.iter().zip(&out) {
//!     assert_eq!(hash, blake3::hash(input).as_bytes());
//! }
//! ```

#[cfg(target_arch = "x86_64")]
mod avx512;

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether [`hash_many`] may use the lanes; see [`set_enabled`].
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Lets [`hash_many`] use the lanes (the default) or not: with `false`
/// every input is hashed one by one with the `blake3` crate, as on a CPU
/// without AVX-512. For comparisons; the hashes are the same either way.
/// The library reads no environment: the `convstore` binary calls this
/// when `CONVSTORE_NO_LANES` is set.
pub fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Relaxed);
}

/// The longest input hashed in the lanes: one blake3 chunk. A longer one
/// is a tree of chunks, which `blake3` already hashes in parallel.
pub const CHUNK_LEN: usize = 1024;

/// blake3's block: what one compression takes.
const BLOCK_LEN: usize = 64;

/// The blake3 hash of each of `inputs` into `out`, in order.
///
/// # Panics
///
/// If `out` is shorter than `inputs`.
pub fn hash_many(inputs: &[&[u8]], out: &mut [[u8; 32]]) {
    assert!(out.len() >= inputs.len(), "one output per input");
    #[cfg(target_arch = "x86_64")]
    if ENABLED.load(Ordering::Relaxed) && avx512::available() {
        avx512::hash_many(inputs, out);
        return;
    }
    one_by_one(inputs, out);
}

/// [`hash_many`] with the `blake3` crate alone, one input after another:
/// the reference the lanes are tested against.
pub fn one_by_one(inputs: &[&[u8]], out: &mut [[u8; 32]]) {
    for (input, out) in inputs.iter().zip(out) {
        *out = *blake3::hash(input).as_bytes();
    }
}

/// How many blocks blake3 compresses for a one-chunk input: an empty one
/// is one empty block.
fn blocks(len: usize) -> usize {
    len.div_ceil(BLOCK_LEN).max(1)
}
