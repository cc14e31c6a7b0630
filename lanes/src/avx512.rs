//! The lanes on AVX-512: sixteen one-chunk inputs compressed side by side.
//!
//! blake3 of an input of at most one chunk is a chain of compressions,
//! one per 64-byte block, from the IV as chaining value, with the chunk
//! counter 0; the first block is flagged `CHUNK_START`, the last
//! `CHUNK_END | ROOT` and compressed with its own length (zero-padded),
//! and the hash is the chaining value the last block gives. Here the
//! sixteen state words of a compression are sixteen registers, lane `l`
//! of each belonging to input `l`; the message words are the sixteen
//! inputs' blocks, transposed. An input that has no more blocks keeps its
//! chaining value (a mask) while the others go on; inputs are grouped by
//! their number of blocks so that few lanes idle.

use std::arch::x86_64::{
    __m512i, _mm512_add_epi32, _mm512_loadu_si512, _mm512_mask_mov_epi32, _mm512_ror_epi32,
    _mm512_set1_epi32, _mm512_setzero_si512, _mm512_shuffle_i32x4, _mm512_storeu_si512,
    _mm512_unpackhi_epi32, _mm512_unpackhi_epi64, _mm512_unpacklo_epi32, _mm512_unpacklo_epi64,
    _mm512_xor_si512,
};
use std::sync::atomic::{AtomicU8, Ordering};

use crate::{blocks, BLOCK_LEN, CHUNK_LEN};

/// Inputs per group: the 32-bit lanes of a 512-bit register.
const LANES: usize = 16;

/// Below this many inputs a group is hashed one by one: a compression in
/// the lanes costs about six of one block on its own.
const FEWEST: usize = 3;

const IV: [u32; 8] = [
    0x6A09_E667,
    0xBB67_AE85,
    0x3C6E_F372,
    0xA54F_F53A,
    0x510E_527F,
    0x9B05_688C,
    0x1F83_D9AB,
    0x5BE0_CD19,
];

/// The message word order of the next round.
const PERMUTATION: [usize; 16] = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];

const CHUNK_START: u32 = 1;
const CHUNK_END: u32 = 2;
const ROOT: u32 = 8;

/// Whether the CPU has AVX-512 (F), asked once: 0 unknown, 1 no, 2 yes.
pub(crate) fn available() -> bool {
    static KNOWN: AtomicU8 = AtomicU8::new(0);
    match KNOWN.load(Ordering::Relaxed) {
        0 => {
            let yes = std::arch::is_x86_feature_detected!("avx512f");
            KNOWN.store(1 + u8::from(yes), Ordering::Relaxed);
            yes
        }
        known => known == 2,
    }
}

/// [`crate::hash_many`] once [`available`] said yes.
pub(crate) fn hash_many(inputs: &[&[u8]], out: &mut [[u8; 32]]) {
    // The inputs of one chunk or less, by their number of blocks; the
    // longer ones go to blake3 as they come.
    let mut order: Vec<(u8, u32)> = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        if input.len() <= CHUNK_LEN {
            order.push((blocks(input.len()) as u8, i as u32));
        } else {
            out[i] = *blake3::hash(input).as_bytes();
        }
    }
    order.sort_unstable();
    let mut group: [&[u8]; LANES] = [&[]; LANES];
    let mut hashes = [[0u8; 32]; LANES];
    for indices in order.chunks(LANES) {
        if indices.len() < FEWEST {
            for &(_, i) in indices {
                out[i as usize] = *blake3::hash(inputs[i as usize]).as_bytes();
            }
            continue;
        }
        for (slot, &(_, i)) in group.iter_mut().zip(indices) {
            *slot = inputs[i as usize];
        }
        // SAFETY: `available` found AVX-512 F on this CPU; every input of
        // the group is at most one chunk long.
        unsafe { hash_group(&group[..indices.len()], &mut hashes) };
        for (hash, &(_, i)) in hashes.iter().zip(indices) {
            out[i as usize] = *hash;
        }
    }
}

/// The hashes of up to [`LANES`] inputs of at most [`CHUNK_LEN`] bytes
/// each, into the first `inputs.len()` of `out`.
///
/// # Safety
///
/// The CPU must have AVX-512 F.
#[target_feature(enable = "avx512f")]
unsafe fn hash_group(inputs: &[&[u8]], out: &mut [[u8; 32]; LANES]) {
    debug_assert!(inputs.len() <= LANES);
    debug_assert!(inputs.iter().all(|i| i.len() <= CHUNK_LEN));
    let most = inputs.iter().map(|i| blocks(i.len())).max().unwrap_or(0);
    let mut cv = [_mm512_setzero_si512(); 8];
    for (cv, &iv) in cv.iter_mut().zip(&IV) {
        *cv = _mm512_set1_epi32(iv.cast_signed());
    }
    for block in 0..most {
        let mut message = [_mm512_setzero_si512(); 16];
        let mut lens = [0u32; LANES];
        let mut flags = [0u32; LANES];
        let mut running: u16 = 0;
        for (l, input) in inputs.iter().enumerate() {
            let count = blocks(input.len());
            if block >= count {
                continue;
            }
            let bytes = &input[block * BLOCK_LEN..input.len().min((block + 1) * BLOCK_LEN)];
            message[l] = load_block(bytes);
            lens[l] = bytes.len() as u32;
            flags[l] = if block == 0 { CHUNK_START } else { 0 }
                | if block + 1 == count {
                    CHUNK_END | ROOT
                } else {
                    0
                };
            running |= 1 << l;
        }
        transpose(&mut message);
        let next = compress(&cv, &message, load_words(&lens), load_words(&flags));
        for (cv, next) in cv.iter_mut().zip(next) {
            // Lanes whose input has ended keep the hash they have.
            *cv = _mm512_mask_mov_epi32(*cv, running, next);
        }
    }
    let mut words = [[0u32; LANES]; 8];
    for (words, cv) in words.iter_mut().zip(cv) {
        // SAFETY: `words` is 64 bytes; an unaligned store.
        unsafe { _mm512_storeu_si512(words.as_mut_ptr().cast(), cv) };
    }
    for (l, out) in out.iter_mut().enumerate().take(inputs.len()) {
        for (w, word) in words.iter().enumerate() {
            out[4 * w..4 * w + 4].copy_from_slice(&word[l].to_le_bytes());
        }
    }
}

/// A block of at most 64 bytes, zero-padded.
#[target_feature(enable = "avx512f")]
fn load_block(bytes: &[u8]) -> __m512i {
    if let Ok(full) = <&[u8; BLOCK_LEN]>::try_from(bytes) {
        // SAFETY: `full` is 64 readable bytes; an unaligned load.
        unsafe { _mm512_loadu_si512(full.as_ptr().cast()) }
    } else {
        let mut padded = [0u8; BLOCK_LEN];
        padded[..bytes.len()].copy_from_slice(bytes);
        // SAFETY: as above, from the padded copy.
        unsafe { _mm512_loadu_si512(padded.as_ptr().cast()) }
    }
}

/// Sixteen words, one per lane.
#[target_feature(enable = "avx512f")]
fn load_words(words: &[u32; LANES]) -> __m512i {
    // SAFETY: `words` is 64 readable bytes; an unaligned load.
    unsafe { _mm512_loadu_si512(words.as_ptr().cast()) }
}

/// One compression in every lane: the chaining values `cv`, the
/// transposed message words, each lane's block length and flags (the
/// counter is 0: one chunk). Returns the next chaining values.
#[target_feature(enable = "avx512f")]
fn compress(
    cv: &[__m512i; 8],
    message: &[__m512i; 16],
    lens: __m512i,
    flags: __m512i,
) -> [__m512i; 8] {
    let mut s = [_mm512_setzero_si512(); 16];
    s[..8].copy_from_slice(cv);
    for (s, &iv) in s[8..12].iter_mut().zip(&IV) {
        *s = _mm512_set1_epi32(iv.cast_signed());
    }
    s[14] = lens;
    s[15] = flags;
    let mut m = *message;
    for round in 0..7 {
        g(&mut s, [0, 4, 8, 12], m[0], m[1]);
        g(&mut s, [1, 5, 9, 13], m[2], m[3]);
        g(&mut s, [2, 6, 10, 14], m[4], m[5]);
        g(&mut s, [3, 7, 11, 15], m[6], m[7]);
        g(&mut s, [0, 5, 10, 15], m[8], m[9]);
        g(&mut s, [1, 6, 11, 12], m[10], m[11]);
        g(&mut s, [2, 7, 8, 13], m[12], m[13]);
        g(&mut s, [3, 4, 9, 14], m[14], m[15]);
        if round < 6 {
            let old = m;
            for (m, &from) in m.iter_mut().zip(&PERMUTATION) {
                *m = old[from];
            }
        }
    }
    let mut next = [_mm512_setzero_si512(); 8];
    for (i, next) in next.iter_mut().enumerate() {
        *next = _mm512_xor_si512(s[i], s[i + 8]);
    }
    next
}

/// blake3's quarter-round on state words `[a, b, c, d]` with message
/// words `x` and `y`.
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::many_single_char_names)] // the specification's names
fn g(s: &mut [__m512i; 16], [a, b, c, d]: [usize; 4], x: __m512i, y: __m512i) {
    s[a] = _mm512_add_epi32(_mm512_add_epi32(s[a], s[b]), x);
    s[d] = _mm512_ror_epi32::<16>(_mm512_xor_si512(s[d], s[a]));
    s[c] = _mm512_add_epi32(s[c], s[d]);
    s[b] = _mm512_ror_epi32::<12>(_mm512_xor_si512(s[b], s[c]));
    s[a] = _mm512_add_epi32(_mm512_add_epi32(s[a], s[b]), y);
    s[d] = _mm512_ror_epi32::<8>(_mm512_xor_si512(s[d], s[a]));
    s[c] = _mm512_add_epi32(s[c], s[d]);
    s[b] = _mm512_ror_epi32::<7>(_mm512_xor_si512(s[b], s[c]));
}

/// Transposes sixteen vectors of sixteen words: word `w` of vector `v`
/// becomes word `v` of vector `w` (blake3's own AVX-512 transposition:
/// 32-bit, then 64-bit, then twice 128-bit interleaving).
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose(v: &mut [__m512i; 16]) {
    // Pairs of vectors, 32-bit words interleaved: words 0/0/1/1/4/4/5/5...
    // of vectors 2p and 2p + 1, then words 2/2/3/3/6/6/7/7...
    let mut pairs = [[_mm512_setzero_si512(); 2]; 8];
    for (p, pair) in pairs.iter_mut().enumerate() {
        let (a, b) = (v[2 * p], v[2 * p + 1]);
        *pair = [_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b)];
    }
    // Quads of vectors, 64-bit words interleaved: in each 128-bit lane,
    // word 0 of the four vectors, then words 1, 2 and 3.
    let mut quads = [[_mm512_setzero_si512(); 4]; 4];
    for (q, quad) in quads.iter_mut().enumerate() {
        let ([a0, a2], [b0, b2]) = (pairs[2 * q], pairs[2 * q + 1]);
        *quad = [
            _mm512_unpacklo_epi64(a0, b0),
            _mm512_unpackhi_epi64(a0, b0),
            _mm512_unpacklo_epi64(a2, b2),
            _mm512_unpackhi_epi64(a2, b2),
        ];
    }
    // Then 128-bit lanes, twice, into their final places.
    let lo128 = |a, b| _mm512_shuffle_i32x4::<0x88>(a, b);
    let hi128 = |a, b| _mm512_shuffle_i32x4::<0xdd>(a, b);
    for i in 0..4 {
        let (a, b) = (
            lo128(quads[0][i], quads[1][i]),
            lo128(quads[2][i], quads[3][i]),
        );
        v[i] = lo128(a, b);
        v[i + 8] = hi128(a, b);
        let (a, b) = (
            hi128(quads[0][i], quads[1][i]),
            hi128(quads[2][i], quads[3][i]),
        );
        v[i + 4] = lo128(a, b);
        v[i + 12] = hi128(a, b);
    }
}
