//! The database: [`Store::open`], conversations, names and id prefixes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::encrypted::EncryptedBackend;
use crate::backend::Segments;
use crate::backend::{
    self, Backend, Batch, Bytes, Condition, Keyspace, KvIter, MemoryBackend, SledBackend,
};
use crate::codec::{decode, decode_named, encode};
use crate::error::{StoreError, StoreResult};
use crate::event::{EventType, Timestamp, TurnTracker};
use crate::fork::ForkPoint;
use crate::hash::Address;
use crate::ids::ConversationId;
use crate::keys::{self, FORMAT_VERSION, OLDEST_FORMAT};

/// The shortest id prefix that names a conversation: shorter hex strings
/// are too easily meant as names (`append b` creates `b`).
pub const MIN_ID_PREFIX: usize = 4;

/// Unsynced writes after which a write syncs ([`Store::synced_or_counted`]).
pub(crate) const UNSYNCED_WRITES: u64 = 256;

/// A convstore database: conversations, their logs and the payloads they
/// share, in a [`Backend`] (sled in a directory by default; in memory, or
/// any other ordered key-value store that keeps its guarantees).
///
/// A `Store` can be shared between threads. Writes are serialised inside
/// the process, and each is applied on condition that the conversation's
/// metadata is still what it was read as, so that a backend shared by
/// several processes serialises them too.
pub struct Store {
    /// Where everything is kept.
    pub(crate) kv: Arc<dyn Backend>,
    /// The database's format version: 1 keeps chunks and blobs in the
    /// backend's keyspaces, 2 the bodies of large appends in its segment
    /// files, 3 also stages small appends.
    pub(crate) format: u32,
    write_lock: Mutex<()>,
    /// Appends of this process to one conversation take turns on one of
    /// these (by the id's first byte), whatever the backend.
    conversation_locks: [Mutex<()>; 64],
    max_event_bytes: AtomicU64,
    /// Writes acknowledged without a sync since the last sync
    /// ([`Store::synced_or_counted`]).
    unsynced_writes: AtomicU64,
    segment_min_bytes: AtomicU64,
    settle_records: AtomicU64,
    bulk_memory_bytes: AtomicU64,
    /// Decoded compaction overlays by (owner, seq): records never change,
    /// so a process that reads the overlays again and again (a server, the
    /// automatic compaction loop) decodes each once.
    pub(crate) overlay_cache: Mutex<HashMap<(ConversationId, u64), crate::log::StoredOverlay>>,
    /// Deletions that removed blobs so far ([`Store::blob_sweeps`]).
    blob_sweeps: AtomicU64,
    /// Told how many records long operations have got through.
    progress: std::sync::RwLock<Option<ProgressFn>>,
    /// Staged keys settles replaced, and the reads that may still reach
    /// them (`staging.rs`).
    pub(crate) reclaim: Arc<Mutex<crate::staging::Reclaim>>,
}

impl Drop for Store {
    /// Deletes the staged keys settles retired while reads held them
    /// (`staging.rs`; a read cannot outlive the store).
    fn drop(&mut self) {
        self.retire(Vec::new());
    }
}

/// A callback told how many more records a long operation (verify, a
/// projection's windows) has got through.
pub type ProgressFn = std::sync::Arc<dyn Fn(u64) + Send + Sync>;

/// Overlays kept decoded at most; past it the cache starts over.
pub(crate) const OVERLAY_CACHE_MAX: usize = 100_000;

/// An append whose chunks and new blobs reach this many bytes keeps them in
/// the segment files (format 2); a smaller one keeps them in sled, so that
/// a single event costs one sync, not two.
pub const DEFAULT_SEGMENT_MIN_BYTES: u64 = 64 * 1024;

/// The largest event an append accepts by default: 64 MiB, counting its
/// record and the texts it stores as blobs.
pub const DEFAULT_MAX_EVENT_BYTES: u64 = 64 * 1024 * 1024;

/// A bulk append keeps its events in memory, and commits them as one
/// append, until they reach this many bytes; past it, it writes them to
/// the segment files as it goes (`bulk.rs`).
pub const DEFAULT_BULK_MEMORY_BYTES: u64 = 4 * 1024 * 1024;

/// Counts for one kind of event in a conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindStats {
    /// How many events.
    pub count: u64,
    /// Their encoded size: record bytes plus the blobs they reference.
    pub bytes: u64,
}

/// What the store keeps about a conversation besides its records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ConversationMeta {
    pub name: Option<String>,
    pub created: Timestamp,
    pub head: Address,
    pub len: u64,
    pub turns: TurnTracker,
    pub kinds: [KindStats; 10],
}

/// A conversation as `list` and `stats` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConversationInfo {
    /// Its id.
    pub id: ConversationId,
    /// Its name, if it has one.
    pub name: Option<String>,
    /// When it was created.
    pub created: Timestamp,
    /// The address of its last record ([`Address::ROOT`] when empty).
    pub head: Address,
    /// How many records it has.
    pub len: u64,
    /// How many turns its records span.
    pub turns: u64,
    /// Counts per event type, indexed by [`EventType::index`], of the
    /// records stored under this conversation's own keys: for a fork, those
    /// after its fork point ([`Store::kind_stats`] counts the whole log).
    pub kinds: [KindStats; 10],
    /// Where it was forked from, if it is a fork.
    pub fork: Option<ForkPoint>,
}

impl ConversationInfo {
    /// Counts for one event type.
    pub fn kind(&self, kind: EventType) -> KindStats {
        self.kinds[kind.index()]
    }

    /// The name if it has one, else the short id as a query takes it
    /// ([`ConversationId::query`]).
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.id.query())
    }
}

impl ConversationMeta {
    pub(crate) fn info(&self, id: ConversationId, fork: Option<ForkPoint>) -> ConversationInfo {
        ConversationInfo {
            id,
            name: self.name.clone(),
            created: self.created,
            head: self.head,
            len: self.len,
            turns: self.turns.turn_count(self.len),
            kinds: self.kinds,
            fork,
        }
    }
}

/// How [`Store::open_with`] opens a database.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct OpenOptions {
    /// Create the database when the path does not exist (its parent
    /// directory must) or is an empty directory. Otherwise a missing
    /// database is [`StoreError::NoDatabase`].
    pub create: bool,
    /// While another process has the database open, retry for this long
    /// before failing with [`StoreError::Locked`].
    pub wait: Duration,
    /// The master key and keyring of an encrypted database: a database
    /// created with it is encrypted ([`crate::crypto`]); an encrypted one
    /// needs it to read its payloads and to write, and an unencrypted one
    /// is refused with it.
    pub encryption: Option<Arc<crate::crypto::Keyring>>,
    /// The key scope a new encrypted database gets: a backup's is its
    /// database's (they share data keys); `None`, a new one.
    pub(crate) key_scope: Option<[u8; 16]>,
}

impl OpenOptions {
    /// Open an existing database only.
    pub fn existing() -> Self {
        Self::default()
    }

    /// Open a database, creating it if needed.
    pub fn create() -> Self {
        OpenOptions {
            create: true,
            ..Self::default()
        }
    }

    /// Retry a database in use for up to `wait`.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Encrypt with `keyring`'s master key (see [`OpenOptions::encryption`]).
    #[must_use]
    pub fn encryption(mut self, keyring: Option<Arc<crate::crypto::Keyring>>) -> Self {
        self.encryption = keyring;
        self
    }
}

/// What is at a database path before it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// sled's files: a database (a convstore one if it has the format key).
    Database,
    /// Nothing: the directory would be created.
    Nothing,
    /// An empty directory.
    EmptyDirectory,
}

/// Looks at `path` without writing anything: refuses a file, a directory
/// that holds something other than a database, and (unless `create`) a
/// path with no database.
fn inspect(path: &Path, create: bool) -> StoreResult<Found> {
    let not_convstore = || StoreError::NotConvstore {
        path: path.to_path_buf(),
    };
    let cannot = |e: std::io::Error| StoreError::Open {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A symbolic link to nothing: neither created through nor
            // removed.
            if let Ok(target) = std::fs::read_link(path) {
                return Err(StoreError::Open {
                    path: path.to_path_buf(),
                    reason: format!(
                        "it is a symbolic link to {}, which does not exist",
                        target.display()
                    ),
                });
            }
            if !create {
                return Err(StoreError::NoDatabase {
                    path: path.to_path_buf(),
                });
            }
            let parent = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !parent.is_dir() {
                return Err(StoreError::Open {
                    path: path.to_path_buf(),
                    reason: format!("the directory {} does not exist", parent.display()),
                });
            }
            Ok(Found::Nothing)
        }
        Err(e) => Err(cannot(e)),
        Ok(meta) if !meta.is_dir() => Err(not_convstore()),
        Ok(_) => {
            if path.join("db").is_file() && path.join("conf").is_file() {
                return Ok(Found::Database);
            }
            let empty = std::fs::read_dir(path).map_err(cannot)?.next().is_none();
            match (empty, create) {
                (true, true) => Ok(Found::EmptyDirectory),
                (true, false) => Err(StoreError::NoDatabase {
                    path: path.to_path_buf(),
                }),
                (false, _) => Err(not_convstore()),
            }
        }
    }
}

impl Store {
    /// Opens the database at `path`, creating it if the path does not exist
    /// or is an empty directory (see [`Store::open_with`]).
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Store> {
        Self::open_with(path, &OpenOptions::create())
    }

    /// Like [`Store::open`], but while another process has the database
    /// open, retries for up to `wait` before failing with
    /// [`StoreError::Locked`].
    pub fn open_waiting(path: impl AsRef<Path>, wait: Duration) -> StoreResult<Store> {
        Self::open_with(path, &OpenOptions::create().wait(wait))
    }

    /// Opens the database at `path` as `options` say.
    ///
    /// Nothing is written before the path is known to hold a convstore
    /// database, or (with [`OpenOptions::create`]) to be free for one: a
    /// file, or a directory holding anything else, is
    /// [`StoreError::NotConvstore`] and stays untouched. A database this
    /// call created and then failed to set up is removed again.
    ///
    /// Fails with [`StoreError::Locked`] when another process has it open,
    /// [`StoreError::UnsupportedFormat`] for a newer format,
    /// [`StoreError::NotConvstore`] for anything that is not a convstore
    /// database and [`StoreError::NoDatabase`] when there is none and
    /// `options.create` is not set.
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> StoreResult<Store> {
        let path = path.as_ref().to_path_buf();
        let found = inspect(&path, options.create)?;
        let opened = Self::open_inspected(&path, options, found);
        let locked = matches!(opened, Err(StoreError::Locked { .. }));
        if opened.is_err() && found != Found::Database && !locked {
            // Leave the path as it was: absent, or an empty directory. (A
            // database locked by another process was created by it
            // meanwhile: it is left alone.)
            if found == Found::Nothing {
                let _ = std::fs::remove_dir_all(&path);
            } else if let Ok(entries) = std::fs::read_dir(&path) {
                for entry in entries.flatten() {
                    let _ = std::fs::remove_dir_all(entry.path())
                        .or_else(|_| std::fs::remove_file(entry.path()));
                }
            }
        }
        opened
    }

    fn open_inspected(path: &Path, options: &OpenOptions, found: Found) -> StoreResult<Store> {
        let mut backend = SledBackend::open(path, options.wait)?;
        // A new database, or one whose creation was cut short before its
        // format key was written, may be set up here.
        let create = options.create || found != Found::Database;
        let format = match read_format(&backend, path)? {
            Some(format) => format,
            None if create && backend.is_empty()? => {
                let mut batch = Batch::new();
                batch.insert(Keyspace::Main, keys::FORMAT, FORMAT_VERSION.to_be_bytes());
                if let Some(keyring) = &options.encryption {
                    let scope = match options.key_scope {
                        Some(scope) => scope,
                        None => *ConversationId::generate().as_bytes(),
                    };
                    let mut marker = keyring.check().to_vec();
                    marker.extend_from_slice(&scope);
                    batch.insert(Keyspace::Main, keys::ENCRYPTION, marker);
                }
                backend.apply(batch)?;
                backend.created()?;
                FORMAT_VERSION
            }
            None => {
                return Err(StoreError::NotConvstore {
                    path: path.to_path_buf(),
                })
            }
        };
        if format >= 2 {
            backend.reclaim_bulk_files()?;
        }
        let backend: Arc<dyn Backend> = Arc::new(backend);
        let store = match encryption(&*backend, path, options)? {
            Some((keyring, scope)) => Store::assemble_sealed(backend, format, keyring, scope),
            None => Store::assemble(backend, format),
        };
        if format >= 2 {
            crate::bulk::discard_pending(&store)?;
        }
        store.finish_deletions();
        store.finish_redactions();
        store.finish_retention();
        Ok(store)
    }

    /// A store over `backend`: its database as the format key says, or a
    /// new one of the current format if the backend is empty.
    pub fn with_backend(backend: Arc<dyn Backend>) -> StoreResult<Store> {
        let format = match read_format(&*backend, Path::new("(backend)"))? {
            Some(format) => format,
            None if backend.is_empty()? => {
                let mut batch = Batch::new();
                batch.insert(Keyspace::Main, keys::FORMAT, FORMAT_VERSION.to_be_bytes());
                backend.apply(batch)?;
                backend.sync()?;
                FORMAT_VERSION
            }
            None => {
                return Err(StoreError::NotConvstore {
                    path: PathBuf::from("(backend)"),
                })
            }
        };
        let store = Store::assemble(backend, format);
        store.finish_deletions();
        store.finish_redactions();
        store.finish_retention();
        Ok(store)
    }

    /// A new, empty database in memory (nothing survives the process).
    pub fn in_memory() -> Store {
        let backend = Arc::new(MemoryBackend::new());
        let mut batch = Batch::new();
        batch.insert(Keyspace::Main, keys::FORMAT, FORMAT_VERSION.to_be_bytes());
        // A map in memory does not fail.
        let _ = backend.apply(batch);
        Store::assemble(backend, FORMAT_VERSION)
    }

    /// A store over `backend`, an encrypted database: its values sealed
    /// with the keys of `keyring` (`None`: no key, read-only).
    pub(crate) fn assemble_sealed(
        backend: Arc<dyn Backend>,
        format: u32,
        keyring: Option<Arc<crate::crypto::Keyring>>,
        scope: [u8; 16],
    ) -> Store {
        let sealed = EncryptedBackend::new(backend, keyring, scope);
        Store::assemble(Arc::new(sealed), format)
    }

    /// For an encrypted database, the backend that seals its values
    /// (`kv`).
    pub(crate) fn sealed(&self) -> Option<&EncryptedBackend> {
        self.kv.as_any().downcast_ref()
    }

    /// An encrypted database's key scope (see [`crate::crypto::Slot`]).
    pub(crate) fn key_scope(&self) -> Option<[u8; 16]> {
        self.sealed().map(EncryptedBackend::scope)
    }

    /// Whether `id` is a conversation of an encrypted database whose data
    /// key, or an ancestor's (a fork reads its parent's records), was
    /// deleted from the keyring: a conversation deleted after a backup
    /// that still holds it was made.
    pub fn is_shredded(&self, id: &ConversationId) -> StoreResult<bool> {
        let Some(keyring) = self.keyring() else {
            return Ok(false);
        };
        let Some(scope) = self.key_scope() else {
            return Ok(false);
        };
        let mut next = Some(*id);
        while let Some(id) = next {
            if keyring.is_shredded(&scope, &id)? {
                return Ok(true);
            }
            next = self.fork_point(&id)?.map(|p| p.parent);
        }
        Ok(false)
    }

    /// The keyring an encrypted database was opened with.
    pub fn keyring(&self) -> Option<Arc<crate::crypto::Keyring>> {
        self.sealed().and_then(EncryptedBackend::keyring_if_any)
    }

    /// Whether the database is encrypted ([`crate::crypto`]).
    pub fn is_encrypted(&self) -> bool {
        self.sealed().is_some()
    }

    /// Whether the database is encrypted and opened without its key: its
    /// payloads cannot be read, and nothing can be written.
    pub fn is_locked_by_key(&self) -> bool {
        self.sealed().is_some_and(|s| s.keyring_if_any().is_none())
    }

    fn assemble(kv: Arc<dyn Backend>, format: u32) -> Store {
        Store {
            kv,
            format,
            write_lock: Mutex::new(()),
            conversation_locks: std::array::from_fn(|_| Mutex::new(())),
            max_event_bytes: AtomicU64::new(DEFAULT_MAX_EVENT_BYTES),
            unsynced_writes: AtomicU64::new(0),
            segment_min_bytes: AtomicU64::new(DEFAULT_SEGMENT_MIN_BYTES),
            settle_records: AtomicU64::new(crate::staging::SETTLE_RECORDS),
            bulk_memory_bytes: AtomicU64::new(DEFAULT_BULK_MEMORY_BYTES),
            overlay_cache: Mutex::new(HashMap::new()),
            blob_sweeps: AtomicU64::new(0),
            progress: std::sync::RwLock::new(None),
            reclaim: Arc::default(),
        }
    }

    /// The database's id: 16 random bytes, made the first time it is
    /// asked for and never changed (a copy made by `backup` or `copy` has
    /// its own). Derived data kept outside the database (a search index
    /// in a cache directory) is filed under it.
    pub fn database_id(&self) -> StoreResult<ConversationId> {
        if let Some(value) = self.get(keys::DATABASE_ID)? {
            let bytes: [u8; 16] = value.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                what: format!("the database id is {} bytes, not 16", value.len()),
            })?;
            return Ok(ConversationId::from_bytes(bytes));
        }
        let id = ConversationId::generate();
        let mut batch = Batch::new();
        batch.put(keys::DATABASE_ID, id.as_bytes().to_vec());
        let condition = Condition {
            key: keys::DATABASE_ID.to_vec(),
            expected: None,
        };
        if self.kv.apply_if(&[condition], batch)? {
            self.sync()?;
            return Ok(id);
        }
        // Another process made it first.
        self.database_id()
    }

    /// Where the database is, for messages: its directory, or its URL
    /// without a password.
    pub fn describe(&self) -> String {
        self.kv.describe()
    }

    /// The backend the database is kept in.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.kv
    }

    /// The segment files, when the backend keeps them and the format uses
    /// them.
    pub(crate) fn segments(&self) -> Option<&Segments> {
        self.kv.segments().filter(|_| self.format >= 2)
    }

    /// The value of `key` in the main keyspace.
    pub(crate) fn get(&self, key: &[u8]) -> StoreResult<Option<Bytes>> {
        self.kv.get(Keyspace::Main, key)
    }

    /// Whether `key` has a value in the main keyspace.
    pub(crate) fn contains(&self, key: &[u8]) -> StoreResult<bool> {
        self.kv.contains(Keyspace::Main, key)
    }

    /// The main keyspace's pairs whose key starts with `prefix`.
    pub(crate) fn scan_prefix(&self, prefix: impl Into<Vec<u8>>) -> KvIter<'_> {
        self.kv
            .scan(Keyspace::Main, backend::prefixed(prefix), false)
    }

    /// The main keyspace's keys starting with `prefix`, values unread (an
    /// encrypted database's are not opened: a deleted conversation's
    /// cannot be).
    pub(crate) fn scan_keys(
        &self,
        prefix: impl Into<Vec<u8>>,
    ) -> impl Iterator<Item = StoreResult<Bytes>> + '_ {
        let kv: &dyn Backend = match self.sealed() {
            Some(sealed) => sealed.raw(),
            None => &*self.kv,
        };
        kv.scan(Keyspace::Main, backend::prefixed(prefix), false)
            .map(|pair| pair.map(|(key, _)| key))
    }

    /// The main keyspace's pairs with a key from `start` (inclusive) to
    /// `end` (exclusive).
    pub(crate) fn scan_range(
        &self,
        start: impl Into<Vec<u8>>,
        end: impl Into<Vec<u8>>,
    ) -> KvIter<'_> {
        self.kv
            .scan(Keyspace::Main, backend::between(start, end), false)
    }

    /// Sets (or with `None` removes) the callback long operations report
    /// their progress to, in records.
    pub fn set_progress(&self, progress: Option<ProgressFn>) {
        *self
            .progress
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = progress;
    }

    /// Reports `records` more records done to the progress callback, if
    /// one is set.
    pub fn advance(&self, records: u64) {
        let progress = self
            .progress
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(progress) = progress.as_ref() {
            progress(records);
        }
    }

    /// Sets the largest event appends accept ([`DEFAULT_MAX_EVENT_BYTES`]
    /// unless set).
    pub fn set_max_event_bytes(&self, bytes: u64) {
        self.max_event_bytes.store(bytes, Ordering::Relaxed);
    }

    /// The layout new records are stored in (by the database's format;
    /// an encrypted database's keep every text in the record).
    pub(crate) fn layout(&self) -> crate::codec::Layout {
        if self.is_encrypted() {
            crate::codec::Layout::Sealed
        } else {
            crate::codec::Layout::of_format(self.format)
        }
    }

    /// The largest event appends accept.
    pub fn max_event_bytes(&self) -> u64 {
        self.max_event_bytes.load(Ordering::Relaxed)
    }

    /// Sets the size from which an append keeps its chunks and new blobs in
    /// the segment files rather than in sled
    /// ([`DEFAULT_SEGMENT_MIN_BYTES`] unless set; 0: always). Format-2
    /// databases only; a format-1 database keeps everything in sled.
    pub fn set_segment_min_bytes(&self, bytes: u64) {
        self.segment_min_bytes.store(bytes, Ordering::Relaxed);
    }

    /// See [`Store::set_segment_min_bytes`].
    pub fn segment_min_bytes(&self) -> u64 {
        self.segment_min_bytes.load(Ordering::Relaxed)
    }

    /// Sets how many staged records an append settles (256 unless set; 1:
    /// every append writes settled chunks). Appends smaller than that, and
    /// than 64 KiB of records with those staged before them, are staged
    /// first (format-3 databases; see `staging.rs`). Changes the layout,
    /// never what is read.
    pub fn set_settle_records(&self, records: u64) {
        self.settle_records.store(records.max(1), Ordering::Relaxed);
    }

    /// See [`Store::set_settle_records`].
    pub fn settle_records(&self) -> u64 {
        self.settle_records.load(Ordering::Relaxed)
    }

    /// Sets how many bytes of events a bulk append keeps in memory before
    /// it writes them to the segment files as it goes
    /// ([`DEFAULT_BULK_MEMORY_BYTES`] unless set; 0: from the first event).
    /// Format-1 databases keep a bulk append in memory whatever its size.
    pub fn set_bulk_memory_bytes(&self, bytes: u64) {
        self.bulk_memory_bytes.store(bytes, Ordering::Relaxed);
    }

    /// See [`Store::set_bulk_memory_bytes`].
    pub fn bulk_memory_bytes(&self) -> u64 {
        self.bulk_memory_bytes.load(Ordering::Relaxed)
    }

    /// The database's format version ([`FORMAT_VERSION`] for a database
    /// this build created).
    pub fn format_version(&self) -> u32 {
        self.format
    }

    /// The unfinished snapshot files a crash left that opening the
    /// database moved to its `discarded/` directory (see `ARCHITECTURE.md`,
    /// "sled"); empty almost always.
    pub fn discarded_snapshots(&self) -> &[PathBuf] {
        self.kv.discarded_snapshots()
    }

    /// The segment files of bulk appends a process was stopped in (killed,
    /// or cut off by a power loss) that opening the database deleted:
    /// nothing referred to them.
    pub fn reclaimed_bulk_files(&self) -> &[PathBuf] {
        self.kv.reclaimed_bulk_files()
    }

    /// The database directory, for a database kept in one.
    pub fn path(&self) -> Option<&Path> {
        self.kv.path()
    }

    /// Asks the kernel to start reading the database's files into the page
    /// cache (`POSIX_FADV_WILLNEED` on sled's file and every segment file,
    /// from a thread of its own), for a command about to read most of
    /// them: from a cold cache the disk then reads ahead in large requests
    /// while the command works, rather than a record's pages at a time as
    /// it asks. Best effort, and nothing for a database server. Linux reads
    /// one readahead window per call (`read_ahead_kb`: 8 MiB of a 226 MB
    /// segment file on the development machine), so this starts each file;
    /// the kernel's own readahead carries on as the reads reach it.
    /// Advising the whole file a window at a time measured no faster for
    /// `project` and slower for `verify` (BENCHMARKS.md, "Cold cache").
    pub fn prefetch(&self) {
        let Some(path) = self.path() else {
            return;
        };
        // Under an address space limit a thread's stack is not worth it.
        if crate::address_space_limit().is_some() {
            return;
        }
        let mut files = vec![path.join("db")];
        if let Ok(entries) = std::fs::read_dir(path.join("segments")) {
            files.extend(entries.flatten().map(|entry| entry.path()));
        }
        let _ = std::thread::Builder::new()
            .name("prefetch".to_owned())
            .stack_size(64 << 10)
            .spawn(move || {
                for file in files {
                    if let Ok(file) = std::fs::File::open(&file) {
                        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::WillNeed);
                    }
                }
            });
    }

    /// [`Store::prefetch`] for a command about to read conversation `id`
    /// whole, if its records are most of the database's bytes (otherwise
    /// the kernel would read much that the command never asks for).
    pub fn prefetch_for(&self, id: &ConversationId) {
        let Ok(info) = self.info(id) else {
            return;
        };
        let bytes: u64 = info.kinds.iter().map(|k| k.bytes).sum();
        if self.size_on_disk().is_ok_and(|size| bytes >= size / 2) {
            self.prefetch();
        }
    }

    /// Makes every write so far durable.
    pub fn flush(&self) -> StoreResult<()> {
        self.sync()
    }

    /// Makes every write applied before the call durable (see `durable.rs`):
    /// what every acknowledged write waits for.
    pub(crate) fn sync(&self) -> StoreResult<()> {
        self.unsynced_writes.store(0, Ordering::Relaxed);
        self.kv.sync()
    }

    /// After a write: syncs it, or with `no_sync` counts it and syncs every
    /// [`UNSYNCED_WRITES`] such writes. sled writes its log behind the
    /// writes on a pool of its own and reclaims log segments only behind
    /// what it has made stable, so a long run of unsynced small appends
    /// (an event at a time, 7,000 a second) left it 40 MB behind and
    /// reclaiming nothing: 270 MB of log for 4 MB of live data after 10^5
    /// appends, against 9 MB with a sync every 256 (BENCHMARKS.md, "Logs
    /// appended an event at a time"). The sync costs one flush per 256
    /// appends, and the run was faster with it.
    pub(crate) fn synced_or_counted(&self, no_sync: bool) -> StoreResult<()> {
        if !no_sync || self.unsynced_writes.fetch_add(1, Ordering::Relaxed) + 1 >= UNSYNCED_WRITES {
            self.sync()?;
        }
        Ok(())
    }

    /// How many times this process deleted blobs: a writer that found a
    /// blob stored without the write lock, and so did not write it, checks
    /// again under the lock if this moved.
    pub(crate) fn blob_sweeps(&self) -> u64 {
        self.blob_sweeps.load(Ordering::SeqCst)
    }

    /// Notes that blobs are about to be deleted.
    pub(crate) fn sweeping_blobs(&self) {
        self.blob_sweeps.fetch_add(1, Ordering::SeqCst);
    }

    /// Bytes the database occupies on disk.
    pub fn size_on_disk(&self) -> StoreResult<u64> {
        self.kv.size_on_disk()
    }

    /// Serialises this process's appends to `id` (and to the conversations
    /// that share its lock): a database server would otherwise make all
    /// but one of them plan again.
    pub(crate) fn lock_conversation(&self, id: &ConversationId) -> MutexGuard<'_, ()> {
        self.lock_stripe(self.conversation_stripe(id))
    }

    /// Which of the conversation locks is `id`'s (several conversations
    /// share one; whoever takes several takes them in ascending order).
    pub(crate) fn conversation_stripe(&self, id: &ConversationId) -> usize {
        usize::from(id.as_bytes()[0]) % self.conversation_locks.len()
    }

    /// Takes the conversation lock `stripe`.
    pub(crate) fn lock_stripe(&self, stripe: usize) -> MutexGuard<'_, ()> {
        self.conversation_locks[stripe]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Serialises the writes of this process, for a backend one process
    /// holds (a lost race would otherwise be planned again); `None` for a
    /// database server.
    pub(crate) fn lock_writes(&self) -> Option<MutexGuard<'_, ()>> {
        self.kv.on_write();
        self.hold_writes()
    }

    /// Holds off the writes of this process, for a reader that needs the
    /// database still (`verify`), as [`Store::lock_writes`] does for a
    /// writer; `None` for a database server, which serialises writers
    /// itself where their conditions meet (writes to different
    /// conversations go on in parallel).
    pub(crate) fn hold_writes(&self) -> Option<MutexGuard<'_, ()>> {
        if self.kv.is_server() {
            return None;
        }
        // A panic while holding the lock cannot leave sled half-written
        // (writes are single batches), so a poisoned lock is still usable.
        Some(
            self.write_lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// For a database server other processes write to, a read-only store
    /// that sees the database as it stood at its first read (see
    /// [`Backend::begin_snapshot`]): reads that must agree with one another
    /// go through it. `None` where [`Store::hold_writes`] holds the
    /// writes off instead.
    pub(crate) fn snapshot(&self) -> StoreResult<Option<Store>> {
        let Some(begun) = self.kv.begin_snapshot() else {
            return Ok(None);
        };
        let snapshot = Store::assemble(begun?, self.format);
        let progress = self
            .progress
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        snapshot.set_progress(progress);
        Ok(Some(snapshot))
    }

    /// Creates an empty conversation, with a unique `name` if given.
    pub fn create_conversation(&self, name: Option<&str>) -> StoreResult<ConversationId> {
        let guard = self.lock_writes();
        let (id, meta) = self.prepare_conversation(name)?;
        let mut batch = Batch::new();
        batch.insert(Keyspace::Main, keys::conversation(&id), encode(&meta));
        if let Some(name) = name {
            batch.insert(Keyspace::Main, keys::name(name), id.as_bytes().as_slice());
        }
        self.apply_creating(&id, name, batch)?;
        drop(guard);
        self.sync()?;
        Ok(id)
    }

    /// Applies `batch`, which creates conversation `id` (named `name`), on
    /// condition that neither its id nor its name exists meanwhile (another
    /// process sharing the backend may have taken the name).
    pub(crate) fn apply_creating(
        &self,
        id: &ConversationId,
        name: Option<&str>,
        batch: Batch,
    ) -> StoreResult<()> {
        let mut conditions = vec![Condition {
            key: keys::conversation(id),
            expected: None,
        }];
        if let Some(name) = name {
            conditions.push(Condition {
                key: keys::name(name),
                expected: None,
            });
        }
        if self.kv.apply_if(&conditions, batch)? {
            return Ok(());
        }
        Err(match name {
            Some(name) if self.contains(&keys::name(name))? => StoreError::NameTaken {
                name: name.to_owned(),
            },
            _ => StoreError::Conflict {
                what: format!("conversation {id} was created meanwhile"),
            },
        })
    }

    /// A fresh id and the metadata of an empty conversation named `name`,
    /// after checking the name is valid and free. Writes nothing; callers
    /// hold the write lock.
    pub(crate) fn prepare_conversation(
        &self,
        name: Option<&str>,
    ) -> StoreResult<(ConversationId, ConversationMeta)> {
        if let Some(name) = name {
            validate_name(name)?;
            if self.contains(&keys::name(name))? {
                return Err(StoreError::NameTaken {
                    name: name.to_owned(),
                });
            }
        }
        let id = loop {
            let id = ConversationId::generate();
            if !self.contains(&keys::conversation(&id))? {
                break id;
            }
        };
        let meta = ConversationMeta {
            name: name.map(str::to_owned),
            created: Timestamp::now(),
            head: Address::ROOT,
            len: 0,
            turns: TurnTracker::new(),
            kinds: [KindStats::default(); 10],
        };
        Ok((id, meta))
    }

    /// `error`, met reading `id`, unless `id` was deleted meanwhile (its
    /// records and segment files went with it): then that it is gone, not
    /// that the database is damaged. For readers that find damage of
    /// their own (a gap in the chunks they were handed).
    pub fn unless_deleted(&self, id: &ConversationId, error: StoreError) -> StoreError {
        match error {
            StoreError::Corrupt { .. } => match self.meta(id) {
                Err(gone @ StoreError::NoSuchConversation { .. }) => gone,
                _ => error,
            },
            other => other,
        }
    }

    /// Whether `id` is not (or no longer) a conversation of the database.
    pub(crate) fn gone(&self, id: &ConversationId) -> bool {
        matches!(self.meta(id), Err(StoreError::NoSuchConversation { .. }))
    }

    pub(crate) fn meta(&self, id: &ConversationId) -> StoreResult<ConversationMeta> {
        Ok(self.meta_and_bytes(id)?.0)
    }

    /// The metadata of `id` and its stored bytes, which a write of it is
    /// conditional on.
    pub(crate) fn meta_and_bytes(
        &self,
        id: &ConversationId,
    ) -> StoreResult<(ConversationMeta, Vec<u8>)> {
        match self.get(&keys::conversation(id))? {
            Some(bytes) => Ok((
                decode_named(&bytes, &|| format!("metadata of conversation {id}"))?,
                bytes.to_vec(),
            )),
            None => Err(StoreError::NoSuchConversation {
                query: id.hex(),
                hint: None,
            }),
        }
    }

    /// What the store knows about a conversation.
    pub fn info(&self, id: &ConversationId) -> StoreResult<ConversationInfo> {
        Ok(self.meta(id)?.info(*id, self.fork_point(id)?))
    }

    /// Every conversation, in id order.
    pub fn conversations(&self) -> StoreResult<Vec<ConversationInfo>> {
        let mut out = Vec::new();
        for item in self.scan_prefix([keys::CONVERSATION]) {
            let (key, value) = item?;
            let id = conversation_id_of(&key)?;
            let meta: ConversationMeta = decode(&value, &format!("metadata of conversation {id}"))?;
            out.push(meta.info(id, self.fork_point(&id)?));
        }
        Ok(out)
    }

    /// The conversation with this name, if any.
    pub fn find_name(&self, name: &str) -> StoreResult<Option<ConversationId>> {
        match self.get(&keys::name(name))? {
            Some(bytes) => {
                let bytes =
                    <[u8; 16]>::try_from(bytes.as_ref()).map_err(|_| StoreError::Corrupt {
                        what: format!("name entry \"{name}\""),
                    })?;
                Ok(Some(ConversationId::from_bytes(bytes)))
            }
            None => Ok(None),
        }
    }

    /// Finds a conversation the way commands that only read name one: by
    /// name, full id, `id:PREFIX`, or a bare unambiguous id prefix of at
    /// least [`MIN_ID_PREFIX`] hex digits (in that order: a name shadows an
    /// id or prefix that spells the same).
    pub fn find(&self, query: &str) -> StoreResult<Option<ConversationId>> {
        self.lookup(query, Lookup::Read)
    }

    /// Finds a conversation the way commands that write name one: by name,
    /// full id (32 hex digits) or a marked prefix `id:PREFIX`, never by a
    /// bare prefix. `append cafe` must create a conversation named `cafe`,
    /// not append to the one whose id happens to start with `cafe`.
    pub fn find_exact(&self, query: &str) -> StoreResult<Option<ConversationId>> {
        self.lookup(query, Lookup::Write)
    }

    fn lookup(&self, query: &str, lookup: Lookup) -> StoreResult<Option<ConversationId>> {
        if let Some(id) = self.find_name(query)? {
            return Ok(Some(id));
        }
        let (hex, marked) = match query.strip_prefix(ID_MARKER) {
            Some(rest) => (rest.to_ascii_lowercase(), true),
            None => (query.to_ascii_lowercase(), false),
        };
        let is_hex =
            !hex.is_empty() && hex.len() <= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit());
        if marked && (!is_hex || hex.len() < MIN_ID_PREFIX) {
            return Err(StoreError::InvalidQuery {
                query: query.to_owned(),
                reason: "id: takes 4 to 32 hex digits of a conversation id",
            });
        }
        let full = is_hex && hex.len() == 32;
        if !is_hex || hex.len() < MIN_ID_PREFIX || !(marked || full || lookup == Lookup::Read) {
            return Ok(None);
        }
        // Scan the ids that start with the whole bytes of the prefix, then
        // match the odd nibble, if any, on the hex form.
        let whole = crate::hash::from_hex_prefix(&hex[..hex.len() / 2 * 2]);
        let mut prefix = vec![keys::CONVERSATION];
        prefix.extend_from_slice(&whole);
        let mut found = Vec::new();
        for item in self.scan_prefix(prefix) {
            let (key, _) = item?;
            let id = conversation_id_of(&key)?;
            if id.hex().starts_with(&hex) {
                found.push(id);
                if found.len() > 4 {
                    break;
                }
            }
        }
        match found.len() {
            0 => Ok(None),
            1 => Ok(Some(found[0])),
            _ => Err(StoreError::AmbiguousConversation {
                query: query.to_owned(),
                candidates: found.iter().map(ConversationId::hex).collect(),
            }),
        }
    }

    /// Like [`Store::find`], but a conversation that is not found is
    /// [`StoreError::NoSuchConversation`].
    pub fn resolve(&self, query: &str) -> StoreResult<ConversationId> {
        self.find(query)?
            .ok_or_else(|| StoreError::NoSuchConversation {
                query: query.to_owned(),
                hint: None,
            })
    }

    /// Like [`Store::find_exact`], but a conversation that is not found is
    /// [`StoreError::NoSuchConversation`], with a hint when the query is a
    /// bare prefix of an id.
    pub fn resolve_exact(&self, query: &str) -> StoreResult<ConversationId> {
        if let Some(id) = self.find_exact(query)? {
            return Ok(id);
        }
        let hint = match self.find(query) {
            Ok(Some(_)) | Err(StoreError::AmbiguousConversation { .. }) => Some(format!(
                "commands that write take a name, a full id or id:PREFIX; did you mean id:{query}?"
            )),
            _ => None,
        };
        Err(StoreError::NoSuchConversation {
            query: query.to_owned(),
            hint,
        })
    }
}

/// How strictly a query names a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// Commands that only read: bare id prefixes too.
    Read,
    /// Commands that write: names, full ids and `id:PREFIX` only.
    Write,
}

/// The mark of an id prefix (`id:3f2a`), accepted by every command.
pub const ID_MARKER: &str = "id:";

fn conversation_id_of(key: &[u8]) -> StoreResult<ConversationId> {
    keys::conversation_of(key).ok_or_else(|| StoreError::Corrupt {
        what: "a conversation key is truncated".to_owned(),
    })
}

/// Conversation names are 1 to 200 bytes of printable text without
/// surrounding spaces, and read as names, never as ids: not 32 hex digits
/// (a full id) and not starting with `id:`; nor `.` or `..` (steps in a
/// URL path) or `-` (stdin or stdout, and no name in `list`).
pub(crate) fn validate_name(name: &str) -> StoreResult<()> {
    let reason = if let Err(reason) = printable(name) {
        Some(reason)
    } else if name == "." || name == ".." {
        Some("a URL path reads it as a step, so no server could name it")
    } else if name == "-" {
        Some("- stands for stdin or stdout, and for no name in listings")
    } else if name.starts_with(ID_MARKER) {
        Some("id: marks an id prefix")
    } else if name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
        Some("32 hex digits read as a conversation id")
    } else {
        None
    };
    refuse_name("conversation", name, reason)
}

/// `Ok` without a `reason`, else the name of a `what` refused for it.
fn refuse_name(what: &'static str, name: &str, reason: Option<&'static str>) -> StoreResult<()> {
    match reason {
        Some(reason) => Err(StoreError::InvalidName {
            what,
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Checks a conversation name: 1 to 200 bytes of visible text, in Unicode
/// NFC, without surrounding spaces, that cannot read as an id (`id:…`, 32
/// hex digits).
pub fn validate_conversation_name(name: &str) -> StoreResult<()> {
    validate_name(name)
}

/// Checks a view name: 1 to 200 bytes of printable text without
/// surrounding spaces, as a conversation name, and not `-` (no profile,
/// in listings). (Names starting with `.` are convstore's own views.)
pub fn validate_view_name(name: &str) -> StoreResult<()> {
    let reason = match printable(name) {
        Err(reason) => Some(reason),
        Ok(()) if name == "-" => Some("- stands for no profile in listings"),
        Ok(()) => None,
    };
    refuse_name("view", name, reason)
}

/// 1 to 200 bytes of visible text: no control or invisible formatting
/// character, no surrounding white space, and in Unicode NFC, so that two
/// names that look the same are the same.
fn printable(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("it is empty")
    } else if name.len() > 200 {
        Err("it is longer than 200 bytes")
    } else if name.chars().any(char::is_control) {
        Err("it contains a control character")
    } else if name.contains(['\u{2028}', '\u{2029}']) {
        // A line break to any reader that follows Unicode: an error line
        // naming it would read as two.
        Err("it contains a line or paragraph separator")
    } else if has_hidden(name) {
        Err("it contains an invisible formatting character")
    } else if name.trim() != name {
        Err("it starts or ends with white space")
    } else if !unicode_normalization::is_nfc(name) {
        Err("it is not in Unicode NFC (composed) form")
    } else {
        Ok(())
    }
}

/// Characters that print as nothing: soft hyphen, zero-width spaces and
/// joiners, direction marks and overrides, word joiners, the byte order
/// mark, interlinear annotation marks and tags. Some of them are part of
/// how a script or an emoji is written, where they stand: see [`hidden`].
pub(crate) fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

const ZWNJ: char = '\u{200C}';
const ZWJ: char = '\u{200D}';
/// The waving black flag: the base of a subdivision flag's tag sequence.
const BLACK_FLAG: char = '\u{1F3F4}';
/// A tag sequence's end (CANCEL TAG).
const CANCEL_TAG: char = '\u{E007F}';

/// For each character of `text`, whether it is an [`invisible`] one
/// standing where it means nothing, which names refuse and one-line
/// messages escape. Invisible characters that are how a script or an
/// emoji is written are kept:
///
/// - a zero-width joiner or non-joiner between a virama and a letter
///   (Devanagari, Bengali, Tamil and the other Brahmic scripts: a half
///   form, a conjunct kept apart), as IDNA allows after a virama (RFC
///   5892, appendix A);
/// - a zero-width non-joiner between two Arabic-script letters (Persian
///   `می‌خواهم`: a letter not joined to the next);
/// - a zero-width joiner between two emoji (`👩‍💻`, `🏳️‍🌈`, `❤️‍🔥`;
///   a variation selector or a skin tone after the first is part of it);
/// - a subdivision flag's tags: after the black flag, two or more tag
///   digits and small letters ended by the cancel tag (`🏴󠁧󠁢󠁳󠁣󠁴󠁿`).
///
/// `None` when `text` holds no invisible character at all (the common case,
/// answered without allocating).
pub(crate) fn hidden(text: &str) -> Option<Vec<bool>> {
    if !text.chars().any(invisible) {
        return None;
    }
    let chars: Vec<char> = text.chars().collect();
    let mut hidden: Vec<bool> = chars.iter().map(|&c| invisible(c)).collect();
    for (i, &c) in chars.iter().enumerate() {
        if c != ZWJ && c != ZWNJ {
            continue;
        }
        let (Some(&before), Some(&after)) = (
            i.checked_sub(1).and_then(|b| chars.get(b)),
            chars.get(i + 1),
        ) else {
            continue;
        };
        let emoji_before = chars[..i]
            .iter()
            .rev()
            .find(|&&b| !emoji_modifier(b))
            .is_some_and(|&b| emoji(b));
        hidden[i] = !((virama(before) && script_letter(after))
            || (c == ZWNJ && arabic_letter(before) && arabic_letter(after))
            || (c == ZWJ && emoji_before && emoji(after)));
    }
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == BLACK_FLAG {
            // Tag digits and small letters: a region's code (`gbsct`).
            let tags = chars[i + 1..]
                .iter()
                .take_while(|c| matches!(c, '\u{E0030}'..='\u{E0039}' | '\u{E0061}'..='\u{E007A}'))
                .count();
            let end = i + 1 + tags;
            if tags >= 2 && chars.get(end) == Some(&CANCEL_TAG) {
                hidden[i + 1..=end].fill(false);
                i = end;
            }
        }
        i += 1;
    }
    Some(hidden)
}

/// Whether `text` holds an invisible character standing where it means
/// nothing ([`hidden`]).
pub(crate) fn has_hidden(text: &str) -> bool {
    hidden(text).is_some_and(|hidden| hidden.contains(&true))
}

/// A virama (canonical combining class 9).
fn virama(c: char) -> bool {
    unicode_normalization::char::canonical_combining_class(c) == 9
}

/// A letter after a virama's joiner: a letter of a script with viramas,
/// not an ASCII one, not a combining mark.
fn script_letter(c: char) -> bool {
    c.is_alphabetic()
        && !c.is_ascii()
        && unicode_normalization::char::canonical_combining_class(c) == 0
}

/// A letter of the Arabic script's blocks (Arabic, its supplement and
/// extended blocks, presentation forms), which join to their neighbours;
/// not one of its combining marks.
fn arabic_letter(c: char) -> bool {
    c.is_alphabetic()
        && unicode_normalization::char::canonical_combining_class(c) == 0
        && matches!(
            c,
            '\u{0620}'..='\u{06FF}'
                | '\u{0750}'..='\u{077F}'
                | '\u{0870}'..='\u{08FF}'
                | '\u{FB50}'..='\u{FDFF}'
                | '\u{FE70}'..='\u{FEFC}'
        )
}

/// A pictograph of the emoji blocks (and the older symbol blocks emoji
/// took their first characters from).
fn emoji(c: char) -> bool {
    matches!(
        c,
        '\u{00A9}'
            | '\u{00AE}'
            | '\u{203C}'
            | '\u{2049}'
            | '\u{2122}'
            | '\u{2139}'
            | '\u{2194}'..='\u{21FF}'
            | '\u{2300}'..='\u{23FF}'
            | '\u{2460}'..='\u{27BF}'
            | '\u{2900}'..='\u{2BFF}'
            | '\u{3030}'
            | '\u{303D}'
            | '\u{3297}'
            | '\u{3299}'
            | '\u{1F000}'..='\u{1FAFF}'
    ) && !emoji_modifier(c)
}

/// What may follow an emoji inside one: the emoji variation selector and
/// the five skin tones.
fn emoji_modifier(c: char) -> bool {
    matches!(c, '\u{FE0F}' | '\u{1F3FB}'..='\u{1F3FF}')
}

/// An encrypted database's keyring (`None`: no key given) and key scope.
type Encryption = (Option<Arc<crate::crypto::Keyring>>, [u8; 16]);

/// Whether the database in `backend` is encrypted, and with which key:
/// `None` if it is not (refused if `options` give a key: the database
/// would be taken for encrypted when it is not), its keyring (if a key
/// was given, and it is its own) and key scope if it is.
fn encryption(
    backend: &dyn Backend,
    path: &Path,
    options: &OpenOptions,
) -> StoreResult<Option<Encryption>> {
    let marker = backend.get(Keyspace::Main, keys::ENCRYPTION)?;
    let Some(marker) = marker else {
        return match &options.encryption {
            None => Ok(None),
            Some(_) => Err(StoreError::Encrypted {
                what: format!(
                    "the database at {} is not encrypted, but a key is configured (an \
                     encrypted database is made new: export its conversations and import them \
                     into one)",
                    path.display()
                ),
            }),
        };
    };
    let (Some(check), Some(scope)) = (
        marker.get(..16),
        marker.get(16..).and_then(|s| <[u8; 16]>::try_from(s).ok()),
    ) else {
        return Err(StoreError::Corrupt {
            what: format!(
                "the encryption key of the database is {} bytes, not 32",
                marker.len()
            ),
        });
    };
    match &options.encryption {
        None => Ok(Some((None, scope))),
        Some(keyring) if check == keyring.check().as_slice() => {
            Ok(Some((Some(keyring.clone()), scope)))
        }
        Some(keyring) => Err(StoreError::Key {
            path: keyring.key_file().to_path_buf(),
            reason: format!(
                "it is not the key the database at {} was encrypted with",
                path.display()
            ),
        }),
    }
}

/// The format version the database's format key gives, refused when this
/// build cannot read it; `None` when there is no format key.
fn read_format(backend: &dyn Backend, path: &Path) -> StoreResult<Option<u32>> {
    let Some(bytes) = backend.get(Keyspace::Main, keys::FORMAT)? else {
        return Ok(None);
    };
    let found = <[u8; 4]>::try_from(bytes.as_ref()).map_or(u32::MAX, u32::from_be_bytes);
    if !(OLDEST_FORMAT..=FORMAT_VERSION).contains(&found) {
        return Err(StoreError::UnsupportedFormat {
            path: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        });
    }
    Ok(Some(found))
}
