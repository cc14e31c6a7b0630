//! Compaction overlays, read from their entries without scanning the log.

use crate::codec::{self, decode_record, record_to_event};
use crate::codec::{OverlayDirectory, OverlayEntry};
use crate::error::{StoreError, StoreResult};
use crate::event::Event;
use crate::ids::ConversationId;
use crate::keys;
use crate::store::Store;

use super::in_record;

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

impl Store {
    /// The compaction overlays among records `0..end`, in log order.
    pub fn overlays(&self, id: &ConversationId, end: u64) -> StoreResult<Vec<StoredOverlay>> {
        let mut out = Vec::new();
        if self.format >= keys::OVERLAY_DIRECTORY_FORMAT {
            for (space, piece) in self.spaced_pieces(id, 0, end)? {
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
            let entries = self.scan_range(
                keys::overlay(owner, piece.start),
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
        let repr = decode_record(record).map_err(|e| in_record(owner, seq, &e))?;
        let event = record_to_event(&repr, &mut |blob| self.load_blob(blob))
            .map_err(|e| in_record(owner, seq, &e))?;
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
