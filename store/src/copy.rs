//! Writing conversations into a new database record byte for record byte,
//! keeping their ids, names, creation times and fork points: what
//! [`Store::backup`] and salvage (`salvage.rs`) write with.
//!
//! Records go through the append path (`write_records`, `Store::commit`):
//! chunked, indexed and placed (sled or segment files) as any append, all
//! settled. Addresses are re-chained from the records' bytes, so a copy
//! whose head equals the original's holds exactly its records.
//!
//! A conversation becomes visible at once, with its last batch: earlier
//! batches write its chunks and their indexes only (keys nothing reads
//! while the conversation's metadata is absent), and the last writes the
//! metadata, name, lineage and settings, on condition that neither the id
//! nor the name exists. A copy cut short leaves rows nothing refers to;
//! the same copy again writes the same keys.

use crate::append::{write_records, Placement, Writes};
use crate::codec::{decode_record, encode, BodyRepr, Digests, EncodedRecord};
use crate::error::{StoreError, StoreResult};
use crate::event::{Timestamp, TurnTracker};
use crate::fork::ForkPoint;
use crate::hash::{Address, BlobHash};
use crate::ids::ConversationId;
use crate::keys;
use crate::store::{ConversationMeta, KindStats, Store};

/// Records per batch written.
const BATCH_RECORDS: usize = 8192;
/// Bytes (records and blob texts) per batch written.
const BATCH_BYTES: usize = 32 << 20;

/// A conversation to write: who it is.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub id: ConversationId,
    pub name: Option<String>,
    pub created: Timestamp,
    pub fork: Option<ForkPoint>,
}

/// A record to write: its canonical bytes and the texts of its blobs.
pub(crate) struct RawRecord {
    pub bytes: Vec<u8>,
    pub blobs: Vec<(BlobHash, String)>,
}

/// Writes one conversation into a store, batch by batch.
pub(crate) struct ConversationWriter<'s> {
    store: &'s Store,
    id: ConversationId,
    meta: ConversationMeta,
    /// The keys the last batch writes besides the records (name, lineage,
    /// settings), which make the conversation visible.
    last: Writes,
    pending: Vec<RawRecord>,
    pending_bytes: usize,
}

impl<'s> ConversationWriter<'s> {
    /// Starts writing `who` into `store`; nothing is written before
    /// [`ConversationWriter::finish`] or enough records are pushed.
    pub(crate) fn new(store: &'s Store, who: &Identity) -> Self {
        let (head, len, turns) = match &who.fork {
            Some(point) => (point.base, point.at, point.turns),
            None => (Address::ROOT, 0, TurnTracker::new()),
        };
        let meta = ConversationMeta {
            name: who.name.clone(),
            created: who.created,
            head,
            len,
            turns,
            kinds: [KindStats::default(); 10],
        };
        let mut last = Writes::new(store);
        last.require(keys::conversation(&who.id), None);
        if let Some(name) = &who.name {
            last.require(keys::name(name), None);
            last.batch
                .put(keys::name(name), who.id.as_bytes().as_slice());
        }
        if let Some(point) = &who.fork {
            last.batch.put(keys::lineage(&who.id), encode(point));
        }
        ConversationWriter {
            store,
            id: who.id,
            meta,
            last,
            pending: Vec::new(),
            pending_bytes: 0,
        }
    }

    /// Adds a record after those pushed before.
    pub(crate) fn push(&mut self, record: RawRecord) -> StoreResult<()> {
        self.pending_bytes +=
            record.bytes.len() + record.blobs.iter().map(|(_, t)| t.len()).sum::<usize>();
        self.pending.push(record);
        if self.pending.len() >= BATCH_RECORDS || self.pending_bytes >= BATCH_BYTES {
            self.write(false)?;
        }
        Ok(())
    }

    /// The records pushed so far (with a fork's shared ones).
    pub(crate) fn len(&self) -> u64 {
        self.meta.len + self.pending.len() as u64
    }

    /// Writes `key` = `value` with the last batch (a setting of the
    /// conversation: pins, automatic compaction's state).
    pub(crate) fn setting(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.last.batch.put(key, value);
    }

    /// Writes what is pending and makes the conversation visible; returns
    /// its length and head. Fails with [`StoreError::Conflict`] (nothing
    /// made visible) if its id or name exists meanwhile.
    pub(crate) fn finish(mut self) -> StoreResult<(u64, Address)> {
        self.write(true)?;
        Ok((self.meta.len, self.meta.head))
    }

    fn write(&mut self, last: bool) -> StoreResult<()> {
        if self.pending.is_empty() && !last {
            return Ok(());
        }
        let records = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        // The tool calls' ids and names, owned apart from the record bytes
        // the encoded records take.
        let mut calls: Vec<Option<(String, String)>> = Vec::with_capacity(records.len());
        let mut kinds = Vec::with_capacity(records.len());
        for record in &records {
            let repr = decode_record(&record.bytes).map_err(|e| StoreError::Corrupt {
                what: format!(
                    "conversation {}: record {}: {e}",
                    self.id,
                    self.meta.len + kinds.len() as u64
                ),
            })?;
            let size = crate::codec::record_size(&record.bytes, &repr);
            calls.push(match &repr.body {
                BodyRepr::ToolCall { id, name, .. } => Some(((*id).to_owned(), (*name).to_owned())),
                _ => None,
            });
            kinds.push((
                repr.body.event_type(),
                size,
                repr.body.compaction_span(),
                repr.timestamp,
            ));
        }
        let mut encoded = Vec::with_capacity(records.len());
        let mut texts = Vec::with_capacity(records.len());
        for record in records {
            texts.push(record.blobs);
            encoded.push(record.bytes);
        }
        let encoded: Vec<EncodedRecord<'_>> = encoded
            .into_iter()
            .zip(&texts)
            .zip(&calls)
            .zip(&kinds)
            .map(
                |(((bytes, blobs), call), &(event_type, size, span, timestamp))| EncodedRecord {
                    size,
                    bytes,
                    digests: Digests::default(),
                    event_type,
                    blobs: blobs.iter().map(|(h, t)| (*h, t.as_str())).collect(),
                    call: call.as_ref().map(|(i, n)| (i.as_str(), n.as_str())),
                    span,
                    timestamp,
                },
            )
            .collect();
        let mut writes = if last {
            std::mem::replace(&mut self.last, Writes::new(self.store))
        } else {
            Writes::new(self.store)
        };
        let _guard = self.store.lock_writes();
        if encoded.is_empty() {
            writes
                .batch
                .put(keys::conversation(&self.id), encode(&self.meta));
        } else {
            let appended = write_records(
                &self.id,
                self.meta.clone(),
                &encoded,
                &Placement::Settled(None),
                &mut writes,
            )?;
            for record in &encoded {
                self.meta.turns.next(record.event_type);
                let stats = &mut self.meta.kinds[record.event_type.index()];
                stats.count += 1;
                stats.bytes += record.size;
            }
            self.meta.len += encoded.len() as u64;
            self.meta.head = appended.head;
        }
        if !last {
            // Not visible yet: everything but the metadata.
            let conversation = keys::conversation(&self.id);
            writes.batch.ops.retain(|(_, key, _)| *key != conversation);
            writes.batch.announced.clear();
        }
        self.store.commit(&encoded, writes)
    }
}

/// How the temporary directory of a copy is named, before the writing
/// process's id.
const COPY_PREFIX: &str = ".convstore-copy-";

/// Removes the temporary directories in `parent` of copies whose process
/// is gone (killed part-way: a finished or failed copy removes its own).
fn remove_abandoned_copies(parent: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(COPY_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        // Gone: no such process (another user's is alive, not ours to
        // signal).
        let gone = rustix::process::Pid::from_raw(pid).is_some_and(|pid| {
            rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
        });
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The copies this process is writing, for [`remove_unfinished_copies`].
static WRITING: std::sync::Mutex<Writing> = std::sync::Mutex::new(Writing {
    dirs: Vec::new(),
    interrupted: false,
});

struct Writing {
    /// The copies' temporary directories.
    dirs: Vec<std::path::PathBuf>,
    /// Set by [`remove_unfinished_copies`]: no copy starts after it.
    interrupted: bool,
}

/// Removes the temporary directories of the copies (`backup`, `copy`)
/// this process is writing: for a command interrupted part-way, which
/// ends without running their destructors. The copy goes on writing on
/// another thread meanwhile, so each directory is first renamed (paths
/// into it no longer reach it, and no file can be added by name while it
/// is removed), then removed; and no copy starts after this.
pub fn remove_unfinished_copies() {
    let mut writing = WRITING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    writing.interrupted = true;
    for dir in std::mem::take(&mut writing.dirs) {
        let mut doomed = dir.clone().into_os_string();
        doomed.push("-removed");
        let doomed = std::path::PathBuf::from(doomed);
        let gone = if std::fs::rename(&dir, &doomed).is_ok() {
            doomed
        } else {
            dir
        };
        for _ in 0..3 {
            if std::fs::remove_dir_all(&gone).is_ok() || !gone.exists() {
                break;
            }
        }
    }
}

/// A new database being written for `dest`: in a temporary directory
/// beside it until complete, then moved there, so that `dest` never holds
/// half a copy (a failed copy leaves nothing).
pub(crate) struct Destination {
    dest: std::path::PathBuf,
    temp: tempfile::TempDir,
}

impl Destination {
    /// Refuses a `dest` that exists (other than as an empty directory)
    /// and opens a new store in a temporary directory beside it.
    pub(crate) fn create(
        dest: &std::path::Path,
        encryption: Option<std::sync::Arc<crate::crypto::Keyring>>,
        key_scope: Option<[u8; 16]>,
    ) -> StoreResult<(Self, Store)> {
        let refuse = |reason: String| StoreError::Destination {
            path: dest.to_path_buf(),
            reason,
        };
        if dest.exists() {
            let empty = std::fs::read_dir(dest).is_ok_and(|mut d| d.next().is_none());
            if !empty {
                return Err(refuse(
                    "it already exists; a copy is written to a new path".to_owned(),
                ));
            }
        }
        let parent = dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        if !parent.is_dir() {
            return Err(refuse(format!(
                "the directory {} does not exist",
                parent.display()
            )));
        }
        remove_abandoned_copies(parent);
        // Made and noted under the lock that an interrupt's removal takes,
        // so that it removes every directory made before it, and none is
        // made after it.
        let temp = {
            let mut writing = WRITING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if writing.interrupted {
                return Err(refuse("the command was interrupted".to_owned()));
            }
            let temp = tempfile::Builder::new()
                .prefix(&format!("{COPY_PREFIX}{}-", std::process::id()))
                .tempdir_in(parent)
                .map_err(|e| refuse(e.to_string()))?;
            writing.dirs.push(temp.path().to_path_buf());
            temp
        };
        let mut options = crate::OpenOptions::create().encryption(encryption);
        options.key_scope = key_scope;
        let store = Store::open_with(temp.path().join("db"), &options)?;
        Ok((
            Destination {
                dest: dest.to_path_buf(),
                temp,
            },
            store,
        ))
    }

    /// Closes `store` (flushing it) and moves it to the destination.
    pub(crate) fn publish(self, store: Store) -> StoreResult<()> {
        drop(store);
        let from = self.temp.path().join("db");
        if self.dest.exists() {
            // An empty directory: replaced.
            let _ = std::fs::remove_dir(&self.dest);
        }
        std::fs::rename(&from, &self.dest).map_err(|e| StoreError::Destination {
            path: self.dest.clone(),
            reason: e.to_string(),
        })?;
        if let Some(parent) = self.dest.parent() {
            if let Ok(dir) = std::fs::File::open(if parent.as_os_str().is_empty() {
                std::path::Path::new(".")
            } else {
                parent
            }) {
                let _ = dir.sync_all();
            }
        }
        Ok(())
    }
}
