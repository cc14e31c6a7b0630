//! [`EncryptedBackend`]: a backend that seals, under each conversation's
//! data key ([`crate::crypto`]), every value holding that conversation's
//! payloads, around the backend that stores them.
//!
//! Sealed: chunks (`c`, `s`), overlay directories (`O`, `q`, `o`), call
//! directories (`k`, `j`), view blocks and their call indexes (`w`, `x`)
//! and pending redactions (`Z`). In clear: the format, a conversation's
//! metadata (its name, head, length and counts), names, lineage, staging
//! and turn indexes, pins, stored views' names and states, deletions in
//! progress: what finds a conversation and checks its chain without the
//! key. Everything above this layer reads and writes plaintext, so
//! redaction, retention, deletion and views work unchanged.
//!
//! The database keeps no segment files (every value is in sled, sealed)
//! and no blobs (an encrypted database's records keep every text beside
//! them, [`crate::codec::Layout::Sealed`]).
//!
//! A batch that decides a deletion (a conversation's metadata replaced by
//! its tombstone) or finishes one (the tombstone removed) deletes the
//! conversations' data keys once it is durable.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Backend, Batch, Bytes, Condition, KeyRange, Keyspace, KvIter};
use crate::codec::{self, ChunkLayout, ChunkValue};
use crate::crypto::{ChunkHeader, KeyState, Keyring, Sealed};
use crate::error::{StoreError, StoreResult};
use crate::ids::ConversationId;
use crate::keys;

/// The tags of the keys whose values are sealed.
const SEALED_TAGS: &[u8] = b"csOqowxkjZ";
/// Of those, the chunks' (which carry a [`ChunkHeader`]).
const CHUNK_TAGS: &[u8] = b"cs";

/// A backend whose conversations' payloads are sealed (see the module
/// documentation). Without a keyring it reads what is in clear and
/// refuses the rest, and every write.
pub(crate) struct EncryptedBackend {
    inner: Arc<dyn Backend>,
    keyring: Option<Arc<Keyring>>,
    /// The database's key scope ([`crate::crypto::Slot`]).
    scope: [u8; 16],
}

/// The conversation whose data key seals the value of `key`, if sealed.
pub(crate) fn sealed_by(key: &[u8]) -> Option<ConversationId> {
    if key.len() < 17 || !SEALED_TAGS.contains(&key[0]) {
        return None;
    }
    keys::conversation_of(key)
}

/// A key as messages show it: its tag, then the rest in hexadecimal.
fn describe(key: &[u8]) -> String {
    let rest = crate::hash::hex(key.get(1..).unwrap_or_default());
    format!("{}{rest}", key.first().map_or('?', |&t| char::from(t)))
}

/// Whether the value of `key` is a chunk (sealed with a [`ChunkHeader`]).
pub(crate) fn is_chunk_key(key: &[u8]) -> bool {
    key.first().is_some_and(|tag| CHUNK_TAGS.contains(tag))
}

impl EncryptedBackend {
    pub(crate) fn new(
        inner: Arc<dyn Backend>,
        keyring: Option<Arc<Keyring>>,
        scope: [u8; 16],
    ) -> Self {
        EncryptedBackend {
            inner,
            keyring,
            scope,
        }
    }

    /// The database's key scope.
    pub(crate) fn scope(&self) -> [u8; 16] {
        self.scope
    }

    /// The backend underneath, whose values are sealed: for `verify`
    /// without the key.
    pub(crate) fn raw(&self) -> &dyn Backend {
        &*self.inner
    }

    /// The keyring, if a key is configured.
    pub(crate) fn keyring_if_any(&self) -> Option<Arc<Keyring>> {
        self.keyring.clone()
    }

    /// The keyring, or the refusal of what needs it (`doing`, said only
    /// when refused: reads call this for every value).
    fn keyring(&self, doing: impl std::fmt::Display) -> StoreResult<&Keyring> {
        self.keyring
            .as_deref()
            .ok_or_else(|| StoreError::Encrypted {
                what: format!(
                    "the database is encrypted and no key is configured, so it cannot {doing}: \
                     set [encryption] key_file in convstore.toml or ${}",
                    crate::crypto::KEY_FILE_VARIABLE
                ),
            })
    }

    /// The plaintext of `value`, stored under `key` in the main keyspace.
    fn open(&self, key: &[u8], value: Bytes) -> StoreResult<Bytes> {
        let Some(id) = sealed_by(key) else {
            return Ok(value);
        };
        let keyring = self.keyring(format_args!("read conversation {id}"))?;
        let damaged = |why: &str| StoreError::Corrupt {
            what: format!(
                "conversation {id}: the value of key {} {why}",
                describe(key)
            ),
        };
        let sealed = Sealed::parse(&value).ok_or_else(|| damaged("is not sealed"))?;
        let plain = keyring
            .data_key(&self.scope, &id)?
            .open(key, &sealed)
            .ok_or_else(|| {
                damaged("does not open with its data key (changed, damaged or moved)")
            })?;
        Ok(Bytes::from(plain))
    }

    /// `value` sealed for `key` (unchanged if not a sealed key).
    fn seal(&self, keyring: &Keyring, key: &[u8], value: Vec<u8>) -> StoreResult<Vec<u8>> {
        let Some(id) = sealed_by(key) else {
            return Ok(value);
        };
        let data_key = keyring.data_key(&self.scope, &id)?;
        if is_chunk_key(key) {
            let header = chunk_header(&id, key, &value)?;
            data_key.seal(key, &header.bytes(), &value)
        } else {
            data_key.seal(key, &[], &value)
        }
    }

    /// `batch` sealed, with the conversations whose deletion it decides
    /// and those whose deletion it finishes.
    #[allow(clippy::type_complexity)]
    fn seal_batch(
        &self,
        batch: Batch,
    ) -> StoreResult<(Batch, Vec<ConversationId>, Vec<ConversationId>)> {
        if batch.is_empty() {
            return Ok((batch, Vec::new(), Vec::new()));
        }
        let keyring = self.keyring("be written")?;
        let mut sealed = Batch {
            ops: Vec::with_capacity(batch.ops.len()),
            announced: batch.announced,
        };
        let mut decided = Vec::new();
        let mut finished = Vec::new();
        // Conversations the batch creates: a data key is made only for
        // one of these. One that exists and has no key in the keyring
        // (another keyring, an older copy of it) is refused, as reading it
        // is: a new key would leave its records under two.
        let mut new = Vec::new();
        for (space, key, value) in &batch.ops {
            if *space == Keyspace::Main
                && value.is_some()
                && key.first() == Some(&keys::CONVERSATION)
            {
                if let Some(id) = keys::conversation_of(key) {
                    if !new.contains(&id)
                        && !self.inner.contains(Keyspace::Main, key)?
                        && !self.inner.contains(Keyspace::Main, &keys::deleted(&id))?
                    {
                        new.push(id);
                    }
                }
            }
        }
        if !new.is_empty() {
            // A keyring missing beside a database that has conversations
            // was lost or moved: a new one would hold none of their keys.
            if !keyring.exists() && self.has_conversations_besides(&new)? {
                return Err(StoreError::Encrypted {
                    what: format!(
                        "the keyring {} does not exist, and the database has conversations whose \
                         data keys it held: put it back",
                        keyring.path().display()
                    ),
                });
            }
            // Every conversation the batch creates gets its data key now,
            // whether or not the batch seals anything of it (a fork's first
            // batch may not).
            for id in &new {
                keyring.make_key(&self.scope, id)?;
            }
        }
        for (space, key, value) in batch.ops {
            if space == Keyspace::Blobs {
                if value.is_some() {
                    return Err(StoreError::Encrypted {
                        what: "a long text stored apart from its conversation cannot be \
                               encrypted (records copied from an unencrypted database may \
                               hold one)"
                            .to_owned(),
                    });
                }
                sealed.ops.push((space, key, value));
                continue;
            }
            match (key.first(), &value) {
                (Some(&keys::DELETED), Some(_)) => {
                    if let Some(id) = keys::conversation_of(&key) {
                        self.check_shreddable(keyring, &id)?;
                        decided.push(id);
                    }
                }
                (Some(&keys::DELETED), None) => finished.extend(keys::conversation_of(&key)),
                _ => {}
            }
            let value = value.map(|v| self.seal(keyring, &key, v)).transpose()?;
            sealed.ops.push((space, key, value));
        }
        // A deletion is decided by the batch that puts a conversation's
        // tombstone in place of its metadata, finished by the one that
        // removes the tombstone.
        let decided: Vec<ConversationId> = decided
            .into_iter()
            .filter(|id| {
                let meta = keys::conversation(id);
                sealed
                    .ops
                    .iter()
                    .any(|(s, k, v)| *s == Keyspace::Main && *k == meta && v.is_none())
            })
            .collect();
        Ok((sealed, decided, finished))
    }

    /// Whether the database has a conversation other than `new`.
    fn has_conversations_besides(&self, new: &[ConversationId]) -> StoreResult<bool> {
        for pair in self
            .inner
            .scan(Keyspace::Main, super::prefixed([keys::CONVERSATION]), false)
        {
            let (key, _) = pair?;
            if keys::conversation_of(&key).is_some_and(|id| !new.contains(&id)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Refuses to delete conversation `id` when its data key is not in the
    /// keyring (another keyring, an older copy of it): the deletion could
    /// not shred it, and the key would stay live where the keyring is.
    fn check_shreddable(&self, keyring: &Keyring, id: &ConversationId) -> StoreResult<()> {
        match keyring.state(&self.scope, id)? {
            KeyState::Live(_) | KeyState::Shredded => Ok(()),
            KeyState::Missing => Err(StoreError::Encrypted {
                what: format!(
                    "conversation {id} has no data key in the keyring {}, so deleting it would \
                     not shred it: put the keyring that holds it back first",
                    keyring.path().display()
                ),
            }),
        }
    }

    /// Applies `batch` (conditionally), deleting the data keys of the
    /// conversations whose deletion it decides, once it is durable (a
    /// failure there is left to the batch that finishes the deletion),
    /// and of those whose deletion it finishes, before it is applied: a
    /// tombstone goes only once its conversation's key is gone, so a
    /// deletion whose key could not be deleted (a full disk) is finished
    /// again at the next open.
    fn apply_sealed(&self, conditions: Option<&[Condition]>, batch: Batch) -> StoreResult<bool> {
        let (batch, decided, finished) = self.seal_batch(batch)?;
        if !finished.is_empty() {
            self.keyring("delete a conversation")?
                .shred(&self.scope, &finished)?;
        }
        let applied = if let Some(conditions) = conditions {
            self.inner.apply_if(conditions, batch)?
        } else {
            self.inner.apply(batch)?;
            true
        };
        if applied && !decided.is_empty() {
            self.inner.sync()?;
            let _ = self
                .keyring("delete a conversation")?
                .shred(&self.scope, &decided);
        }
        Ok(applied)
    }
}

/// The header a chunk's value (`ChunkValue::Inline` of the chunk) is
/// sealed with: its record count, and the addresses before its first
/// record and of its last.
fn chunk_header(id: &ConversationId, key: &[u8], value: &[u8]) -> StoreResult<ChunkHeader> {
    let what = || format!("conversation {id}: chunk {}", describe(key));
    let ChunkValue::Inline(bytes) = codec::decode_named(value, &what)? else {
        return Err(StoreError::Corrupt {
            what: format!(
                "{}: a segment file reference in an encrypted database",
                what()
            ),
        });
    };
    let layout = ChunkLayout::read(bytes, &what)?;
    let mut last = layout.parent;
    for entry in &layout.entries {
        last = codec::link(&last, &bytes[entry.record.clone()]);
    }
    Ok(ChunkHeader {
        records: layout.entries.len() as u64,
        parent: *layout.parent.as_bytes(),
        last: *last.as_bytes(),
    })
}

impl Backend for EncryptedBackend {
    fn get(&self, space: Keyspace, key: &[u8]) -> StoreResult<Option<Bytes>> {
        match self.inner.get(space, key)? {
            Some(value) if space == Keyspace::Main => self.open(key, value).map(Some),
            other => Ok(other),
        }
    }

    fn contains(&self, space: Keyspace, key: &[u8]) -> StoreResult<bool> {
        self.inner.contains(space, key)
    }

    fn scan(&self, space: Keyspace, range: KeyRange, reverse: bool) -> KvIter<'_> {
        let pairs = self.inner.scan(space, range, reverse);
        if space != Keyspace::Main {
            return pairs;
        }
        Box::new(pairs.map(move |pair| {
            let (key, value) = pair?;
            let value = self.open(&key, value)?;
            Ok((key, value))
        }))
    }

    fn apply(&self, batch: Batch) -> StoreResult<()> {
        self.apply_sealed(None, batch).map(|_| ())
    }

    fn apply_if(&self, conditions: &[Condition], batch: Batch) -> StoreResult<bool> {
        if let Some(c) = conditions.iter().find(|c| sealed_by(&c.key).is_some()) {
            return Err(StoreError::Corrupt {
                what: format!(
                    "a write conditional on sealed key {} (a bug)",
                    describe(&c.key)
                ),
            });
        }
        self.apply_sealed(Some(conditions), batch)
    }

    fn sync(&self) -> StoreResult<()> {
        self.inner.sync()
    }

    fn size_on_disk(&self) -> StoreResult<u64> {
        self.inner.size_on_disk()
    }

    fn is_empty(&self) -> StoreResult<bool> {
        self.inner.is_empty()
    }

    fn on_write(&self) {
        self.inner.on_write();
    }

    fn forgetting(&self, conversations: u64, records: u64) -> StoreResult<()> {
        self.inner.forgetting(conversations, records)
    }

    fn forgotten(&self) {
        self.inner.forgotten();
    }

    fn path(&self) -> Option<&Path> {
        self.inner.path()
    }

    fn discarded_snapshots(&self) -> &[PathBuf] {
        self.inner.discarded_snapshots()
    }

    fn reclaimed_bulk_files(&self) -> &[PathBuf] {
        self.inner.reclaimed_bulk_files()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
