//! Staged chunks: how a log appended a few events at a time still reads
//! as a few large chunks.
//!
//! An append never rewrites a stored chunk (what it costs sled's log;
//! ARCHITECTURE.md, "sled"), so the records of each append make chunks of
//! their own. For a log appended an event at
//! a time that is a chunk per event, and sled's per-key costs on every
//! read. So in a format-3 database an append too small to make a settled
//! chunk (under [`SETTLE_RECORDS`] records and [`SETTLE_BYTES`] bytes,
//! together with the records staged before it) writes its chunk to the
//! *staged* key space (`keys::Space::Staged`: its own chunk, turn index,
//! call directory and overlay directory keys). The append that brings the staged records to
//! either limit writes them all again, its own with them, as settled
//! chunks (the usual keys), and moves the conversation's settled boundary
//! past them, in its one batch.
//!
//! So records `0..settled` of a conversation's own log are read from the
//! settled chunks and `settled..len` from the staged ones. Once a settle
//! is applied, the staged copies below the new boundary are deleted
//! ([`Store::retire`]), so a log appended an event at a time keeps each
//! record once (sled's log reclaims the deleted space later: BENCHMARKS.md,
//! "Logs appended an event at a time"). A read that loaded the boundary before a settle moved it may
//! still be about to read those staged copies, so every read that loads
//! the boundary holds a [`ReadPin`] from before it loads it until it has
//! read what it needed: staged keys retired while such a read runs are
//! deleted by the first write after it ends (or when the store is
//! dropped). Reads take no lock but the pin's counter.
//!
//! A database server (PostgreSQL) keeps its staged copies: the readers of
//! other processes hold no pin here.
//!
//! A conversation with no staging key (every one written in large appends,
//! or before staging existed) has every record settled.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::backend::{Batch, Bytes};
use crate::codec::{self, CallDirectory, DirectoryOverlay, OverlayDirectory};
use crate::error::StoreResult;
use crate::hash::Address;
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::log::{LoadedChunk, Located};
use crate::store::Store;

/// Staged records are settled once there are this many...
pub(crate) const SETTLE_RECORDS: u64 = 256;
/// ...or this many bytes of them.
pub(crate) const SETTLE_BYTES: u64 = 64 * 1024;

/// Where a conversation's staged records start and how many bytes they
/// hold (their record bytes, as chunks count them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Staging {
    pub settled: u64,
    pub bytes: u64,
}

/// The staged records of a log, loaded to be settled, in log order.
pub(crate) struct Staged {
    pub chunks: Vec<StagedChunk>,
}

/// A staged chunk with its call and overlay directories' bytes.
pub(crate) struct StagedChunk {
    pub chunk: LoadedChunk,
    calls: Option<Bytes>,
    overlays: Option<Bytes>,
}

impl Staged {
    /// The keys the staged chunks and their side data are stored under,
    /// to retire once they are settled: their turn index entries too if
    /// `turns` (formats before 9 write them).
    pub(crate) fn keys(&self, id: &ConversationId, turns: bool) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for StagedChunk {
            chunk,
            calls,
            overlays,
        } in &self.chunks
        {
            let first = chunk.first_seq;
            let last_turn = chunk.layout.entries.last().map_or(0, |e| e.turn);
            out.push(keys::chunk(Space::Staged, id, first));
            if turns {
                out.push(keys::turn(Space::Staged, id, last_turn, first));
            }
            // Only the directories there are: a chunk without tool calls
            // or compactions has none.
            if calls.is_some() {
                out.push(keys::call_directory(Space::Staged, id, first));
            }
            if overlays.is_some() {
                out.push(keys::overlay_directory(Space::Staged, id, first));
            }
        }
        out
    }

    /// Each record as (turn, check, bytes), in log order.
    pub(crate) fn records(&self) -> impl Iterator<Item = (u64, [u8; 8], &[u8])> {
        self.chunks.iter().flat_map(|StagedChunk { chunk, .. }| {
            chunk
                .layout
                .entries
                .iter()
                .enumerate()
                .map(move |(i, e)| (e.turn, e.check, chunk.record_bytes(i)))
        })
    }

    /// Their tool calls as (seq, call id, name), in log order.
    pub(crate) fn calls(&self) -> StoreResult<Vec<(u64, &str, &str)>> {
        let mut out = Vec::new();
        for staged in &self.chunks {
            if let Some(bytes) = &staged.calls {
                let directory: CallDirectory<'_> = codec::decode(bytes, "call directory")?;
                out.extend(directory.calls);
            }
        }
        Ok(out)
    }

    /// Their compactions, in log order (format 4; earlier formats keep a
    /// key per compaction, which settling leaves as it is).
    pub(crate) fn overlays(&self) -> StoreResult<Vec<DirectoryOverlay<'_>>> {
        let mut out = Vec::new();
        for staged in &self.chunks {
            if let Some(bytes) = &staged.overlays {
                let directory: OverlayDirectory<'_> = codec::decode(bytes, "overlay directory")?;
                out.extend(directory.overlays);
            }
        }
        Ok(out)
    }
}

/// Staged keys replaced by settles, waiting for the reads that may still
/// reach them ([`ReadPin`]) to end.
#[derive(Debug, Default)]
pub(crate) struct Reclaim {
    /// Moves on at each retirement: a read pinned at epoch `e` loaded its
    /// boundaries before every retirement of epoch `e` or later.
    epoch: u64,
    /// Reads running, by the epoch they were pinned at.
    pins: BTreeMap<u64, usize>,
    /// Keys retired, by the epoch they were retired at.
    retired: Vec<(u64, Vec<Vec<u8>>)>,
}

impl Reclaim {
    /// Takes out the retired keys no running read may reach. A read
    /// pinned at `e` may have loaded a boundary from before any retirement
    /// of epoch `e` or later, so keys retired at epoch `r` are free once
    /// every running read was pinned after it (at `r + 1` or later).
    fn take_free(&mut self) -> Vec<Vec<u8>> {
        let oldest = self.pins.keys().next().copied().unwrap_or(u64::MAX);
        let mut free = Vec::new();
        self.retired.retain_mut(|(epoch, keys)| {
            if *epoch < oldest {
                free.append(keys);
                false
            } else {
                true
            }
        });
        free
    }
}

/// A read that may reach staged keys: while it is held, no staged key a
/// settle retires is deleted (see the module documentation).
#[derive(Debug)]
pub(crate) struct ReadPin {
    reclaim: Arc<Mutex<Reclaim>>,
    epoch: u64,
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        let mut reclaim = self.reclaim.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = reclaim.pins.get_mut(&self.epoch) {
            *count -= 1;
            if *count == 0 {
                reclaim.pins.remove(&self.epoch);
            }
        }
    }
}

impl Store {
    /// Pins a read: taken before it loads a staging boundary, held until
    /// it has read the staged keys the boundary sent it to.
    pub(crate) fn pin_read(&self) -> ReadPin {
        let mut reclaim = self.reclaim.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = reclaim.epoch;
        *reclaim.pins.entry(epoch).or_default() += 1;
        ReadPin {
            reclaim: Arc::clone(&self.reclaim),
            epoch,
        }
    }

    /// Retires `retired`, staged keys a settle that has been applied
    /// replaced, and deletes every retired key no running read may reach.
    /// Called by writers after a successful write, under the write lock. A
    /// deletion that fails is tried again by the next writer; one that
    /// never happens (the process ends first) leaves records no read
    /// reaches.
    pub(crate) fn retire(&self, retired: Vec<Vec<u8>>) {
        if self.kv.is_server() {
            return;
        }
        let free = {
            let mut reclaim = self.reclaim.lock().unwrap_or_else(PoisonError::into_inner);
            if !retired.is_empty() {
                let epoch = reclaim.epoch;
                reclaim.retired.push((epoch, retired));
                reclaim.epoch += 1;
            }
            reclaim.take_free()
        };
        if free.is_empty() {
            return;
        }
        let mut batch = Batch::new();
        for key in &free {
            batch.delete(key.as_slice());
        }
        self.kv.on_write();
        if self.kv.apply(batch).is_err() {
            // Free already, so retired at the first epoch.
            let mut reclaim = self.reclaim.lock().unwrap_or_else(PoisonError::into_inner);
            reclaim.retired.push((0, free));
        }
    }

    /// The staging state of `id`, if it has one.
    pub(crate) fn staging(&self, id: &ConversationId) -> StoreResult<Option<Staging>> {
        match self.get(&keys::staging(id))? {
            Some(bytes) => {
                codec::decode_named(&bytes, &|| format!("staging of conversation {id}")).map(Some)
            }
            None => Ok(None),
        }
    }

    /// The seq where `id`'s own staged records start: records before it
    /// are in settled chunks, records from it on in staged ones. The
    /// staged ones are there for as long as `pin`, taken before this call,
    /// is held.
    pub(crate) fn settled(&self, id: &ConversationId, _pin: &ReadPin) -> StoreResult<u64> {
        Ok(self.staging(id)?.map_or(u64::MAX, |s| s.settled))
    }

    /// The space holding `id`'s own record `seq`, given where its staged
    /// records start.
    pub(crate) fn space_of(seq: u64, settled: u64) -> Space {
        if seq < settled {
            Space::Settled
        } else {
            Space::Staged
        }
    }

    /// The staged chunks of `id` holding records `from..len`, which must
    /// end with address `head`, loaded to settle them. Fails as corrupt
    /// when they do not chain: an append cannot settle records it cannot
    /// vouch for, and `verify` names the first bad one.
    pub(crate) fn load_staged(
        &self,
        id: &ConversationId,
        from: u64,
        len: u64,
        head: Address,
    ) -> StoreResult<Staged> {
        let mut chunks = Vec::new();
        let mut seq = from;
        let mut address = None;
        // The directories of the staged chunks, by first seq: most chunks
        // have none, so one scan each rather than a lookup per chunk.
        let directories = |key: fn(Space, &ConversationId, u64) -> Vec<u8>| {
            self.scan_range(key(Space::Staged, id, from), key(Space::Staged, id, len))
                .map(|item| {
                    let (key, value) = item?;
                    let seq = keys::key_seq(&key).ok_or_else(|| crate::StoreError::Corrupt {
                        what: format!("conversation {id}: a staged directory key is truncated"),
                    })?;
                    Ok((seq, value))
                })
                .collect::<StoreResult<BTreeMap<u64, Bytes>>>()
        };
        let mut calls = directories(keys::call_directory)?;
        let mut overlays = if self.format >= keys::OVERLAY_DIRECTORY_FORMAT {
            directories(keys::overlay_directory)?
        } else {
            BTreeMap::new()
        };
        let staged = self.scan_range(
            keys::chunk(Space::Staged, id, from),
            keys::chunk(Space::Staged, id, len),
        );
        for item in staged {
            let (key, value) = item?;
            let chunk = Located::new(self.format, id, &key, value)?.into_loaded(self, id)?;
            if chunk.first_seq != seq {
                return Err(staged_corrupt(id, seq, "is missing"));
            }
            let mut at = *address.get_or_insert(chunk.layout.parent);
            if chunk.layout.parent != at {
                return Err(staged_corrupt(
                    id,
                    seq,
                    "does not chain to the record before",
                ));
            }
            for (i, entry) in chunk.layout.entries.iter().enumerate() {
                at = crate::codec::link(&at, chunk.record_bytes(i));
                if at.check() != entry.check {
                    let problem = "does not match its address";
                    return Err(staged_corrupt(id, seq + i as u64, problem));
                }
            }
            address = Some(at);
            seq += chunk.layout.entries.len() as u64;
            chunks.push(StagedChunk {
                calls: calls.remove(&chunk.first_seq),
                overlays: overlays.remove(&chunk.first_seq),
                chunk,
            });
        }
        if seq != len || address.is_some_and(|a| a != head) {
            return Err(staged_corrupt(id, seq, "is missing"));
        }
        Ok(Staged { chunks })
    }
}

fn staged_corrupt(id: &ConversationId, seq: u64, problem: &str) -> crate::StoreError {
    crate::StoreError::Corrupt {
        what: format!("conversation {id}: staged record {seq} {problem}"),
    }
}
