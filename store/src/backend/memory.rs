//! [`MemoryBackend`]: a database in memory, for tests and for programs
//! that embed convstore without files. Nothing survives the process.

use std::collections::BTreeMap;
use std::sync::{PoisonError, RwLock};

use bytes::Bytes;

use super::{Backend, Batch, Condition, KeyRange, Keyspace, KvIter};
use crate::error::StoreResult;

/// Both keyspaces in ordered maps behind one lock: a batch, conditional or
/// not, is applied whole under it, so readers never see part of one.
#[derive(Default)]
pub struct MemoryBackend {
    spaces: RwLock<[BTreeMap<Vec<u8>, Bytes>; 2]>,
}

impl MemoryBackend {
    /// An empty database.
    pub fn new() -> MemoryBackend {
        MemoryBackend::default()
    }

    fn index(space: Keyspace) -> usize {
        match space {
            Keyspace::Main => 0,
            Keyspace::Blobs => 1,
        }
    }
}

impl Backend for MemoryBackend {
    fn get(&self, space: Keyspace, key: &[u8]) -> StoreResult<Option<Bytes>> {
        let spaces = self.spaces.read().unwrap_or_else(PoisonError::into_inner);
        Ok(spaces[Self::index(space)].get(key).cloned())
    }

    fn scan(&self, space: Keyspace, range: KeyRange, reverse: bool) -> KvIter<'_> {
        // A snapshot of the range: later writes do not show in it.
        let spaces = self.spaces.read().unwrap_or_else(PoisonError::into_inner);
        let mut pairs: Vec<(Bytes, Bytes)> = spaces[Self::index(space)]
            .range(range)
            .map(|(k, v)| (Bytes::copy_from_slice(k), v.clone()))
            .collect();
        if reverse {
            pairs.reverse();
        }
        Box::new(pairs.into_iter().map(Ok))
    }

    fn apply(&self, batch: Batch) -> StoreResult<()> {
        self.apply_if(&[], batch).map(|_| ())
    }

    fn apply_if(&self, conditions: &[Condition], batch: Batch) -> StoreResult<bool> {
        let mut spaces = self.spaces.write().unwrap_or_else(PoisonError::into_inner);
        let main = &spaces[0];
        for condition in conditions {
            if main.get(&condition.key).map(AsRef::as_ref) != condition.expected.as_deref() {
                return Ok(false);
            }
        }
        for (space, key, value) in batch.ops {
            let map = &mut spaces[Self::index(space)];
            match value {
                Some(value) => {
                    map.insert(key, Bytes::from(value));
                }
                None => {
                    map.remove(&key);
                }
            }
        }
        Ok(true)
    }

    fn sync(&self) -> StoreResult<()> {
        Ok(())
    }

    fn size_on_disk(&self) -> StoreResult<u64> {
        let spaces = self.spaces.read().unwrap_or_else(PoisonError::into_inner);
        Ok(spaces
            .iter()
            .flat_map(|m| m.iter())
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
