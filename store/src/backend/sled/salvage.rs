//! Salvage: [`salvage`] copies every conversation whose records can still
//! be read and verified out of a damaged database into a new one, and
//! reports, per conversation, how many records it recovered and where and
//! why it stopped. The damaged database is only read: sled is opened on
//! copies of its files, everything else is read with plain reads, and the
//! damaged `db` file is locked (as sled locks it) only to keep other
//! processes out meanwhile.
//!
//! Where records come from, in order of trust:
//!
//! 1. **sled, on copies of its files**: as they are, and again without its
//!    snapshot files, so that sled replays its log from the start up to the
//!    first message it cannot read. Each gives keys: conversations'
//!    metadata, names, fork points, pins, chunks by conversation and seq,
//!    blobs by hash. A panic in sled's recovery or reads counts as a
//!    failure of that source.
//! 2. **Frames in the segment files** (`frames.rs`): each body written
//!    since frames exist says which chunk key or blob hash it is.
//! 3. **Scanning** (only when 1 and 2 leave a conversation short): every
//!    offset of sled's files and of the unframed parts of the segment files
//!    is tried as a chunk body; one is found when a record decodes and
//!    hashes, from the parent address the chunk carries, to the check
//!    beside it. Such records carry no conversation: they continue a
//!    conversation's chain only from the address of its last record
//!    recovered, and only when every copy found agrees on the next record;
//!    where other conversations' records may follow the same address (the
//!    root, which every first record follows, or a fork point) only on the
//!    way back from the conversation's head in `convstore.catalog`.
//!    Blobs are found in sled's files by their value's encoding and hash,
//!    and between bodies in unframed segment files by their hash.
//!
//! sled's iterators over damaged pages can yield the same error forever:
//! every iteration here stops at its first error.
//!
//! Every record written to the copy re-hashes along its conversation's
//! chain from the root (or its fork point); every blob hashes to its key;
//! the copy is verified before it is moved into place. A conversation is
//! cut at its first record that cannot be found or verified, or whose
//! blobs cannot be found: records after a gap cannot be chained. Names and
//! creation times come from sled's metadata, else from `convstore.catalog`.
//! Stored views are not copied (they are rebuilt from the log); pins and
//! automatic compaction state are, when readable.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backend::sled::frames::{self, FrameKind};
use crate::backend::sled::opening::quiet;
use crate::backend::sled::segments::Segments;
use crate::backend::sled::state::{self, CatalogEntry};
use crate::codec::{
    decode, decode_record, BlobValue, ChunkLayout, ChunkValue, TextRepr, CHUNK_MAX_ENTRIES,
};
use crate::copy::{ConversationWriter, Destination, Identity, RawRecord};
use crate::error::{StoreError, StoreResult};
use crate::event::Timestamp;
use crate::fork::ForkPoint;
use crate::hash::{Address, BlobHash};
use crate::ids::ConversationId;
use crate::keys::{self, Space};
use crate::pins::AutoState;
use crate::store::{ConversationMeta, Store};

/// The longest record a scan takes for one.
const SCAN_RECORD_MAX: usize = 16 << 20;
/// How long sled may take to recover a copy before that source is given
/// up.
const SLED_TIMEOUT: Duration = Duration::from_secs(300);

/// What salvage did for one conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SalvagedConversation {
    /// Its id (the copy keeps it).
    pub id: ConversationId,
    /// Its name, if one was found (the copy keeps it).
    pub name: Option<String>,
    /// Its parent and how many of the parent's records it shares, if it
    /// is a fork.
    pub fork: Option<(ConversationId, u64)>,
    /// Records the copy holds (for a fork, the shared ones included).
    pub recovered: u64,
    /// How many records its metadata gave (the most any readable copy
    /// gave); `None` when none was readable.
    pub expected: Option<u64>,
    /// Without readable metadata: how many it had at least, from
    /// `convstore.catalog` (its length when the line was written).
    pub at_least: Option<u64>,
    /// Where its recovered log stops and why, unless it is whole.
    pub stopped: Option<(u64, String)>,
    /// Anything else worth saying (its name was taken, its creation time
    /// is unknown, ...).
    pub notes: Vec<String>,
}

impl SalvagedConversation {
    /// Whether every record it had (as far as anything tells) was
    /// recovered.
    pub fn is_whole(&self) -> bool {
        self.stopped.is_none()
    }
}

/// What [`salvage`] recovered and lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SalvageReport {
    /// Every conversation found, in the order they were written.
    pub conversations: Vec<SalvagedConversation>,
    /// What each source gave (sled's attempts, the segment files, scans).
    pub sources: Vec<String>,
    /// Records the copy holds, a fork's shared records counted once.
    pub records: u64,
    /// Distinct blobs the copy holds.
    pub blobs: u64,
}

/// Copies what can still be read and verified of the database at
/// `damaged` into a new database at `dest` (which must not exist, or be an
/// empty directory), verifies the copy, and reports what was recovered
/// and lost; see `salvage.rs`. `damaged` is never written.
pub fn salvage(damaged: impl AsRef<Path>, dest: impl AsRef<Path>) -> StoreResult<SalvageReport> {
    let damaged = damaged.as_ref();
    let dest = dest.as_ref();
    if !damaged.is_dir() {
        return Err(StoreError::Open {
            path: damaged.to_path_buf(),
            reason: "not a database directory".to_owned(),
        });
    }
    let _lock = lock_out_others(damaged)?;
    let mut sources = Sources::gather(damaged);
    if sources
        .attempts
        .iter()
        .any(|a| quiet(|| a.db.contains_key(keys::ENCRYPTION).unwrap_or(false)).unwrap_or(false))
    {
        return Err(StoreError::Encrypted {
            what: format!(
                "{} is an encrypted database, which salvage does not read yet (`verify` without \
                 the key names what is damaged; `backup` copies what can be read)",
                damaged.display()
            ),
        });
    }
    let known = sources.identities();
    sources.fork_bases = known.values().filter_map(|k| k.fork?.2).collect();
    if known.is_empty() {
        return Err(StoreError::Corrupt {
            what: format!(
                "nothing in {} could be read as a conversation ({})",
                damaged.display(),
                sources.notes.join("; ")
            ),
        });
    }
    let (destination, out) = Destination::create(dest, None, None)?;
    let mut assembled: BTreeMap<ConversationId, Assembly> = known
        .values()
        .map(|k| (k.id, sources.assemble(k)))
        .collect();
    if assembled.values().any(Assembly::short) {
        sources.scan();
        // Records some conversation's chain holds: scanning finds them
        // without their conversation, so they are not another's.
        let mut claimed: HashMap<Address, Vec<ConversationId>> = HashMap::new();
        for (id, assembly) in &assembled {
            for address in &assembly.addresses {
                claimed.entry(*address).or_default().push(*id);
            }
        }
        sources.claimed = claimed;
        // Again, every one: the metadata read back may be older than
        // the log, and scanning may find what follows.
        for (id, assembly) in &mut assembled {
            *assembly = sources.assemble(&known[id]);
        }
    }
    let needed: HashMap<BlobHash, u64> = assembled
        .values()
        .flat_map(|a| a.blobs.iter().copied())
        .collect();
    let blobs = sources.find_blobs(&needed);
    for assembly in assembled.values_mut() {
        assembly.cut_at_missing_blobs(&blobs);
    }
    let mut report = SalvageReport {
        sources: sources.notes.clone(),
        ..SalvageReport::default()
    };
    let mut written: HashMap<ConversationId, u64> = HashMap::new();
    let mut names = HashSet::new();
    for id in fork_order(&known) {
        let k = &known[&id];
        let assembly = assembled.remove(&id).unwrap_or_default();
        let outcome = write_conversation(&out, k, assembly, &blobs, &mut written, &mut names)?;
        report.records += outcome.recovered - outcome.fork.map_or(0, |f| f.1);
        report.conversations.push(outcome);
    }
    out.flush()?;
    let verified = out.verify_all()?.map_err(|failure| StoreError::Corrupt {
        what: format!("the salvaged copy does not verify: {failure}"),
    })?;
    report.blobs = verified.blobs;
    destination.publish(out)?;
    Ok(report)
}

/// Takes the lock sled takes on `damaged/db`, through a read-only handle:
/// no process opens the database while it is read. A database another
/// process has open is refused (it is not damaged: back it up).
fn lock_out_others(damaged: &Path) -> StoreResult<Option<std::fs::File>> {
    let Ok(file) = std::fs::File::open(damaged.join("db")) else {
        return Ok(None);
    };
    if fs2::FileExt::try_lock_exclusive(&file).is_err() {
        return Err(StoreError::Open {
            path: damaged.to_path_buf(),
            reason: "it is in use by another process (a database that opens is copied with \
                     `convstore backup`)"
                .to_owned(),
        });
    }
    Ok(Some(file))
}

/// A conversation as the sources know it.
#[derive(Debug, Clone)]
struct Known {
    id: ConversationId,
    name: Option<String>,
    created: Option<Timestamp>,
    /// Parent, records shared, base address (if known).
    fork: Option<(ConversationId, u64, Option<Address>)>,
    /// The most records any readable metadata gave.
    expected: Option<u64>,
    /// What `convstore.catalog` gave: a lower bound (its length when the
    /// line was written).
    at_least: Option<u64>,
    /// The catalog's head for it (the address of record `at_least - 1`).
    catalog_head: Option<Address>,
    settings: Vec<(Vec<u8>, sled::IVec)>,
}

impl Known {
    fn start(&self) -> (u64, Option<Address>) {
        match self.fork {
            Some((_, at, base)) => (at, base),
            None => (0, Some(Address::ROOT)),
        }
    }
}

/// A conversation's own records as recovered, in order.
#[derive(Debug, Default)]
struct Assembly {
    records: Vec<Vec<u8>>,
    /// Each record's address.
    addresses: Vec<Address>,
    /// The seq of its first own record.
    start: u64,
    /// Its blobs (hash, length), in the order the records need them.
    blobs: Vec<(BlobHash, u64)>,
    stop: Option<(u64, String)>,
}

impl Assembly {
    /// Whether it stopped before its end (or its end is unknown).
    fn short(&self) -> bool {
        self.stop.is_some()
    }

    /// Cuts the records at the first whose blobs are not all in `found`.
    fn cut_at_missing_blobs(&mut self, found: &HashMap<BlobHash, BlobLoc>) {
        let first_missing = self.records.iter().enumerate().find_map(|(i, bytes)| {
            let record = decode_record(bytes).ok()?;
            let missing = record.texts().find_map(|text| match text {
                TextRepr::Blob(blob) if !found.contains_key(&blob.hash) => Some((i, blob)),
                _ => None,
            });
            missing
        });
        if let Some((i, blob)) = first_missing {
            self.stop = Some((
                self.start + i as u64,
                format!(
                    "its blob {} ({} bytes) was not found in any copy",
                    blob.hash, blob.len
                ),
            ));
            self.records.truncate(i);
            self.addresses.truncate(i);
        }
    }
}

/// sled opened on a copy of the damaged database's files.
struct Attempt {
    label: &'static str,
    db: sled::Db,
    blobs: Option<sled::Tree>,
    /// The format key's value, if it reads.
    format: Option<u32>,
    _scratch: tempfile::TempDir,
}

/// Where a framed body is.
#[derive(Debug, Clone, Copy)]
struct FrameLoc {
    file: u32,
    offset: u64,
    len: u64,
}

/// Where a blob's text was found.
#[derive(Debug, Clone)]
enum BlobLoc {
    /// In sled (through an attempt), read already.
    Bytes(Vec<u8>),
    /// In a file of the damaged database.
    File {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
}

/// A record found by scanning.
#[derive(Debug, Clone)]
struct ScannedRecord {
    /// Its own address.
    address: Address,
    file: u32,
    offset: u64,
    len: u32,
}

/// What scanning found.
#[derive(Default)]
struct Scanned {
    /// The files scanned, by index.
    files: Vec<PathBuf>,
    /// Records by the address before them.
    next: HashMap<Address, Vec<ScannedRecord>>,
    /// The address before each record found, by its address.
    parents: HashMap<Address, Address>,
    /// Per unframed segment file region scanned: the file, and the body
    /// boundaries found in it (chunk starts and ends, region ends).
    boundaries: Vec<(PathBuf, Vec<u64>)>,
}

struct Sources {
    damaged: PathBuf,
    segments: Segments,
    attempts: Vec<Attempt>,
    frame_chunks: BTreeMap<Vec<u8>, FrameLoc>,
    frame_blobs: HashMap<BlobHash, FrameLoc>,
    /// The unframed regions of each segment file.
    unframed: Vec<(u32, Vec<Range<usize>>)>,
    catalog: Vec<CatalogEntry>,
    scanned: Option<Scanned>,
    /// The conversations whose chains hold each record address.
    claimed: HashMap<Address, Vec<ConversationId>>,
    /// The addresses forks branch off at.
    fork_bases: HashSet<Address>,
    notes: Vec<String>,
}

impl Sources {
    fn gather(damaged: &Path) -> Self {
        let mut sources = Sources {
            damaged: damaged.to_path_buf(),
            segments: Segments::new(damaged),
            attempts: Vec::new(),
            frame_chunks: BTreeMap::new(),
            frame_blobs: HashMap::new(),
            unframed: Vec::new(),
            catalog: state::read_catalog(damaged),
            scanned: None,
            claimed: HashMap::new(),
            fork_bases: HashSet::new(),
            notes: Vec::new(),
        };
        if damaged.join("db").exists() {
            for (label, keep_snapshots) in [("as is", true), ("without its snapshot", false)] {
                match attempt(damaged, keep_snapshots) {
                    Ok(mut found) => {
                        found.label = label;
                        let count = quiet(|| {
                            found
                                .db
                                .scan_prefix([keys::CONVERSATION])
                                .map_while(Result::ok)
                                .count()
                        })
                        .unwrap_or(0);
                        sources.notes.push(format!(
                            "sled {label}: opened, {count} conversation(s) listed"
                        ));
                        sources.attempts.push(found);
                    }
                    Err(why) => sources.notes.push(format!("sled {label}: {why}")),
                }
            }
        } else {
            sources.notes.push("sled: no db file".to_owned());
        }
        sources.read_frames();
        if !sources.catalog.is_empty() {
            sources.notes.push(format!(
                "{}: {} conversation(s) named",
                state::CATALOG,
                sources.catalog.len()
            ));
        }
        sources
    }

    /// Indexes the frames of every segment file.
    fn read_frames(&mut self) {
        let (mut chunks, mut blobs, mut files) = (0, 0, 0);
        for (number, path) in segment_files(&self.damaged) {
            let Ok(bytes) = std::fs::read(&path) else {
                self.notes
                    .push(format!("segment file {number:08}: cannot be read"));
                continue;
            };
            files += 1;
            let (found, unframed) = frames::scan(&bytes);
            for frame in found {
                let loc = FrameLoc {
                    file: number,
                    offset: frame.body.start,
                    len: frame.body.end - frame.body.start,
                };
                match frame.kind {
                    FrameKind::Chunk => {
                        chunks += 1;
                        self.frame_chunks.insert(frame.key, loc);
                    }
                    FrameKind::Blob => {
                        if let Ok(hash) = <[u8; 32]>::try_from(frame.key.as_slice()) {
                            blobs += 1;
                            self.frame_blobs.insert(BlobHash::from_bytes(hash), loc);
                        }
                    }
                }
            }
            let unframed: Vec<Range<usize>> =
                unframed.into_iter().filter(|r| r.len() > 32).collect();
            if !unframed.is_empty() {
                self.unframed.push((number, unframed));
            }
        }
        self.notes.push(format!(
            "segment files: {files}, with {chunks} framed chunk(s) and {blobs} framed blob(s)"
        ));
    }

    /// Every conversation any source names.
    fn identities(&self) -> BTreeMap<ConversationId, Known> {
        let mut known: BTreeMap<ConversationId, Known> = BTreeMap::new();
        let entry = |known: &mut BTreeMap<ConversationId, Known>, id: ConversationId| {
            known.entry(id).or_insert_with(|| Known {
                id,
                name: None,
                created: None,
                fork: None,
                expected: None,
                at_least: None,
                catalog_head: None,
                settings: Vec::new(),
            });
        };
        for attempt in &self.attempts {
            let db = &attempt.db;
            let metas: Vec<(ConversationId, Option<ConversationMeta>)> = quiet(|| {
                db.scan_prefix([keys::CONVERSATION])
                    .map_while(Result::ok)
                    .filter_map(|(key, value)| {
                        let id = keys::conversation_of(&key)?;
                        Some((id, decode::<ConversationMeta>(&value, "metadata").ok()))
                    })
                    .collect()
            })
            .unwrap_or_default();
            for (id, meta) in metas {
                entry(&mut known, id);
                let k = known.get_mut(&id).expect("just added");
                if let Some(meta) = meta {
                    k.name = k.name.take().or(meta.name);
                    k.created = k.created.or(Some(meta.created));
                    k.expected = k.expected.max(Some(meta.len));
                }
                if k.fork.is_none() {
                    let point = quiet(|| db.get(keys::lineage(&id)).ok().flatten()).flatten();
                    if let Some(Ok(point)) =
                        point.map(|bytes| decode::<ForkPoint>(&bytes, "lineage"))
                    {
                        k.fork = Some((point.parent, point.at, Some(point.base)));
                    }
                }
                if k.settings.is_empty() {
                    for key in [keys::pins(&id), keys::auto(&id)] {
                        let value = quiet(|| db.get(&key).ok().flatten()).flatten();
                        if let Some(value) = value {
                            let sound = if key[0] == keys::PINS {
                                decode::<Vec<(u64, u64)>>(&value, "pins").is_ok()
                            } else {
                                decode::<AutoState>(&value, "auto").is_ok()
                            };
                            if sound {
                                k.settings.push((key, value));
                            }
                        }
                    }
                }
            }
            // Conversations whose metadata is gone but whose chunks are
            // not.
            let ids: Vec<ConversationId> = quiet(|| {
                [keys::CHUNK, b's']
                    .iter()
                    .flat_map(|tag| db.scan_prefix([*tag]).keys().map_while(Result::ok))
                    .filter_map(|key| keys::conversation_of(&key))
                    .collect()
            })
            .unwrap_or_default();
            for id in ids {
                entry(&mut known, id);
            }
        }
        for key in self.frame_chunks.keys() {
            if let Some(id) = keys::conversation_of(key) {
                entry(&mut known, id);
            }
        }
        for line in &self.catalog {
            let Some(id) = line.conversation() else {
                continue;
            };
            entry(&mut known, id);
            let k = known.get_mut(&id).expect("just added");
            k.name = k.name.take().or_else(|| line.name.clone());
            k.created = k.created.or_else(|| Timestamp::from_micros(line.created));
            if line.len > 0 && k.at_least.is_none_or(|n| line.len > n) {
                k.at_least = Some(line.len);
                k.catalog_head = Address::from_hex(&line.head);
            }
            if k.fork.is_none() {
                if let Some((parent, at, base)) = &line.fork {
                    if let Some(parent) = ConversationId::from_hex(parent) {
                        k.fork = Some((parent, *at, Address::from_hex(base)));
                    }
                }
            }
        }
        known
    }

    /// The own records of `k` that can be chained from its start, as far
    /// as they go.
    fn assemble(&self, k: &Known) -> Assembly {
        let (start, base) = k.start();
        let mut assembly = Assembly {
            start,
            ..Assembly::default()
        };
        let Some(mut address) = base else {
            assembly.stop = Some((
                start,
                "its fork point's address is not known, so its records cannot be chained"
                    .to_owned(),
            ));
            return assembly;
        };
        let mut seq = start;
        let mut committed = false;
        loop {
            let mut problems = Vec::new();
            let mut next = self.keyed(&k.id, seq, address, &mut problems);
            let before_end = k.expected.is_none_or(|e| seq < e);
            // Metadata read back may be older than the log (sled replayed
            // its log only to a damaged message): scanning goes on past
            // it, unless a fork branches off here (its first record would
            // be taken for this conversation's next).
            if next.is_empty() && (before_end || !self.fork_bases.contains(&address)) {
                let toward = k.catalog_head.zip(k.at_least).and_then(|(head, len)| {
                    len.checked_sub(seq).filter(|&n| n > 0).map(|n| (head, n))
                });
                match self.scanned_next(&k.id, address, toward) {
                    Ok(Some(record)) => next.push(record),
                    Ok(None) => {}
                    Err(problem) => problems.push(problem),
                }
            }
            if next.is_empty() {
                if before_end {
                    let mut reason = if !problems.is_empty() {
                        dedup(problems).join("; ")
                    } else if k.expected.is_none() && k.at_least.is_none_or(|n| seq >= n) {
                        "no more records were found".to_owned()
                    } else {
                        "no copy of it was found".to_owned()
                    };
                    if k.expected.is_none() {
                        reason.push_str(
                            "; its length is not known (no readable metadata), so whether \
                             it had more is not known",
                        );
                    }
                    assembly.stop = Some((seq, reason));
                }
                break;
            }
            for bytes in next {
                // As `verify` requires: no plain record after a committed
                // one (a redacted record rewritten to prove less).
                if crate::codec::Layout::of_stored(&bytes) == crate::codec::Layout::Committed {
                    committed = true;
                } else if committed {
                    assembly.stop = Some((
                        seq,
                        "a plain record after committed ones, which no convstore writes".to_owned(),
                    ));
                    return assembly;
                }
                address = crate::codec::link(&address, &bytes);
                assembly.addresses.push(address);
                if let Ok(record) = decode_record(&bytes) {
                    for text in record.texts() {
                        if let TextRepr::Blob(blob) = text {
                            assembly.blobs.push((blob.hash, blob.len));
                        }
                    }
                }
                assembly.records.push(bytes);
                seq += 1;
            }
        }
        assembly
    }

    /// The records from `seq` on (following `address`) that a chunk keyed
    /// to `id` holds, from the first source that has any; what went wrong
    /// with the others is added to `problems`.
    fn keyed(
        &self,
        id: &ConversationId,
        seq: u64,
        address: Address,
        problems: &mut Vec<String>,
    ) -> Vec<Vec<u8>> {
        for space in [Space::Settled, Space::Staged] {
            let key = keys::chunk(space, id, seq);
            let prefix = keys::chunks(space, id);
            for attempt in &self.attempts {
                let found = quiet(|| {
                    attempt
                        .db
                        .range(prefix.clone()..=key.clone())
                        .next_back()
                        .transpose()
                });
                let value = match found {
                    None => {
                        problems.push(format!("sled {}: reading it panicked", attempt.label));
                        continue;
                    }
                    Some(Err(e)) => {
                        problems.push(format!("sled {}: {e}", attempt.label));
                        continue;
                    }
                    Some(Ok(None)) => continue,
                    Some(Ok(Some((k, v)))) => (k, v),
                };
                let first = keys::key_seq(&value.0).unwrap_or(0);
                let bytes = match self.chunk_bytes(attempt, &value.1) {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        problems.push(format!("sled {}: chunk at seq {first}: {e}", attempt.label));
                        continue;
                    }
                };
                match follow(&bytes, first, seq, address) {
                    Ok(records) if !records.is_empty() => return records,
                    Ok(_) => {}
                    Err(e) => {
                        problems.push(format!("sled {}: chunk at seq {first}: {e}", attempt.label));
                    }
                }
            }
            let framed = self
                .frame_chunks
                .range(prefix.clone()..=key)
                .next_back()
                .filter(|(k, _)| k.starts_with(&prefix));
            if let Some((k, loc)) = framed {
                let first = keys::key_seq(k).unwrap_or(0);
                match read_at(&segment_path(&self.damaged, loc.file), loc.offset, loc.len) {
                    Ok(bytes) => match follow(&bytes, first, seq, address) {
                        Ok(records) if !records.is_empty() => return records,
                        Ok(_) => {}
                        Err(e) => problems.push(format!(
                            "segment file {:08} at offset {}: chunk at seq {first}: {e}",
                            loc.file, loc.offset
                        )),
                    },
                    Err(e) => problems.push(format!(
                        "segment file {:08} at offset {}: {e}",
                        loc.file, loc.offset
                    )),
                }
            }
        }
        Vec::new()
    }

    /// The bytes of a chunk value read through `attempt`.
    fn chunk_bytes(&self, attempt: &Attempt, value: &[u8]) -> Result<Vec<u8>, String> {
        let wrapped = match attempt.format {
            Some(1) => None,
            _ => decode::<ChunkValue<'_>>(value, "chunk value").ok(),
        };
        match wrapped {
            Some(ChunkValue::Inline(bytes)) => Ok(bytes.to_vec()),
            Some(ChunkValue::Segment { at, .. }) => {
                self.segments.read(&at, &String::new).map_err(|e| {
                    e.to_string()
                        .trim_start_matches("corrupt data: : ")
                        .to_owned()
                })
            }
            None => Ok(value.to_vec()),
        }
    }

    /// The one record scanning found after `address`; an error when
    /// copies disagree.
    ///
    /// `toward` (a head and how many records ahead it is) settles which
    /// of several records is this conversation's: the one on the chain
    /// that leads back from that head.
    fn scanned_next(
        &self,
        id: &ConversationId,
        address: Address,
        toward: Option<(Address, u64)>,
    ) -> Result<Option<Vec<u8>>, String> {
        let Some(scanned) = &self.scanned else {
            return Ok(None);
        };
        let Some(candidates) = scanned.next.get(&address) else {
            return Ok(None);
        };
        // A record another conversation's chain holds (and this one's
        // does not) is the other's.
        let others = |a: &Address| {
            self.claimed
                .get(a)
                .is_some_and(|owners| !owners.contains(id))
        };
        let mut distinct: HashSet<Address> = candidates.iter().map(|c| c.address).collect();
        if distinct.len() > 1 {
            distinct.retain(|a| !others(a));
        }
        let confirmed =
            toward.and_then(|(head, steps)| on_path_back(&scanned.parents, address, head, steps));
        if let Some(next) = confirmed {
            distinct.retain(|a| *a == next);
        } else if self.shared_start(id, address) {
            // Every conversation's first record follows the root, and a
            // fork's first follows its parent's: a record found there
            // by scanning may be any of theirs. Only the way back from this
            // conversation's own head (its catalog line) tells.
            return Err(
                "the records found by scanning that follow carry no conversation, and other \
                 conversations' records follow the same one (the root, or a fork point), so \
                 which are this conversation's is not known"
                    .to_owned(),
            );
        }
        let candidates: Vec<&ScannedRecord> = candidates
            .iter()
            .filter(|c| distinct.contains(&c.address))
            .collect();
        if distinct.len() > 1 {
            return Err(format!(
                "scanning found {} different records that follow the one before (histories \
                 that share this prefix), so which is this conversation's is not known",
                distinct.len()
            ));
        }
        for candidate in candidates {
            let path = &scanned.files[candidate.file as usize];
            if let Ok(bytes) = read_at(path, candidate.offset, u64::from(candidate.len)) {
                if crate::codec::link_checked(&address, &bytes) == Some(candidate.address) {
                    return Ok(Some(bytes));
                }
            }
        }
        Ok(None)
    }

    /// Whether records of other conversations may follow `address` as
    /// well as `id`'s: the root, a fork point, or a record another
    /// conversation's chain holds.
    fn shared_start(&self, id: &ConversationId, address: Address) -> bool {
        address == Address::ROOT
            || self.fork_bases.contains(&address)
            || self
                .claimed
                .get(&address)
                .is_some_and(|owners| owners.iter().any(|o| o != id))
    }

    /// Scans sled's files and the unframed parts of the segment files for
    /// chunk bodies (see the module documentation).
    fn scan(&mut self) {
        let mut scanned = Scanned::default();
        let mut sled_files = vec![self.damaged.join("db")];
        if let Ok(dir) = std::fs::read_dir(self.damaged.join("blobs")) {
            sled_files.extend(dir.flatten().map(|e| e.path()));
        }
        let mut records = 0usize;
        for path in sled_files {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let index = scanned.files.len() as u32;
            scanned.files.push(path);
            records += scan_region(
                &bytes,
                0..bytes.len(),
                index,
                &mut scanned.next,
                &mut |_, _| {},
            );
        }
        for (number, regions) in &self.unframed {
            let path = segment_path(&self.damaged, *number);
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let index = scanned.files.len() as u32;
            scanned.files.push(path.clone());
            let mut boundaries = Vec::new();
            for region in regions {
                boundaries.push(region.start as u64);
                boundaries.push(region.end as u64);
                records += scan_region(
                    &bytes,
                    region.clone(),
                    index,
                    &mut scanned.next,
                    &mut |start, end| {
                        boundaries.push(start as u64);
                        if let Some(end) = end {
                            boundaries.push(end as u64);
                        }
                    },
                );
            }
            boundaries.sort_unstable();
            boundaries.dedup();
            scanned.boundaries.push((path, boundaries));
        }
        for (before, records) in &scanned.next {
            for record in records {
                scanned.parents.insert(record.address, *before);
            }
        }
        self.notes.push(format!(
            "scanned sled's files and {} unframed segment file(s): {records} record(s) found \
             in chunk bodies",
            self.unframed.len()
        ));
        self.scanned = Some(scanned);
    }

    /// Finds the blobs `needed` (hash, length) in the sources.
    fn find_blobs(&mut self, needed: &HashMap<BlobHash, u64>) -> HashMap<BlobHash, BlobLoc> {
        let mut found = HashMap::new();
        for (&hash, &len) in needed {
            if let Some(bytes) = self.sled_blob(&hash) {
                if sound_blob(&bytes, &hash, len) {
                    found.insert(hash, BlobLoc::Bytes(bytes));
                    continue;
                }
            }
            if let Some(loc) = self.frame_blobs.get(&hash) {
                let path = segment_path(&self.damaged, loc.file);
                if let Ok(bytes) = read_at(&path, loc.offset, loc.len) {
                    if sound_blob(&bytes, &hash, len) {
                        found.insert(
                            hash,
                            BlobLoc::File {
                                path,
                                offset: loc.offset,
                                len: loc.len,
                            },
                        );
                    }
                }
            }
        }
        let missing: HashMap<BlobHash, u64> = needed
            .iter()
            .filter(|(h, _)| !found.contains_key(*h))
            .map(|(h, l)| (*h, *l))
            .collect();
        if !missing.is_empty() {
            if self.scanned.is_none() {
                self.scan();
            }
            let before = found.len();
            self.scan_blobs(&missing, &mut found);
            self.notes.push(format!(
                "scanning for {} blob(s) sled and the frames did not give: {} found",
                missing.len(),
                found.len() - before
            ));
        }
        found
    }

    /// A blob's stored bytes through any sled attempt.
    fn sled_blob(&self, hash: &BlobHash) -> Option<Vec<u8>> {
        for attempt in &self.attempts {
            let Some(tree) = &attempt.blobs else {
                continue;
            };
            let Some(Ok(Some(value))) = quiet(|| tree.get(hash.as_bytes())) else {
                continue;
            };
            let bytes = match attempt.format {
                Some(1) => Some(value.to_vec()),
                _ => match decode::<BlobValue<'_>>(&value, "blob") {
                    Ok(BlobValue::Inline(bytes)) => Some(bytes.to_vec()),
                    Ok(BlobValue::Segment(at)) => self.segments.read(&at, &String::new).ok(),
                    Err(_) => Some(value.to_vec()),
                },
            };
            if let Some(bytes) = bytes {
                if &BlobHash::of(&bytes) == hash {
                    return Some(bytes);
                }
            }
        }
        None
    }

    /// Looks for `missing` blobs in sled's files (a blob value's encoding:
    /// 0, then its length as a bincode varint, then the text) and between
    /// bodies in unframed segment files.
    fn scan_blobs(&self, missing: &HashMap<BlobHash, u64>, found: &mut HashMap<BlobHash, BlobLoc>) {
        let lengths: HashSet<u64> = missing.values().copied().collect();
        let Some(scanned) = &self.scanned else {
            return;
        };
        let segment_files: HashSet<&PathBuf> = scanned.boundaries.iter().map(|(p, _)| p).collect();
        for path in scanned.files.iter().filter(|p| !segment_files.contains(p)) {
            let Ok(bytes) = std::fs::read(path) else {
                continue;
            };
            for at in memchr::memchr2_iter(0xfb, 0xfc, &bytes) {
                if at == 0 || bytes[at - 1] != 0 {
                    continue;
                }
                let mut pos = at;
                let Some(len) = varint(&bytes, &mut pos) else {
                    continue;
                };
                if !lengths.contains(&len) {
                    continue;
                }
                let Some(text) = bytes.get(pos..pos + len as usize) else {
                    continue;
                };
                let hash = BlobHash::of(text);
                if missing.get(&hash) == Some(&len) && !found.contains_key(&hash) {
                    found.insert(hash, BlobLoc::Bytes(text.to_vec()));
                }
            }
        }
        // Bodies in a segment file lie back to back: a blob ends where
        // another body starts, or starts where one ends.
        for (path, boundaries) in &scanned.boundaries {
            let Ok(bytes) = std::fs::read(path) else {
                continue;
            };
            let mut work: Vec<u64> = boundaries.clone();
            let mut seen: HashSet<u64> = work.iter().copied().collect();
            while let Some(at) = work.pop() {
                for (&hash, &len) in missing {
                    if found.contains_key(&hash) {
                        continue;
                    }
                    for start in [at.checked_sub(len), Some(at)].into_iter().flatten() {
                        let end = start + len;
                        let Some(text) = bytes.get(start as usize..end as usize) else {
                            continue;
                        };
                        if BlobHash::of(text) == hash {
                            found.insert(
                                hash,
                                BlobLoc::File {
                                    path: path.clone(),
                                    offset: start,
                                    len,
                                },
                            );
                            for b in [start, end] {
                                if seen.insert(b) {
                                    work.push(b);
                                }
                            }
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// Writes `k`'s recovered records into `out`; returns what it did.
fn write_conversation(
    out: &Store,
    k: &Known,
    mut assembly: Assembly,
    blobs: &HashMap<BlobHash, BlobLoc>,
    written: &mut HashMap<ConversationId, u64>,
    names: &mut HashSet<String>,
) -> StoreResult<SalvagedConversation> {
    let mut notes = Vec::new();
    let name = match &k.name {
        Some(name) if names.insert(name.clone()) => Some(name.clone()),
        Some(name) => {
            notes.push(format!(
                "its name \"{name}\" is another conversation's too; written without it"
            ));
            None
        }
        None => None,
    };
    let created = k.created.unwrap_or_else(|| {
        notes.push("its creation time is not known: set to the time of the salvage".to_owned());
        Timestamp::now()
    });
    let mut fork = None;
    if let Some((parent, at, base)) = k.fork {
        let parent_len = written.get(&parent).copied();
        match parent_len {
            None => {
                notes.push(format!(
                    "its parent {parent} was not recovered: written without the records it \
                     shared, and without its own"
                ));
                assembly.records.clear();
                assembly.stop = Some((
                    0,
                    format!("its parent {parent} (records 0..{at}) was not recovered"),
                ));
            }
            Some(len) if len < at => {
                let (b, turns) = out.fork_base(&parent, len)?;
                fork = Some(ForkPoint {
                    parent,
                    at: len,
                    base: b,
                    turns,
                });
                assembly.records.clear();
                assembly.stop = Some((
                    len,
                    format!(
                        "its parent {parent} was recovered only to record {len}, before \
                         its fork point {at}"
                    ),
                ));
            }
            Some(_) => {
                let (b, turns) = out.fork_base(&parent, at)?;
                if base.is_some_and(|base| base != b) {
                    assembly.records.clear();
                    assembly.stop = Some((
                        at,
                        "its parent's recovered record before the fork point is not the \
                         one it forked from"
                            .to_owned(),
                    ));
                }
                fork = Some(ForkPoint {
                    parent,
                    at,
                    base: b,
                    turns,
                });
            }
        }
    }
    let who = Identity {
        id: k.id,
        name: name.clone(),
        created,
        fork,
    };
    let mut writer = ConversationWriter::new(out, &who);
    for bytes in assembly.records {
        let record = decode_record(&bytes)?;
        let mut texts = Vec::new();
        for text in record.texts() {
            if let TextRepr::Blob(blob) = text {
                let text = blobs
                    .get(&blob.hash)
                    .and_then(|loc| load_blob(loc, &blob.hash))
                    .ok_or_else(|| StoreError::Corrupt {
                        what: format!("blob {} could not be read again", blob.hash),
                    })?;
                texts.push((blob.hash, text));
            }
        }
        writer.push(RawRecord {
            bytes,
            blobs: texts,
        })?;
    }
    let (recovered, _) = writer.finish()?;
    let mut settings = crate::backend::Batch::new();
    for (key, value) in &k.settings {
        settings.put(key.as_slice(), value.to_vec());
    }
    out.kv.apply(settings)?;
    written.insert(k.id, recovered);
    let mut stopped = assembly.stop;
    if stopped.is_none() && k.expected.is_some_and(|e| recovered < e) {
        stopped = Some((recovered, "no copy of it was found".to_owned()));
    }
    if k.expected.is_none() && stopped.is_none() {
        if let Some(at_least) = k.at_least {
            if recovered < at_least {
                stopped = Some((recovered, "no copy of it was found".to_owned()));
            }
        }
    }
    if let Some(expected) = k.expected {
        if recovered > expected {
            notes.push(format!(
                "{} record(s) beyond the length its metadata gives (the metadata found \
                 was older than its log, or an append that never completed wrote them)",
                recovered - expected
            ));
        }
    }
    Ok(SalvagedConversation {
        id: k.id,
        name,
        fork: fork.map(|p| (p.parent, p.at)),
        recovered,
        expected: k.expected,
        at_least: k.expected.is_none().then_some(k.at_least).flatten(),
        stopped,
        notes,
    })
}

/// The record after `from` on the chain that leads back from `head`
/// within `steps` records, if there is one.
fn on_path_back(
    parents: &HashMap<Address, Address>,
    from: Address,
    head: Address,
    steps: u64,
) -> Option<Address> {
    let mut current = head;
    for _ in 0..steps {
        let parent = *parents.get(&current)?;
        if parent == from {
            return Some(current);
        }
        current = parent;
    }
    None
}

/// sled opened on a copy of `damaged`'s files (without its snapshots
/// unless `keep_snapshots`), within [`SLED_TIMEOUT`].
fn attempt(damaged: &Path, keep_snapshots: bool) -> Result<Attempt, String> {
    let scratch =
        state::scratch_copy(damaged).map_err(|e| format!("cannot copy its files: {e}"))?;
    if !keep_snapshots {
        for (_, file) in state::snapshots(scratch.path()) {
            let _ = std::fs::remove_file(file);
        }
    }
    let path = scratch.path().to_path_buf();
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let opened = crate::backend::sled::opening::guarded(|| {
            sled::Config::new().path(&path).flush_every_ms(None).open()
        });
        let _ = send.send(opened);
    });
    let db = match receive.recv_timeout(SLED_TIMEOUT) {
        Ok(Ok(db)) => db,
        Ok(Err(sled::Error::Corruption { .. })) => {
            return Err("cannot open: sled finds corruption".to_owned())
        }
        Ok(Err(e)) => return Err(format!("cannot open: {e}")),
        Err(_) => {
            return Err(format!(
                "sled did not finish recovering within {} s",
                SLED_TIMEOUT.as_secs()
            ))
        }
    };
    let format = quiet(|| db.get(keys::FORMAT).ok().flatten())
        .flatten()
        .and_then(|b| <[u8; 4]>::try_from(b.as_ref()).ok())
        .map(u32::from_be_bytes);
    let blobs = quiet(|| db.open_tree(keys::BLOBS).ok()).flatten();
    Ok(Attempt {
        label: "",
        db,
        blobs,
        format,
        _scratch: scratch,
    })
}

/// The records of a chunk (whole bytes, first record `first`) from `seq`
/// on, provided the record before `seq` has address `address`; they end
/// at the first that does not hash to its check or decode.
fn follow(bytes: &[u8], first: u64, seq: u64, address: Address) -> Result<Vec<Vec<u8>>, String> {
    let layout = ChunkLayout::read(bytes, &String::new).map_err(|e| e.to_string())?;
    let mut at = layout.parent;
    let mut out = Vec::new();
    for (i, entry) in layout.entries.iter().enumerate() {
        let this = first + i as u64;
        let record = &bytes[entry.record.clone()];
        if this == seq && at != address {
            return Err("it does not continue the records before it".to_owned());
        }
        let next = crate::codec::link_checked(&at, record);
        let Some(next) = next.filter(|next| next.check() == entry.check) else {
            if this < seq {
                return Err(format!("record {this} does not match its address"));
            }
            if out.is_empty() {
                return Err(format!("record {this} does not match its address"));
            }
            break;
        };
        if this >= seq {
            if decode_record(record).is_err() {
                if out.is_empty() {
                    return Err(format!("record {this} does not decode"));
                }
                break;
            }
            out.push(record.to_vec());
        }
        at = next;
    }
    Ok(out)
}

/// Scans `bytes[region]` for chunk bodies, adding their records to `next`
/// (file `file`) and calling `body(start, end)` for each body found (end
/// `None` when only a prefix of it verified); returns the records found.
fn scan_region(
    bytes: &[u8],
    region: Range<usize>,
    file: u32,
    next: &mut HashMap<Address, Vec<ScannedRecord>>,
    body: &mut dyn FnMut(usize, Option<usize>),
) -> usize {
    let bytes = &bytes[..region.end];
    let mut at = region.start;
    let mut found = 0;
    while at + 40 <= bytes.len() {
        let Some(chunk) = try_chunk(bytes, at) else {
            at += 1;
            continue;
        };
        body(at, chunk.whole.then_some(chunk.end));
        let mut address = chunk.parent;
        for (range, own) in &chunk.records {
            let candidates = next.entry(address).or_default();
            if !candidates.iter().any(|c| c.address == *own) || candidates.len() < 4 {
                candidates.push(ScannedRecord {
                    address: *own,
                    file,
                    offset: range.start as u64,
                    len: range.len() as u32,
                });
            }
            address = *own;
            found += 1;
        }
        at = chunk.end;
    }
    found
}

/// A chunk body found by scanning.
struct FoundChunk {
    parent: Address,
    /// Each verified record's bytes and own address.
    records: Vec<(Range<usize>, Address)>,
    /// Where the verified part ends.
    end: usize,
    /// Whether every entry verified.
    whole: bool,
}

/// The chunk body at `at`, if its first record decodes and hashes to its
/// check.
fn try_chunk(bytes: &[u8], at: usize) -> Option<FoundChunk> {
    let mut pos = at;
    let parent = Address::from_bytes(bytes.get(pos..pos + 32)?.try_into().ok()?);
    pos += 32;
    let count = varint(bytes, &mut pos)?;
    if count == 0 || count > CHUNK_MAX_ENTRIES as u64 {
        return None;
    }
    let mut records = Vec::new();
    let mut address = parent;
    let mut end = pos;
    for _ in 0..count {
        let entry = (|| {
            let mut p = end;
            varint(bytes, &mut p)?;
            let check: [u8; 8] = bytes.get(p..p + 8)?.try_into().ok()?;
            p += 8;
            let len = usize::try_from(varint(bytes, &mut p)?).ok()?;
            if !(3..=SCAN_RECORD_MAX).contains(&len) {
                return None;
            }
            let record = bytes.get(p..p + len)?;
            decode_record(record).ok()?;
            let own = crate::codec::link_checked(&address, record)?;
            (own.check() == check).then_some((p..p + len, own))
        })();
        let Some((range, own)) = entry else {
            break;
        };
        end = range.end;
        address = own;
        records.push((range, own));
    }
    if records.is_empty() {
        return None;
    }
    let whole = records.len() as u64 == count;
    Some(FoundChunk {
        parent,
        records,
        end,
        whole,
    })
}

/// A bincode varint (`bincode::DefaultOptions`) at `pos`, moving past it.
fn varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let first = *bytes.get(*pos)?;
    let (value, width) = match first {
        0..=250 => (u64::from(first), 1),
        251 => (
            u64::from(u16::from_le_bytes(
                bytes.get(*pos + 1..*pos + 3)?.try_into().ok()?,
            )),
            3,
        ),
        252 => (
            u64::from(u32::from_le_bytes(
                bytes.get(*pos + 1..*pos + 5)?.try_into().ok()?,
            )),
            5,
        ),
        253 => (
            u64::from_le_bytes(bytes.get(*pos + 1..*pos + 9)?.try_into().ok()?),
            9,
        ),
        _ => return None,
    };
    *pos += width;
    Some(value)
}

fn sound_blob(bytes: &[u8], hash: &BlobHash, len: u64) -> bool {
    bytes.len() as u64 == len && &BlobHash::of(bytes) == hash && std::str::from_utf8(bytes).is_ok()
}

fn load_blob(loc: &BlobLoc, hash: &BlobHash) -> Option<String> {
    let bytes = match loc {
        BlobLoc::Bytes(bytes) => bytes.clone(),
        BlobLoc::File { path, offset, len } => read_at(path, *offset, *len).ok()?,
    };
    (&BlobHash::of(&bytes) == hash)
        .then(|| String::from_utf8(bytes).ok())
        .flatten()
}

fn segment_files(damaged: &Path) -> Vec<(u32, PathBuf)> {
    let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(damaged.join("segments"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn segment_path(damaged: &Path, number: u32) -> PathBuf {
    damaged.join("segments").join(format!("{number:08}"))
}

fn read_at(path: &Path, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the file ends before it",
        ));
    }
    let len = usize::try_from(len).map_err(std::io::Error::other)?;
    let mut buffer = Vec::new();
    buffer
        .try_reserve_exact(len)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::OutOfMemory, "out of memory"))?;
    buffer.resize(len, 0);
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut buffer, offset)?;
    Ok(buffer)
}

fn dedup(items: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

/// The conversations ordered so that each fork's parent comes before it.
fn fork_order(known: &BTreeMap<ConversationId, Known>) -> Vec<ConversationId> {
    let mut order = Vec::with_capacity(known.len());
    let mut placed = HashSet::new();
    for id in known.keys() {
        let mut chain = Vec::new();
        let mut current = Some(*id);
        while let Some(c) = current {
            if placed.contains(&c) || chain.contains(&c) {
                break;
            }
            chain.push(c);
            current = known
                .get(&c)
                .and_then(|k| k.fork)
                .map(|f| f.0)
                .filter(|p| known.contains_key(p));
        }
        for c in chain.into_iter().rev() {
            placed.insert(c);
            order.push(c);
        }
    }
    order
}
