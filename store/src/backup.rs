//! Online backup: [`Store::backup`] copies a consistent snapshot of every
//! conversation into a new database and verifies the copy.
//!
//! It runs inside a process that has the store open (a server, the CLI),
//! beside its reads and writes: a raw copy of a live sled directory is not
//! a database. Under the write lock, for a moment, it reads what a
//! snapshot needs: every conversation's metadata (length, head), fork
//! point, pins and automatic compaction state, and copies the stored views
//! (small values, read whole). Then, without the lock, it copies records
//! `0..len` of each conversation as they were at that moment: the log is
//! append-only, so those records cannot change while appends go on.
//! Records are copied byte for byte through the append path into a new
//! database beside the destination, which is verified (every record
//! re-hashed, every head and count compared with the snapshot's) before it
//! is moved into place.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::backend::{Batch, Bytes};
use crate::codec::{decode, decode_record, Layout, TextRepr};
use crate::copy::{ConversationWriter, Destination, Identity, RawRecord};
use crate::error::{StoreError, StoreResult};
use crate::fork::ForkPoint;
use crate::ids::ConversationId;
use crate::keys;
use crate::store::{ConversationMeta, Store};

/// What a backup or a copy wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupReport {
    /// Conversations copied.
    pub conversations: u64,
    /// Records copied (a fork's shared records counted once, with their
    /// owner).
    pub records: u64,
    /// Distinct blobs the copy holds (a backup; a copy into a database
    /// that holds more does not count them).
    pub blobs: u64,
    /// Stored views copied.
    pub views: u64,
    /// Conversations the destination held already, identical (same id,
    /// same head): a copy run again skips them.
    pub skipped: u64,
    /// Conversations deleted from the database while being copied (by
    /// another client of a server): left out of the copy, since what was
    /// deleted was meant to be gone.
    pub deleted: u64,
}

/// One conversation as the snapshot saw it.
struct Captured {
    id: ConversationId,
    meta: ConversationMeta,
    fork: Option<ForkPoint>,
    settings: Vec<(Vec<u8>, Bytes)>,
    views: Vec<(Vec<u8>, Bytes)>,
}

impl Store {
    /// Copies a consistent snapshot of every conversation into a new
    /// database at `dest` (which must not exist, or be an empty directory)
    /// and verifies it; see `backup.rs`. Appends may go on meanwhile.
    pub fn backup(&self, dest: impl AsRef<Path>) -> StoreResult<BackupReport> {
        self.backup_checked(dest, |_| Ok(()))
    }

    /// [`Store::backup`], with `check` run on the copy (open) after it
    /// verified and before it is moved to `dest`: the caller's own checks,
    /// such as stored views against fresh projections. An `Err` fails the
    /// backup and leaves nothing at `dest`.
    pub fn backup_checked(
        &self,
        dest: impl AsRef<Path>,
        check: impl FnOnce(&Store) -> Result<(), String>,
    ) -> StoreResult<BackupReport> {
        let dest = dest.as_ref();
        if let Some(source) = self.kv.path() {
            // The copy would sit inside what it copies (and in the
            // database's own directory, among files it does not own).
            let parent = dest
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if let (Ok(source), Ok(parent)) = (source.canonicalize(), parent.canonicalize()) {
                if parent.starts_with(&source) {
                    return Err(StoreError::Destination {
                        path: dest.to_path_buf(),
                        reason: "it is inside the database being backed up".to_owned(),
                    });
                }
            }
        }
        // A copy of an encrypted database is encrypted with the same keys:
        // deleting a conversation's key shreds it in the copy too.
        let (destination, out) = Destination::create(dest, self.keyring(), self.key_scope())?;
        let mut report = self.copy_into(&out, None)?;
        out.flush()?;
        let verified = out.verify_all()?.map_err(|failure| StoreError::Corrupt {
            what: format!("the backup does not verify: {failure}"),
        })?;
        report.blobs = verified.blobs;
        check(&out).map_err(|problem| StoreError::Corrupt {
            what: format!("the backup does not verify: {problem}"),
        })?;
        destination.publish(out)?;
        Ok(report)
    }

    /// [`Store::copy_into`] a new database at `dest` (a path where nothing
    /// is, or an empty directory), encrypted with `encryption` if given,
    /// with data keys of its own: written in a temporary directory beside
    /// it and moved there once complete, so that a copy that fails or is
    /// killed leaves nothing at `dest`.
    pub fn copy_into_new(
        &self,
        dest: &std::path::Path,
        encryption: Option<std::sync::Arc<crate::crypto::Keyring>>,
        only: Option<&[ConversationId]>,
    ) -> StoreResult<BackupReport> {
        let (destination, out) = Destination::create(dest, encryption, None)?;
        let report = self.copy_into(&out, only)?;
        out.flush()?;
        destination.publish(out)?;
        Ok(report)
    }

    /// Copies conversations, as of one moment, into `out` (another
    /// database, on any backend), record byte for record byte with their
    /// ids, names, creation times, fork points, pins and stored views:
    /// every conversation, or those of `only` with the parents their forks
    /// share records with. Each conversation appears in `out` whole or not
    /// at all; one `out` holds already with the same head is skipped, and
    /// one whose id or name `out` holds otherwise is refused before
    /// anything is written. Every copied conversation is then verified in
    /// `out`, and its length and head compared with the snapshot's.
    pub fn copy_into(
        &self,
        out: &Store,
        only: Option<&[ConversationId]>,
    ) -> StoreResult<BackupReport> {
        // Records are copied as they are: a format-7 database's may be
        // committed, which a database of an earlier format cannot hold.
        if out.is_encrypted() && !self.is_encrypted() {
            return Err(StoreError::Destination {
                path: out.describe().into(),
                reason: "it is encrypted and the database copied is not: its records, copied \
                         byte for byte, may keep long texts apart, which cannot be encrypted \
                         (export and import the conversations instead)"
                    .to_owned(),
            });
        }
        if out.layout() == Layout::Plain && self.layout() != Layout::Plain {
            return Err(StoreError::OlderFormat {
                format: out.format,
                needs: keys::COMMITTED_FORMAT,
            });
        }
        let captured = self.capture(only)?;
        let mut report = BackupReport::default();
        let mut todo = Vec::new();
        for conversation in fork_order(&captured)? {
            match out.meta(&conversation.id) {
                Ok(there) if there.head == conversation.meta.head => {
                    report.skipped += 1;
                    continue;
                }
                Ok(_) => {
                    return Err(StoreError::Destination {
                        path: out.describe().into(),
                        reason: format!(
                            "it holds conversation {} with another history; nothing was copied",
                            conversation.id
                        ),
                    })
                }
                Err(StoreError::NoSuchConversation { .. }) => {}
                Err(e) => return Err(e),
            }
            if let Some(name) = &conversation.meta.name {
                if out.find_exact(name)?.is_some() {
                    return Err(StoreError::Destination {
                        path: out.describe().into(),
                        reason: format!(
                            "it holds another conversation named \"{name}\"; nothing was copied"
                        ),
                    });
                }
            }
            todo.push(conversation);
        }
        let mut deleted = HashSet::new();
        for conversation in todo {
            // A fork of a conversation deleted meanwhile went with it.
            if conversation
                .fork
                .is_some_and(|point| deleted.contains(&point.parent))
            {
                deleted.insert(conversation.id);
                continue;
            }
            let start = conversation.fork.map_or(0, |p| p.at);
            let who = Identity {
                id: conversation.id,
                name: conversation.meta.name.clone(),
                created: conversation.meta.created,
                fork: conversation.fork,
            };
            // On a database server, each conversation is copied in a
            // transaction of its own: a copy cut short leaves nothing.
            let inside = match out.kv.begin_transaction() {
                Some(begun) => Some(Store::with_backend(begun?)?),
                None => None,
            };
            let target = inside.as_ref().unwrap_or(out);
            // The stored views first: nothing reads them before the
            // conversation exists.
            let mut batch = Batch::new();
            for (key, value) in &conversation.views {
                batch.put(key.as_slice(), value.to_vec());
            }
            target.kv.apply(batch)?;
            report.views += conversation
                .views
                .iter()
                .filter(|(k, _)| k.first() == Some(&keys::VIEW))
                .count() as u64;
            let mut writer = ConversationWriter::new(target, &who);
            for (key, value) in &conversation.settings {
                writer.setting(key.clone(), value.to_vec());
            }
            let read = self.copy_records(conversation, start, &mut writer);
            // Deleted while being read: the copy is not finished, so it
            // never becomes a conversation there (on a database server its
            // transaction is not taken).
            if (read.is_err() || writer.len() != conversation.meta.len)
                && self.gone(&conversation.id)
            {
                deleted.insert(conversation.id);
                continue;
            }
            read?;
            let (len, head) = writer.finish().map_err(|e| match e {
                StoreError::Conflict { .. } => StoreError::Destination {
                    path: out.describe().into(),
                    reason: format!(
                        "conversation {} (or its name) was created there meanwhile",
                        conversation.id
                    ),
                },
                other => other,
            })?;
            if let Some(inside) = &inside {
                inside.backend().commit_transaction()?;
            }
            if (len, head) != (conversation.meta.len, conversation.meta.head) {
                return Err(StoreError::Corrupt {
                    what: format!(
                        "conversation {}: the copy holds {len} records ending at {head}, \
                         the database {} ending at {}",
                        conversation.id, conversation.meta.len, conversation.meta.head
                    ),
                });
            }
            report.conversations += 1;
            report.records += len - start;
        }
        out.flush()?;
        report.deleted = deleted.len() as u64;
        for conversation in captured.iter().filter(|c| !deleted.contains(&c.id)) {
            let copy = out.meta(&conversation.id)?;
            let original = &conversation.meta;
            if (copy.len, copy.head, copy.turns, copy.kinds)
                != (original.len, original.head, original.turns, original.kinds)
            {
                return Err(StoreError::Corrupt {
                    what: format!(
                        "the copy of conversation {} differs from the original",
                        conversation.id
                    ),
                });
            }
            if let Err(failure) = out.verify(&conversation.id)? {
                return Err(StoreError::Corrupt {
                    what: format!("the copy does not verify: {failure}"),
                });
            }
        }
        Ok(report)
    }

    /// Records `start..` of `conversation` as captured, with their blobs,
    /// into `writer`.
    fn copy_records(
        &self,
        conversation: &Captured,
        start: u64,
        writer: &mut ConversationWriter<'_>,
    ) -> StoreResult<()> {
        let end = conversation.meta.len;
        for chunk in self.chunks(&conversation.id, start, end)? {
            for (_, bytes) in chunk?.raw_records(self, start, end)? {
                let mut blobs = Vec::new();
                for text in decode_record(&bytes)?.texts() {
                    if let TextRepr::Blob(blob) = text {
                        blobs.push((blob.hash, self.load_blob(blob)?));
                    }
                }
                writer.push(RawRecord { bytes, blobs })?;
            }
        }
        Ok(())
    }

    /// Under the write lock, for a moment: every conversation's (or those
    /// of `only`, and the parents they share records with) metadata, fork
    /// point, settings and stored views. The records `0..len` of each are
    /// then read without the lock: the log is append-only.
    fn capture(&self, only: Option<&[ConversationId]>) -> StoreResult<Vec<Captured>> {
        let _guard = self.lock_writes();
        let mut wanted: Option<HashSet<ConversationId>> =
            only.map(|ids| ids.iter().copied().collect());
        if let Some(wanted) = &mut wanted {
            let mut pending: Vec<ConversationId> = wanted.iter().copied().collect();
            while let Some(id) = pending.pop() {
                if let Some(point) = self.fork_point(&id)? {
                    if wanted.insert(point.parent) {
                        pending.push(point.parent);
                    }
                }
            }
        }
        let mut captured = Vec::new();
        for item in self.scan_prefix([keys::CONVERSATION]) {
            let (key, value) = item?;
            let id = keys::conversation_of(&key).ok_or_else(|| StoreError::Corrupt {
                what: "a conversation key is truncated".to_owned(),
            })?;
            if wanted.as_ref().is_some_and(|w| !w.contains(&id)) {
                continue;
            }
            // A deleted conversation a backup still holds: its data key is
            // gone, so there is nothing to copy.
            if self.is_shredded(&id)? {
                continue;
            }
            let meta: ConversationMeta = decode(&value, &format!("metadata of conversation {id}"))?;
            let fork = self.fork_point(&id)?;
            let mut settings = Vec::new();
            for key in [keys::pins(&id), keys::auto(&id)] {
                if let Some(value) = self.get(&key)? {
                    settings.push((key, value));
                }
            }
            let mut views = Vec::new();
            for prefix in [keys::VIEW, keys::VIEW_BLOCK, keys::VIEW_CALLS] {
                let mut start = vec![prefix];
                start.extend_from_slice(id.as_bytes());
                for item in self.scan_prefix(start) {
                    let (key, value) = item?;
                    views.push((key.to_vec(), value));
                }
            }
            captured.push(Captured {
                id,
                meta,
                fork,
                settings,
                views,
            });
        }
        Ok(captured)
    }
}

/// The conversations ordered so that each fork's parent comes before it.
fn fork_order(captured: &[Captured]) -> StoreResult<Vec<&Captured>> {
    let by_id: HashMap<ConversationId, &Captured> = captured.iter().map(|c| (c.id, c)).collect();
    let mut order = Vec::with_capacity(captured.len());
    let mut placed = HashSet::new();
    for conversation in captured {
        let mut chain = Vec::new();
        let mut current = Some(conversation);
        while let Some(c) = current {
            if placed.contains(&c.id) {
                break;
            }
            if chain.iter().any(|x: &&Captured| x.id == c.id) {
                return Err(StoreError::Corrupt {
                    what: format!("conversation {}: its lineage loops", c.id),
                });
            }
            chain.push(c);
            current = match c.fork {
                Some(point) => {
                    Some(
                        *by_id
                            .get(&point.parent)
                            .ok_or_else(|| StoreError::Corrupt {
                                what: format!(
                                    "conversation {}: its parent {} does not exist",
                                    c.id, point.parent
                                ),
                            })?,
                    )
                }
                None => None,
            };
        }
        for c in chain.into_iter().rev() {
            placed.insert(c.id);
            order.push(c);
        }
    }
    Ok(order)
}
