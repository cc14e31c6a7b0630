//! The storage seam: [`Backend`], the small ordered key-value store every
//! part of convstore above it uses. A database is two keyspaces (the log
//! and its side data, and the blobs by hash); a backend gives point reads,
//! ordered range scans in both directions, atomic batches, a batch applied
//! only if some keys still hold what the writer read (so that appends from
//! several processes, or machines, are serialised by the backend rather
//! than by a lock in one process), a sync that makes what was applied
//! durable, and its size.
//!
//! Two implementations: [`SledBackend`] (the embedded default: sled and
//! the segment files beside it, in one directory) and [`MemoryBackend`]
//! (in memory, for tests and embedding). The store holds one as
//! `Arc<dyn Backend>`, so no generic parameter spreads above it.

pub(crate) mod encrypted;
mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
pub(crate) mod sled;

use std::ops::Bound;
use std::path::{Path, PathBuf};

pub use self::sled::SledBackend;
// The segment files: the sled backend's place for large bodies, which the
// log's writers and readers reach through `Backend::segments`.
pub(crate) use self::sled::frames;
pub(crate) use self::sled::segments::{BulkFile, SegmentRef, Segments};
pub use bytes::Bytes;
pub use memory::MemoryBackend;

use crate::error::StoreResult;

/// The keyspaces of a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Keyspace {
    /// Conversations, their chunks and everything stored beside them.
    Main,
    /// Long texts by content hash.
    Blobs,
}

/// Writes applied together. Blob writes may land before the rest (a blob
/// nothing refers to is harmless); the writes to [`Keyspace::Main`] are
/// applied atomically: after a crash all or none of them are there. A scan
/// running beside the batch may see part of it (sled does not isolate
/// scans from writes), so convstore's readers bound what they read by what
/// they read first (a conversation's metadata), and write each log key
/// once.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    pub(crate) ops: Vec<(Keyspace, Vec<u8>, Option<Vec<u8>>)>,
    /// Conversations whose logs the batch lengthens, and their new
    /// lengths: a backend shared by several processes may tell the others
    /// ([`Backend::changes`]).
    pub(crate) announced: Vec<Change>,
}

/// What another process sharing a backend changed, as a hint: whoever
/// hears it reads the conversation again rather than trusting it, and
/// nothing may depend on hearing it at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The conversation's log is now at least `len` records long.
    Appended {
        /// The conversation.
        id: crate::ids::ConversationId,
        /// Its length after the write.
        len: u64,
    },
    /// Hints may have been missed (the connection that hears them was
    /// lost): any conversation may have changed.
    Unknown,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Sets `key` to `value` in `space`.
    pub fn insert(&mut self, space: Keyspace, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push((space, key.into(), Some(value.into())));
    }

    /// Sets `key` to `value` in the main keyspace.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.insert(Keyspace::Main, key, value);
    }

    /// Removes `key` from the main keyspace.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        self.remove(Keyspace::Main, key);
    }

    /// Removes `key` from `space`.
    pub fn remove(&mut self, space: Keyspace, key: impl Into<Vec<u8>>) {
        self.ops.push((space, key.into(), None));
    }

    /// Whether it holds no write.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// How many writes it holds.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Adds `other`'s writes after this one's.
    pub fn extend(&mut self, other: Batch) {
        self.ops.extend(other.ops);
        self.announced.extend(other.announced);
    }

    /// Notes that the batch makes conversation `id` `len` records long.
    pub fn announce(&mut self, id: crate::ids::ConversationId, len: u64) {
        self.announced
            .retain(|c| !matches!(c, Change::Appended { id: other, .. } if *other == id));
        self.announced.push(Change::Appended { id, len });
    }

    /// The conversations the batch lengthens ([`Batch::announce`]).
    pub fn announced(&self) -> &[Change] {
        &self.announced
    }

    /// The writes to one keyspace, in order.
    pub fn ops_in(&self, space: Keyspace) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.ops
            .iter()
            .filter(move |(s, _, _)| *s == space)
            .map(|(_, k, v)| (k.as_slice(), v.as_deref()))
    }
}

/// What a conditional batch requires: `key` in [`Keyspace::Main`] holds
/// `expected` (`None`: does not exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The key.
    pub key: Vec<u8>,
    /// The value it must hold, or `None` for absent.
    pub expected: Option<Vec<u8>>,
}

/// Key-value pairs in key order (or reverse key order).
pub type KvIter<'a> = Box<dyn Iterator<Item = StoreResult<(Bytes, Bytes)>> + Send + 'a>;

/// A key range: start and end bounds.
pub type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// An ordered key-value store with the guarantees convstore builds on (see
/// the module documentation).
pub trait Backend: Send + Sync {
    /// The value of `key`.
    fn get(&self, space: Keyspace, key: &[u8]) -> StoreResult<Option<Bytes>>;

    /// Whether `key` has a value.
    fn contains(&self, space: Keyspace, key: &[u8]) -> StoreResult<bool> {
        Ok(self.get(space, key)?.is_some())
    }

    /// The pairs whose key is in `range`, in key order, or reverse key
    /// order with `reverse`.
    fn scan(&self, space: Keyspace, range: KeyRange, reverse: bool) -> KvIter<'_>;

    /// Applies `batch` (see [`Batch`] for what is atomic).
    fn apply(&self, batch: Batch) -> StoreResult<()>;

    /// Applies `batch` only if every condition holds when it is applied,
    /// checked and applied as one step against every other writer; returns
    /// whether it was applied.
    fn apply_if(&self, conditions: &[Condition], batch: Batch) -> StoreResult<bool>;

    /// Makes everything applied so far durable: what an acknowledged write
    /// waits for.
    fn sync(&self) -> StoreResult<()>;

    /// Whether the backend is a database server: each batch is durable
    /// once applied, and batches of different writers (threads, processes,
    /// machines) are applied in parallel, serialised only where their
    /// conditions meet. The store then takes no process-wide write lock.
    fn is_server(&self) -> bool {
        false
    }

    /// Bytes the database occupies.
    fn size_on_disk(&self) -> StoreResult<u64>;

    /// Whether the main keyspace holds nothing (a database not set up yet).
    fn is_empty(&self) -> StoreResult<bool> {
        Ok(self
            .scan(Keyspace::Main, (Bound::Unbounded, Bound::Unbounded), false)
            .next()
            .transpose()?
            .is_none())
    }

    /// The segment files where this backend keeps large bodies outside its
    /// keyspaces, if it has them (a local directory does).
    fn segments(&self) -> Option<&Segments> {
        None
    }

    /// Called before every write, under the store's write lock (the sled
    /// backend notes that the database changed, for `convstore.state`).
    fn on_write(&self) {}

    /// Called before `conversations` conversations holding `records`
    /// records in all are deleted (the sled backend lowers the bounds its
    /// state file keeps, so that a later open does not expect them); an
    /// error stops the deletion before anything is deleted.
    fn forgetting(&self, _conversations: u64, _records: u64) -> StoreResult<()> {
        Ok(())
    }

    /// Called once deleted conversations are gone (the sled backend writes
    /// its catalog again without them).
    fn forgotten(&self) {}

    /// The directory the database is in, for a local backend.
    fn path(&self) -> Option<&Path> {
        None
    }

    /// Unfinished snapshot files an earlier crash left that opening moved
    /// aside (sled; see ARCHITECTURE.md).
    fn discarded_snapshots(&self) -> &[PathBuf] {
        &[]
    }

    /// Files of interrupted bulk appends that opening deleted.
    fn reclaimed_bulk_files(&self) -> &[PathBuf] {
        &[]
    }

    /// For a database server: a backend whose reads and writes all go
    /// into one new transaction of this database, seen by no other reader
    /// until [`Backend::commit_transaction`]; dropped without it, nothing
    /// of it stays (a process that dies is rolled back too). `None` for a
    /// backend without transactions.
    fn begin_transaction(&self) -> Option<StoreResult<std::sync::Arc<dyn Backend>>> {
        None
    }

    /// For a database server other processes write to: a backend whose
    /// reads all see the database as it stood at its first read, whatever
    /// is written meanwhile, for reads that must agree with one another
    /// (a record count and the records). It writes nothing; dropping it
    /// ends it. `None` for a backend one process holds, whose writes that
    /// process can hold off instead.
    fn begin_snapshot(&self) -> Option<StoreResult<std::sync::Arc<dyn Backend>>> {
        None
    }

    /// Commits the transaction this backend is (see
    /// [`Backend::begin_transaction`]).
    fn commit_transaction(&self) -> StoreResult<()> {
        Ok(())
    }

    /// Hints of what other processes sharing the backend write, for a
    /// backend that can be shared (PostgreSQL: LISTEN/NOTIFY); `None` for
    /// one that a single process holds. Each call starts a new listener.
    fn changes(&self) -> Option<std::sync::mpsc::Receiver<Change>> {
        None
    }

    /// A short description of where the database is, for messages (a
    /// URL without its password, a directory).
    fn describe(&self) -> String {
        self.path()
            .map_or_else(|| "(memory)".to_owned(), |p| p.display().to_string())
    }

    /// The backend as `Any`, for features of one backend (salvage reads
    /// sled's files).
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A key range from `start` (inclusive) to `end` (exclusive).
pub fn between(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> KeyRange {
    (Bound::Included(start.into()), Bound::Excluded(end.into()))
}

/// A key range from `start` to `end`, both inclusive.
pub fn through(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> KeyRange {
    (Bound::Included(start.into()), Bound::Included(end.into()))
}

/// Every key that starts with `prefix`.
pub fn prefixed(prefix: impl Into<Vec<u8>>) -> KeyRange {
    let start: Vec<u8> = prefix.into();
    let mut end = start.clone();
    // The first key after every key with this prefix: the prefix with its
    // last byte below 255 raised by one, the bytes after it dropped.
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return (Bound::Included(start), Bound::Excluded(end));
        }
    }
    (Bound::Included(start), Bound::Unbounded)
}
