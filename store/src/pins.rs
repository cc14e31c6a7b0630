//! Per-conversation settings kept beside the log (not part of its
//! history): pinned turns and automatic compaction's state.

use serde::{Deserialize, Serialize};

use crate::backend::{Batch, Condition};
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
        match self.get(&keys::pins(id))? {
            Some(bytes) => decode(&bytes, &format!("pins of conversation {id}")),
            None => Ok(Vec::new()),
        }
    }

    /// Pins turns `first..=last` of `id`; returns the pins after it.
    pub fn pin(&self, id: &ConversationId, first: u64, last: u64) -> StoreResult<Vec<(u64, u64)>> {
        self.update_pins(id, |pins| {
            pins.push((first.min(last), first.max(last)));
            *pins = crate::position::merge_ranges(std::mem::take(pins));
        })
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
        self.update_pins(id, |pins| {
            let mut kept = Vec::new();
            for &(a, b) in pins.iter() {
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
            *pins = kept;
        })
    }

    /// Changes the pins of `id` with `change`, on condition that nobody
    /// changed them meanwhile (else reads them again), durably.
    fn update_pins(
        &self,
        id: &ConversationId,
        change: impl Fn(&mut Vec<(u64, u64)>),
    ) -> StoreResult<Vec<(u64, u64)>> {
        let key = keys::pins(id);
        loop {
            let guard = self.lock_writes();
            self.meta(id)?;
            let stored = self.get(&key)?;
            let mut pins: Vec<(u64, u64)> = match &stored {
                Some(bytes) => decode(bytes, &format!("pins of conversation {id}"))?,
                None => Vec::new(),
            };
            change(&mut pins);
            let mut batch = Batch::new();
            batch.put(key.clone(), encode(&pins));
            let condition = Condition {
                key: key.clone(),
                expected: stored.map(|b| b.to_vec()),
            };
            if self.kv.apply_if(&[condition], batch)? {
                drop(guard);
                self.sync()?;
                return Ok(pins);
            }
        }
    }

    /// Automatic compaction's state for `id`.
    pub fn auto_state(&self, id: &ConversationId) -> StoreResult<AutoState> {
        match self.get(&keys::auto(id))? {
            Some(bytes) => decode(&bytes, &format!("automatic compaction state of {id}")),
            None => Ok(AutoState::default()),
        }
    }

    /// Sets automatic compaction's state for `id`.
    pub fn set_auto_state(&self, id: &ConversationId, state: AutoState) -> StoreResult<()> {
        let mut batch = Batch::new();
        batch.put(keys::auto(id), encode(&state));
        self.kv.apply(batch)?;
        self.sync()?;
        Ok(())
    }
}
