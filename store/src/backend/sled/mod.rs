//! [`SledBackend`]: the embedded default. A database directory holds
//! sled's files (both keyspaces are sled trees), the segment files where
//! large bodies live outside sled (`segments/`, see `segments.rs`), and
//! the files convstore keeps beside sled's (`convstore.state`,
//! `convstore.catalog`, `convstore.reserve`; see `state.rs`).
//!
//! sled admits one process at a time (its file lock); within the process
//! the store serialises writes, and a conditional batch is checked and
//! applied under a lock of its own. sled's flush is not an fsync on Linux:
//! [`SledBackend::sync`] makes writes durable (`durable.rs`).

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;

pub(crate) mod durable;
pub(crate) mod frames;
pub(crate) mod opening;
pub(crate) mod salvage;
pub(crate) mod segments;
pub(crate) mod state;

use super::{Backend, Batch, Condition, KeyRange, Keyspace, KvIter};
use crate::backend::sled::segments::Segments;
use crate::error::{StoreError, StoreResult};
use crate::event::Timestamp;
use crate::keys;
use durable::Durability;

/// A database directory: sled's trees and the segment files.
pub struct SledBackend {
    db: sled::Db,
    blobs: sled::Tree,
    segments: Segments,
    durability: Durability,
    tracker: crate::backend::sled::state::Tracker,
    path: PathBuf,
    discarded: Vec<PathBuf>,
    reclaimed: Vec<PathBuf>,
    /// Held while a conditional batch is checked and applied.
    commit: Mutex<()>,
}

impl SledBackend {
    /// Opens sled in `path` (which the caller has checked: a database, or
    /// nothing yet), retrying a database in use for `wait`, with the
    /// guards of `state.rs` around it.
    pub(crate) fn open(path: &Path, wait: Duration) -> StoreResult<SledBackend> {
        let precheck = crate::backend::sled::state::before_open(path)?;
        let (db, discarded) = open_sled(path, wait)?;
        let tracker = crate::backend::sled::state::after_open(path, &db, precheck)?;
        let blobs = db.open_tree(keys::BLOBS)?;
        let durability = Durability::new(path)?;
        Ok(SledBackend {
            db,
            blobs,
            segments: Segments::new(path),
            durability,
            tracker,
            path: path.to_path_buf(),
            discarded,
            reclaimed: Vec::new(),
            commit: Mutex::new(()),
        })
    }

    /// Deletes the files of bulk appends that were interrupted before
    /// their commit (format 2 and later: nothing refers to them).
    pub(crate) fn reclaim_bulk_files(&mut self) -> StoreResult<()> {
        let (db, blobs) = (&self.db, &self.blobs);
        self.reclaimed = self.segments.recover(&|number| {
            let key = keys::segment_file(number);
            Ok(db.contains_key(&key)? || blobs.contains_key(&key)?)
        })?;
        Ok(())
    }

    /// Makes a database just created durable: its files, its directory
    /// and the directory it is in.
    pub(crate) fn created(&self) -> StoreResult<()> {
        self.db.flush()?;
        durable::sync_new_database(&self.path)
    }

    fn tree(&self, space: Keyspace) -> &sled::Tree {
        match space {
            Keyspace::Main => &self.db,
            Keyspace::Blobs => &self.blobs,
        }
    }
}

/// A sled value as [`Bytes`], without copying it.
fn bytes(value: sled::IVec) -> Bytes {
    Bytes::from_owner(value)
}

impl Backend for SledBackend {
    fn get(&self, space: Keyspace, key: &[u8]) -> StoreResult<Option<Bytes>> {
        Ok(self.tree(space).get(key)?.map(bytes))
    }

    fn contains(&self, space: Keyspace, key: &[u8]) -> StoreResult<bool> {
        Ok(self.tree(space).contains_key(key)?)
    }

    fn scan(&self, space: Keyspace, range: KeyRange, reverse: bool) -> KvIter<'_> {
        let iter = self
            .tree(space)
            .range::<Vec<u8>, (Bound<Vec<u8>>, Bound<Vec<u8>>)>(range);
        let pair = |item: sled::Result<(sled::IVec, sled::IVec)>| {
            item.map(|(k, v)| (bytes(k), bytes(v)))
                .map_err(StoreError::from)
        };
        if reverse {
            Box::new(iter.rev().map(pair))
        } else {
            Box::new(iter.map(pair))
        }
    }

    fn apply(&self, batch: Batch) -> StoreResult<()> {
        let mut main = sled::Batch::default();
        let mut blobs = sled::Batch::default();
        let (mut any_main, mut any_blobs) = (false, false);
        for (space, key, value) in batch.ops {
            let (target, any) = match space {
                Keyspace::Main => (&mut main, &mut any_main),
                Keyspace::Blobs => (&mut blobs, &mut any_blobs),
            };
            *any = true;
            match value {
                Some(value) => target.insert(key, value),
                None => target.remove(key),
            }
        }
        if any_blobs {
            self.blobs.apply_batch(blobs)?;
        }
        if any_main {
            self.db.apply_batch(main)?;
        }
        Ok(())
    }

    fn apply_if(&self, conditions: &[Condition], batch: Batch) -> StoreResult<bool> {
        let _held = self.commit.lock().unwrap_or_else(PoisonError::into_inner);
        for condition in conditions {
            let found = self.db.get(&condition.key)?;
            if found.as_deref() != condition.expected.as_deref() {
                return Ok(false);
            }
        }
        self.apply(batch)?;
        Ok(true)
    }

    fn sync(&self) -> StoreResult<()> {
        self.durability.sync(&self.db)?;
        // Bulk files committed before this are durably referenced now.
        self.segments.finish_committed()
    }

    fn size_on_disk(&self) -> StoreResult<u64> {
        Ok(self.db.size_on_disk()? + self.segments.size_on_disk())
    }

    fn is_empty(&self) -> StoreResult<bool> {
        Ok(self.db.is_empty())
    }

    fn segments(&self) -> Option<&Segments> {
        Some(&self.segments)
    }

    fn on_write(&self) {
        self.tracker.wrote();
    }

    fn forgetting(&self, conversations: u64, records: u64) -> StoreResult<()> {
        self.tracker.forgetting(&self.path, conversations, records)
    }

    fn forgotten(&self) {
        crate::backend::sled::state::rewrite_catalog(&self.path, &self.db);
    }

    fn path(&self) -> Option<&Path> {
        Some(&self.path)
    }

    fn discarded_snapshots(&self) -> &[PathBuf] {
        &self.discarded
    }

    fn reclaimed_bulk_files(&self) -> &[PathBuf] {
        &self.reclaimed
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for SledBackend {
    /// Makes pending writes durable, so that the files are released (and
    /// `--no-sync` writes are durable) once the database is closed: sled's
    /// flush and the files it adds to `blobs/`; sled itself fsyncs its
    /// `db` file when dropped, right after. Bulk files committed without a
    /// sync get their names after a whole sync.
    fn drop(&mut self) {
        if flush_unless_disk_full(&self.db, &self.blobs, &self.path) {
            if self.segments.has_committed() {
                let _ = self.sync();
            } else {
                let _ = self.durability.sync_sled_blobs();
            }
        }
        self.tracker.on_drop(&self.path, &self.db);
        let mut dropped = DROPPED.lock().unwrap_or_else(PoisonError::into_inner);
        dropped.retain(|(_, at)| at.elapsed() < LOCK_GRACE);
        dropped.push((lock_key(&self.path), Instant::now()));
    }
}

/// Flushes sled's pending writes; `false` if it gave up because the disk
/// is full. sled 0.34.7 can wait forever in a flush whose write failed
/// for want of space (no error reaches its waiters), and would again when
/// its last handle is dropped: so the flush runs on a thread of its own,
/// holding a handle to each tree, and while it has not finished the disk is looked at
/// every half second. Once the file system has no space left the thread is
/// left waiting with its handles (the process's exit ends it), so no flush
/// blocks the caller; what was acknowledged was synced when it was.
fn flush_unless_disk_full(db: &sled::Db, blobs: &sled::Tree, path: &Path) -> bool {
    let (done, finished) = std::sync::mpsc::channel();
    let handles = (db.clone(), blobs.clone());
    let spawned = std::thread::Builder::new()
        .name("convstore-close".into())
        .spawn(move || {
            let _ = handles.0.flush();
            let _ = done.send(());
            // The handles are dropped here: there is nothing left to flush.
        });
    let Ok(thread) = spawned else {
        let _ = db.flush();
        return true;
    };
    loop {
        match finished.recv_timeout(Duration::from_millis(500)) {
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                // Its handles gone before the caller's, so that the
                // database is released when the caller's are.
                let _ = thread.join();
                return true;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if disk_full(path) => return false,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Whether the file system holding `path` has (almost) no space left for
/// its user.
fn disk_full(path: &Path) -> bool {
    rustix::fs::statvfs(path).is_ok_and(|s| s.f_bavail.saturating_mul(s.f_frsize) < 1024 * 1024)
}

/// sled's page cache. Reads of a whole log pass through it once, so it need
/// not hold one.
const CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Databases this process closed lately, and when: sled's lock may outlive
/// a `Store` for a moment (its last I/O jobs), and only an open of one of
/// these waits that moment out.
static DROPPED: Mutex<Vec<(PathBuf, Instant)>> = Mutex::new(Vec::new());

/// A database path as [`DROPPED`] keeps it.
fn lock_key(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
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
        let opened = crate::backend::sled::opening::open(path, &config);
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

/// Undoes the creation of the database at `path` by a command that then
/// failed before storing anything: removes the directory, or, if it was
/// an empty directory before (`emptied`), what is in it. Only if no
/// process has the database open: sled's lock on its `db` file is held
/// while the files are removed. Whether it was done.
pub fn remove_created_database(path: &Path, emptied: bool) -> bool {
    let Ok(lock) = std::fs::File::open(path.join("db")) else {
        return false;
    };
    if fs2::FileExt::try_lock_exclusive(&lock).is_err() {
        return false;
    }
    if !emptied {
        return std::fs::remove_dir_all(path).is_ok();
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return false;
    };
    let mut all = true;
    for entry in entries.flatten() {
        let entry = entry.path();
        let removed = if entry.is_dir() {
            std::fs::remove_dir_all(&entry)
        } else {
            std::fs::remove_file(&entry)
        };
        all &= removed.is_ok();
    }
    all
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
        // No database there yet: the open was creating one.
        sled::Error::Io(e)
            if e.kind() == std::io::ErrorKind::PermissionDenied && !path.join("db").exists() =>
        {
            StoreError::Open {
                path,
                reason: "permission denied: a new database cannot be made there \
                         (its directory, or the directory holding it, is not writable)"
                    .to_owned(),
            }
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

impl From<sled::Error> for StoreError {
    fn from(error: sled::Error) -> Self {
        match error {
            sled::Error::Io(e) => StoreError::Io(e),
            // Said in one line, as damaged data is (sled's own text ends
            // with an empty backtrace).
            sled::Error::Corruption { at, .. } => StoreError::Corrupt {
                what: format!(
                    "sled's files are damaged ({}); `convstore salvage` recovers every conversation that still verifies",
                    match at {
                        Some(sled::DiskPtr::Inline(offset)) => format!("at offset {offset} of its file `db`"),
                        Some(sled::DiskPtr::Blob(_, blob)) => format!("its blob file `blobs/{blob}`"),
                        None => "where is not known".to_owned(),
                    }
                ),
            },
            other => StoreError::Backend(Box::new(other)),
        }
    }
}
