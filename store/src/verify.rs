//! Verification: [`Store::verify`] re-hashes a conversation's whole log and
//! re-derives everything stored beside it.
//!
//! Checked, in log order: chunks are contiguous; each chunk's parent is the
//! address of the record before it; each record hashes to the check stored
//! beside it and decodes; its stored turn is the turn rule's; each blob it
//! references exists, has its length and hashes to its key. Then: the last
//! address is the head, and the record count, turn state, per-kind counts
//! and turn index all match what the records give.
//! The first failure is reported, naming the record when there is one.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::append::{OverlayEntry, TurnEntry};
use crate::codec::{self, decode_record, BlobRef, BodyRepr, CallDirectory, TextRepr};
use crate::error::StoreResult;
use crate::event::TurnTracker;
use crate::hash::{Address, BlobHash};
use crate::ids::ConversationId;
use crate::keys;
use crate::store::{ConversationMeta, KindStats, Store};

/// The tool calls of a chunk as `(seq, id, name)`.
type Calls = Vec<(u64, String, String)>;

/// What a successful verification covered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Conversations verified.
    pub conversations: u64,
    /// Records re-hashed.
    pub records: u64,
    /// Distinct blobs re-hashed.
    pub blobs: u64,
}

/// The first thing found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyFailure {
    /// The conversation.
    pub conversation: ConversationId,
    /// Its name, if it has one.
    pub name: Option<String>,
    /// The first bad record, when the failure is in one.
    pub seq: Option<u64>,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for VerifyFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conversation {}", self.conversation)?;
        if let Some(name) = &self.name {
            write!(f, " ({name})")?;
        }
        if let Some(seq) = self.seq {
            write!(f, ": record {seq}")?;
        }
        write!(f, ": {}", self.problem)
    }
}

/// A verification outcome: the report, or the first failure found. The
/// outer [`StoreResult`] is for the database failing while reading.
pub type Verified = Result<VerifyReport, VerifyFailure>;

impl Store {
    /// Verifies every conversation.
    pub fn verify_all(&self) -> StoreResult<Verified> {
        let mut total = VerifyReport::default();
        let mut blobs = HashSet::new();
        let mut done = HashMap::new();
        for item in self.db.scan_prefix([keys::CONVERSATION]) {
            let (key, _) = item?;
            let Some(id) = key
                .get(1..17)
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .map(ConversationId::from_bytes)
            else {
                continue;
            };
            let own = self.meta(&id).map(|m| m.len)? - self.fork_point(&id)?.map_or(0, |p| p.at);
            match self.verify_one(&id, &mut blobs, &mut done) {
                // Shared records are counted once, with their owner.
                Ok(_) => total.records += own,
                Err(failure) => return Ok(Err(failure)),
            }
            total.conversations += 1;
        }
        total.blobs = blobs.len() as u64;
        Ok(Ok(total))
    }

    /// Verifies one conversation.
    pub fn verify(&self, id: &ConversationId) -> StoreResult<Verified> {
        let mut blobs = HashSet::new();
        let mut report = self.verify_one(id, &mut blobs, &mut HashMap::new());
        if let Ok(report) = &mut report {
            report.conversations = 1;
            report.blobs = blobs.len() as u64;
        }
        Ok(report)
    }

    /// Verifies `id` (through its ancestors, if it is a fork); `done`
    /// holds the conversations verified already and their record counts.
    fn verify_one(
        &self,
        id: &ConversationId,
        blobs: &mut HashSet<BlobHash>,
        done: &mut HashMap<ConversationId, u64>,
    ) -> Verified {
        if let Some(&records) = done.get(id) {
            return Ok(VerifyReport {
                conversations: 1,
                records,
                blobs: 0,
            });
        }
        let fail = |problem: String| VerifyFailure {
            conversation: *id,
            name: None,
            seq: None,
            problem,
        };
        let meta = self.meta(id).map_err(|e| fail(e.to_string()))?;
        let point = self.fork_point(id).map_err(|e| fail(e.to_string()))?;
        let mut shared = 0;
        let start = match point {
            None => Start::default(),
            Some(point) => {
                // A fork is checked through its parent: the shared records,
                // then that the fork point is what they give.
                self.verify_one(&point.parent, blobs, done)?;
                shared = point.at;
                let found = self
                    .fork_base(&point.parent, point.at)
                    .map_err(|e| fail(e.to_string()))?;
                if found != (point.base, point.turns) {
                    return Err(VerifyFailure {
                        name: meta.name.clone(),
                        seq: point.at.checked_sub(1),
                        ..fail(format!(
                            "the fork point does not match record {} of its parent {}",
                            point.at.saturating_sub(1),
                            point.parent
                        ))
                    });
                }
                Start {
                    seq: point.at,
                    address: point.base,
                    turns: point.turns,
                }
            }
        };
        let mut check = Checker {
            store: self,
            id: *id,
            name: meta.name.clone(),
            blobs,
        };
        let mut report = check.run(&meta, start)?;
        report.records += shared;
        done.insert(*id, report.records);
        Ok(report)
    }
}

/// Where a conversation's own records start: seq 0 from the root, or a
/// fork's first own record after its parent's.
#[derive(Clone, Copy)]
struct Start {
    seq: u64,
    address: Address,
    turns: TurnTracker,
}

impl Default for Start {
    fn default() -> Self {
        Start {
            seq: 0,
            address: Address::ROOT,
            turns: TurnTracker::new(),
        }
    }
}

struct Checker<'a> {
    store: &'a Store,
    id: ConversationId,
    name: Option<String>,
    blobs: &'a mut HashSet<BlobHash>,
}

impl Checker<'_> {
    fn fail(&self, seq: Option<u64>, problem: impl Into<String>) -> VerifyFailure {
        VerifyFailure {
            conversation: self.id,
            name: self.name.clone(),
            seq,
            problem: problem.into(),
        }
    }

    fn run(&mut self, meta: &ConversationMeta, start: Start) -> Verified {
        let id = self.id;
        let Start {
            mut seq,
            mut address,
            mut turns,
        } = start;
        let first = seq;
        let mut kinds = [KindStats::default(); 10];
        let mut index = Vec::new();
        let mut overlays: Vec<(u64, u64, Vec<u8>)> = Vec::new();
        let mut directories: Vec<(u64, Calls)> = Vec::new();
        for item in self.store.db.scan_prefix(keys::chunks(&id)) {
            let (key, bytes) = item.map_err(|e| self.fail(Some(seq), e.to_string()))?;
            let chunk = self
                .store
                .read_chunk(&id, &key, bytes)
                .map_err(|e| self.fail(Some(seq), e.to_string()))?;
            if chunk.first_seq != seq {
                return Err(self.fail(
                    Some(seq),
                    format!(
                        "missing: the next chunk starts at record {}",
                        chunk.first_seq
                    ),
                ));
            }
            if chunk.layout.parent != address {
                return Err(self.fail(
                    Some(seq),
                    "its chunk's parent address is not the previous record's address",
                ));
            }
            let mut calls = Vec::new();
            for (i, entry) in chunk.layout.entries.iter().enumerate() {
                let bytes = chunk.record_bytes(i);
                let child = address.child(bytes);
                if child.check() != entry.check {
                    return Err(self.fail(Some(seq), "stored bytes do not match their address"));
                }
                let record = decode_record(bytes)
                    .map_err(|e| self.fail(Some(seq), format!("does not decode: {e}")))?;
                let event_type = record.body.event_type();
                let turn = turns.next(event_type);
                if turn != entry.turn {
                    return Err(self.fail(
                        Some(seq),
                        format!("stored turn {} but the turn rule gives {turn}", entry.turn),
                    ));
                }
                let mut size = bytes.len() as u64;
                for text in record.texts() {
                    if let TextRepr::Blob(blob) = text {
                        self.check_blob(blob).map_err(|p| self.fail(Some(seq), p))?;
                        size += blob.len;
                    }
                }
                match &record.body {
                    BodyRepr::Compaction(_) => overlays.push((seq, turn, bytes.to_vec())),
                    BodyRepr::ToolCall { id, name, .. } => {
                        calls.push((seq, (*id).to_owned(), (*name).to_owned()));
                    }
                    _ => {}
                }
                let stats = &mut kinds[event_type.index()];
                stats.count += 1;
                stats.bytes += size;
                address = child;
                seq += 1;
            }
            if !calls.is_empty() {
                directories.push((chunk.first_seq, std::mem::take(&mut calls)));
            }
            let entries = chunk.layout.entries.len() as u64;
            let first_turn = chunk.layout.entries.first().map_or(0, |e| e.turn);
            let last_turn = chunk.layout.entries.last().map_or(0, |e| e.turn);
            index.push((last_turn, chunk.first_seq, first_turn, entries));
        }
        if seq != meta.len {
            return Err(self.fail(
                None,
                format!(
                    "the metadata counts {} records but the log has {seq}",
                    meta.len
                ),
            ));
        }
        if address != meta.head {
            return Err(self.fail(
                None,
                format!(
                    "the stored head {} is not the last record's address {address}",
                    meta.head
                ),
            ));
        }
        if turns != meta.turns || kinds != meta.kinds {
            return Err(self.fail(
                None,
                "the metadata's turn or kind counts do not match the log",
            ));
        }
        self.check_turn_index(&index)?;
        self.check_overlays(&overlays)?;
        self.check_call_directories(&directories)?;
        Ok(VerifyReport {
            conversations: 1,
            records: seq - first,
            blobs: 0,
        })
    }

    /// The turn index holds exactly one entry per chunk, under its last turn.
    fn check_turn_index(&self, expected: &[(u64, u64, u64, u64)]) -> Result<(), VerifyFailure> {
        let mut expected = expected.to_vec();
        expected.sort_unstable();
        let mut found = Vec::new();
        for item in self.store.db.scan_prefix(keys::turns(&self.id)) {
            let (key, value) = item.map_err(|e| self.fail(None, e.to_string()))?;
            let (last_turn, first_seq) = keys::turn_parts(&key)
                .ok_or_else(|| self.fail(None, "a turn index key is truncated"))?;
            let entry: TurnEntry = codec::decode(&value, "turn index entry")
                .map_err(|e| self.fail(None, e.to_string()))?;
            found.push((last_turn, first_seq, entry.first_turn, entry.entries));
        }
        if found != expected {
            return Err(self.fail(None, "the turn index does not match the log's chunks"));
        }
        Ok(())
    }

    /// The overlay entries are exactly the compaction records.
    fn check_overlays(&self, expected: &[(u64, u64, Vec<u8>)]) -> Result<(), VerifyFailure> {
        let mut found = Vec::new();
        for item in self.store.db.scan_prefix(keys::overlays(&self.id)) {
            let (key, value) = item.map_err(|e| self.fail(None, e.to_string()))?;
            let seq = keys::key_seq(&key)
                .ok_or_else(|| self.fail(None, "an overlay key is truncated"))?;
            let entry: OverlayEntry<'_> = codec::decode(&value, "overlay entry")
                .map_err(|e| self.fail(Some(seq), e.to_string()))?;
            found.push((seq, entry.turn, entry.record.to_vec()));
        }
        if found != expected {
            let first_bad = found
                .iter()
                .zip(expected)
                .find(|(f, e)| f != e)
                .map(|(f, _)| f.0);
            return Err(self.fail(
                first_bad,
                "the overlay index does not match the log's compactions",
            ));
        }
        Ok(())
    }

    /// Each chunk's call directory lists exactly its tool calls.
    fn check_call_directories(&self, expected: &[(u64, Calls)]) -> Result<(), VerifyFailure> {
        let mut found = Vec::new();
        for item in self.store.db.scan_prefix(keys::call_directories(&self.id)) {
            let (key, value) = item.map_err(|e| self.fail(None, e.to_string()))?;
            let first_seq = keys::key_seq(&key)
                .ok_or_else(|| self.fail(None, "a call directory key is truncated"))?;
            let directory: CallDirectory<'_> = codec::decode(&value, "call directory")
                .map_err(|e| self.fail(Some(first_seq), e.to_string()))?;
            let calls = directory
                .calls
                .into_iter()
                .map(|(seq, id, name)| (seq, id.to_owned(), name.to_owned()))
                .collect();
            found.push((first_seq, calls));
        }
        if found != expected {
            return Err(self.fail(
                None,
                "the call directories do not match the log's tool calls",
            ));
        }
        Ok(())
    }

    fn check_blob(&mut self, blob: BlobRef) -> Result<(), String> {
        if self.blobs.contains(&blob.hash) {
            return Ok(());
        }
        let bytes = self
            .store
            .blob_bytes(&blob.hash)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("its blob {} is missing", blob.hash))?;
        if bytes.len() as u64 != blob.len || BlobHash::of(&bytes) != blob.hash {
            return Err(format!("its blob {} is corrupt", blob.hash));
        }
        if std::str::from_utf8(&bytes).is_err() {
            return Err(format!("its blob {} is not UTF-8", blob.hash));
        }
        self.blobs.insert(blob.hash);
        Ok(())
    }
}
