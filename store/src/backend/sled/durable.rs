//! Making acknowledged writes durable.
//!
//! sled's `flush` writes its log buffers and calls
//! `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)` on its `db` file (on
//! Linux): the bytes reach the device, but the device's write cache is not
//! flushed and the file's metadata (its size, when the log grew) is not
//! written. A power cut after that can still lose them. sled fsyncs the file
//! only from its flusher thread (every 500 ms) and when the database is
//! dropped. Values too large for a log buffer go to a file of their own in
//! `blobs/`, which sled writes without any sync.
//!
//! So a durable write here is: sled's `flush`, then an `fsync` of each new
//! file in sled's `blobs/` directory and of the directory, then an
//! `fdatasync` of the `db` file (through a handle of our own: a sync acts on
//! the file, whichever descriptor asks). Writers that finish their batches at
//! the same time share one round of syncs ([`Durability::sync`]).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use crate::error::{StoreError, StoreResult};

/// sled's log file in the database directory.
const DB_FILE: &str = "db";
/// sled's configuration file.
const CONF_FILE: &str = "conf";
/// Where sled keeps values too large for its log buffers.
const SLED_BLOBS: &str = "blobs";

/// How a directory's modification time is trusted: only once it is older
/// than this, since file systems stamp times from a coarse clock and two
/// changes in one tick leave the same time.
const MTIME_SLACK: Duration = Duration::from_secs(1);

/// The syncs of one database.
pub(crate) struct Durability {
    /// sled's `db` file, opened only to sync it.
    db_file: File,
    sled_blobs: Mutex<SledBlobs>,
    /// Rounds of syncs started and finished (see [`Durability::sync`]).
    started: AtomicU64,
    finished: Mutex<u64>,
}

/// The files of sled's `blobs/` directory known to be synced.
struct SledBlobs {
    dir: PathBuf,
    /// The directory's modification time when it was last read, if old
    /// enough to be trusted: unchanged, no file was added since.
    seen: Option<SystemTime>,
    synced: HashSet<OsString>,
}

impl Durability {
    /// The syncs of the sled database in directory `path` (open).
    pub(crate) fn new(path: &Path) -> StoreResult<Self> {
        let db_path = path.join(DB_FILE);
        let db_file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&db_path)
            .map_err(|e| io_error(&db_path, &e))?;
        Ok(Durability {
            db_file,
            sled_blobs: Mutex::new(SledBlobs {
                dir: path.join(SLED_BLOBS),
                seen: None,
                synced: HashSet::new(),
            }),
            started: AtomicU64::new(0),
            finished: Mutex::new(0),
        })
    }

    /// Makes every write applied to `db` before this call durable: sled's
    /// flush, then the syncs it leaves out (module docs). Callers that
    /// arrive while a round runs wait for it, then share the next one.
    pub(crate) fn sync(&self, db: &sled::Db) -> StoreResult<()> {
        // A round numbered past this one starts after this call began,
        // hence after the caller's writes were applied.
        let wanted = self.started.load(Ordering::SeqCst) + 1;
        let mut finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
        if *finished >= wanted {
            return Ok(());
        }
        let round = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        db.flush()?;
        self.sync_sled_blobs()?;
        self.db_file.sync_data().map_err(StoreError::Io)?;
        *finished = round;
        Ok(())
    }

    /// Syncs the files sled added to its `blobs/` directory since the last
    /// call, then the directory. Reads the directory only when its
    /// modification time changed (or is too recent to be trusted).
    pub(crate) fn sync_sled_blobs(&self) -> StoreResult<()> {
        let mut blobs = self
            .sled_blobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let dir = blobs.dir.clone();
        let now = SystemTime::now();
        let modified = match fs::metadata(&dir).and_then(|m| m.modified()) {
            Ok(time) => time,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error(&dir, &e)),
        };
        if blobs.seen == Some(modified) {
            return Ok(());
        }
        let entries = fs::read_dir(&dir).map_err(|e| io_error(&dir, &e))?;
        let mut present = HashSet::new();
        let mut added = false;
        for entry in entries {
            let name = entry.map_err(|e| io_error(&dir, &e))?.file_name();
            if !blobs.synced.contains(&name) {
                let path = dir.join(&name);
                match sync_file(&path) {
                    // sled removes blobs it no longer needs.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_error(&path, &e)),
                    Ok(()) => added = true,
                }
            }
            present.insert(name);
        }
        if added {
            sync_directory(&dir)?;
        }
        blobs.synced = present;
        blobs.seen = now
            .duration_since(modified)
            .is_ok_and(|age| age > MTIME_SLACK)
            .then_some(modified);
        Ok(())
    }
}

/// Makes a database sled just created in directory `path` durable, names
/// included: its files, its `blobs/` directory, the directory itself and
/// its entry in its parent. Called once its first values are flushed.
pub(crate) fn sync_new_database(path: &Path) -> StoreResult<()> {
    for file in [DB_FILE, CONF_FILE] {
        let file = path.join(file);
        sync_file(&file).map_err(|e| io_error(&file, &e))?;
    }
    sync_directory(&path.join(SLED_BLOBS))?;
    sync_directory(path)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_directory(parent)?;
    }
    Ok(())
}

/// Syncs a file's data and metadata. (Opened for writing: some systems
/// refuse to sync a handle opened only for reading.)
fn sync_file(path: &Path) -> io::Result<()> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?
        .sync_all()
}

/// Makes the directory's entries (new or renamed files) durable.
pub(crate) fn sync_directory(dir: &Path) -> StoreResult<()> {
    #[cfg(unix)]
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, &e))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

pub(crate) fn io_error(path: &Path, error: &io::Error) -> StoreError {
    StoreError::Io(io::Error::new(
        error.kind(),
        format!("{}: {error}", path.display()),
    ))
}
