//! The database: [`Store::open`], conversations, names and id prefixes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode};
use crate::durable::{self, Durability};
use crate::error::{StoreError, StoreResult};
use crate::event::{EventType, Timestamp, TurnTracker};
use crate::fork::ForkPoint;
use crate::hash::Address;
use crate::ids::ConversationId;
use crate::keys::{self, FORMAT_VERSION, OLDEST_FORMAT};
use crate::segments::Segments;

/// The shortest id prefix that names a conversation: shorter hex strings
/// are too easily meant as names (`append b` creates `b`).
pub const MIN_ID_PREFIX: usize = 4;

/// sled's page cache. Reads of a whole log pass through it once, so it need
/// not hold one.
const CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// A convstore database: conversations, their logs and the payloads they
/// share, in one sled tree.
///
/// A `Store` can be shared between threads. Writes are serialised inside
/// the process; sled's file lock keeps other processes out.
pub struct Store {
    pub(crate) db: sled::Db,
    /// Long texts by content hash (see `keys.rs`).
    pub(crate) blobs: sled::Tree,
    /// The database's format version: 1 keeps chunks and blobs in sled, 2
    /// the bodies of large appends in `segments`.
    pub(crate) format: u32,
    pub(crate) segments: Segments,
    /// The syncs that make a write durable (`durable.rs`).
    durability: Durability,
    /// Unfinished sled snapshots moved away when the database was opened.
    discarded_snapshots: Vec<PathBuf>,
    /// Segment files of interrupted bulk appends deleted when the database
    /// was opened.
    reclaimed: Vec<PathBuf>,
    path: PathBuf,
    write_lock: Mutex<()>,
    max_event_bytes: AtomicU64,
    segment_min_bytes: AtomicU64,
    settle_records: AtomicU64,
    bulk_memory_bytes: AtomicU64,
    /// Decoded compaction overlays by (owner, seq): records never change,
    /// so a process that reads the overlays again and again (a server, the
    /// automatic compaction loop) decodes each once.
    pub(crate) overlay_cache: Mutex<HashMap<(ConversationId, u64), crate::log::StoredOverlay>>,
    /// Told how many records long operations have got through.
    progress: std::sync::RwLock<Option<ProgressFn>>,
    /// What convstore records beside sled's files (`state.rs`).
    tracker: crate::state::Tracker,
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

impl Drop for Store {
    /// Makes pending writes durable, so that the files are released (and
    /// `--no-sync` writes are durable) once a `Store` is gone: sled's flush
    /// and the files it adds to `blobs/`; sled fsyncs its `db` file when
    /// it is dropped, right after. Bulk files committed without a sync get
    /// their names after a whole sync.
    fn drop(&mut self) {
        if self.segments.has_committed() {
            let _ = self.sync();
        } else {
            let _ = self.db.flush();
            let _ = self.durability.sync_sled_blobs();
        }
        self.tracker.on_drop(&self.path, &self.db);
        let mut dropped = DROPPED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        dropped.retain(|(_, at)| at.elapsed() < LOCK_GRACE);
        dropped.push((lock_key(&self.path), Instant::now()));
    }
}

/// Databases this process closed lately, and when: sled's lock may outlive
/// a `Store` for a moment (its last I/O jobs), and only an open of one of
/// these waits that moment out.
static DROPPED: Mutex<Vec<(PathBuf, Instant)>> = Mutex::new(Vec::new());

/// A database path as [`DROPPED`] keeps it.
fn lock_key(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

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

    /// The name if it has one, else the short id.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.id.short())
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
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct OpenOptions {
    /// Create the database when the path does not exist (its parent
    /// directory must) or is an empty directory. Otherwise a missing
    /// database is [`StoreError::NoDatabase`].
    pub create: bool,
    /// While another process has the database open, retry for this long
    /// before failing with [`StoreError::Locked`].
    pub wait: Duration,
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
        if opened.is_err() && found != Found::Database {
            // Leave the path as it was: absent, or an empty directory.
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
        let path = path.to_path_buf();
        let precheck = crate::state::before_open(&path)?;
        let (db, discarded_snapshots) = open_sled(&path, options.wait)?;
        let tracker = crate::state::after_open(&path, &db, precheck)?;
        let format = match db.get(keys::FORMAT)? {
            Some(bytes) => {
                let found =
                    <[u8; 4]>::try_from(bytes.as_ref()).map_or(u32::MAX, u32::from_be_bytes);
                if !(OLDEST_FORMAT..=FORMAT_VERSION).contains(&found) {
                    return Err(StoreError::UnsupportedFormat {
                        path,
                        found,
                        supported: FORMAT_VERSION,
                    });
                }
                found
            }
            // A new database, or one whose creation was cut short before
            // its format key was written.
            None if db.is_empty() && (options.create || found != Found::Database) => {
                db.insert(keys::FORMAT, &FORMAT_VERSION.to_be_bytes())?;
                db.flush()?;
                durable::sync_new_database(&path)?;
                FORMAT_VERSION
            }
            None => return Err(StoreError::NotConvstore { path }),
        };
        let blobs = db.open_tree(keys::BLOBS)?;
        let segments = Segments::new(&path);
        let reclaimed = if format >= 2 {
            segments.recover(&|number| {
                let key = keys::segment_file(number);
                Ok(db.contains_key(&key)? || blobs.contains_key(&key)?)
            })?
        } else {
            Vec::new()
        };
        let durability = Durability::new(&path)?;
        Ok(Store {
            db,
            blobs,
            format,
            segments,
            durability,
            discarded_snapshots,
            reclaimed,
            path,
            write_lock: Mutex::new(()),
            max_event_bytes: AtomicU64::new(DEFAULT_MAX_EVENT_BYTES),
            segment_min_bytes: AtomicU64::new(DEFAULT_SEGMENT_MIN_BYTES),
            settle_records: AtomicU64::new(crate::staging::SETTLE_RECORDS),
            bulk_memory_bytes: AtomicU64::new(DEFAULT_BULK_MEMORY_BYTES),
            overlay_cache: Mutex::new(HashMap::new()),
            progress: std::sync::RwLock::new(None),
            tracker,
        })
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
        &self.discarded_snapshots
    }

    /// The segment files of bulk appends a process was stopped in (killed,
    /// or cut off by a power loss) that opening the database deleted:
    /// nothing referred to them.
    pub fn reclaimed_bulk_files(&self) -> &[PathBuf] {
        &self.reclaimed
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes every write so far durable.
    pub fn flush(&self) -> StoreResult<()> {
        self.sync()
    }

    /// Makes every write applied before the call durable (see `durable.rs`):
    /// what every acknowledged write waits for.
    pub(crate) fn sync(&self) -> StoreResult<()> {
        self.durability.sync(&self.db)?;
        // Bulk files committed before this are durably referenced now.
        self.segments.finish_committed()
    }

    /// Bytes the database occupies on disk.
    pub fn size_on_disk(&self) -> StoreResult<u64> {
        Ok(self.db.size_on_disk()? + self.segments.size_on_disk())
    }

    pub(crate) fn lock_writes(&self) -> MutexGuard<'_, ()> {
        self.tracker.wrote();
        // A panic while holding the lock cannot leave sled half-written
        // (writes are single batches), so a poisoned lock is still usable.
        self.write_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Creates an empty conversation, with a unique `name` if given.
    pub fn create_conversation(&self, name: Option<&str>) -> StoreResult<ConversationId> {
        let guard = self.lock_writes();
        let (id, meta) = self.prepare_conversation(name)?;
        let mut batch = sled::Batch::default();
        batch.insert(keys::conversation(&id), encode(&meta));
        if let Some(name) = name {
            batch.insert(keys::name(name), id.as_bytes().as_slice());
        }
        self.db.apply_batch(batch)?;
        drop(guard);
        self.sync()?;
        Ok(id)
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
            if self.db.contains_key(keys::name(name))? {
                return Err(StoreError::NameTaken {
                    name: name.to_owned(),
                });
            }
        }
        let id = loop {
            let id = ConversationId::generate();
            if !self.db.contains_key(keys::conversation(&id))? {
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

    pub(crate) fn meta(&self, id: &ConversationId) -> StoreResult<ConversationMeta> {
        match self.db.get(keys::conversation(id))? {
            Some(bytes) => decode(&bytes, &format!("metadata of conversation {id}")),
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
        for item in self.db.scan_prefix([keys::CONVERSATION]) {
            let (key, value) = item?;
            let id = conversation_id_of(&key)?;
            let meta: ConversationMeta = decode(&value, &format!("metadata of conversation {id}"))?;
            out.push(meta.info(id, self.fork_point(&id)?));
        }
        Ok(out)
    }

    /// The conversation with this name, if any.
    pub fn find_name(&self, name: &str) -> StoreResult<Option<ConversationId>> {
        match self.db.get(keys::name(name))? {
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
        for item in self.db.scan_prefix(prefix) {
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
    key.get(1..17)
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
        .map(ConversationId::from_bytes)
        .ok_or_else(|| StoreError::Corrupt {
            what: "a conversation key is truncated".to_owned(),
        })
}

/// Conversation names are 1 to 200 bytes of printable text without
/// surrounding spaces, and read as names, never as ids: not 32 hex digits
/// (a full id) and not starting with `id:`.
pub(crate) fn validate_name(name: &str) -> StoreResult<()> {
    let reason = if let Err(reason) = printable(name) {
        Some(reason)
    } else if name.starts_with(ID_MARKER) {
        Some("id: marks an id prefix")
    } else if name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
        Some("32 hex digits read as a conversation id")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StoreError::InvalidName {
            what: "conversation",
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
/// surrounding spaces, as a conversation name.
pub fn validate_view_name(name: &str) -> StoreResult<()> {
    printable(name).map_err(|reason| StoreError::InvalidName {
        what: "view",
        name: name.to_owned(),
        reason,
    })
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
    } else if name.chars().any(invisible) {
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
/// mark, interlinear annotation marks and tags.
fn invisible(c: char) -> bool {
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

/// How long `open` retries a locked database: a `Store` dropped an instant
/// ago in this process may still hold sled's file lock while its last I/O
/// jobs finish. Another process holding the database is reported after this.
const LOCK_GRACE: Duration = Duration::from_millis(300);

/// Opens sled, retrying a locked database for `wait`. A crash while sled
/// wrote a snapshot leaves a `snap.*.generating` file that sled then reads
/// as its latest snapshot and refuses to open (sled issues #1527, #1533).
/// sled writes a snapshot to that name and renames it when complete, so
/// such a file is never a snapshot sled committed to: when opening fails
/// with corruption and such files exist, they are moved to `discarded/`
/// and the open is tried once more (sled then recovers from its previous
/// snapshot and its log). Returns the files moved.
fn open_sled(path: &Path, wait: Duration) -> StoreResult<(sled::Db, Vec<PathBuf>)> {
    let started = Instant::now();
    // A `Store` this process dropped an instant ago may still hold the
    // lock: then retry for a moment even when the caller does not wait.
    // Another process's lock is reported at once.
    let key = lock_key(path);
    let recent = DROPPED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .any(|(p, at)| *p == key && at.elapsed() < LOCK_GRACE);
    let retry = if recent { wait.max(LOCK_GRACE) } else { wait };
    let mut discarded = Vec::new();
    loop {
        let config = sled::Config::new()
            .path(path)
            .cache_capacity(CACHE_BYTES)
            .flush_every_ms(Some(500));
        let opened = crate::opening::open(path, &config);
        match opened {
            Ok(db) => return Ok((db, discarded)),
            Err(sled::Error::Corruption { .. })
                if discarded.is_empty() && !unfinished_snapshots(path).is_empty() =>
            {
                discarded = discard_unfinished_snapshots(path)?;
            }
            Err(error) => match open_error(path, error) {
                StoreError::Locked { .. } if started.elapsed() < retry => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                StoreError::Locked { path, .. } => {
                    return Err(StoreError::Locked { path, waited: wait })
                }
                other => return Err(other),
            },
        }
    }
}

/// The `snap.*.generating` files in database directory `path`.
pub(crate) fn unfinished_snapshots(path: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(path).map_or_else(
        |_| Vec::new(),
        |dir| {
            dir.flatten()
                .filter(|entry| {
                    let name = entry.file_name();
                    let name = name.to_string_lossy();
                    name.starts_with("snap.") && name.ends_with(".generating")
                })
                .map(|entry| entry.path())
                .collect()
        },
    )
}

/// Moves the unfinished snapshot files of database directory `path` to
/// its `discarded/` directory, holding sled's lock on the database file
/// meanwhile (a database another process has open is left alone).
fn discard_unfinished_snapshots(path: &Path) -> StoreResult<Vec<PathBuf>> {
    let io = |e: std::io::Error| StoreError::Open {
        path: path.to_path_buf(),
        reason: format!("moving an unfinished snapshot file away: {e}"),
    };
    let lock = std::fs::File::open(path.join("db")).map_err(io)?;
    // sled locks this file the same way (fs2's exclusive lock).
    if fs2::FileExt::try_lock_exclusive(&lock).is_err() {
        return Err(StoreError::Locked {
            path: path.to_path_buf(),
            waited: Duration::ZERO,
        });
    }
    let target = path.join("discarded");
    let stamp = Timestamp::now().as_micros();
    let mut moved = Vec::new();
    for file in unfinished_snapshots(path) {
        // An empty one holds nothing to keep (an open that failed before
        // writing it, e.g. on a full disk, where `discarded/` could not be
        // made either).
        if std::fs::metadata(&file).is_ok_and(|m| m.len() == 0) {
            std::fs::remove_file(&file).map_err(io)?;
            continue;
        }
        std::fs::create_dir_all(&target).map_err(io)?;
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        let to = target.join(format!("{name}.{stamp}"));
        match std::fs::rename(&file, &to) {
            Ok(()) => moved.push(to),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
    }
    Ok(moved)
}

fn open_error(path: &Path, error: sled::Error) -> StoreError {
    let path = path.to_path_buf();
    match error {
        sled::Error::Io(e) if e.to_string().contains("could not acquire lock") => {
            StoreError::Locked {
                path,
                waited: Duration::ZERO,
            }
        }
        sled::Error::Corruption { .. } => {
            let reason = if unfinished_snapshots(&path).is_empty() {
                "sled found corruption in its files".to_owned()
            } else {
                "sled found corruption; a crash left an unfinished snapshot file \
                 (snap.*.generating) in the database directory that could not be \
                 moved away: move it away and open the database again"
                    .to_owned()
            };
            StoreError::Open { path, reason }
        }
        sled::Error::Io(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            StoreError::Open {
                path,
                reason: "permission denied: convstore needs write access to a database \
                         directory even to read it (sled keeps its lock and log there); \
                         read it as its owner"
                    .to_owned(),
            }
        }
        other => StoreError::Open {
            path,
            reason: other.to_string(),
        },
    }
}
