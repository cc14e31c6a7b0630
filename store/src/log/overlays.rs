//! Compaction overlays, read from their entries without scanning the log.

use crate::codec::OverlayEntry;
use crate::codec::{self, decode_record, record_to_event};
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
                if let Some(hit) = self.cached_overlay(owner, seq) {
                    out.push(hit);
                    continue;
                }
                let entry: OverlayEntry<'_> = codec::decode(&value, "overlay entry")?;
                let record = decode_record(entry.record).map_err(|e| in_record(owner, seq, &e))?;
                let event = record_to_event(&record, &mut |blob| self.load_blob(blob))
                    .map_err(|e| in_record(owner, seq, &e))?;
                let overlay = StoredOverlay {
                    seq,
                    turn: entry.turn,
                    event,
                };
                self.cache_overlay(owner, &overlay);
                out.push(overlay);
            }
        }
        Ok(out)
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
