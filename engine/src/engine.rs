//! [`Engine`]: a database opened from a [`Location`], with the
//! configuration and secrets its operations use.

use convstore_projection::config::Config;
use convstore_projection::{Tokenizer, ViewEvent};
use convstore_store::{
    json, AppendOptions, Appended, ConversationId, Event, OpenOptions, Store, Timestamp,
    VerifyFailure, VerifyReport, ViewState,
};

use crate::auto::{self, AutoReport};
use crate::compact::{self, CompactReport, CompactRequest};
use crate::error::{Error, Result};
use crate::explain::{self, Explanation};
use crate::fork::{self, ForkAt, Forked};
use crate::location::Location;
use crate::pipeline::{self, AsOf, Scope};
use crate::summarizers::Secrets;
use crate::views::{self, Refresh};

/// A convstore database and what its operations need: the configuration
/// (profiles, per-tool hints, automatic compaction) and the secrets of
/// summarizers. Shareable between threads (`&Engine` is enough for every
/// operation); one process at a time may have a database directory open.
pub struct Engine {
    store: Store,
    config: Config,
    secrets: Secrets,
}

/// What `verify` found: the report, the number of stored views checked,
/// or the first failure.
pub type Verification = std::result::Result<(VerifyReport, u64), VerifyFailure>;

impl Engine {
    /// Opens the database at `location`, with the default configuration
    /// and no secrets.
    pub fn open(location: &Location, options: &OpenOptions) -> Result<Engine> {
        let store = match location {
            Location::Path(path) => Store::open_with(path, options)?,
        };
        Ok(Engine::from_store(store))
    }

    /// An engine over a store opened already.
    pub fn from_store(store: Store) -> Engine {
        Engine {
            store,
            config: Config::default(),
            secrets: Secrets::none(),
        }
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
    /// [`Store::append`]).
    pub fn append(
        &self,
        id: &ConversationId,
        events: &[Event],
        options: &AppendOptions,
    ) -> Result<Appended> {
        Ok(self.store.append(id, events, options)?)
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
        compact::compact(
            &self.store,
            id,
            request,
            &self.config,
            tokenizer,
            &self.secrets,
        )
    }

    /// Compacts `id` automatically if its view needs it, as the
    /// configuration's `[compaction.auto]` says.
    pub fn auto_compact(&self, id: &ConversationId, no_sync: bool) -> Result<Option<AutoReport>> {
        auto::run(&self.store, id, &self.config, &self.secrets, no_sync)
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
        fork::fork(
            &self.store,
            parent,
            at,
            name,
            profile,
            &self.config,
            &self.secrets,
        )
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
        let mut views = 0;
        for id in &ids {
            for state in self.store.views(id)? {
                if let Some(problem) = views::check(&self.store, id, &state)? {
                    return Ok(Err(VerifyFailure {
                        conversation: *id,
                        name: self.store.info(id)?.name,
                        seq: None,
                        problem: format!("view \"{}\": {problem}", state.name),
                    }));
                }
                views += 1;
            }
        }
        Ok(Ok((report, views)))
    }
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
