//! Compaction overlays, read from their entries without scanning the log.

use crate::codec;
use crate::codec::{OverlayDirectory, OverlayEntry};
use crate::error::{StoreError, StoreResult};
use crate::event::{Event, Timestamp};
use crate::ids::ConversationId;
use crate::keys;
use crate::position::merge_ranges;
use crate::store::Store;

use super::event_of;

/// A compaction overlay, read from the overlay entries without scanning the
/// log.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredOverlay {
    /// The compaction record's seq.
    pub seq: u64,
    /// Its turn.
    pub turn: u64,
    /// The compaction event.
    pub event: Event,
}

/// Turns `from..=to` (inclusive) where only the compactions that outrank
/// the one of rank `rank` are asked for: those with a greater
/// `(timestamp, seq)`, which win over it wherever they cover a turn it
/// covers (SPEC: the greatest timestamp wins, then the later in the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outranking {
    /// The first turn.
    pub from: u64,
    /// The last turn.
    pub to: u64,
    /// The `(timestamp, seq)` of the compaction to outrank.
    pub rank: (Timestamp, u64),
}

impl Store {
    /// The compaction overlays among records `0..end`, in log order.
    pub fn overlays(&self, id: &ConversationId, end: u64) -> StoreResult<Vec<StoredOverlay>> {
        self.overlays_between(id, 0, end)
    }

    /// The compaction overlays among records `start..end`, in log order.
    pub fn overlays_between(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
    ) -> StoreResult<Vec<StoredOverlay>> {
        let mut out = Vec::new();
        if self.format >= keys::OVERLAY_DIRECTORY_FORMAT {
            let pin = self.pin_read();
            for (space, piece) in self.spaced_pieces(id, start, end, &pin)? {
                let owner = &piece.owner;
                let from = self.chunk_start(space, owner, piece.start)?;
                let directories = self.scan_range(
                    keys::overlay_directory(space, owner, from),
                    keys::overlay_directory(space, owner, piece.end),
                );
                for item in directories {
                    let (_, value) = item?;
                    let directory: OverlayDirectory<'_> =
                        codec::decode(&value, "overlay directory")?;
                    for entry in directory.overlays {
                        if (piece.start..piece.end).contains(&entry.seq) {
                            out.push(self.overlay(owner, entry.seq, entry.turn, entry.record)?);
                        }
                    }
                }
            }
            return Ok(out);
        }
        for piece in self.pieces(id, end)? {
            let owner = &piece.owner;
            if piece.end <= start {
                continue;
            }
            let entries = self.scan_range(
                keys::overlay(owner, piece.start.max(start)),
                keys::overlay(owner, piece.end),
            );
            for item in entries {
                let (key, value) = item?;
                let seq = keys::key_seq(&key).ok_or_else(|| StoreError::Corrupt {
                    what: format!("conversation {owner}: an overlay key is truncated"),
                })?;
                let entry: OverlayEntry<'_> = codec::decode(&value, "overlay entry")?;
                out.push(self.overlay(owner, seq, entry.turn, entry.record)?);
            }
        }
        Ok(out)
    }

    /// Whether compactions are filed by turn range (format 5 and later), so
    /// that [`Store::overlays_meeting`] reads only those it returns.
    pub fn files_overlays_by_range(&self) -> bool {
        self.format >= keys::OVERLAY_RANGE_FORMAT
    }

    /// Whether compactions are filed by turn range with their timestamps
    /// (format 8 and later), so that [`Store::overlays_meeting`] reads,
    /// of those meeting an [`Outranking`]'s turns, only those outranking
    /// its compaction.
    pub fn files_overlays_by_rank(&self) -> bool {
        self.format >= keys::RANKED_RANGE_FORMAT
    }

    /// The compaction overlays among records `0..end` whose turn range
    /// meets one of `turns` (inclusive ranges), or meets the turns of one
    /// of `outranking` and outranks its compaction, in log order: what the
    /// resolution of those turns depends on. Read from the overlay range
    /// keys (format 5) at a cost that follows what is found, not how many
    /// compactions the log holds. Before format 8, where the keys hold no
    /// timestamps, every compaction meeting the turns of `outranking` is
    /// returned; a database of a format before 5 does not file compactions
    /// by range: there, every compaction of `0..end` (supersets, at the
    /// cost of [`Store::overlays`]).
    pub fn overlays_meeting(
        &self,
        id: &ConversationId,
        end: u64,
        turns: &[(u64, u64)],
        outranking: &[Outranking],
    ) -> StoreResult<Vec<StoredOverlay>> {
        if !self.files_overlays_by_range() {
            return self.overlays(id, end);
        }
        let turns = merge_ranges(turns.to_vec());
        // Whether turns `from..=to` meet one of `turns` (sorted, apart).
        let meets = |from: u64, to: u64| {
            let i = turns.partition_point(|&(_, b)| b < from);
            turns.get(i).is_some_and(|&(a, _)| a <= to)
        };
        // Whether a compaction of turns `from..=to` is asked for by one of
        // `outranking` (all of them, without its timestamp).
        let outranks = |from: u64, to: u64, rank: Option<(Timestamp, u64)>| {
            outranking
                .iter()
                .any(|o| o.from <= to && from <= o.to && rank.is_none_or(|rank| rank > o.rank))
        };
        let searched = merge_ranges(
            turns
                .iter()
                .copied()
                .chain(outranking.iter().map(|o| (o.from, o.to)))
                .collect(),
        );
        let mut found = std::collections::BTreeMap::new();
        for piece in self.pieces(id, end)? {
            let owner = &piece.owner;
            // Compactions whose records are left to the overlay directories.
            let mut bare = Vec::new();
            let mut level = 0u8;
            // Levels with no key are skipped by seeking to the next one.
            while let Some(item) = self
                .scan_range(
                    keys::overlay_range_prefix(owner, level),
                    keys::overlay_range_prefix(owner, keys::OVERLAY_RANGE_LEVELS),
                )
                .next()
            {
                let (key, _) = item?;
                level = keys::overlay_range_parts(&key)
                    .ok_or_else(|| truncated(owner))?
                    .0;
                // The buckets that can hold a range meeting the turns, each
                // read once however many of the turns it serves.
                let buckets = merge_ranges(
                    searched
                        .iter()
                        .map(|&(a, b)| {
                            let low = keys::overlay_range_bucket(a, level).saturating_sub(1);
                            (low, keys::overlay_range_bucket(b, level))
                        })
                        .collect(),
                );
                for (low, high) in buckets {
                    let end = match high.checked_add(1) {
                        Some(next) => keys::overlay_range(owner, level, next, 0),
                        None => keys::overlay_range_prefix(owner, level + 1),
                    };
                    for item in self.scan_range(keys::overlay_range(owner, level, low, 0), end) {
                        let (_, value) = item?;
                        for entry in codec::decode_range_group(self.format, &value)? {
                            let seq = entry.seq;
                            let (from, to) = (entry.from_turn, entry.to_turn);
                            let asked = meets(from, to)
                                || outranks(from, to, entry.timestamp.map(|t| (t, seq)));
                            if !asked || !(piece.start..piece.end).contains(&seq) {
                                continue;
                            }
                            if !entry.record.is_empty() {
                                let overlay = self.overlay(owner, seq, entry.turn, entry.record)?;
                                found.insert(seq, overlay);
                            } else if let Some(hit) = self.cached_overlay(owner, seq) {
                                found.insert(seq, hit);
                            } else {
                                bare.push(seq);
                            }
                        }
                    }
                }
                if level >= keys::OVERLAY_RANGE_LEVELS - 1 {
                    break;
                }
                level += 1;
            }
            // Format 6: the records from the overlay directories.
            bare.sort_unstable();
            for overlay in self.directory_overlays(owner, &bare)? {
                found.insert(overlay.seq, overlay);
            }
        }
        Ok(found.into_values().collect())
    }

    /// Compactions `seqs` (ascending) of `owner`'s own log, read from the
    /// overlay directories of their chunks, each directory read once (at
    /// most twice, where the seqs are split between threads).
    fn directory_overlays(
        &self,
        owner: &ConversationId,
        seqs: &[u64],
    ) -> StoreResult<Vec<StoredOverlay>> {
        // Seqs a thread reads the directories of, at least.
        const SHARE: usize = 128;
        use rayon::prelude::*;
        let threads = rayon::current_num_threads();
        if seqs.len() < 2 * SHARE || threads < 2 {
            return self.directory_overlays_in(owner, seqs);
        }
        let share = seqs.len().div_ceil(threads).max(SHARE);
        let parts = seqs
            .par_chunks(share)
            .map(|part| self.directory_overlays_in(owner, part))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// [`Store::directory_overlays`] on the calling thread.
    fn directory_overlays_in(
        &self,
        owner: &ConversationId,
        seqs: &[u64],
    ) -> StoreResult<Vec<StoredOverlay>> {
        let mut out = Vec::with_capacity(seqs.len());
        if seqs.is_empty() {
            return Ok(out);
        }
        let pin = self.pin_read();
        let settled = self.settled(owner, &pin)?;
        let mut rest = seqs;
        while let Some(&seq) = rest.first() {
            // Staged records are read from their staged chunks until they
            // are settled, as a scan of the log reads them.
            let space = Store::space_of(seq, settled);
            let first = self.chunk_start(space, owner, seq)?;
            let missing = |seq: u64| StoreError::Corrupt {
                what: format!(
                    "conversation {owner}: compaction {seq} is not in its chunk's overlay directory"
                ),
            };
            let value = self
                .get(&keys::overlay_directory(space, owner, first))?
                .ok_or_else(|| missing(seq))?;
            let directory: OverlayDirectory<'_> = codec::decode(&value, "overlay directory")?;
            let last = directory.overlays.last().map_or(0, |o| o.seq);
            let stays_in = |s: u64| s <= last && (s < settled) == (seq < settled);
            let here = rest.partition_point(|&s| stays_in(s));
            for &seq in &rest[..here.max(1)] {
                let at = directory
                    .overlays
                    .binary_search_by_key(&seq, |o| o.seq)
                    .map_err(|_| missing(seq))?;
                let entry = &directory.overlays[at];
                out.push(self.overlay(owner, seq, entry.turn, entry.record)?);
            }
            rest = &rest[here.max(1)..];
        }
        Ok(out)
    }

    /// Compaction `seq` of `owner`'s own log, in turn `turn`, from its
    /// record bytes (or the cache).
    fn overlay(
        &self,
        owner: &ConversationId,
        seq: u64,
        turn: u64,
        record: &[u8],
    ) -> StoreResult<StoredOverlay> {
        if let Some(hit) = self.cached_overlay(owner, seq) {
            return Ok(hit);
        }
        let event = event_of(self, owner, seq, record)?;
        let overlay = StoredOverlay { seq, turn, event };
        self.cache_overlay(owner, &overlay);
        Ok(overlay)
    }

    pub(crate) fn cached_overlay(&self, owner: &ConversationId, seq: u64) -> Option<StoredOverlay> {
        let cache = self
            .overlay_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.get(&(*owner, seq)).cloned()
    }

    pub(crate) fn cache_overlay(&self, owner: &ConversationId, overlay: &StoredOverlay) {
        let mut cache = self
            .overlay_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= crate::store::OVERLAY_CACHE_MAX {
            cache.clear();
        }
        cache.insert((*owner, overlay.seq), overlay.clone());
    }
}

fn truncated(owner: &ConversationId) -> StoreError {
    StoreError::Corrupt {
        what: format!("conversation {owner}: an overlay range key is truncated"),
    }
}
