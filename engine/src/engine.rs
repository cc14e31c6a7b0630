//! [`Engine`]: a database opened from a [`Location`], with the
//! configuration and secrets its operations use.

use convstore_projection::config::{Config, RetentionConfig};
use convstore_projection::{Tokenizer, ViewEvent};
use convstore_store::{
    json, AppendOptions, Appended, ConversationId, Deletion, DroppedPayloads, Event, OpenOptions,
    Store, StoreError, Timestamp, VerifyFailure, VerifyReport, ViewState,
};

use crate::auto::{self, AutoReport};
use crate::compact::{self, CompactReport, CompactRequest};
use crate::diff;
use crate::error::{Error, Result};
use crate::explain::{self, Explanation};
use crate::fork::{self, ForkAt, Forked};
use crate::location::Location;
use crate::pipeline::{self, AsOf, Scope};
use crate::retention::{self, Retention};
use crate::search::{self, CaughtUp, Hit, IndexCheck, SearchIndex, SearchQuery};
use crate::summarizers::Secrets;
use crate::views::{self, Refresh};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

/// A convstore database and what its operations need: the configuration
/// (profiles, per-tool hints, automatic compaction) and the secrets of
/// summarizers. Shareable between threads (`&Engine` is enough for every
/// operation); one process at a time may have a database directory open.
pub struct Engine {
    store: Arc<Store>,
    config: Config,
    secrets: Secrets,
    /// The search index, opened when first needed.
    search: Mutex<Option<Arc<SearchIndex>>>,
    /// Why the index could not be brought up to date after the last write
    /// (the write itself stood).
    index_error: Mutex<Option<String>>,
    /// Held shared by each deletion under way, exclusively by a check of
    /// the search index: a deletion's documents leave the index before its
    /// conversation leaves the log, and a catch-up in between may index
    /// some again until the deletion forgets them once more; a check sees
    /// neither half-way state.
    deletions: std::sync::RwLock<()>,
    /// What `[retention]` did after the last compaction, or why it could
    /// not (the compaction itself stood).
    retention_outcome: Mutex<Option<std::result::Result<DroppedPayloads, String>>>,
    /// Who is told of each write ([`Engine::subscribe`]).
    listeners: Arc<Mutex<Vec<Sender<ConversationId>>>>,
    /// Whether writes by other processes sharing the backend are passed
    /// on to the listeners (started with the first subscriber).
    remote: std::sync::Once,
    /// Whether [`Engine::after_write`] brings the search index up to date.
    index_on_write: bool,
    /// Where derived data of a database without a directory of its own
    /// (PostgreSQL) is kept: its search index, under `search/ID`.
    cache_dir: Option<std::path::PathBuf>,
}

/// A write that leaves the search index more records behind than this
/// leaves the catch-up to the next search (or `reindex`): an import of a
/// million events is not made to wait for tantivy.
pub const INDEX_ON_WRITE_MAX: u64 = 50_000;

/// What `verify` found: the report, the number of stored views checked,
/// or the first failure.
pub type Verification = std::result::Result<(VerifyReport, u64), VerifyFailure>;

impl Engine {
    /// Opens the database at `location`, with the default configuration
    /// and no secrets.
    pub fn open(location: &Location, options: &OpenOptions) -> Result<Engine> {
        let store = match location {
            Location::Path(path) => Store::open_with(path, options)?,
            Location::Postgres(_) if options.encryption.is_some() => {
                return Err(Error::Invalid(
                    "encryption at rest is for a database directory; a database server \
                     encrypts its own storage"
                        .to_owned(),
                ))
            }
            Location::Postgres(url) => {
                use convstore_store::backend::postgres::{PgBackend, Setup};
                let setup = if options.create {
                    Setup::Create
                } else {
                    Setup::Existing
                };
                Store::with_backend(std::sync::Arc::new(PgBackend::connect(url, setup)?))?
            }
        };
        Ok(Engine::from_store(store))
    }

    /// An engine over a store opened already.
    pub fn from_store(store: Store) -> Engine {
        Engine {
            store: Arc::new(store),
            config: Config::default(),
            secrets: Secrets::none(),
            search: Mutex::new(None),
            index_error: Mutex::new(None),
            deletions: std::sync::RwLock::new(()),
            retention_outcome: Mutex::new(None),
            listeners: Arc::new(Mutex::new(Vec::new())),
            remote: std::sync::Once::new(),
            index_on_write: true,
            cache_dir: None,
        }
    }

    /// With `dir` for derived data of a database that has no directory of
    /// its own (PostgreSQL): its search index goes to `dir/search/ID`, ID
    /// being the database's id. Without it such an index is kept in
    /// memory, built again by each process.
    #[must_use]
    pub fn with_cache_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Engine {
        self.cache_dir = Some(dir.into());
        self
    }

    /// Where the search index is kept: `search/` in the database
    /// directory, else under the cache directory, else nowhere (memory).
    pub fn index_dir(&self) -> Result<Option<std::path::PathBuf>> {
        if let Some(path) = self.store.path() {
            return Ok(Some(path.join(search::DIR)));
        }
        match &self.cache_dir {
            Some(cache) => {
                let id = self.store.database_id()?;
                Ok(Some(cache.join(search::DIR).join(id.to_string())))
            }
            None => Ok(None),
        }
    }

    /// Whether writes bring the search index up to date right after their
    /// commit (the default). Without, the index stays behind until the
    /// next search or `reindex` catches it up: for a process that cannot
    /// afford tantivy's writer (under a tight memory limit an allocation
    /// failure aborts the process, which must not follow a stored write).
    #[must_use]
    pub fn with_index_on_write(mut self, on: bool) -> Engine {
        self.index_on_write = on;
        self
    }

    /// With this configuration.
    #[must_use]
    pub fn with_config(mut self, config: Config) -> Engine {
        self.config = config;
        self
    }

    /// With these secrets for summarizers.
    #[must_use]
    pub fn with_secrets(mut self, secrets: Secrets) -> Engine {
        self.secrets = secrets;
        self
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The secrets summarizers use.
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// Appends `events` to `id`, atomically and durably (see
    /// [`Store::append`]), then brings the search index up to date and
    /// tells the listeners ([`Engine::after_write`]).
    pub fn append(
        &self,
        id: &ConversationId,
        events: &[Event],
        options: &AppendOptions,
    ) -> Result<Appended> {
        let appended = self.store.append(id, events, options)?;
        self.after_write(id);
        if events
            .iter()
            .any(|e| matches!(e.kind, convstore_store::EventKind::Compaction(_)))
        {
            self.after_compaction(id);
        }
        Ok(appended)
    }

    /// The hook every write goes through once it is committed: the search
    /// index catches up with `id` (what it gained since its marker), and
    /// the listeners ([`Engine::subscribe`]) are told. The write stands
    /// whatever happens here: an index that cannot be updated is noted
    /// ([`Engine::take_index_error`]) and caught up by the next write or
    /// search, or rebuilt by `reindex`.
    pub fn after_write(&self, id: &ConversationId) {
        self.index_written(std::slice::from_ref(id));
        self.tell_listeners(id);
    }

    /// The search index's half of [`Engine::after_write`], for several
    /// conversations in one commit of the index: a process that writes
    /// often (the server) tells its listeners of each write at once and
    /// catches the index up with a group of them now and then, since each
    /// commit of the index costs far more than a small append.
    pub fn index_written(&self, ids: &[ConversationId]) {
        // Derived data never fails a write that is stored: an error, or a
        // panic in the index library, becomes a note.
        let updated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if !self.index_on_write || ids.is_empty() || self.store.is_encrypted() {
                return Ok(None);
            }
            self.with_index(|index| {
                let mut near = Vec::with_capacity(ids.len());
                for id in ids {
                    match index.behind(&self.store, id) {
                        Ok(behind) if behind <= INDEX_ON_WRITE_MAX => near.push(*id),
                        // Far behind (the next search catches it up), or
                        // deleted since it was written: nothing to index now.
                        Ok(_)
                        | Err(Error::Store(convstore_store::StoreError::NoSuchConversation {
                            ..
                        })) => {}
                        Err(e) => return Err(e),
                    }
                }
                if near.is_empty() {
                    return Ok(None);
                }
                // Another process updating the index indexes this write too,
                // or the next write or search does.
                index.catch_up_within(
                    &self.store,
                    Some(&near),
                    std::time::Duration::from_millis(200),
                )
            })
        }))
        .unwrap_or_else(|_| Err(Error::Search("the index library panicked".to_owned())));
        if let Err(e) = updated {
            if let Ok(mut slot) = self.index_error.lock() {
                *slot = Some(e.to_string());
            }
        }
    }

    /// The listeners' half of [`Engine::after_write`]: tells every
    /// subscriber ([`Engine::subscribe`]) that `id` was written.
    pub fn tell_listeners(&self, id: &ConversationId) {
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.retain(|l| l.send(*id).is_ok());
        }
    }

    /// Why the search index could not be updated after the last write, if
    /// it could not (the write itself was stored).
    pub fn take_index_error(&self) -> Option<String> {
        self.index_error.lock().ok().and_then(|mut e| e.take())
    }

    /// A channel told the id of every conversation written through this
    /// engine, once the write is committed, and, on a backend shared with
    /// other processes (PostgreSQL), of the conversations they append to,
    /// as the backend hears of it (a hint: every conversation is named
    /// again after hints may have been missed).
    pub fn subscribe(&self) -> Receiver<ConversationId> {
        self.remote.call_once(|| {
            let Some(changes) = self.store.backend().changes() else {
                return;
            };
            // Weak: the thread ends with the engine.
            let store = Arc::downgrade(&self.store);
            let listeners = Arc::downgrade(&self.listeners);
            let _ = std::thread::Builder::new()
                .name("convstore-changes".to_owned())
                .spawn(move || {
                    while let Ok(change) = changes.recv() {
                        let (Some(store), Some(listeners)) = (store.upgrade(), listeners.upgrade())
                        else {
                            return;
                        };
                        let ids = match change {
                            convstore_store::backend::Change::Appended { id, .. } => vec![id],
                            convstore_store::backend::Change::Unknown => store
                                .conversations()
                                .map(|all| all.into_iter().map(|c| c.id).collect())
                                .unwrap_or_default(),
                        };
                        let Ok(mut listeners) = listeners.lock() else {
                            return;
                        };
                        for id in ids {
                            listeners.retain(|l| l.send(id).is_ok());
                        }
                    }
                });
        });
        let (sender, receiver) = std::sync::mpsc::channel();
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.push(sender);
        }
        receiver
    }

    /// The search index of this database (`search/` in its directory),
    /// opened (or created, empty) on first use.
    pub fn search_index(&self) -> Result<Arc<SearchIndex>> {
        self.refuse_index()?;
        let mut slot = self
            .search
            .lock()
            .map_err(|_| Error::Search("a thread panicked with it".to_owned()))?;
        if let Some(index) = &*slot {
            return Ok(Arc::clone(index));
        }
        let index = Arc::new(SearchIndex::open(self.index_dir()?.as_deref())?);
        *slot = Some(Arc::clone(&index));
        Ok(index)
    }

    /// An encrypted database keeps no search index: tantivy would store
    /// its texts in clear, beside the sealed log.
    fn refuse_index(&self) -> Result<()> {
        if self.store.is_encrypted() {
            return Err(Error::Store(convstore_store::StoreError::Encrypted {
                what: "an encrypted database keeps no search index (it would hold the texts in \
                       clear)"
                    .to_owned(),
            }));
        }
        Ok(())
    }

    /// Searches every conversation (or one), after catching the index up
    /// with every log.
    pub fn search(&self, query: &SearchQuery) -> Result<Vec<Hit>> {
        self.with_index(|index| {
            index.catch_up(&self.store, None)?;
            index.search(&self.store, query)
        })
    }

    /// Compares two views (see [`diff::diff`]).
    pub fn diff(&self, a: &diff::Side, b: &diff::Side) -> Result<diff::Diff> {
        diff::diff(&self.store, a, b, &self.config, &self.secrets)
    }

    /// Deletes the search index and builds it again from every log.
    pub fn reindex(&self) -> Result<CaughtUp> {
        self.refuse_index()?;
        let mut slot = self
            .search
            .lock()
            .map_err(|_| Error::Search("a thread panicked with it".to_owned()))?;
        // Uses of the index under way end first, and those that had it
        // already take the new one (`with_index`): none meets its files
        // half deleted or half built.
        let old = slot.take();
        let _retiring = old.as_deref().map(SearchIndex::retire);
        let (index, done) = search::rebuild(self.index_dir()?.as_deref(), &self.store)?;
        *slot = Some(Arc::new(index));
        Ok(done)
    }

    /// Runs `f` with the search index, with the new one if `reindex` built
    /// it anew while `f` had the old one.
    fn with_index<T>(&self, f: impl Fn(&SearchIndex) -> Result<T>) -> Result<T> {
        let mut tries = 0;
        loop {
            let index = self.search_index()?;
            match f(&index) {
                Err(Error::Search(m)) if m == search::REBUILT && tries < 8 => tries += 1,
                done => return done,
            }
        }
    }

    /// Compares the search index with the logs (see [`SearchIndex::check`]).
    /// A database without an index has nothing to compare (`None`).
    pub fn check_index(&self, id: Option<&ConversationId>) -> Result<Option<IndexCheck>> {
        let exists = match self.index_dir()? {
            Some(dir) => SearchIndex::exists(&dir),
            // An index in memory exists once it was opened.
            None => self.search.lock().is_ok_and(|slot| slot.is_some()),
        };
        if !exists {
            return Ok(None);
        }
        if let Err(e) = self.search_index() {
            return Ok(Some(IndexCheck {
                problem: Some(e.to_string()),
                unreadable: true,
                ..IndexCheck::default()
            }));
        }
        // The lock guards no data: one a panic poisoned is as good.
        let _no_deletion = self
            .deletions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.with_index(|index| index.check(&self.store, id))
            .map(Some)
    }

    /// The scope of `id`'s log as of a point (the whole log for `None`).
    pub fn scope(&self, id: &ConversationId, as_of: Option<AsOf>) -> Result<Scope> {
        Scope::as_of(&self.store, id, as_of)
    }

    /// Calls `sink` with each event of `id`'s view, in order, as of a point
    /// (streamed: memory does not grow with the log).
    pub fn project(
        &self,
        id: &ConversationId,
        as_of: Option<AsOf>,
        sink: impl FnMut(&ViewEvent) -> Result<()>,
    ) -> Result<()> {
        let scope = self.scope(id, as_of)?;
        let projector = pipeline::plan(&self.store, id, scope, None)?;
        pipeline::stream(&self.store, id, scope, &projector, sink)
    }

    /// Compacts `id` as `request` says (see [`compact::compact`]).
    pub fn compact(
        &self,
        id: &ConversationId,
        request: &CompactRequest,
        tokenizer: &Tokenizer,
    ) -> Result<CompactReport> {
        let report = compact::compact(
            &self.store,
            id,
            request,
            &self.config,
            tokenizer,
            &self.secrets,
        )?;
        if report.head.is_some() {
            self.after_write(id);
            self.after_compaction(id);
        }
        Ok(report)
    }

    /// Compacts `id` automatically if its view needs it, as the
    /// configuration's `[compaction.auto]` says (see [`auto::run`]).
    pub fn auto_compact(&self, id: &ConversationId, no_sync: bool) -> Result<Option<AutoReport>> {
        let report = auto::run(&self.store, id, &self.config, &self.secrets, no_sync)?;
        if report.is_some() {
            self.after_write(id);
            self.after_compaction(id);
        }
        Ok(report)
    }

    /// Brings materialized view `name` of `id` up to date, creating it
    /// (with `profile`) if need be.
    pub fn refresh_view(
        &self,
        id: &ConversationId,
        name: &str,
        profile: Option<&str>,
    ) -> Result<(ViewState, Refresh)> {
        views::refresh(&self.store, id, name, profile)
    }

    /// Refreshes view `name` of `id`, then calls `sink` with its events.
    pub fn read_view(
        &self,
        id: &ConversationId,
        name: &str,
        sink: impl FnMut(ViewEvent) -> Result<()>,
    ) -> Result<ViewState> {
        let (state, _) = self.refresh_view(id, name, None)?;
        views::read(&self.store, id, name, sink)?;
        Ok(state)
    }

    /// Forks `parent` (see [`fork::fork`]).
    pub fn fork(
        &self,
        parent: &ConversationId,
        at: ForkAt,
        name: Option<&str>,
        profile: Option<&str>,
    ) -> Result<Forked> {
        let forked = fork::fork(
            &self.store,
            parent,
            at,
            name,
            profile,
            &self.config,
            &self.secrets,
        )?;
        self.after_write(&forked.id);
        Ok(forked)
    }

    /// Drops the payloads `retention` picks from `id`'s own records (see
    /// [`retention::collect`]), and their texts from the search index as
    /// [`Engine::redact`] does. A dry run only counts.
    pub fn gc(
        &self,
        id: &ConversationId,
        retention: &Retention,
        dry_run: bool,
    ) -> Result<DroppedPayloads> {
        let mut dropped = self.gc_pass(id, retention, dry_run)?;
        if dry_run {
            self.count_removed_blobs(vec![(*id, &mut dropped)])?;
        }
        Ok(dropped)
    }

    /// In a dry run, the long texts each of `passes` would remove, the
    /// passes run in that order ([`Store::blobs_removed_together`]).
    fn count_removed_blobs(
        &self,
        mut passes: Vec<(ConversationId, &mut DroppedPayloads)>,
    ) -> Result<()> {
        let would: Vec<_> = passes
            .iter()
            .filter_map(|(id, d)| d.would_drop.as_ref().map(|w| (*id, w)))
            .collect();
        let mut counts = self.store.blobs_removed_together(&would)?.into_iter();
        for (_, dropped) in &mut passes {
            if dropped.would_drop.is_some() {
                dropped.blobs_removed = counts.next().unwrap_or(0);
            }
        }
        Ok(())
    }

    /// [`Engine::gc`], a dry run's long texts not counted.
    fn gc_pass(
        &self,
        id: &ConversationId,
        retention: &Retention,
        dry_run: bool,
    ) -> Result<DroppedPayloads> {
        // Texts the index would keep after the log dropped them: nothing
        // is dropped if the index cannot forget them first.
        let mut unforgotten = None;
        let collected = retention::collect(&self.store, id, retention, dry_run, &mut || {
            self.forget_in_index(&[*id], true).map_err(|note| {
                let stop = StoreError::Io(std::io::Error::other(note.clone()));
                unforgotten = Some(note);
                stop
            })
        });
        if let Some(note) = unforgotten {
            return Err(kept_by_index(&note, "dropped"));
        }
        let dropped = collected?;
        if !dry_run && dropped.records > 0 {
            // A write meanwhile may have indexed it again.
            let _ = self.forget_in_index(&[*id], true);
            self.after_write(id);
        }
        Ok(dropped)
    }

    /// Runs `retention` over `target` (every conversation for `None`),
    /// each conversation's own records, and says what went as `gc --json`
    /// prints it: the policy's reason, per conversation that lost
    /// payloads (or the one named) the records, bytes, seqs, blobs and
    /// view blocks, and the totals.
    pub fn gc_report(
        &self,
        target: Option<&ConversationId>,
        retention: &Retention,
        dry_run: bool,
    ) -> Result<serde_json::Value> {
        let targets = match target {
            Some(id) => vec![(*id, self.store.info(id)?.name)],
            None => self
                .store
                .conversations()?
                .into_iter()
                .map(|c| (c.id, c.name))
                .collect(),
        };
        let mut passes = Vec::new();
        for (id, name) in targets {
            match self.gc_pass(&id, retention, dry_run) {
                Ok(dropped) => passes.push((id, name, dropped)),
                // Deleted since the list was taken (by another client of a
                // server): nothing of it is left to drop.
                Err(Error::Store(StoreError::NoSuchConversation { .. }))
                    if target.is_none() && self.store.info(&id).is_err() => {}
                Err(e) => return Err(e),
            }
        }
        if dry_run {
            // A long text several conversations drop goes with the last of
            // them, as the passes run in this order.
            self.count_removed_blobs(passes.iter_mut().map(|(id, _, d)| (*id, d)).collect())?;
        }
        let mut conversations = Vec::new();
        let (mut records, mut bytes, mut blobs) = (0, 0, 0);
        for (id, name, dropped) in passes {
            records += dropped.records;
            bytes += dropped.bytes;
            blobs += dropped.blobs_removed;
            if dropped.records > 0 || target.is_some() {
                conversations.push(serde_json::json!({
                    "id": id.hex(),
                    "name": name,
                    "records": dropped.records,
                    "bytes": dropped.bytes,
                    "first_seq": dropped.seqs.map(|s| s.0),
                    "last_seq": dropped.seqs.map(|s| s.1),
                    "blobs_removed": dropped.blobs_removed,
                    "view_blocks": dropped.view_blocks,
                    "unfinished": dropped.unfinished,
                }));
            }
        }
        Ok(serde_json::json!({
            "dry_run": dry_run,
            "reason": retention.reason(),
            "conversations": conversations,
            "records": records,
            "bytes": bytes,
            "blobs_removed": blobs,
        }))
    }

    /// Runs `[retention]` on `id` if it says to after a compaction. The
    /// compaction stands whatever happens here: a failure is noted
    /// ([`Engine::take_retention_error`]).
    pub fn after_compaction(&self, id: &ConversationId) {
        self.retain_after_compaction(id, &self.config.retention);
    }

    /// [`Engine::after_compaction`] with `settings` in place of the
    /// engine's configuration.
    pub fn retain_after_compaction(&self, id: &ConversationId, settings: &RetentionConfig) {
        if !settings.after_compaction {
            return;
        }
        let ran = Retention::new(settings, None, false).and_then(|r| self.gc(id, &r, false));
        if let Ok(mut slot) = self.retention_outcome.lock() {
            *slot = Some(ran.map_err(|e| e.to_string()));
        }
    }

    /// Why `[retention]` could not run after the last compaction, if it
    /// could not (the compaction itself was stored).
    pub fn take_retention_error(&self) -> Option<String> {
        self.take_retention().and_then(std::result::Result::err)
    }

    /// What `[retention]` did after the last compaction, or why it could
    /// not, if it ran.
    pub fn take_retention(&self) -> Option<std::result::Result<DroppedPayloads, String>> {
        self.retention_outcome
            .lock()
            .ok()
            .and_then(|mut e| e.take())
    }

    /// Deletes `id` for good (with its forks if `with_forks`; see
    /// [`Store::delete`]) and its documents in the search index. The
    /// deletion stands whatever happens to the index (noted as for a
    /// write, [`Engine::take_index_error`]; `reindex` rebuilds it).
    pub fn delete(&self, id: &ConversationId, with_forks: bool) -> Result<Deletion> {
        // The documents go first, so that a process killed in between
        // leaves an index behind the log (caught up by the next search)
        // rather than one holding a conversation the database lacks.
        let _deleting = self
            .deletions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut ids = vec![*id];
        ids.extend(self.store.forks_of(id)?);
        if with_forks || ids.len() == 1 {
            let _ = self.forget_in_index(&ids, false);
        }
        let deletion = self.store.delete(id, with_forks)?;
        let ids: Vec<ConversationId> = deletion.conversations.iter().map(|c| c.id).collect();
        // A write meanwhile may have indexed one again.
        let _ = self.forget_in_index(&ids, true);
        if let Ok(mut listeners) = self.listeners.lock() {
            for id in &ids {
                listeners.retain(|l| l.send(*id).is_ok());
            }
        }
        Ok(deletion)
    }

    /// Redacts `field` of record `seq` of `id` ([`Store::redact`]) and
    /// the text from the search index: the documents of the conversation
    /// holding the record go first (a process killed in between leaves
    /// the index behind the log, never holding the text after the log
    /// lost it), and the index catches it up from the redacted log.
    pub fn redact(
        &self,
        id: &ConversationId,
        seq: u64,
        field: Option<convstore_store::RedactField>,
        reason: &str,
    ) -> Result<convstore_store::Redaction> {
        // A redaction refused leaves the index as it was.
        self.store.check_redactable(id, seq, field, reason)?;
        let owner = self.store.owner_of(id, seq)?;
        // The index would keep the text after the log lost it: nothing is
        // redacted if it cannot forget it first.
        self.forget_in_index(&[owner], true)
            .map_err(|note| kept_by_index(&note, "redacted"))?;
        let redaction = match self.store.redact(id, seq, field, reason) {
            Ok(redaction) => redaction,
            Err(e) => {
                // Refused after all (a write raced the check) or failed:
                // the log is as it was, and the index catches up with it.
                self.after_write(&owner);
                return Err(e.into());
            }
        };
        // A write meanwhile may have indexed it again.
        let _ = self.forget_in_index(&[redaction.owner], true);
        self.after_write(&redaction.owner);
        if redaction.owner != *id {
            self.after_write(id);
        }
        Ok(redaction)
    }

    /// Drops the documents of `ids` from the search index, if it exists
    /// (`only_indexed`: only if the index holds any of them); a failure is
    /// noted ([`Engine::take_index_error`]).
    fn forget_in_index(
        &self,
        ids: &[ConversationId],
        only_indexed: bool,
    ) -> std::result::Result<(), String> {
        let forgotten = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Some(dir) = self.index_dir()? {
                if !SearchIndex::exists(&dir) {
                    return Ok(true);
                }
            }
            self.with_index(|index| {
                if only_indexed {
                    index.forget_indexed(ids)
                } else {
                    index.forget(ids)
                }
            })
        }))
        .unwrap_or_else(|_| Err(Error::Search("the index library panicked".to_owned())));
        let note = match forgotten {
            Ok(true) => None,
            Ok(false) => Some("another process kept the search index busy".to_owned()),
            Err(e) => Some(e.to_string()),
        };
        match note {
            None => Ok(()),
            Some(note) => {
                if let Ok(mut slot) = self.index_error.lock() {
                    *slot = Some(note.clone());
                }
                Err(note)
            }
        }
    }

    /// What decides `turn` of `id`'s view as of a point.
    pub fn explain(
        &self,
        id: &ConversationId,
        as_of: Option<AsOf>,
        turn: u64,
    ) -> Result<Explanation> {
        explain::explain(&self.store, id, self.scope(id, as_of)?, turn)
    }

    /// Re-hashes every record of `id` (every conversation for `None`) and
    /// checks everything stored beside them, then each stored view
    /// against a fresh projection of the head it records.
    pub fn verify(&self, id: Option<&ConversationId>) -> Result<Verification> {
        let (verified, ids) = match id {
            Some(id) => (self.store.verify(id)?, vec![*id]),
            None => (
                self.store.verify_all()?,
                self.store.conversations()?.iter().map(|c| c.id).collect(),
            ),
        };
        let report = match verified {
            Ok(report) => report,
            Err(failure) => return Ok(Err(failure)),
        };
        let whole = id.is_none();
        let mut views = 0;
        for id in &ids {
            // A deleted conversation a backup still holds.
            if self.store.is_shredded(id)? {
                continue;
            }
            match self.verify_views(id) {
                Ok(Ok(n)) => views += n,
                Ok(Err(failure)) => return Ok(Err(failure)),
                // Deleted since the list was taken (by another client of a
                // server), when verifying the whole database.
                Err(Error::Store(StoreError::NoSuchConversation { .. }))
                    if whole && self.store.info(id).is_err() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Ok((report, views)))
    }

    /// Checks each stored view of `id` against a fresh projection: the
    /// number checked, or the first that differs. A view written while it
    /// was read (a server keeps views current as they are read) is read
    /// again: the check reads its state and its blocks one after another,
    /// so a difference counts only if the view did not change meanwhile.
    fn verify_views(&self, id: &ConversationId) -> Result<std::result::Result<u64, VerifyFailure>> {
        let mut checked = 0;
        for mut state in self.store.views(id)? {
            let mut tries = 0;
            loop {
                let Some(problem) = views::check(&self.store, id, &state)? else {
                    checked += 1;
                    break;
                };
                tries += 1;
                match self.store.view_state(id, &state.name)? {
                    // Dropped meanwhile: nothing left to check.
                    None => break,
                    Some(now) if now != state && tries < 8 => state = now,
                    _ => {
                        return Ok(Err(VerifyFailure {
                            conversation: *id,
                            name: self.store.info(id)?.name,
                            seq: None,
                            problem: format!("view \"{}\": {problem}", state.name),
                        }))
                    }
                }
            }
        }
        Ok(Ok(checked))
    }
}

/// A redaction as `redact --json` prints it and the server answers it:
/// `conversation` holds the record (a fork's parent, for a record the fork
/// shares), `by` asked and holds the redaction event.
pub fn redaction_json(
    redaction: &convstore_store::Redaction,
    by: &ConversationId,
) -> serde_json::Value {
    serde_json::json!({
        "conversation": redaction.owner.hex(),
        "by": by.hex(),
        "seq": redaction.seq,
        "field": redaction.field.as_str(),
        "len": redaction.len,
        "hash": redaction.hash.hex(),
        "blob": redaction.blob,
        "blob_removed": redaction.blob_removed,
        "view_blocks": redaction.view_blocks,
        "event_seq": redaction.event.first_seq,
        "head": redaction.event.head.hex(),
    })
}

/// The refusal of a write that would leave texts in the search index
/// after the log lost them (`note`: why the index could not forget them;
/// `done`: what the write would have done to them).
fn kept_by_index(note: &str, done: &str) -> Error {
    Error::Search(format!(
        "cannot drop the conversation's documents ({note}): \
         nothing was {done}, as the index would keep the texts"
    ))
}

/// A verification as `verify --json` prints it and the server answers it,
/// with `message`, the error line, when it failed. One that passed is
/// [`verified_json`]'s, with the search index then checked against the
/// logs (derived data, compared once they are sound): `search_index`
/// holds its documents and how far it is behind (`behind` records in
/// `behind_conversations`), or `null` without an index. One that failed
/// names the record, or says how the index disagrees with the logs.
pub fn verification_json(
    engine: &Engine,
    id: Option<&ConversationId>,
    verification: Verification,
) -> Result<serde_json::Value> {
    let (report, views) = match verification {
        Ok(passed) => passed,
        Err(failure) => {
            return Ok(serde_json::json!({
                "ok": false,
                "conversation": failure.conversation.hex(),
                "name": failure.name,
                "seq": failure.seq,
                "problem": failure.problem,
                "message": format!("verification failed: {failure}"),
            }))
        }
    };
    let mut value = verified_json(engine, id, &report, views)?;
    let index = engine.check_index(id)?;
    if let Some((problem, unreadable)) = index
        .as_ref()
        .and_then(|i| Some((i.problem.as_deref()?, i.unreadable)))
    {
        return Ok(serde_json::json!({
            "ok": false,
            "search_index": problem,
            "message": if unreadable {
                // Already said as the index's own error, naming reindex.
                format!("verification failed: {problem}")
            } else {
                format!(
                    "verification failed: search index: {problem}; \
                     `convstore reindex` rebuilds it from the logs"
                )
            },
        }));
    }
    value["search_index"] = index.map_or(serde_json::Value::Null, |index| {
        serde_json::json!({
            "documents": index.documents,
            "behind": index.behind_records,
            "behind_conversations": index.behind,
        })
    });
    Ok(value)
}

/// An encrypted database verified without its key
/// ([`convstore_engine::store::Store::verify_sealed`]), as JSON in the
/// shape of a verification (`keyless: true`).
pub fn keyless_verification_json(
    store: &convstore_store::Store,
    id: Option<&ConversationId>,
) -> Result<serde_json::Value> {
    Ok(match store.verify_sealed(id)? {
        Ok(report) => serde_json::json!({
            "ok": true,
            "keyless": true,
            "conversations": report.conversations,
            "records": report.records,
            "chunks": report.chunks,
            "sealed_values": report.values,
        }),
        Err(failure) => serde_json::json!({
            "ok": false,
            "keyless": true,
            "conversation": failure.conversation.hex(),
            "name": failure.name,
            "problem": failure.problem,
            "message": format!("verification failed (without the key): {failure}"),
        }),
    })
}

/// A verification that passed, as `verify --json` prints it and the
/// server answers it: the counts, and the redactions of the records
/// verified (of `id` and the ancestors it shares records with, or of
/// every conversation), grouped as they were made: one `redact`, or one
/// retention pass.
fn verified_json(
    engine: &Engine,
    id: Option<&ConversationId>,
    report: &VerifyReport,
    views: u64,
) -> Result<serde_json::Value> {
    let mut redactions = Vec::new();
    if report.redacted > 0 {
        let store = engine.store();
        // Each conversation's own records, an ancestor's only before the
        // point where the line of ancestry leaves it.
        let targets = match id {
            Some(id) => {
                let mut chain = vec![(*id, store.info(id)?.name, u64::MAX)];
                let (mut at, mut end) = (*id, u64::MAX);
                while let Some(point) = store.fork_point(&at)? {
                    end = end.min(point.at);
                    chain.push((point.parent, store.info(&point.parent)?.name, end));
                    at = point.parent;
                }
                chain
            }
            None => store
                .conversations()?
                .into_iter()
                .map(|c| (c.id, c.name, u64::MAX))
                .collect(),
        };
        for (id, name, end) in targets {
            for group in store.redaction_groups_before(&id, end)? {
                redactions.push(serde_json::json!({
                    "conversation": id.hex(),
                    "name": name,
                    "records": group.records,
                    "first_seq": group.first_seq,
                    "last_seq": group.last_seq,
                    "time": group.time.to_string(),
                    "reason": group.reason,
                    "by": group.by.hex(),
                }));
            }
        }
    }
    Ok(serde_json::json!({
        "ok": true,
        "conversations": report.conversations,
        "records": report.records,
        "blobs": report.blobs,
        "views": views,
        "redacted": report.redacted,
        "redacted_proven": report.redacted_proven,
        "redactions": redactions,
        "shredded": report.shredded,
    }))
}

/// A deletion as `delete --json` prints it and the server answers it.
pub fn deletion_json(deletion: &Deletion) -> serde_json::Value {
    serde_json::json!({
        "deleted": deletion.conversations.iter().map(|c| serde_json::json!({
            "id": c.id.hex(),
            "name": c.name,
            "events": c.len,
            "parent": c.parent.map(|p| p.hex()),
            "shared": c.shared,
        })).collect::<Vec<_>>(),
        "keys": deletion.keys,
        "blobs": deletion.blobs,
        "segment_files": deletion.segment_files,
        "segment_bytes": deletion.segment_bytes,
        "keys_shredded": deletion.keys_shredded,
        "problems": deletion.problems,
    })
}

/// The events of a JSON array of events (as the HTTP API and MCP take
/// them), in order; events without a timestamp get `now`. An error names
/// the element (`event 0`, from 0).
pub fn parse_event_array(items: Vec<serde_json::Value>, now: Timestamp) -> Result<Vec<Event>> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            json::event_from_value(item, now).map_err(|e| Error::Input {
                at: format!("event {i}"),
                problem: e.to_string(),
            })
        })
        .collect()
}

/// Parses NDJSON text into events (blank lines skipped); events without a
/// timestamp get the current time. An error names the line.
pub fn parse_ndjson(text: &str) -> Result<Vec<Event>> {
    let now = Timestamp::now();
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            json::parse_event(line, now).map_err(|e| Error::Input {
                at: format!("line {}", i + 1),
                problem: e.to_string(),
            })
        })
        .collect()
}
