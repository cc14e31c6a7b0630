//! Verification: [`Store::verify`] re-hashes a conversation's whole log and
//! re-derives everything stored beside it.
//!
//! Chunks are read and checked in windows, side by side on rayon's
//! threads, and their summaries folded in log order. Checked, in log
//! order: chunks are contiguous; each chunk's parent is the
//! address of the record before it; each record hashes to the check stored
//! beside it and decodes; its stored turn is the turn rule's; each blob it
//! references exists, has its length and hashes to its key. Then: the last
//! address is the head, and the record count, turn state, per-kind counts
//! and turn index all match what the records give.
//! The first failure is reported, naming the record when there is one.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Mutex, PoisonError};

use rayon::prelude::*;

use crate::backend::Bytes;
use crate::codec::{self, decode_record, BlobRef, BodyRepr, CallDirectory, Layout, TextRepr};
use crate::codec::{OverlayDirectory, OverlayEntry, TurnEntry};
use crate::error::{StoreError, StoreResult};
use crate::event::{EventType, TurnTracker};
use crate::hash::{Address, BlobHash};
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::log::LoadedChunk;
use crate::store::{ConversationMeta, KindStats, Store};

/// The tool calls of a chunk as its call directory would encode them
/// (empty for a chunk without one).
type Calls = Vec<u8>;

/// What a successful verification covered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Conversations verified.
    pub conversations: u64,
    /// Records re-hashed.
    pub records: u64,
    /// Distinct blobs re-hashed.
    pub blobs: u64,
    /// Records found redacted (their addresses kept, a text gone): see
    /// [`Store::redaction_groups`].
    pub redacted: u64,
    /// Of those, the records whose every remaining field is proven: each
    /// committed record (format 7), and a plain one whose redacted texts
    /// were all blobs. For the others only the address the chain was built
    /// on is.
    pub redacted_proven: u64,
    /// Conversations of an encrypted database whose data key (or an
    /// ancestor's, for a fork) was deleted: unreadable by design, not
    /// verified (`verify` without the key still checks their chains).
    pub shredded: u64,
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
        let blobs = Mutex::new(HashSet::new());
        let mut done = HashMap::new();
        for item in self.scan_prefix([keys::CONVERSATION]) {
            let (key, _) = item?;
            let Some(id) = keys::conversation_of(&key) else {
                continue;
            };
            // A log read while it grows would not match the metadata read
            // before it: appends from this process wait for the
            // conversation's check (a server's), and on a database server
            // it is read in one snapshot.
            let guard = self.hold_writes();
            let snapshot = self.snapshot()?;
            let store = snapshot.as_ref().unwrap_or(self);
            if store.is_shredded(&id)? {
                total.shredded += 1;
                continue;
            }
            let own = match store.meta(&id) {
                Ok(meta) => meta.len - store.fork_point(&id)?.map_or(0, |p| p.at),
                // Deleted since the scan found it (by another client of a
                // server): not part of the database any more.
                Err(StoreError::NoSuchConversation { .. }) => continue,
                Err(e) => return Err(e),
            };
            let verified = store.verify_one(&id, &blobs, &mut done);
            drop((guard, snapshot));
            // Deleted while being read (deletions of this process are not
            // held off): what was missing went with it.
            if verified.is_err() && self.gone(&id) {
                continue;
            }
            match verified {
                // Shared records are counted once, with their owner.
                Ok(_) => total.records += own,
                Err(failure) => return Ok(Err(failure)),
            }
            total.conversations += 1;
        }
        total.blobs = lock(&blobs).len() as u64;
        for d in done.values() {
            let (redacted, proven) = d.redacted_before(u64::MAX);
            total.redacted += redacted;
            total.redacted_proven += proven;
        }
        Ok(Ok(total))
    }

    /// Verifies one conversation.
    pub fn verify(&self, id: &ConversationId) -> StoreResult<Verified> {
        let blobs = Mutex::new(HashSet::new());
        let guard = self.hold_writes();
        let snapshot = self.snapshot()?;
        let store = snapshot.as_ref().unwrap_or(self);
        let mut done = HashMap::new();
        let mut report = store.verify_one(id, &blobs, &mut done);
        drop(guard);
        if let Ok(report) = &mut report {
            report.conversations = 1;
            report.blobs = lock(&blobs).len() as u64;
            // A fork's records redacted in its ancestors' logs too: those
            // before the point where its line of ancestry leaves each.
            let (mut at, mut end) = (*id, u64::MAX);
            report.redacted = 0;
            report.redacted_proven = 0;
            loop {
                if let Some(d) = done.get(&at) {
                    let (redacted, proven) = d.redacted_before(end);
                    report.redacted += redacted;
                    report.redacted_proven += proven;
                }
                match store.fork_point(&at)? {
                    Some(point) => {
                        end = end.min(point.at);
                        at = point.parent;
                    }
                    None => break,
                }
            }
        }
        Ok(report)
    }

    /// Verifies `id` (through its ancestors, if it is a fork); `done`
    /// holds the conversations verified already (see [`Done`]).
    fn verify_one(
        &self,
        id: &ConversationId,
        blobs: &Mutex<HashSet<BlobHash>>,
        done: &mut HashMap<ConversationId, Done>,
    ) -> Verified {
        if let Some(Done { records, .. }) = done.get(id) {
            return Ok(VerifyReport {
                conversations: 1,
                records: *records,
                ..VerifyReport::default()
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
                    committed: self
                        .base_committed(&point.parent, point.at)
                        .map_err(|e| fail(e.to_string()))?,
                }
            }
        };
        let check = Checker {
            store: self,
            id: *id,
            name: meta.name.clone(),
            blobs,
        };
        let (mut report, redacted) = check.run(&meta, start)?;
        report.records += shared;
        done.insert(
            *id,
            Done {
                records: report.records,
                redacted,
            },
        );
        Ok(report)
    }
}

/// A conversation verified: its record count and, of its own records,
/// the redacted ones (seq, and whether the fields they keep are proven).
struct Done {
    records: u64,
    redacted: Vec<(u64, bool)>,
}

impl Done {
    /// How many of its redacted records come before `end`, and how many
    /// of those are proven.
    fn redacted_before(&self, end: u64) -> (u64, u64) {
        let before = self.redacted.iter().take_while(|r| r.0 < end);
        before.fold((0, 0), |(n, proven), r| (n + 1, proven + u64::from(r.1)))
    }
}

/// Where a conversation's own records start: seq 0 from the root, or a
/// fork's first own record after its parent's.
#[derive(Clone, Copy)]
struct Start {
    seq: u64,
    address: Address,
    turns: TurnTracker,
    /// Whether a record before it is committed (a fork's shared prefix).
    committed: bool,
}

impl Default for Start {
    fn default() -> Self {
        Start {
            seq: 0,
            address: Address::ROOT,
            turns: TurnTracker::new(),
            committed: false,
        }
    }
}

/// How many chunks one thread checks together, their chains side by side
/// in SIMD lanes ([`codec::link_runs`]).
const LANES: usize = 16;

/// How many chunks are read and checked side by side before their
/// summaries are folded in log order: bounds what a window holds.
const WINDOW: usize = 256;

struct Checker<'a> {
    store: &'a Store,
    id: ConversationId,
    name: Option<String>,
    /// The blobs found sound so far, shared by the checking threads.
    blobs: &'a Mutex<HashSet<BlobHash>>,
}

/// What one chunk gives when checked on its own, on one of rayon's
/// threads: each record hashed along the chain from the chunk's stored
/// parent, decoded, its blobs re-hashed. The checks that need the records
/// before the chunk (contiguity, parent, turns) are made when the summaries
/// are folded in log order, so the failure reported is the first in the log.
struct ChunkCheck {
    first_seq: u64,
    parent: Address,
    /// The address of its last record that hashed right.
    last: Address,
    /// Per record checked: its type, stored turn, size with its blobs and
    /// whether it is committed.
    records: Vec<(EventType, u64, u64, bool)>,
    calls: Calls,
    /// Its compactions as `(index in the chunk, record bytes)`.
    overlays: Vec<(usize, Vec<u8>)>,
    /// Its redacted records: index, and whether their remaining fields
    /// are proven.
    redacted: Vec<(usize, bool)>,
    /// The first failure: the chunk did not read (no index), or its record
    /// at this index is bad (the index of `records`' end when the record
    /// did not hash or decode, of its last entry when a blob is bad).
    failure: Option<(Option<usize>, String)>,
}

impl ChunkCheck {
    fn unread(problem: String) -> Self {
        ChunkCheck {
            first_seq: 0,
            parent: Address::ROOT,
            last: Address::ROOT,
            records: Vec::new(),
            calls: Vec::new(),
            overlays: Vec::new(),
            redacted: Vec::new(),
            failure: Some((None, problem)),
        }
    }
}

/// The state carried from chunk to chunk in log order.
struct Fold {
    seq: u64,
    address: Address,
    turns: TurnTracker,
    kinds: [KindStats; 10],
    /// Per chunk, its turn index entry `(last turn, first seq, first turn,
    /// records)`.
    index: Vec<(u64, u64, u64, u64)>,
    overlays: Vec<(u64, u64, u64, Vec<u8>)>,
    directories: Vec<(u64, Calls)>,
    /// Its redacted records: seq, and whether proven.
    redacted: Vec<(u64, bool)>,
    /// Whether a committed record was seen.
    committed: bool,
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

    /// Checks the conversation's own records: its report, and its redacted
    /// records (seq, proven).
    fn run(
        &self,
        meta: &ConversationMeta,
        start: Start,
    ) -> Result<(VerifyReport, Vec<(u64, bool)>), VerifyFailure> {
        let first = start.seq;
        let mut fold = Fold {
            seq: start.seq,
            address: start.address,
            turns: start.turns,
            kinds: [KindStats::default(); 10],
            index: Vec::new(),
            overlays: Vec::new(),
            directories: Vec::new(),
            redacted: Vec::new(),
            committed: start.committed,
        };
        // The settled chunks, then the staged ones from where they start
        // (the staged chunks before it were settled, and are not read).
        let pin = self.store.pin_read();
        let settled = self
            .store
            .settled(&self.id, &pin)
            .map_err(|e| self.fail(None, e.to_string()))?;
        let staged = keys::chunk(Space::Staged, &self.id, settled.min(meta.len));
        let mut scan = self
            .store
            .scan_prefix(keys::chunks(Space::Settled, &self.id))
            .chain(
                self.store
                    .scan_range(staged, keys::chunk(Space::Staged, &self.id, u64::MAX)),
            );
        loop {
            let window: Vec<_> = scan.by_ref().take(WINDOW).collect();
            if window.is_empty() {
                break;
            }
            let checks: Vec<ChunkCheck> = window
                .into_par_iter()
                .chunks(LANES)
                .flat_map_iter(|group| self.check_group(group))
                .collect();
            for check in checks {
                let records = check.records.len() as u64;
                self.fold_chunk(&mut fold, check)?;
                self.store.advance(records);
            }
        }
        let Fold {
            seq,
            address,
            turns,
            kinds,
            index,
            overlays,
            directories,
            redacted,
            committed: _,
        } = fold;
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
        self.check_turn_index(&index, settled)?;
        self.check_overlays(&overlays, settled, meta.len)?;
        self.check_call_directories(&directories, settled)?;
        let report = VerifyReport {
            conversations: 1,
            records: seq - first,
            blobs: 0,
            redacted: redacted.len() as u64,
            redacted_proven: redacted.iter().filter(|r| r.1).count() as u64,
            shredded: 0,
        };
        Ok((report, redacted))
    }

    /// Checks what each of a few chunks can show on its own; see
    /// [`ChunkCheck`]. Their records' addresses are computed together,
    /// the chunks side by side ([`codec::link_runs`]).
    fn check_group(&self, items: Vec<StoreResult<(Bytes, Bytes)>>) -> Vec<ChunkCheck> {
        let chunks: Vec<StoreResult<LoadedChunk>> = items
            .into_iter()
            .map(|item| item.and_then(|(key, value)| self.store.read_chunk(&self.id, &key, value)))
            .collect();
        let runs: Vec<(Address, Vec<&[u8]>)> = chunks
            .iter()
            .flatten()
            .map(|chunk| {
                let records = (0..chunk.layout.entries.len()).map(|i| chunk.record_bytes(i));
                (chunk.layout.parent, records.collect())
            })
            .collect();
        let mut addresses = codec::link_runs(&runs).into_iter();
        chunks
            .iter()
            .map(|chunk| match chunk {
                Ok(chunk) => {
                    let addresses = addresses.next().expect("a run per chunk read");
                    self.check_chunk(chunk, &addresses)
                }
                Err(e) => ChunkCheck::unread(e.to_string()),
            })
            .collect()
    }

    /// Checks what one chunk can show on its own, given its records'
    /// addresses; see [`ChunkCheck`].
    fn check_chunk(&self, chunk: &LoadedChunk, addresses: &[Address]) -> ChunkCheck {
        let entries = &chunk.layout.entries;
        let mut check = ChunkCheck {
            first_seq: chunk.first_seq,
            parent: chunk.layout.parent,
            last: chunk.layout.parent,
            records: Vec::with_capacity(entries.len()),
            calls: Vec::new(),
            overlays: Vec::new(),
            redacted: Vec::new(),
            failure: None,
        };
        let mut calls = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let bytes = chunk.record_bytes(i);
            let address = addresses[i];
            if address.check() != entry.check {
                let problem = "stored bytes do not match their address".to_owned();
                check.failure = Some((Some(i), problem));
                break;
            }
            let record = match decode_record(bytes) {
                Ok(record) => record,
                Err(e) => {
                    check.failure = Some((Some(i), format!("does not decode: {e}")));
                    break;
                }
            };
            let size = crate::codec::record_size(bytes, &record);
            if bytes.first() == Some(&crate::codec::REDACTED_MARK) {
                match crate::codec::redaction_proven(&check.last, bytes) {
                    Ok(proven) => check.redacted.push((i, proven)),
                    Err(problem) => {
                        check.failure = Some((Some(i), problem));
                        break;
                    }
                }
            }
            let mut bad_blob = None;
            for text in record.texts() {
                if let TextRepr::Blob(blob) = text {
                    if let Err(problem) = self.check_blob(blob) {
                        bad_blob = Some(problem);
                        break;
                    }
                }
            }
            let committed = Layout::of_stored(bytes) == Layout::Committed;
            check
                .records
                .push((record.body.event_type(), entry.turn, size, committed));
            if let Some(problem) = bad_blob {
                check.failure = Some((Some(i), problem));
                break;
            }
            match &record.body {
                BodyRepr::Compaction(_) => check.overlays.push((i, bytes.to_vec())),
                BodyRepr::ToolCall { id, name, .. } => {
                    calls.push((chunk.first_seq + i as u64, *id, *name));
                }
                _ => {}
            }
            check.last = address;
        }
        if !calls.is_empty() {
            check.calls = codec::encode(&CallDirectory { calls });
        }
        check
    }

    /// Folds the next chunk's check into `fold`, making the checks that
    /// need the records before it.
    fn fold_chunk(&self, fold: &mut Fold, check: ChunkCheck) -> Result<(), VerifyFailure> {
        if let Some((None, problem)) = check.failure {
            return Err(self.fail(Some(fold.seq), problem));
        }
        if check.first_seq != fold.seq {
            return Err(self.fail(
                Some(fold.seq),
                format!(
                    "missing: the next chunk starts at record {}",
                    check.first_seq
                ),
            ));
        }
        if check.parent != fold.address {
            return Err(self.fail(
                Some(fold.seq),
                "its chunk's parent address is not the previous record's address",
            ));
        }
        for &(event_type, stored, size, committed) in &check.records {
            // A database writes plain records until it is format 7, then
            // only committed ones (a copy or backup keeps older records
            // first): a plain record after a committed one was rewritten,
            // as a redacted committed record passed off as plain, whose
            // redaction proves less, would be.
            if committed {
                fold.committed = true;
            } else if fold.committed {
                return Err(self.fail(
                    Some(fold.seq),
                    "a plain record after committed ones (since format 7 every record \
                     appended is committed)",
                ));
            }
            let turn = fold.turns.next(event_type);
            if turn != stored {
                return Err(self.fail(
                    Some(fold.seq),
                    format!("stored turn {stored} but the turn rule gives {turn}"),
                ));
            }
            let stats = &mut fold.kinds[event_type.index()];
            stats.count += 1;
            stats.bytes += size;
            fold.seq += 1;
        }
        if let Some((Some(i), problem)) = check.failure {
            return Err(self.fail(Some(check.first_seq + i as u64), problem));
        }
        fold.address = check.last;
        fold.redacted.extend(
            check
                .redacted
                .iter()
                .map(|&(i, proven)| (check.first_seq + i as u64, proven)),
        );
        for (i, record) in check.overlays {
            let seq = check.first_seq + i as u64;
            let turn = check.records[i].1;
            fold.overlays.push((check.first_seq, seq, turn, record));
        }
        if !check.calls.is_empty() {
            fold.directories.push((check.first_seq, check.calls));
        }
        let first_turn = check.records.first().map_or(0, |r| r.1);
        let last_turn = check.records.last().map_or(0, |r| r.1);
        let records = check.records.len() as u64;
        fold.index
            .push((last_turn, check.first_seq, first_turn, records));
        Ok(())
    }

    /// The turn index holds exactly one entry per chunk, under its last
    /// turn: the settled index per settled chunk, the staged index per
    /// staged chunk from `settled` on (before format 9; from format 9 on
    /// the staged index holds none).
    fn check_turn_index(
        &self,
        expected: &[(u64, u64, u64, u64)],
        settled: u64,
    ) -> Result<(), VerifyFailure> {
        let staged_indexed = self.store.format < keys::UNINDEXED_STAGING_FORMAT;
        let mut expected: Vec<_> = expected
            .iter()
            .filter(|e| staged_indexed || e.1 < settled)
            .copied()
            .collect();
        expected.sort_unstable();
        // Staged entries from the settled records' last turn on: those
        // before are of staged chunks settled since, and never read.
        let from_turn = expected
            .iter()
            .filter(|e| e.1 < settled)
            .map(|e| e.0)
            .max()
            .unwrap_or(0);
        let id = &self.id;
        let settled_index = self.store.scan_prefix(keys::turns(Space::Settled, id));
        let staged_index = self.store.scan_range(
            keys::turn(Space::Staged, id, from_turn, 0),
            keys::turn(Space::Staged, id, u64::MAX, u64::MAX),
        );
        let mut found = Vec::new();
        for (space, index) in [
            (Space::Settled, settled_index),
            (Space::Staged, staged_index),
        ] {
            for item in index {
                let (key, value) = item.map_err(|e| self.fail(None, e.to_string()))?;
                let (last_turn, first_seq) = keys::turn_parts(&key)
                    .ok_or_else(|| self.fail(None, "a turn index key is truncated"))?;
                if space == Space::Staged && first_seq < settled {
                    continue;
                }
                let entry: TurnEntry = codec::decode(&value, "turn index entry")
                    .map_err(|e| self.fail(None, e.to_string()))?;
                found.push((last_turn, first_seq, entry.first_turn, entry.entries));
            }
        }
        found.sort_unstable();
        if found != expected {
            return Err(self.fail(None, "the turn index does not match the log's chunks"));
        }
        Ok(())
    }

    /// The overlay entries are exactly the compaction records, each as
    /// `(first seq of its chunk, seq, turn, record)`: a key per compaction
    /// (formats 1-3), or the directory of the chunk holding it (format 4;
    /// staged chunks' from `settled` on).
    fn check_overlays(
        &self,
        expected: &[(u64, u64, u64, Vec<u8>)],
        settled: u64,
        len: u64,
    ) -> Result<(), VerifyFailure> {
        let id = &self.id;
        let mut found = Vec::new();
        if self.store.format >= keys::OVERLAY_DIRECTORY_FORMAT {
            let settled_directories = self
                .store
                .scan_prefix(keys::overlay_directories(Space::Settled, id));
            let staged_directories = self.store.scan_range(
                keys::overlay_directory(Space::Staged, id, settled),
                keys::overlay_directory(Space::Staged, id, u64::MAX),
            );
            for (space, directories) in [
                (Space::Settled, settled_directories),
                (Space::Staged, staged_directories),
            ] {
                for item in directories {
                    let (key, value) = item.map_err(|e| self.fail(None, e.to_string()))?;
                    let first_seq = keys::key_seq(&key)
                        .ok_or_else(|| self.fail(None, "an overlay directory key is truncated"))?;
                    if space == Space::Staged && first_seq < settled {
                        continue;
                    }
                    let directory: OverlayDirectory<'_> =
                        codec::decode(&value, "overlay directory")
                            .map_err(|e| self.fail(Some(first_seq), e.to_string()))?;
                    for o in directory.overlays {
                        found.push((first_seq, o.seq, o.turn, o.record.to_vec()));
                    }
                }
            }
        } else {
            for item in self.store.scan_prefix(keys::overlays(id)) {
                let (key, value) = item.map_err(|e| self.fail(None, e.to_string()))?;
                let seq = keys::key_seq(&key)
                    .ok_or_else(|| self.fail(None, "an overlay key is truncated"))?;
                let entry: OverlayEntry<'_> = codec::decode(&value, "overlay entry")
                    .map_err(|e| self.fail(Some(seq), e.to_string()))?;
                found.push((0, seq, entry.turn, entry.record.to_vec()));
            }
        }
        let chunked = self.store.format >= keys::OVERLAY_DIRECTORY_FORMAT;
        let same = |f: &(u64, u64, u64, Vec<u8>), e: &(u64, u64, u64, Vec<u8>)| {
            (!chunked || f.0 == e.0) && (&f.1, &f.2, &f.3) == (&e.1, &e.2, &e.3)
        };
        if found.len() != expected.len() || !found.iter().zip(expected).all(|(f, e)| same(f, e)) {
            let first_bad = found
                .iter()
                .zip(expected)
                .find(|(f, e)| !same(f, e))
                .map(|(f, _)| f.1);
            return Err(self.fail(
                first_bad,
                "the overlay index does not match the log's compactions",
            ));
        }
        if self.store.format >= keys::OVERLAY_RANGE_FORMAT {
            self.check_overlay_ranges(expected, len)?;
        }
        Ok(())
    }

    /// The overlay range keys (format 5) file exactly the compaction
    /// records `expected` (as in [`Self::check_overlays`]) of the
    /// conversation's `len` records, each under the key its turn range
    /// gives. A bulk append being committed writes its range keys before
    /// the batch making its records visible: while its marker is there,
    /// keys past `len` are its own.
    fn check_overlay_ranges(
        &self,
        expected: &[(u64, u64, u64, Vec<u8>)],
        len: u64,
    ) -> Result<(), VerifyFailure> {
        let id = &self.id;
        let committing = self
            .store
            .contains(&keys::pending_bulk(id))
            .map_err(|e| self.fail(None, e.to_string()))?;
        let mut found = Vec::new();
        for item in self.store.scan_prefix(keys::overlay_ranges(id)) {
            let (key, value) = item.map_err(|e| self.fail(None, e.to_string()))?;
            let (level, bucket, first) = keys::overlay_range_parts(&key)
                .ok_or_else(|| self.fail(None, "an overlay range key is truncated"))?;
            if committing && first >= len {
                continue;
            }
            let entries = codec::decode_range_group(self.store.format, &value)
                .map_err(|e| self.fail(Some(first), e.to_string()))?;
            if entries.first().map(|e| e.seq) != Some(first) {
                return Err(self.fail(Some(first), "an overlay range group is misnamed"));
            }
            for entry in entries {
                let level_of = keys::overlay_range_level(entry.from_turn, entry.to_turn);
                if (
                    level_of,
                    keys::overlay_range_bucket(entry.from_turn, level_of),
                ) != (level, bucket)
                {
                    return Err(self.fail(
                        Some(entry.seq),
                        "a compaction is filed under another turn range",
                    ));
                }
                found.push((
                    entry.seq,
                    entry.turn,
                    entry.record.to_vec(),
                    entry.from_turn,
                    entry.to_turn,
                    entry.timestamp,
                ));
            }
        }
        found.sort_unstable_by_key(|f| f.0);
        let mut wanted = Vec::with_capacity(expected.len());
        for (_, seq, turn, record) in expected {
            let repr =
                codec::decode_record(record).map_err(|e| self.fail(Some(*seq), e.to_string()))?;
            let (from, to) = repr
                .body
                .compaction_span()
                .ok_or_else(|| self.fail(Some(*seq), "an overlay entry holds no compaction"))?;
            // Format 6 leaves the record to the overlay directory.
            let filed = if self.store.format < keys::BARE_RANGE_FORMAT {
                record.clone()
            } else {
                Vec::new()
            };
            // Format 8 files the timestamp too.
            let timestamp =
                (self.store.format >= keys::RANKED_RANGE_FORMAT).then_some(repr.timestamp);
            wanted.push((*seq, *turn, filed, from, to, timestamp));
        }
        if found != wanted {
            let first_bad = found.iter().zip(&wanted).find(|(f, w)| f != w).map_or_else(
                || {
                    found
                        .get(wanted.len())
                        .or(wanted.get(found.len()))
                        .map(|f| f.0)
                },
                // Where they part: a missing entry's seq, or an extra or
                // different one's.
                |(f, w)| Some(f.0.min(w.0)),
            );
            return Err(self.fail(
                first_bad,
                "the overlay range index does not match the log's compactions",
            ));
        }
        Ok(())
    }

    /// Each chunk's call directory lists exactly its tool calls (staged
    /// chunks' from `settled` on).
    fn check_call_directories(
        &self,
        expected: &[(u64, Calls)],
        settled: u64,
    ) -> Result<(), VerifyFailure> {
        let id = &self.id;
        let settled_directories = self
            .store
            .scan_prefix(keys::call_directories(Space::Settled, id));
        let staged_directories = self.store.scan_range(
            keys::call_directory(Space::Staged, id, settled),
            keys::call_directory(Space::Staged, id, u64::MAX),
        );
        // Every stored directory is read and decoded before any mismatch
        // is reported, so that one that does not decode is named wherever
        // it is. One whose bytes are those expected decodes by
        // construction; other bytes may still encode the same calls (as a
        // later writer could), so they are compared decoded.
        let mut expected = expected.iter();
        let mut matches = true;
        for (space, directories) in [
            (Space::Settled, settled_directories),
            (Space::Staged, staged_directories),
        ] {
            for item in directories {
                let (key, value) = item.map_err(|e| self.fail(None, e.to_string()))?;
                let first_seq = keys::key_seq(&key)
                    .ok_or_else(|| self.fail(None, "a call directory key is truncated"))?;
                if space == Space::Staged && first_seq < settled {
                    continue;
                }
                let next = expected.next();
                if next.is_some_and(|(seq, calls)| *seq == first_seq && **calls == *value) {
                    continue;
                }
                let directory: CallDirectory<'_> = codec::decode(&value, "call directory")
                    .map_err(|e| self.fail(Some(first_seq), e.to_string()))?;
                matches &= next.is_some_and(|(seq, calls)| {
                    *seq == first_seq
                        && codec::decode::<CallDirectory<'_>>(calls, "call directory")
                            .is_ok_and(|calls| calls == directory)
                });
            }
        }
        if !matches || expected.next().is_some() {
            return Err(self.fail(
                None,
                "the call directories do not match the log's tool calls",
            ));
        }
        Ok(())
    }

    /// Re-hashes a blob unless it was found sound already (by any thread).
    fn check_blob(&self, blob: BlobRef) -> Result<(), String> {
        if lock(self.blobs).contains(&blob.hash) {
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
        lock(self.blobs).insert(blob.hash);
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
