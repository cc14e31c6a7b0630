//! Per-conversation settings kept beside the log (not part of its
//! history): pinned turns and automatic compaction's state.

use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode};
use crate::error::StoreResult;
use crate::ids::ConversationId;
use crate::keys;
use crate::store::Store;

/// Automatic compaction's state for one conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoState {
    /// A summarizer failed during an automatic compaction since the last
    /// manual compaction: automatic runs use mechanical policies.
    pub summarizer_failed: bool,
}

impl Store {
    /// The pinned turn ranges of `id` (inclusive), sorted and merged.
    pub fn pins(&self, id: &ConversationId) -> StoreResult<Vec<(u64, u64)>> {
        self.meta(id)?;
        match self.db.get(keys::pins(id))? {
            Some(bytes) => decode(&bytes, &format!("pins of conversation {id}")),
            None => Ok(Vec::new()),
        }
    }

    /// Pins turns `first..=last` of `id`; returns the pins after it.
    pub fn pin(&self, id: &ConversationId, first: u64, last: u64) -> StoreResult<Vec<(u64, u64)>> {
        let guard = self.lock_writes();
        let mut pins = self.pins(id)?;
        pins.push((first.min(last), first.max(last)));
        pins.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in pins {
            match merged.last_mut() {
                Some(m) if a <= m.1.saturating_add(1) => m.1 = m.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        self.db.insert(keys::pins(id), encode(&merged))?;
        drop(guard);
        self.sync()?;
        Ok(merged)
    }

    /// Unpins turns `first..=last` of `id` (a pinned range that straddles
    /// them keeps its other turns); returns the pins after it.
    pub fn unpin(
        &self,
        id: &ConversationId,
        first: u64,
        last: u64,
    ) -> StoreResult<Vec<(u64, u64)>> {
        let (first, last) = (first.min(last), first.max(last));
        let guard = self.lock_writes();
        let mut kept = Vec::new();
        for (a, b) in self.pins(id)? {
            if b < first || a > last {
                kept.push((a, b));
                continue;
            }
            if a < first {
                kept.push((a, first - 1));
            }
            if b > last {
                kept.push((last + 1, b));
            }
        }
        self.db.insert(keys::pins(id), encode(&kept))?;
        drop(guard);
        self.sync()?;
        Ok(kept)
    }

    /// Automatic compaction's state for `id`.
    pub fn auto_state(&self, id: &ConversationId) -> StoreResult<AutoState> {
        match self.db.get(keys::auto(id))? {
            Some(bytes) => decode(&bytes, &format!("automatic compaction state of {id}")),
            None => Ok(AutoState::default()),
        }
    }

    /// Sets automatic compaction's state for `id`.
    pub fn set_auto_state(&self, id: &ConversationId, state: AutoState) -> StoreResult<()> {
        self.db.insert(keys::auto(id), encode(&state))?;
        self.sync()?;
        Ok(())
    }
}
