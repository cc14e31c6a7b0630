//! Full-text search across conversations: [`SearchIndex`], a tantivy index
//! (BM25) of every record's text, kept in `search/` inside the database
//! directory.
//!
//! The index is derived data. Its commit carries, in the same atomic
//! commit as the documents (tantivy's commit payload), a marker per
//! conversation: how many records are indexed and the address of the last
//! of them. [`SearchIndex::catch_up`] indexes what a conversation gained
//! since its marker (the engine calls it right after each write it makes,
//! and before every search), so an update lost to a crash between the
//! log's commit and the index's is made up on the next one; a marker whose
//! address no longer matches the log (a database restored under the index)
//! re-indexes that conversation. `verify` compares the index with the log
//! ([`SearchIndex::check`]); `reindex` builds it anew ([`rebuild`]).
//!
//! A document per record that has text (every kind but `turn_start`, and a
//! compaction only with a summary). A fork's documents are its own records
//! (from its fork point); a search limited to a fork reads its parents'
//! documents before the fork point too.

use convstore_store::Seq;
use convstore_store::{REDACTED_JSON, REDACTED_TEXT};
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use convstore_projection::{resolve, Resolution, Summary, ToolPolicy};
use convstore_store::event::ReasoningPolicy;
use convstore_store::{
    Address, ConversationId, Event, EventKind, EventType, LogRecord, Store, StoreError, Timestamp,
};
use serde::{Deserialize, Serialize};
use tantivy::collector::TopDocs;
use tantivy::directory::error::LockError;
use tantivy::query::{BooleanQuery, Occur, Query, QueryParser, RangeQuery, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, Schema, Value, FAST, INDEXED, STORED, STRING, TEXT,
};
use tantivy::snippet::SnippetGenerator;
use tantivy::{
    DocSet as _, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, TantivyError, Term,
};

use crate::error::{Error, Result};
use crate::pipeline;

/// The directory of the index inside a database directory.
pub const DIR: &str = "search";

/// The version of the index's layout; another is rebuilt, never misread.
/// 2: texts removed by a redaction (`[redacted]`) are not indexed.
const LAYOUT: u32 = 2;

/// Records indexed before the writer is committed and emptied, in a large
/// catch-up (bounds the writer's memory).
const COMMIT_EVERY: u64 = 200_000;

/// How long a search or `reindex` waits for another process that is
/// updating the index.
pub const WRITER_WAIT: Duration = Duration::from_secs(60);

/// What a catch-up has to do (see [`SearchIndex::plan`]).
#[derive(Default)]
struct Work {
    todo: Vec<(ConversationId, u64, u64, bool)>,
    gone: Vec<String>,
    new_markers: bool,
}

impl Work {
    fn is_empty(&self) -> bool {
        self.todo.is_empty() && self.gone.is_empty() && !self.new_markers
    }
}

fn err(e: impl std::fmt::Display) -> Error {
    Error::Search(e.to_string())
}

/// A tantivy error in words: an I/O error on one of the index's files as
/// that file and the system's message (tantivy's own text shows the
/// error's structure).
fn plain(e: &tantivy::TantivyError) -> String {
    use tantivy::directory::error::{OpenDirectoryError, OpenReadError, OpenWriteError};
    use tantivy::TantivyError as T;
    let io = |path: &Path, e: &std::io::Error| format!("{}: {e}", path.display());
    match e {
        T::OpenReadError(OpenReadError::IoError { io_error, filepath })
        | T::OpenWriteError(OpenWriteError::IoError { io_error, filepath })
        | T::OpenDirectoryError(OpenDirectoryError::IoError {
            io_error,
            directory_path: filepath,
        }) => io(filepath, io_error),
        T::IoError(e) => e.to_string(),
        other => other.to_string(),
    }
}

/// Runs `f`, a panic in it (tantivy panics on some damaged files rather
/// than failing) becoming an error naming `convstore reindex`: the index is
/// derived data, and a damaged one must not take a command or a server
/// down.
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(Error::Search(format!(
            "the search index is damaged ({what}); `convstore reindex` builds it anew"
        )))
    })
}

/// The index's fields.
#[derive(Debug, Clone, Copy)]
struct Fields {
    /// Conversation id, hex (indexed, stored).
    conv: Field,
    /// Record seq (indexed, stored, fast).
    seq: Field,
    /// Record turn (stored).
    turn: Field,
    /// Event type (indexed, stored).
    kind: Field,
    /// Tool call id of calls and results (indexed).
    call: Field,
    /// Tool name of calls (stored).
    name: Field,
    /// Timestamp, microseconds (indexed, fast).
    time: Field,
    /// The first 8 bytes of the record's address (stored, fast): verify
    /// compares them with the log.
    check: Field,
    /// The text (tokenized, BM25).
    text: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let fields = Fields {
        conv: b.add_text_field("conv", STRING | STORED),
        seq: b.add_u64_field("seq", INDEXED | STORED | FAST),
        turn: b.add_u64_field("turn", STORED),
        kind: b.add_text_field("kind", STRING | STORED),
        call: b.add_text_field("call", STRING),
        name: b.add_text_field("name", STORED),
        time: b.add_i64_field("time", INDEXED | FAST),
        check: b.add_u64_field("check", STORED | FAST),
        text: b.add_text_field("text", TEXT),
    };
    (b.build(), fields)
}

/// What a conversation's documents cover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// Records `0..len` are indexed (for a fork, its own from its fork
    /// point).
    pub len: u64,
    /// The address of record `len - 1` (none for an empty log).
    pub head: Option<String>,
}

/// The commit payload: the layout and the markers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Payload {
    layout: u32,
    conversations: BTreeMap<String, Marker>,
}

/// A search's `since` (`--since`): a time (RFC 3339, or JP's `YYYY-MM-DD HH:MM:SS`) or a
/// duration back from now (`90m`, `5h`, `2d`).
pub fn parse_since(text: &str) -> Result<Timestamp, String> {
    let units = [
        ('s', 1i64),
        ('m', 60),
        ('h', 3600),
        ('d', 86_400),
        ('w', 604_800),
    ];
    if let Some((unit, secs)) = units.iter().find(|(u, _)| text.ends_with(*u)) {
        if let Ok(n) = text.trim_end_matches(*unit).parse::<u32>() {
            let now = Timestamp::now().as_micros();
            return i64::from(n)
                .checked_mul(secs * 1_000_000)
                .and_then(|back| Timestamp::from_micros(now - back))
                .ok_or_else(|| format!("\"{text}\" is too far back"));
        }
    }
    match crate::AsOf::parse(text) {
        Some(crate::AsOf::Time(time)) => Ok(time),
        _ => Err(format!(
            "\"{text}\" is neither a time (2026-03-01T12:00:00Z) nor a duration back from now (90m, 5h, 2d)"
        )),
    }
}

/// The text a record is indexed by, if any. A text removed by a
/// redaction (or `gc`) is not: its placeholder would match every such
/// record.
pub fn indexed_text(event: &Event) -> Option<String> {
    let kept = |text: &str| if text == REDACTED_TEXT { "" } else { text }.to_owned();
    let json = |json: &convstore_store::Json| {
        let text = json.as_str();
        if text == REDACTED_JSON { "" } else { text }.to_owned()
    };
    let named = |name: &str, rest: String| {
        if rest.is_empty() {
            name.to_owned()
        } else {
            format!("{name} {rest}")
        }
    };
    let text = match &event.kind {
        EventKind::TurnStart => return None,
        EventKind::User { text }
        | EventKind::Assistant { text }
        | EventKind::Reasoning { text }
        | EventKind::System { text } => kept(text),
        EventKind::ToolCall {
            name, arguments, ..
        } => named(name, json(arguments)),
        EventKind::ToolResult { content, .. } => kept(content),
        EventKind::Config { delta } => json(delta),
        EventKind::Extension { name, payload } => named(name, json(payload)),
        EventKind::Compaction(c) => c.summary.clone()?,
    };
    (!text.is_empty()).then_some(text)
}

fn check_of(address: &Address) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&address.as_bytes()[..8]);
    u64::from_be_bytes(first)
}

/// A search index, open.
pub struct SearchIndex {
    /// Its directory; `None` for an index in memory (a store whose backend
    /// keeps no files).
    dir: Option<PathBuf>,
    index: Index,
    reader: IndexReader,
    fields: Fields,
    /// One writer at a time within the process (other processes are kept
    /// out by the database's own lock, which every writer holds).
    writing: Mutex<()>,
    /// Held shared by every use of the index's files, exclusively while
    /// `reindex` deletes them and builds the index anew
    /// ([`SearchIndex::retire`]); taken before `writing`.
    in_use: std::sync::RwLock<()>,
    /// Set once the index was built anew under another [`SearchIndex`]:
    /// every use then fails with [`REBUILT`], for the engine to take the
    /// new one.
    retired: std::sync::atomic::AtomicBool,
    /// Each searched conversation's overlays resolved, with the head they
    /// were resolved at: a query's dispositions need them, and they change
    /// only with a write (10,000 compactions take tens of milliseconds to
    /// read and resolve).
    resolutions: Mutex<HashMap<ConversationId, (Address, Arc<Resolution>)>>,
}

/// Conversations whose resolutions [`SearchIndex`] keeps.
const RESOLUTIONS_KEPT: usize = 64;

/// What [`SearchIndex::catch_up`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaughtUp {
    /// Conversations updated.
    pub conversations: u64,
    /// Records read and indexed (those without text give no document).
    pub records: u64,
    /// Conversations indexed again from their start (their marker did not
    /// match the log).
    pub reindexed: u64,
}

impl SearchIndex {
    /// Opens the index in directory `dir` (a database directory's
    /// `search/`, or a cache directory for a database without one),
    /// creating an empty one if there is none; for `None` an empty index
    /// in memory. An index of another layout, or one that does not open,
    /// is an error naming `convstore reindex`.
    pub fn open(dir: Option<&Path>) -> Result<SearchIndex> {
        guarded(|| Self::open_unguarded(dir))
    }

    fn open_unguarded(dir: Option<&Path>) -> Result<SearchIndex> {
        let dir = dir.map(Path::to_path_buf);
        let (schema, fields) = schema();
        let shown = dir.as_ref().map_or_else(
            || "the search index".to_owned(),
            |d| d.display().to_string(),
        );
        let broken = |e: &dyn std::fmt::Display| {
            Error::Search(format!(
                "{shown} cannot be read ({e}); `convstore reindex` builds it anew"
            ))
        };
        let fresh = dir.as_ref().is_none_or(|d| !SearchIndex::exists(d));
        let index = match &dir {
            None => Index::create_in_ram(schema.clone()),
            Some(dir) if fresh => {
                std::fs::create_dir_all(dir)?;
                Index::create_in_dir(dir, schema.clone()).map_err(|e| broken(&plain(&e)))?
            }
            Some(dir) => {
                let index = Index::open_in_dir(dir).map_err(|e| broken(&plain(&e)))?;
                if index.schema() != schema {
                    return Err(broken(&"it was built by another version"));
                }
                index
            }
        };
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| broken(&e))?;
        let opened = SearchIndex {
            dir,
            index,
            reader,
            fields,
            writing: Mutex::new(()),
            in_use: std::sync::RwLock::new(()),
            retired: std::sync::atomic::AtomicBool::new(false),
            resolutions: Mutex::new(HashMap::new()),
        };
        let payload = opened.payload()?;
        if payload.layout != LAYOUT && !(fresh && payload.layout == 0) {
            return Err(broken(&format!(
                "layout {} is not {LAYOUT}",
                payload.layout
            )));
        }
        Ok(opened)
    }

    /// Runs `f`, a use of the index's files, unless the index was built
    /// anew meanwhile ([`REBUILT`]); a panic in the index library is an
    /// error naming `convstore reindex`.
    fn using<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _in_use = self
            .in_use
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.retired.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Search(REBUILT.to_owned()));
        }
        guarded(f)
    }

    /// Waits for every use of the index to end and marks it retired: its
    /// files are about to be deleted and built anew. No use starts while
    /// the guards are held, and every use after fails with [`REBUILT`].
    pub fn retire(&self) -> Retiring<'_> {
        let in_use = self
            .in_use
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let writing = self
            .writing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.retired
            .store(true, std::sync::atomic::Ordering::Release);
        Retiring {
            _in_use: in_use,
            _writing: writing,
        }
    }

    /// Where it is (`None`: in memory).
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Whether directory `dir` holds an index.
    pub fn exists(dir: &Path) -> bool {
        // One that cannot be looked into (no permission) is there, and
        // fails to open saying why, rather than being passed over.
        dir.join("meta.json").try_exists().unwrap_or(true)
    }

    fn payload(&self) -> Result<Payload> {
        let metas = self.index.load_metas().map_err(err)?;
        match metas.payload {
            None => Ok(Payload {
                layout: LAYOUT,
                conversations: BTreeMap::new(),
            }),
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| Error::Search(format!("its commit payload does not parse: {e}"))),
        }
    }

    /// The markers: how far each conversation is indexed.
    pub fn markers(&self) -> Result<BTreeMap<ConversationId, Marker>> {
        Ok(self
            .payload()?
            .conversations
            .into_iter()
            .filter_map(|(id, m)| ConversationId::from_hex(&id).map(|id| (id, m)))
            .collect())
    }

    /// The index's writer: `None` if another process held it for all of
    /// `wait` (tantivy's lock file admits one writer at a time).
    fn writer(&self, large: bool, wait: Duration) -> Result<Option<IndexWriter>> {
        let threads = if large {
            std::thread::available_parallelism()
                .map_or(1, usize::from)
                .clamp(1, 4)
        } else {
            1
        };
        let per_thread = if large { 64 << 20 } else { 16 << 20 };
        let started = Instant::now();
        loop {
            match self
                .index
                .writer_with_num_threads(threads, threads * per_thread)
            {
                Ok(writer) => return Ok(Some(writer)),
                Err(TantivyError::LockFailure(LockError::LockBusy, _)) => {
                    if started.elapsed() >= wait {
                        return Ok(None);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(err(e)),
            }
        }
    }

    /// What each conversation needs, from `payload`'s markers: (id, from,
    /// to, whether its old documents go), the indexed conversations the
    /// store no longer has (when `all`), and whether markers are missing.
    fn plan(
        store: &Store,
        payload: &Payload,
        infos: &[convstore_store::ConversationInfo],
        all: bool,
    ) -> Work {
        let mut work = Work::default();
        for info in infos {
            let own_start = info.fork.map_or(0, |f| f.at);
            let marker = payload.conversations.get(&info.id.hex());
            let sound = marker.is_some_and(|m| {
                m.len >= own_start
                    && m.len <= info.len
                    && match (m.len.checked_sub(1), &m.head) {
                        (Some(last), Some(head)) if last >= own_start => store
                            .record(&info.id, last)
                            .is_ok_and(|r| r.address.hex() == *head),
                        _ => m.len == own_start,
                    }
            });
            match (marker, sound) {
                (Some(m), true) if m.len == info.len => {}
                (Some(m), true) => work.todo.push((info.id, m.len, info.len, false)),
                (Some(_), false) => work.todo.push((info.id, own_start, info.len, true)),
                (None, _) if info.len > own_start => {
                    work.todo.push((info.id, own_start, info.len, false));
                }
                (None, _) => work.new_markers = true,
            }
        }
        if all {
            let known: std::collections::HashSet<String> =
                infos.iter().map(|i| i.id.hex()).collect();
            work.gone = payload
                .conversations
                .keys()
                .filter(|k| !known.contains(*k))
                .cloned()
                .collect();
        }
        work
    }

    /// Records `id` has that the index does not.
    pub fn behind(&self, store: &Store, id: &ConversationId) -> Result<u64> {
        let info = store.info(id)?;
        let payload = self.using(|| self.payload())?;
        let indexed = payload
            .conversations
            .get(&id.hex())
            .map_or(info.fork.map_or(0, |f| f.at), |m| m.len);
        Ok(info.len.saturating_sub(indexed))
    }

    /// Indexes what the conversations (`only` one, or all) gained since
    /// their markers, and drops the documents of conversations the store
    /// no longer has. One commit, markers with it. While another process
    /// updates the index, waits up to [`WRITER_WAIT`] for it, then fails.
    pub fn catch_up(&self, store: &Store, only: Option<&ConversationId>) -> Result<CaughtUp> {
        self.catch_up_within(store, only.map(std::slice::from_ref), WRITER_WAIT)?
            .ok_or_else(|| {
                err("another process kept the search index busy; try again when it is done")
            })
    }

    /// [`SearchIndex::catch_up`] of `only` these conversations (in one
    /// commit; those deleted meanwhile are passed over) or all, waiting at
    /// most `wait` for another process's writer: `None` if it was still
    /// busy (its catch-up, or the next one, indexes what this one would
    /// have).
    pub fn catch_up_within(
        &self,
        store: &Store,
        only: Option<&[ConversationId]>,
        wait: Duration,
    ) -> Result<Option<CaughtUp>> {
        self.using(|| self.catch_up_unguarded(store, only, wait))
    }

    fn catch_up_unguarded(
        &self,
        store: &Store,
        only: Option<&[ConversationId]>,
        wait: Duration,
    ) -> Result<Option<CaughtUp>> {
        let _writing = self.writing.lock().map_err(|_| err("a writer panicked"))?;
        let infos = match only {
            Some(ids) => {
                let mut infos = Vec::with_capacity(ids.len());
                for id in ids {
                    match store.info(id) {
                        Ok(info) => infos.push(info),
                        Err(_) if deleted(store, id) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                infos
            }
            None => store.conversations()?,
        };
        let mut done = CaughtUp::default();
        let first = Self::plan(store, &self.payload()?, &infos, only.is_none());
        if first.is_empty() {
            return Ok(Some(done));
        }
        let total: u64 = first.todo.iter().map(|w| w.2 - w.1).sum();
        let Some(mut writer) = self.writer(total > 10_000, wait)? else {
            return Ok(None);
        };
        // Files a process killed during a commit left (a deletion's
        // `.del` file would be written again under the same name).
        writer.garbage_collect_files().wait().map_err(err)?;
        // Another process may have indexed some of it while this one
        // waited: plan again from the markers as they are now.
        let mut payload = self.payload()?;
        payload.layout = LAYOUT;
        let Work {
            todo: work,
            gone,
            new_markers,
        } = Self::plan(store, &payload, &infos, only.is_none());
        if work.is_empty() && gone.is_empty() && !new_markers {
            self.reader.reload().map_err(err)?;
            return Ok(Some(done));
        }
        for key in gone {
            writer.delete_term(Term::from_field_text(self.fields.conv, &key));
            payload.conversations.remove(&key);
        }
        let mut since_commit = 0u64;
        let mut vanished: Vec<ConversationId> = Vec::new();
        for (id, from, to, drop_old) in work {
            if drop_old {
                writer.delete_term(Term::from_field_text(self.fields.conv, &id.hex()));
                done.reindexed += 1;
            }
            let mut last: Option<LogRecord> = None;
            // A conversation deleted meanwhile is passed over, its
            // documents dropped.
            let records: Box<dyn Iterator<Item = _>> = match store.scan(&id, from..to) {
                Ok(records) => Box::new(records),
                Err(e) => Box::new(std::iter::once(Err(e))),
            };
            for record in records {
                let record = match record {
                    Ok(record) => record,
                    Err(_) if deleted(store, &id) => {
                        vanished.push(id);
                        break;
                    }
                    Err(e) => return Err(e.into()),
                };
                self.add(&writer, &id, &record)?;
                since_commit += 1;
                last = Some(record);
                if since_commit >= COMMIT_EVERY {
                    // Commit what is written so far with a marker at it,
                    // so memory stays bounded and a crash keeps it.
                    if let Some(r) = &last {
                        payload.conversations.insert(
                            id.hex(),
                            Marker {
                                len: r.seq + 1,
                                head: Some(r.address.hex()),
                            },
                        );
                    }
                    commit(&mut writer, &payload)?;
                    since_commit = 0;
                }
            }
            if vanished.last() == Some(&id) {
                writer.delete_term(Term::from_field_text(self.fields.conv, &id.hex()));
                payload.conversations.remove(&id.hex());
                continue;
            }
            done.records += to - from;
            done.conversations += 1;
            let head = match last {
                Some(r) => Some(r.address.hex()),
                None => payload
                    .conversations
                    .get(&id.hex())
                    .and_then(|m| m.head.clone()),
            };
            payload
                .conversations
                .insert(id.hex(), Marker { len: to, head });
        }
        for info in infos.iter().filter(|i| !vanished.contains(&i.id)) {
            payload
                .conversations
                .entry(info.id.hex())
                .or_insert(Marker {
                    len: info.len,
                    head: None,
                });
        }
        commit(&mut writer, &payload)?;
        writer.wait_merging_threads().map_err(err)?;
        self.reader.reload().map_err(err)?;
        Ok(Some(done))
    }

    /// Drops the documents of deleted conversations `ids` and merges the
    /// segments that held them, so that their texts leave the index's
    /// files (a deleted document otherwise stays in its segment, marked,
    /// until a merge). `false` if another process kept the writer busy
    /// (the next catch-up of every conversation drops them).
    pub fn forget(&self, ids: &[ConversationId]) -> Result<bool> {
        self.forget_where(ids, false)
    }

    /// [`SearchIndex::forget`] if the index has a marker of one of `ids`
    /// (it indexed some of it), looked at while no catch-up of this
    /// process runs: one under way when `ids` were deleted commits their
    /// documents, and its marker, before this looks.
    pub fn forget_indexed(&self, ids: &[ConversationId]) -> Result<bool> {
        self.forget_where(ids, true)
    }

    fn forget_where(&self, ids: &[ConversationId], only_indexed: bool) -> Result<bool> {
        self.using(|| {
            let _writing = self.writing.lock().map_err(|_| err("a writer panicked"))?;
            if only_indexed {
                let markers = self.markers()?;
                if !ids.iter().any(|id| markers.contains_key(id)) {
                    return Ok(true);
                }
            }
            let Some(mut writer) = self.writer(false, WRITER_WAIT)? else {
                return Ok(false);
            };
            writer.garbage_collect_files().wait().map_err(err)?;
            let mut payload = self.payload()?;
            payload.layout = LAYOUT;
            for id in ids {
                writer.delete_term(Term::from_field_text(self.fields.conv, &id.hex()));
                payload.conversations.remove(&id.hex());
            }
            commit(&mut writer, &payload)?;
            let holding: Vec<_> = self
                .index
                .searchable_segment_metas()
                .map_err(err)?
                .into_iter()
                .filter(tantivy::SegmentMeta::has_deletes)
                .map(|m| m.id())
                .collect();
            if !holding.is_empty() {
                writer.merge(&holding).wait().map_err(err)?;
            }
            writer.garbage_collect_files().wait().map_err(err)?;
            writer.wait_merging_threads().map_err(err)?;
            self.reader.reload().map_err(err)?;
            Ok(true)
        })
    }

    fn add(&self, writer: &IndexWriter, id: &ConversationId, record: &LogRecord) -> Result<()> {
        let Some(text) = indexed_text(&record.event) else {
            return Ok(());
        };
        let f = &self.fields;
        let mut doc = TantivyDocument::default();
        doc.add_text(f.conv, id.hex());
        doc.add_u64(f.seq, record.seq);
        doc.add_u64(f.turn, record.turn);
        doc.add_text(f.kind, record.event.kind.event_type().as_str());
        match &record.event.kind {
            EventKind::ToolCall { id, name, .. } => {
                doc.add_text(f.call, id);
                doc.add_text(f.name, name);
            }
            EventKind::ToolResult { id, .. } => doc.add_text(f.call, id),
            _ => {}
        }
        doc.add_i64(f.time, record.event.timestamp.as_micros());
        doc.add_u64(f.check, check_of(&record.address));
        doc.add_text(f.text, text);
        writer.add_document(doc).map_err(err)?;
        Ok(())
    }

    /// The documents of `id` as `(seq, check)`, in seq order.
    fn documents(&self, id: &ConversationId) -> Result<Vec<(u64, u64)>> {
        let searcher = self.reader.searcher();
        let term = Term::from_field_text(self.fields.conv, &id.hex());
        let mut out = Vec::new();
        for segment in searcher.segment_readers() {
            let inverted = segment.inverted_index(self.fields.conv).map_err(err)?;
            let Some(mut postings) = inverted
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(err)?
            else {
                continue;
            };
            let seqs = segment.fast_fields().u64("seq").map_err(err)?;
            let checks = segment.fast_fields().u64("check").map_err(err)?;
            let alive = segment.alive_bitset();
            let mut doc = postings.doc();
            while doc != tantivy::TERMINATED {
                if alive.is_none_or(|a| a.is_alive(doc)) {
                    out.push((
                        seqs.first(doc).unwrap_or(u64::MAX),
                        checks.first(doc).unwrap_or(0),
                    ));
                }
                doc = postings.advance();
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Compares the index with the log: for every conversation, a marker
    /// no further than its log, and exactly one document per record with
    /// text below the marker, with the record's address. `Ok(None)` when
    /// they agree; a conversation behind is not a disagreement (the next
    /// write or search catches it up), and is counted.
    pub fn check(&self, store: &Store, only: Option<&ConversationId>) -> Result<IndexCheck> {
        self.using(|| self.check_unguarded(store, only))
    }

    fn check_unguarded(&self, store: &Store, only: Option<&ConversationId>) -> Result<IndexCheck> {
        // Another process sharing the index and the database (a deletion,
        // which forgets the documents and then deletes the log) may commit
        // while it is checked: a disagreement counts only if the index was
        // not committed to meanwhile.
        let mut tries = 0;
        loop {
            let before = self.index.load_metas().map_err(err)?.opstamp;
            let report = self.check_once(store, only)?;
            tries += 1;
            if report.problem.is_none()
                || tries == 4
                || self.index.load_metas().map_err(err)?.opstamp == before
            {
                return Ok(report);
            }
        }
    }

    /// [`SearchIndex::check`], once.
    fn check_once(&self, store: &Store, only: Option<&ConversationId>) -> Result<IndexCheck> {
        // No commit of this process between reading the markers (from the
        // last commit) and the documents (from the reader): both are of
        // the same commit.
        let _writing = self.writing.lock().map_err(|_| err("a writer panicked"))?;
        self.reader.reload().map_err(err)?;
        let markers = self.markers()?;
        let infos = match only {
            Some(id) => vec![store.info(id)?],
            None => store.conversations()?,
        };
        let mut report = IndexCheck::default();
        for info in &infos {
            let own_start = info.fork.map_or(0, |f| f.at);
            let marker = markers.get(&info.id);
            let indexed = marker.map_or(own_start, |m| m.len);
            if indexed > info.len {
                report.problem = Some(format!(
                    "conversation {}: indexed to record {indexed}, but the log has {}",
                    info.label(),
                    info.len
                ));
                return Ok(report);
            }
            if indexed < info.len {
                report.behind += 1;
                report.behind_records += info.len - indexed;
            }
            let mut expected = Vec::new();
            let read = store
                .scan(&info.id, own_start..indexed)
                .and_then(|records| {
                    for record in records {
                        let record = record?;
                        if indexed_text(&record.event).is_some() {
                            expected.push((record.seq, check_of(&record.address)));
                        }
                    }
                    Ok(())
                });
            match read {
                Ok(()) => {}
                // Deleted since the list was read (by another process):
                // not part of the database any more.
                Err(StoreError::NoSuchConversation { .. }) if only.is_none() => continue,
                Err(e) => return Err(e.into()),
            }
            let found = self.documents(&info.id)?;
            if found != expected {
                let first = expected
                    .iter()
                    .zip(&found)
                    .position(|(a, b)| a != b)
                    .unwrap_or(expected.len().min(found.len()));
                let at = expected
                    .get(first)
                    .or(found.get(first))
                    .map_or(0, |(seq, _)| *seq);
                report.problem = Some(format!(
                    "conversation {}: the index has {} document(s) for its {} record(s) with text up to record {indexed}; they first differ at record {at}",
                    info.label(),
                    found.len(),
                    expected.len()
                ));
                return Ok(report);
            }
            report.documents += found.len() as u64;
            report.conversations += 1;
        }
        if only.is_none() {
            let known: std::collections::HashSet<ConversationId> =
                infos.iter().map(|i| i.id).collect();
            if let Some(stray) = markers.keys().find(|id| !known.contains(id)) {
                report.problem = Some(format!(
                    "conversation {stray} is indexed but not in the database"
                ));
            }
        }
        Ok(report)
    }

    /// Searches: the best `query.limit` hits by BM25, each with where it is
    /// in the log, a snippet, and whether the view shows it.
    pub fn search(&self, store: &Store, query: &SearchQuery) -> Result<Vec<Hit>> {
        self.using(|| self.search_unguarded(store, query))
    }

    fn search_unguarded(&self, store: &Store, query: &SearchQuery) -> Result<Vec<Hit>> {
        let f = &self.fields;
        // Another process may have committed since this one last looked.
        self.reader.reload().map_err(err)?;
        let searcher = self.reader.searcher();
        check_query(query)?;
        let mut parser = QueryParser::for_index(&self.index, vec![f.text]);
        parser.set_conjunction_by_default();
        // Text as people type it (`error: Broken pipe`, `fn main()`, a
        // URL) is often not in the query syntax: it is then searched as
        // words, what the syntax could not read left out.
        let text_query = match parser.parse_query(&query.text) {
            Ok(parsed) => parsed,
            Err(strict) => {
                let (lenient, _) = parser.parse_query_lenient(&query.text);
                let words: String = query
                    .text
                    .chars()
                    .map(|c| if c.is_alphanumeric() { c } else { ' ' })
                    .collect();
                let empty = |q: &dyn Query| q.is::<tantivy::query::EmptyQuery>();
                match lenient {
                    q if !empty(q.as_ref()) => q,
                    _ => match parser.parse_query_lenient(&words) {
                        (q, _) if !empty(q.as_ref()) => q,
                        _ => {
                            return Err(Error::Invalid(format!(
                                "the query does not parse ({strict}) and has no words to search for"
                            )))
                        }
                    },
                }
            }
        };
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, text_query.box_clone())];
        if let Some(id) = &query.conversation {
            // Its own documents, and its parents' before each fork point.
            let mut pieces: Vec<(Occur, Box<dyn Query>)> = Vec::new();
            let mut limit = u64::MAX;
            for (owner, point) in store.lineage(id)? {
                let own = term_query(f.conv, &owner.hex());
                let part: Box<dyn Query> = if limit == u64::MAX {
                    own
                } else {
                    Box::new(BooleanQuery::new(vec![
                        (Occur::Must, own),
                        (
                            Occur::Must,
                            Box::new(RangeQuery::new(
                                Bound::Unbounded,
                                Bound::Excluded(Term::from_field_u64(f.seq, limit)),
                            )),
                        ),
                    ]))
                };
                pieces.push((Occur::Should, part));
                limit = point.map_or(0, |p| p.at).min(limit);
                if limit == 0 {
                    break;
                }
            }
            clauses.push((Occur::Must, Box::new(BooleanQuery::new(pieces))));
        }
        if !query.kinds.is_empty() {
            let kinds = query
                .kinds
                .iter()
                .map(|k| (Occur::Should, term_query(f.kind, k.as_str())))
                .collect();
            clauses.push((Occur::Must, Box::new(BooleanQuery::new(kinds))));
        }
        if let Some(since) = query.since {
            clauses.push((
                Occur::Must,
                Box::new(RangeQuery::new(
                    Bound::Included(Term::from_field_i64(f.time, since.as_micros())),
                    Bound::Unbounded,
                )),
            ));
        }
        let full = BooleanQuery::new(clauses);
        let top = searcher
            .search(
                &full,
                &TopDocs::with_limit(
                    query.limit.clamp(
                        1,
                        usize::try_from(searcher.num_docs())
                            .unwrap_or(usize::MAX)
                            .max(1),
                    ),
                )
                .order_by_score(),
            )
            .map_err(err)?;
        let snippets = SnippetGenerator::create(&searcher, &*text_query, f.text).map_err(err)?;
        let mut views: HashMap<ConversationId, Arc<Resolution>> = HashMap::new();
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address).map_err(err)?;
            let text_of = |field: Field| {
                doc.get_first(field)
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
                    .unwrap_or_default()
            };
            let u64_of = |field: Field| doc.get_first(field).and_then(|v| v.as_u64()).unwrap_or(0);
            let owner = ConversationId::from_hex(&text_of(f.conv))
                .ok_or_else(|| err("a document names no conversation"))?;
            let conversation = query.conversation.unwrap_or(owner);
            let (seq, turn) = (u64_of(f.seq), u64_of(f.turn));
            let kind = EventType::from_name(&text_of(f.kind))
                .ok_or_else(|| err("a document names no event type"))?;
            let hit = (|| -> Result<Hit> {
                let record = store.record(&conversation, seq)?;
                let text = indexed_text(&record.event).unwrap_or_default();
                let snippet = snippets.snippet(&text);
                if let std::collections::hash_map::Entry::Vacant(slot) = views.entry(conversation) {
                    slot.insert(self.resolution(store, &conversation)?);
                }
                let resolution = &views[&conversation];
                let tool = match &record.event.kind {
                    EventKind::ToolCall { name, .. } => Some(name.clone()),
                    EventKind::ToolResult { id, .. } => {
                        self.call_name(&searcher, store, &conversation, id)?
                    }
                    _ => None,
                };
                let visibility = disposition(resolution, turn, kind, tool.as_deref());
                Ok(Hit {
                    conversation,
                    name: store.info(&conversation)?.name,
                    seq,
                    turn,
                    kind,
                    score,
                    time: record.event.timestamp,
                    snippet: snippet.fragment().to_owned(),
                    highlights: snippet
                        .highlighted()
                        .iter()
                        .map(|r| (r.start, r.end))
                        .collect(),
                    visibility,
                })
            })();
            match hit {
                Ok(hit) => hits.push(hit),
                // Deleted since the index was caught up: not a hit.
                Err(_) if deleted(store, &conversation) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(hits)
    }

    /// `id`'s overlays resolved over its whole log, kept per head.
    fn resolution(&self, store: &Store, id: &ConversationId) -> Result<Arc<Resolution>> {
        let info = store.info(id)?;
        let kept = |r: &Mutex<HashMap<ConversationId, (Address, Arc<Resolution>)>>| {
            r.lock().ok().and_then(|m| {
                m.get(id)
                    .filter(|(head, _)| *head == info.head)
                    .map(|(_, r)| Arc::clone(r))
            })
        };
        if let Some(resolution) = kept(&self.resolutions) {
            return Ok(resolution);
        }
        let last_turn = match info.len {
            0 => None,
            len => Some(store.turn_of(id, Seq(len - 1))?.0),
        };
        let overlays = pipeline::overlays_under(store, id, info.len, None)?;
        let resolution = Arc::new(resolve(overlays, last_turn));
        if let Ok(mut map) = self.resolutions.lock() {
            if map.len() >= RESOLUTIONS_KEPT {
                map.clear();
            }
            map.insert(*id, (info.head, Arc::clone(&resolution)));
        }
        Ok(resolution)
    }

    /// The name of the latest call with id `call` in `id`'s log (through
    /// the index: its documents carry calls' ids and names).
    fn call_name(
        &self,
        searcher: &tantivy::Searcher,
        store: &Store,
        id: &ConversationId,
        call: &str,
    ) -> Result<Option<String>> {
        let f = &self.fields;
        let mut best: Option<(u64, String)> = None;
        let mut limit = u64::MAX;
        for (owner, point) in store.lineage(id)? {
            let q = BooleanQuery::new(vec![
                (Occur::Must, term_query(f.conv, &owner.hex())),
                (Occur::Must, term_query(f.call, call)),
                (Occur::Must, term_query(f.kind, "tool_call")),
            ]);
            for (_, address) in searcher
                .search(&q, &TopDocs::with_limit(10_000).order_by_score())
                .map_err(err)?
            {
                let doc: TantivyDocument = searcher.doc(address).map_err(err)?;
                let seq = doc.get_first(f.seq).and_then(|v| v.as_u64()).unwrap_or(0);
                let name = doc
                    .get_first(f.name)
                    .and_then(|v| v.as_str())
                    .unwrap_or("unknown")
                    .to_owned();
                if seq < limit && best.as_ref().is_none_or(|(s, _)| seq > *s) {
                    best = Some((seq, name));
                }
            }
            limit = point.map_or(0, |p| p.at).min(limit);
            if limit == 0 {
                break;
            }
        }
        Ok(best.map(|(_, name)| name))
    }
}

/// Whether conversation `id` is gone from `store` (deleted since the
/// reader looked).
fn deleted(store: &Store, id: &ConversationId) -> bool {
    matches!(
        store.info(id),
        Err(convstore_store::StoreError::NoSuchConversation { .. })
    )
}

fn term_query(field: Field, text: &str) -> Box<dyn Query> {
    Box::new(TermQuery::new(
        Term::from_field_text(field, text),
        IndexRecordOption::Basic,
    ))
}

fn commit(writer: &mut IndexWriter, payload: &Payload) -> Result<()> {
    let text = serde_json::to_string(payload).map_err(err)?;
    let mut prepared = writer.prepare_commit().map_err(err)?;
    prepared.set_payload(&text);
    prepared.commit().map_err(err)?;
    Ok(())
}

/// Deletes the index in `dir` and builds it again from every
/// conversation's log (for `None`, builds one in memory).
pub fn rebuild(dir: Option<&Path>, store: &Store) -> Result<(SearchIndex, CaughtUp)> {
    if let Some(dir) = dir {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
    }
    let index = SearchIndex::open(dir)?;
    let done = index.catch_up(store, None)?;
    Ok((index, done))
}

/// What a use of a [`SearchIndex`] built anew meanwhile fails with (in
/// [`Error::Search`]): the engine then takes the new one.
pub const REBUILT: &str = "it was built anew while in use; try again";

/// What [`SearchIndex::retire`] holds: no use of the retired index
/// starts until it is dropped.
#[must_use = "the index may be used again once this is dropped"]
pub struct Retiring<'a> {
    _in_use: std::sync::RwLockWriteGuard<'a, ()>,
    _writing: std::sync::MutexGuard<'a, ()>,
}

/// What `verify` found in the index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexCheck {
    /// Conversations whose documents match the log.
    pub conversations: u64,
    /// Documents checked.
    pub documents: u64,
    /// Conversations indexed short of their log (an interrupted update).
    pub behind: u64,
    /// Records not indexed yet.
    pub behind_records: u64,
    /// The first disagreement, if any.
    pub problem: Option<String>,
    /// Whether the index could not be opened at all (`problem` then says
    /// so, naming `convstore reindex`).
    pub unreadable: bool,
}

/// The most hits the faces (the command line, the server) let a search
/// return; the engine returns up to `limit`, at most one per document.
pub const LIMIT_MAX: usize = 10_000;

/// The longest query, in characters.
pub const QUERY_MAX_CHARS: usize = 10_000;

/// How deep a query's parentheses may nest (tantivy's parser recurses
/// into each level: thousands would overflow a thread's stack).
pub const QUERY_MAX_DEPTH: usize = 32;

/// Refuses a query the index should not be asked: a text over [`QUERY_MAX_CHARS`] characters or nesting
/// parentheses deeper than [`QUERY_MAX_DEPTH`] (outside quotes).
fn check_query(query: &SearchQuery) -> Result<()> {
    if query.text.chars().count() > QUERY_MAX_CHARS {
        return Err(Error::Invalid(format!(
            "the query is longer than {QUERY_MAX_CHARS} characters"
        )));
    }
    let (mut depth, mut deepest, mut quoted) = (0usize, 0usize, false);
    for c in query.text.chars() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' if !quoted => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > QUERY_MAX_DEPTH {
        return Err(Error::Invalid(format!(
            "the query nests parentheses {deepest} deep (at most {QUERY_MAX_DEPTH})"
        )));
    }
    Ok(())
}

/// A search.
#[derive(Debug, Clone)]
pub struct SearchQuery {
    /// The query, in tantivy's syntax: words (all must match), `"a
    /// phrase"`, `-word`, `a OR b`.
    pub text: String,
    /// Only this conversation (with the records it shares with its
    /// parents).
    pub conversation: Option<ConversationId>,
    /// Only these event types.
    pub kinds: Vec<EventType>,
    /// Only records at or after this time.
    pub since: Option<Timestamp>,
    /// How many hits.
    pub limit: usize,
}

/// Whether a record is in the current view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Visibility {
    /// In the view as it is.
    Visible,
    /// In the view, its arguments or content stripped.
    Stripped,
    /// Not in the view: reasoning stripped, or calls and results omitted.
    Dropped,
    /// Replaced by a summary of these turns.
    Summarized(u64, u64),
    /// Never in a view (a compaction).
    Overlay,
}

impl Hit {
    /// As `search --json` prints it, and the server answers it: the
    /// conversation's id in hex, the kind's name, `timestamp` in RFC 3339,
    /// `view` (`visible`, `stripped`, `dropped`, `summarized`, `overlay`)
    /// and, for a summarized record, `summarized_turns`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "conversation": self.conversation.hex(),
            "name": self.name,
            "seq": self.seq,
            "turn": self.turn,
            "kind": self.kind.as_str(),
            "timestamp": self.time.to_string(),
            "score": self.score,
            "snippet": self.snippet,
            "highlights": self.highlights,
            "view": self.visibility.as_str(),
            "summarized_turns": match self.visibility {
                Visibility::Summarized(a, b) => Some([a, b]),
                _ => None,
            },
        })
    }

    /// A hit read back from [`Hit::to_json`]'s form (`None` if it is not
    /// one).
    pub fn from_json(value: &serde_json::Value) -> Option<Hit> {
        let text = |key: &str| value.get(key).and_then(serde_json::Value::as_str);
        let number = |key: &str| value.get(key).and_then(serde_json::Value::as_u64);
        let visibility = match text("view")? {
            "visible" => Visibility::Visible,
            "stripped" => Visibility::Stripped,
            "dropped" => Visibility::Dropped,
            "overlay" => Visibility::Overlay,
            "summarized" => {
                let turns = value.get("summarized_turns")?.as_array()?;
                Visibility::Summarized(turns.first()?.as_u64()?, turns.get(1)?.as_u64()?)
            }
            _ => return None,
        };
        Some(Hit {
            conversation: ConversationId::from_hex(text("conversation")?)?,
            name: text("name").map(str::to_owned),
            seq: number("seq")?,
            turn: number("turn")?,
            kind: EventType::from_name(text("kind")?)?,
            score: value.get("score")?.as_f64()? as f32,
            time: Timestamp::parse_rfc3339(text("timestamp")?)?,
            snippet: text("snippet")?.to_owned(),
            highlights: serde_json::from_value(value.get("highlights")?.clone()).ok()?,
            visibility,
        })
    }
}

impl Visibility {
    /// `visible`, `stripped`, `dropped`, `summarized`, `overlay`.
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Visible => "visible",
            Visibility::Stripped => "stripped",
            Visibility::Dropped => "dropped",
            Visibility::Summarized(..) => "summarized",
            Visibility::Overlay => "overlay",
        }
    }
}

/// What the view does to a record of `kind` in `turn` (a call or result
/// of tool `tool`), by the resolution of its overlays: the rules of
/// SPEC §4 as the projector applies them (`Projector::transform`).
pub fn disposition(
    resolution: &Resolution,
    turn: u64,
    kind: EventType,
    tool: Option<&str>,
) -> Visibility {
    if kind == EventType::Compaction {
        return Visibility::Overlay;
    }
    if !kind.is_conversation() {
        return Visibility::Visible;
    }
    let Some(span) = resolution.span(turn) else {
        return Visibility::Visible;
    };
    let overlays = &resolution.overlays;
    if let Some(Summary::Text(_)) = span.summary.and_then(|i| overlays[i].summary.as_ref()) {
        let run = resolution
            .runs
            .iter()
            .find(|r| r.first <= turn && turn <= r.last)
            .map_or((turn, turn), |r| (r.first, r.last));
        return Visibility::Summarized(run.0, run.1);
    }
    let reasoning = span.reasoning.and_then(|i| overlays[i].reasoning);
    let tools = span
        .tool_calls
        .and_then(|i| overlays[i].tool_calls.as_ref());
    let name = tool.unwrap_or("unknown");
    match kind {
        EventType::Reasoning if reasoning == Some(ReasoningPolicy::Strip) => Visibility::Dropped,
        EventType::ToolCall | EventType::ToolResult if tools == Some(&ToolPolicy::Omit) => {
            Visibility::Dropped
        }
        EventType::ToolCall if tools.is_some_and(|t| t.strips_request(name)) => {
            Visibility::Stripped
        }
        EventType::ToolResult if tools.is_some_and(|t| t.strips_response(name)) => {
            Visibility::Stripped
        }
        _ => Visibility::Visible,
    }
}

/// A search hit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hit {
    /// The conversation (the one searched, for a search limited to one).
    pub conversation: ConversationId,
    /// Its name.
    pub name: Option<String>,
    /// The record's seq.
    pub seq: u64,
    /// Its turn.
    pub turn: u64,
    /// Its event type.
    pub kind: EventType,
    /// BM25 score.
    pub score: f32,
    /// Its timestamp.
    pub time: Timestamp,
    /// A fragment of its text around the matches.
    pub snippet: String,
    /// Byte ranges of the matches in `snippet`.
    pub highlights: Vec<(usize, usize)>,
    /// Whether the current view shows it.
    pub visibility: Visibility,
}
