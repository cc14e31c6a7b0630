//! The addresses of whole runs of records at once: [`link`] for each
//! record of each run, with the hashing done side by side.
//!
//! A committed record's address hashes each of its short texts first
//! (each on its own), then the parent, the mark, the frame and those
//! digests. The texts of every record of every run are independent: they
//! are hashed together, sixteen at a time in SIMD lanes where the CPU has
//! them ([`crate::hash::hash_many`]). The chain steps are not: each needs
//! the address before it. But runs are independent of each other (each
//! starts from its own parent, as every chunk of a log stores its parent),
//! so step `n` of up to sixteen runs is one more call of the lanes.
//!
//! [`link`]: super::link

use super::{next_entry, split_committed, Entry, COMMITTED_MARK, REDACTED_MARK};
use crate::hash::{hash_many, Address};

/// How a record's address is found; see [`super::link`].
enum Step {
    /// Kept in its bytes: a redacted record.
    Kept(Address),
    /// blake3 of the parent and its bytes: a plain record, or a committed
    /// one whose entries do not parse.
    Plain,
    /// blake3 of the parent, the mark, the frame and the digests of
    /// `parts` (a range of the run's parts).
    Committed {
        frame: (usize, usize),
        parts: (usize, usize),
    },
}

/// One digest a committed record's address hashes after its frame.
enum Part {
    /// A short text's: the hash of text `n` of the texts gathered.
    Text(usize, u64),
    /// A redacted short text's, kept in the record.
    Given([u8; 32], u64),
}

impl Part {
    /// The hash and length it stands for, `digests` the gathered texts'.
    fn digest<'d>(&'d self, digests: &'d [[u8; 32]]) -> (&'d [u8; 32], u64) {
        match self {
            Part::Text(t, len) => (&digests[*t], *len),
            Part::Given(hash, len) => (hash, *len),
        }
    }
}

/// Below this many runs, each is chained on its own, its steps hashed one
/// by one: the lanes would be mostly idle.
const SIDE_BY_SIDE: usize = 3;

/// For each of `runs` (the address before its first record, and its
/// records' bytes in order), each record's address: what [`super::link`]
/// gives one after another.
pub(crate) fn link_runs(runs: &[(Address, Vec<&[u8]>)]) -> Vec<Vec<Address>> {
    let mut texts: Vec<&[u8]> = Vec::new();
    let mut parts: Vec<Part> = Vec::new();
    let steps: Vec<Vec<Step>> = runs
        .iter()
        .map(|(_, records)| {
            records
                .iter()
                .map(|bytes| step(bytes, &mut texts, &mut parts))
                .collect()
        })
        .collect();
    let mut digests = vec![[0u8; 32]; texts.len()];
    hash_many(&texts, &mut digests);
    drop(texts);

    if runs.len() < SIDE_BY_SIDE {
        chain_alone(runs, &steps, &parts, &digests)
    } else {
        chain_side_by_side(runs, &steps, &parts, &digests)
    }
}

/// Writes into `message` what the address of a record after `parent`
/// hashes (the parent's address first), its `step` made of its `bytes`
/// and the gathered `digests`; `Some` for a record whose address is kept,
/// with nothing to hash.
fn message(
    parent: &Address,
    bytes: &[u8],
    step: &Step,
    parts: &[Part],
    digests: &[[u8; 32]],
    message: &mut Vec<u8>,
) -> Option<Address> {
    // A kept address writes nothing (not even the parent).
    if let Step::Kept(address) = step {
        return Some(*address);
    }
    message.clear();
    message.extend_from_slice(parent.as_bytes());
    match step {
        Step::Kept(_) => {} // returned above
        Step::Plain => message.extend_from_slice(bytes),
        Step::Committed {
            frame,
            parts: range,
        } => {
            message.push(COMMITTED_MARK);
            message.extend_from_slice(&bytes[frame.0..frame.1]);
            for part in &parts[range.0..range.1] {
                let (hash, len) = part.digest(digests);
                message.extend_from_slice(hash);
                message.extend_from_slice(&len.to_le_bytes());
            }
        }
    }
    None
}

/// Each run's chain on its own, a step at a time.
fn chain_alone(
    runs: &[(Address, Vec<&[u8]>)],
    steps: &[Vec<Step>],
    parts: &[Part],
    digests: &[[u8; 32]],
) -> Vec<Vec<Address>> {
    let mut hashed = Vec::new();
    runs.iter()
        .zip(steps)
        .map(|((parent, records), steps)| {
            let mut at = *parent;
            records
                .iter()
                .zip(steps)
                .map(|(bytes, step)| {
                    at = message(&at, bytes, step, parts, digests, &mut hashed)
                        .unwrap_or_else(|| Address::of_hashed(&hashed));
                    at
                })
                .collect()
        })
        .collect()
}

/// The runs' chains side by side: step `n` of every run that has one,
/// hashed together in the lanes.
fn chain_side_by_side(
    runs: &[(Address, Vec<&[u8]>)],
    steps: &[Vec<Step>],
    parts: &[Part],
    digests: &[[u8; 32]],
) -> Vec<Vec<Address>> {
    let mut addresses: Vec<Vec<Address>> = runs
        .iter()
        .map(|(_, records)| Vec::with_capacity(records.len()))
        .collect();
    let longest = runs.iter().map(|(_, r)| r.len()).max().unwrap_or(0);
    let mut messages: Vec<Vec<u8>> = vec![Vec::new(); runs.len()];
    let mut hashing: Vec<usize> = Vec::with_capacity(runs.len());
    let mut hashes = vec![[0u8; 32]; runs.len()];
    for n in 0..longest {
        hashing.clear();
        for (r, ((parent, records), steps)) in runs.iter().zip(steps).enumerate() {
            let (Some(bytes), Some(step)) = (records.get(n), steps.get(n)) else {
                continue;
            };
            let parent = addresses[r].last().unwrap_or(parent);
            match message(parent, bytes, step, parts, digests, &mut messages[r]) {
                Some(kept) => addresses[r].push(kept),
                None => hashing.push(r),
            }
        }
        let inputs: Vec<&[u8]> = hashing.iter().map(|&r| messages[r].as_slice()).collect();
        hash_many(&inputs, &mut hashes);
        for (&r, hash) in hashing.iter().zip(&hashes) {
            addresses[r].push(Address::from_bytes(*hash));
        }
    }
    addresses
}

/// How the address of the record stored as `bytes` is found, its short
/// texts added to `texts` and its digests to `parts`.
fn step<'b>(bytes: &'b [u8], texts: &mut Vec<&'b [u8]>, parts: &mut Vec<Part>) -> Step {
    match bytes.split_first() {
        Some((&REDACTED_MARK, rest)) if rest.len() >= 32 => {
            let mut address = [0u8; 32];
            address.copy_from_slice(&rest[..32]);
            Step::Kept(Address::from_bytes(address))
        }
        Some((&COMMITTED_MARK, rest)) => {
            let (texts_before, parts_before) = (texts.len(), parts.len());
            if let Some((start, end)) = committed_parts(rest, texts, parts) {
                // In `bytes`, one past the mark.
                Step::Committed {
                    frame: (1 + start, 1 + end),
                    parts: (parts_before, parts.len()),
                }
            } else {
                texts.truncate(texts_before);
                parts.truncate(parts_before);
                Step::Plain
            }
        }
        _ => Step::Plain,
    }
}

/// Where a committed record's frame is in `rest` (its bytes after the
/// mark), its short texts and digests added; `None` where its entries do
/// not parse (as `committed_address`).
fn committed_parts<'b>(
    rest: &'b [u8],
    texts: &mut Vec<&'b [u8]>,
    parts: &mut Vec<Part>,
) -> Option<(usize, usize)> {
    let (frame, mut entries) = split_committed(rest)?;
    let end = rest.len() - entries.len();
    let place = (end - frame.len(), end);
    while !entries.is_empty() {
        match next_entry(&mut entries)? {
            Entry::Short(text) => {
                parts.push(Part::Text(texts.len(), text.len() as u64));
                texts.push(text);
            }
            Entry::ShortRedacted(blob) => parts.push(Part::Given(*blob.hash.as_bytes(), blob.len)),
            Entry::Blob | Entry::BlobRedacted => {}
        }
    }
    Some(place)
}
