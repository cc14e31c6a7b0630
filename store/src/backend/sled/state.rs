//! convstore's own record of what a database holds, kept beside sled's
//! files, so that an open can tell when sled recovers less than existed.
//!
//! sled rebuilds its page table at open from its newest snapshot file and
//! the log written after it. When that snapshot is missing (deleted, lost),
//! it replays whatever it can read of its log from the start, and if that
//! gives less (a log whose early segments were reused), it writes the
//! lesser state back: the database opened empty or partial, `verify` said
//! `ok`, and sled's rewrite of its files made the loss permanent.
//!
//! Two files, written atomically (a temporary file, synced, renamed):
//!
//! - [`STATE`]: the lsn of the newest sled snapshot seen after an open, and
//!   lower bounds on the conversations and records the database holds
//!   (records summed over conversations; the log is append-only, so they
//!   only grow). Written when an open finds a newer snapshot and when a
//!   `Store` that wrote is dropped (after its flush), so it never claims
//!   more than is durable.
//! - [`CATALOG`]: one JSON line per conversation (id, name, created, fork
//!   point, and its length and head when written), rewritten when a
//!   dropped `Store` finds new conversations. Salvage reads it to name
//!   what it recovers when sled's own metadata is unreadable.
//!
//! Before sled opens: if the state names a snapshot and no snapshot file
//! at least that new exists, sled is first opened on a copy of its files
//! (a *trial*); unless the copy holds at least the conversations and
//! records the state counts, the open is refused and the files are left
//! untouched. After sled opens: if the state counts conversations (or the
//! segment files hold bytes, which no database without its format key
//! has), a database without its format key or without any conversation is
//! refused before anything is written to it.
//!
//! Both files are advisory: a missing or unreadable one is rebuilt, and
//! failing to write one (a full disk) fails nothing.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::codec::decode;
use crate::error::{StoreError, StoreResult};
use crate::fork::ForkPoint;
use crate::ids::ConversationId;
use crate::keys;
use crate::store::ConversationMeta;

/// The state file in a database directory.
pub(crate) const STATE: &str = "convstore.state";
/// The catalog file in a database directory.
pub(crate) const CATALOG: &str = "convstore.catalog";

/// What [`STATE`] holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    /// The lsn of the newest sled snapshot seen after an open.
    pub snapshot: Option<u64>,
    /// At least this many conversations exist.
    pub conversations: u64,
    /// At least this many records exist, summed over conversations (a
    /// fork counts its shared records).
    pub records: u64,
}

/// A line of [`CATALOG`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CatalogEntry {
    /// The conversation id, hex.
    pub id: String,
    pub name: Option<String>,
    /// Microseconds since the epoch.
    pub created: i64,
    /// Parent id (hex), records shared and the base address (hex).
    pub fork: Option<(String, u64, String)>,
    /// Its length and head when the line was written.
    pub len: u64,
    pub head: String,
}

impl CatalogEntry {
    pub(crate) fn conversation(&self) -> Option<ConversationId> {
        ConversationId::from_hex(&self.id)
    }
}

/// What a `Store` keeps to update the files.
pub(crate) struct Tracker {
    state: Mutex<State>,
    /// Whether this `Store` took the write lock.
    wrote: AtomicBool,
}

impl Tracker {
    pub(crate) fn wrote(&self) {
        self.wrote.store(true, Ordering::Relaxed);
    }

    /// Lowers the state's bounds by `conversations` and `records`, on disk
    /// at once: conversations about to be deleted.
    pub(crate) fn forgetting(
        &self,
        path: &Path,
        conversations: u64,
        records: u64,
    ) -> StoreResult<()> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let new = State {
            conversations: state.conversations.saturating_sub(conversations),
            records: state.records.saturating_sub(records),
            ..*state
        };
        if new != *state {
            write_state(path, &new).map_err(StoreError::Io)?;
            *state = new;
        }
        Ok(())
    }

    /// Brings the files up to date after a `Store` that wrote was flushed.
    pub(crate) fn on_drop(&self, path: &Path, db: &sled::Db) {
        if !self.wrote.load(Ordering::Relaxed) {
            return;
        }
        let Ok(found) = census(db) else {
            return;
        };
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let grew = found.conversations > state.conversations;
        if grew || !path.join(CATALOG).exists() {
            let _ = write_catalog(path, db);
        }
        let new = State {
            conversations: found.conversations.max(state.conversations),
            records: found.records.max(state.records),
            ..*state
        };
        if new != *state && write_state(path, &new).is_ok() {
            *state = new;
        }
    }
}

/// What [`before_open`] found, for [`after_open`].
#[derive(Clone, Copy)]
pub(crate) struct Precheck {
    state: Option<State>,
}

/// The checks made before sled opens the database at `path`; see the
/// module documentation.
pub(crate) fn before_open(path: &Path) -> StoreResult<Precheck> {
    let state = read_state(path);
    if let Some(State {
        snapshot: Some(lsn),
        ..
    }) = state
    {
        let newest = snapshots(path).iter().map(|(l, _)| *l).max();
        if newest.is_none_or(|n| n < lsn) {
            trial(path, state.unwrap_or_default(), lsn)?;
        }
    }
    Ok(Precheck { state })
}

/// The checks made once sled has opened, before convstore reads or writes
/// anything; then records the newest snapshot (best effort). Returns the
/// tracker for the `Store`.
pub(crate) fn after_open(path: &Path, db: &sled::Db, pre: Precheck) -> StoreResult<Tracker> {
    let has_format = db.contains_key(keys::FORMAT)?;
    let any_conversation = db.scan_prefix([keys::CONVERSATION]).next().is_some();
    let counted = pre.state.map_or(0, |s| s.conversations);
    let segment_bytes = crate::backend::sled::segments::Segments::new(path).size_on_disk();
    let lost = if counted > 0 && !(has_format && any_conversation) {
        Some(format!(
            "convstore's own record ({STATE}) shows it held at least {counted} \
             conversation(s)"
        ))
    } else if !has_format && db.is_empty() && segment_bytes > 0 {
        Some(format!(
            "its segment files hold {segment_bytes} bytes of records"
        ))
    } else {
        None
    };
    if let Some(proof) = lost {
        return Err(StoreError::Open {
            path: path.to_path_buf(),
            reason: format!(
                "sled recovered {} but {proof}; nothing was written to it. \
                 `convstore salvage {} DEST` copies out every conversation that can still be read",
                if has_format {
                    "no conversation"
                } else {
                    "an empty database"
                },
                path.display()
            ),
        });
    }
    let mut state = pre.state.unwrap_or_default();
    let newest = snapshots(path).iter().map(|(l, _)| *l).max();
    let mut changed = pre.state.is_none() || newest > state.snapshot;
    state.snapshot = state.snapshot.max(newest);
    if pre.state.is_none() && any_conversation {
        // A database from before these files: count it once.
        if let Ok(found) = census(db) {
            state.conversations = found.conversations;
            state.records = found.records;
            let _ = write_catalog(path, db);
        }
    }
    if !has_format {
        // A new database: nothing to record yet.
        changed = false;
    }
    if changed {
        let _ = write_state(path, &state);
    }
    Ok(Tracker {
        state: Mutex::new(state),
        wrote: AtomicBool::new(false),
    })
}

/// The complete sled snapshot files in `path` and their lsns.
pub(crate) fn snapshots(path: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(dir) = std::fs::read_dir(path) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let lsn = name.to_str()?.strip_prefix("snap.")?;
            let lsn = u64::from_str_radix(lsn, 16).ok()?;
            Some((lsn, entry.path()))
        })
        .collect()
}

/// The state file of `path`, if it is there and reads.
pub(crate) fn read_state(path: &Path) -> Option<State> {
    let bytes = std::fs::read(path.join(STATE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The catalog of `path`: its lines that read.
pub(crate) fn read_catalog(path: &Path) -> Vec<CatalogEntry> {
    let Ok(text) = std::fs::read_to_string(path.join(CATALOG)) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn write_state(path: &Path, state: &State) -> std::io::Result<()> {
    let text = serde_json::to_vec(state).map_err(std::io::Error::other)?;
    write_atomically(&path.join(STATE), &text)
}

/// Writes the catalog again, best effort: conversations were deleted.
pub(crate) fn rewrite_catalog(path: &Path, db: &sled::Db) {
    let _ = write_catalog(path, db);
}

fn write_catalog(path: &Path, db: &sled::Db) -> StoreResult<()> {
    let mut text = Vec::new();
    for item in db.scan_prefix([keys::CONVERSATION]) {
        let (key, value) = item?;
        let Some(id) = keys::conversation_of(&key) else {
            continue;
        };
        let Ok(meta) = decode::<ConversationMeta>(&value, "metadata") else {
            continue;
        };
        let fork = match db.get(keys::lineage(&id))? {
            Some(bytes) => decode::<ForkPoint>(&bytes, "lineage")
                .ok()
                .map(|p| (p.parent.hex(), p.at, p.base.hex())),
            None => None,
        };
        let entry = CatalogEntry {
            id: id.hex(),
            name: meta.name,
            created: meta.created.as_micros(),
            fork,
            len: meta.len,
            head: meta.head.hex(),
        };
        serde_json::to_writer(&mut text, &entry)
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
        text.push(b'\n');
    }
    write_atomically(&path.join(CATALOG), &text).map_err(StoreError::Io)
}

/// Writes `bytes` to `file` through a synced temporary file renamed over
/// it; on failure, the temporary file is removed and `file` is as it was.
pub(crate) fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut temp = tempfile::Builder::new()
        .prefix(".convstore-tmp-")
        .tempfile_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(file).map_err(|e| e.error)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Conversations and records (summed) a database holds.
struct Census {
    conversations: u64,
    records: u64,
}

fn census(db: &sled::Db) -> StoreResult<Census> {
    let mut found = Census {
        conversations: 0,
        records: 0,
    };
    for item in db.scan_prefix([keys::CONVERSATION]) {
        let (_, value) = item?;
        let meta: ConversationMeta = decode(&value, "metadata")?;
        found.conversations += 1;
        found.records += meta.len;
    }
    Ok(found)
}

/// Opens sled on a copy of the files of `path` (its snapshot missing) and
/// checks that it recovers at least what `state` counts; the copy is
/// removed after.
fn trial(path: &Path, state: State, lsn: u64) -> StoreResult<()> {
    let refuse = |what: String| StoreError::Open {
        path: path.to_path_buf(),
        reason: format!(
            "sled's snapshot file is missing (the newest seen was snap.{lsn:016X}) and \
             {what}; the database was left as it is. `convstore salvage {} DEST` copies \
             out every conversation that can still be read",
            path.display()
        ),
    };
    let scratch = scratch_copy(path)
        .map_err(|e| refuse(format!("a trial recovery on a copy could not be made: {e}")))?;
    let opened = crate::backend::sled::opening::guarded(|| {
        sled::Config::new()
            .path(scratch.path())
            .flush_every_ms(None)
            .open()
    });
    let db = match opened {
        Ok(db) => db,
        Err(sled::Error::Corruption { .. }) => {
            return Err(refuse(
                "sled cannot recover from its log alone (it finds corruption)".to_owned(),
            ))
        }
        Err(e) => {
            return Err(refuse(format!(
                "sled cannot recover from its log alone ({e})"
            )))
        }
    };
    let found = census(&db).unwrap_or(Census {
        conversations: 0,
        records: 0,
    });
    drop(db);
    if found.conversations < state.conversations || found.records < state.records {
        return Err(refuse(format!(
            "sled's log alone recovers {} of the {} conversation(s) and {} of the {} \
             record(s) convstore recorded ({STATE})",
            found.conversations, state.conversations, found.records, state.records
        )));
    }
    Ok(())
}

/// A temporary directory beside `path` (else in the system's temporary
/// directory) holding a copy of sled's files of `path`: `conf`, `db`, its
/// complete snapshots and its `blobs/` directory.
pub(crate) fn scratch_copy(path: &Path) -> std::io::Result<tempfile::TempDir> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let scratch = tempfile::Builder::new()
        .prefix(".convstore-scratch-")
        .tempdir_in(parent)
        .or_else(|_| {
            tempfile::Builder::new()
                .prefix("convstore-scratch-")
                .tempdir()
        })?;
    for name in ["conf", "db"] {
        let from = path.join(name);
        if from.exists() {
            std::fs::copy(&from, scratch.path().join(name))?;
        }
    }
    for (_, file) in snapshots(path) {
        if let Some(name) = file.file_name() {
            std::fs::copy(&file, scratch.path().join(name))?;
        }
    }
    let blobs = path.join("blobs");
    std::fs::create_dir_all(scratch.path().join("blobs"))?;
    if let Ok(entries) = std::fs::read_dir(&blobs) {
        for entry in entries.flatten() {
            if entry.path().is_file() {
                std::fs::copy(
                    entry.path(),
                    scratch.path().join("blobs").join(entry.file_name()),
                )?;
            }
        }
    }
    Ok(scratch)
}
