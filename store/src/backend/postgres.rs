//! [`PgBackend`]: a database in PostgreSQL, shared by any number of
//! processes and machines.
//!
//! The keyspaces of the seam map to tables. Everything that grows with a
//! conversation is in a table whose primary key starts with
//! `conversation_id` (chunks, turn index, call and overlay directories,
//! staged records, views, ...), so every table can be distributed by it
//! (Citus) and every read or write of one conversation touches one
//! conversation's rows; blobs are keyed by their hash, names by the name.
//! docs/postgres.md shows the schema.
//!
//! A conditional batch ([`Backend::apply_if`]) is one transaction: it locks
//! the rows its conditions name (`SELECT ... FOR UPDATE`; an advisory lock
//! on a key expected to be absent), compares them, writes, and commits.
//! Two writers of one conversation therefore serialise on its metadata
//! row, and the loser's batch is not applied: the store plans again from
//! the new head, or reports the conflict. A commit is durable when
//! PostgreSQL acknowledges it (`synchronous_commit = on` is set on every
//! connection), so [`Backend::sync`] has nothing left to do.
//!
//! Appends announce themselves with `pg_notify` inside their transaction
//! (channel [`CHANNEL`], payload `ID LEN`): a hint other processes may
//! hear ([`Backend::changes`]), never something they rely on.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::ops::Bound;
use std::str::FromStr;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;
use postgres::{Client, GenericClient, NoTls, Statement};

use super::{Backend, Batch, Change, Condition, KeyRange, Keyspace, KvIter};
use crate::error::{StoreError, StoreResult};
use crate::ids::ConversationId;

/// The schema version this build creates and reads.
pub const SCHEMA_VERSION: u32 = 2;

/// The channel appends are announced on.
pub const CHANNEL: &str = "convstore";

/// The migrations, in order: version `i + 1` is `MIGRATIONS[i]`.
const MIGRATIONS: &[&str] = &[
    include_str!("postgres_schema_1.sql"),
    include_str!("postgres_schema_2.sql"),
];

/// Rows a scan reads per query at first; later pages are larger.
const FIRST_PAGE: i64 = 64;
/// Rows a scan reads per query at most.
const LARGEST_PAGE: i64 = 1024;
/// Bytes of values a scan aims to read per query.
const PAGE_BYTES: usize = 32 << 20;

/// How a table keys its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `(conversation_id, key)`: a conversation's many rows of one kind.
    Keyed,
    /// `conversation_id`: one row per conversation.
    Single,
    /// `key` (a name, a hash, a database-wide setting).
    Global,
}

/// A table and how its keys relate to the seam's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Table {
    name: &'static str,
    shape: Shape,
    /// Whether its rows' keys leave out the tag byte the seam's key starts
    /// with (every table but `settings` and `blobs`, which keep whole
    /// keys).
    strips_tag: bool,
}

const fn table(name: &'static str, shape: Shape) -> Table {
    Table {
        name,
        shape,
        strips_tag: true,
    }
}

const SETTINGS: Table = Table {
    name: "settings",
    shape: Shape::Global,
    strips_tag: false,
};

const BLOBS: Table = Table {
    name: "blobs",
    shape: Shape::Global,
    strips_tag: false,
};

/// The table of a main-keyspace key starting with `tag` (see `keys.rs`).
fn main_table(tag: u8) -> Table {
    match tag {
        b'N' => table("names", Shape::Global),
        b'C' => table("conversations", Shape::Single),
        b'T' => table("staging", Shape::Single),
        b'P' => table("pins", Shape::Single),
        b'A' => table("auto_state", Shape::Single),
        b'L' => table("lineage", Shape::Single),
        b'K' => table("idempotency_keys", Shape::Keyed),
        b'c' => table("chunks", Shape::Keyed),
        b't' => table("turns", Shape::Keyed),
        b'k' => table("calls", Shape::Keyed),
        b'O' => table("overlay_directories", Shape::Keyed),
        b'o' => table("overlays", Shape::Keyed),
        b'R' => table("overlay_ranges", Shape::Keyed),
        b's' => table("staged_chunks", Shape::Keyed),
        b'u' => table("staged_turns", Shape::Keyed),
        b'j' => table("staged_calls", Shape::Keyed),
        b'q' => table("staged_overlays", Shape::Keyed),
        b'v' => table("views", Shape::Keyed),
        b'w' => table("view_blocks", Shape::Keyed),
        b'x' => table("view_calls", Shape::Keyed),
        _ => SETTINGS,
    }
}

/// Every table, for sizes and for dropping a schema in tests.
pub const TABLES: &[&str] = &[
    "settings",
    "names",
    "blobs",
    "conversations",
    "staging",
    "pins",
    "auto_state",
    "lineage",
    "idempotency_keys",
    "chunks",
    "turns",
    "calls",
    "overlay_directories",
    "overlays",
    "overlay_ranges",
    "staged_chunks",
    "staged_turns",
    "staged_calls",
    "staged_overlays",
    "views",
    "view_blocks",
    "view_calls",
];

/// A row's address: its table and the key columns' values.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct RowKey {
    table: &'static str,
    shape_rank: u8,
    conversation: Vec<u8>,
    key: Vec<u8>,
}

/// Where the seam's `key` in `space` is stored.
fn locate(space: Keyspace, key: &[u8]) -> StoreResult<(Table, Vec<u8>, Vec<u8>)> {
    let table = match space {
        Keyspace::Blobs => BLOBS,
        Keyspace::Main => main_table(key.first().copied().unwrap_or(0)),
    };
    let rest = if table.strips_tag { &key[1..] } else { key };
    match table.shape {
        Shape::Global => Ok((table, Vec::new(), rest.to_vec())),
        Shape::Single if rest.len() == 16 => Ok((table, rest.to_vec(), Vec::new())),
        Shape::Keyed if rest.len() >= 16 => Ok((table, rest[..16].to_vec(), rest[16..].to_vec())),
        _ => Err(StoreError::Corrupt {
            what: format!(
                "a key of {} bytes cannot be stored in table {}",
                key.len(),
                table.name
            ),
        }),
    }
}

/// The seam's key of a row.
fn seam_key(table: Table, tag: u8, conversation: &[u8], key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + conversation.len() + key.len());
    if table.strips_tag {
        out.push(tag);
    }
    out.extend_from_slice(conversation);
    out.extend_from_slice(key);
    out
}

/// A failure PostgreSQL reported, in its own words.
#[derive(Debug)]
struct PgError(String);

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PgError {}

/// PostgreSQL's message for `error`: the server's own for a database
/// error, else the client's.
fn message(error: &postgres::Error) -> String {
    use std::error::Error as _;
    if let Some(db) = error.as_db_error() {
        let mut text = format!("{}: {}", db.severity(), db.message());
        if let Some(detail) = db.detail() {
            text.push_str(" (");
            text.push_str(detail);
            text.push(')');
        }
        return text;
    }
    match error.source() {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}

fn backend_error(error: &postgres::Error) -> StoreError {
    StoreError::Backend(Box::new(PgError(message(error))))
}

/// Whether `error` says the transaction lost to another one (a key
/// inserted first, a serialisation failure, a deadlock): the batch was not
/// applied and may be planned again.
fn lost_race(error: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    error.code().is_some_and(|code| {
        *code == SqlState::UNIQUE_VIOLATION
            || *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
    })
}

/// Whether `error` is a unique key's violation.
fn is_unique_violation(error: &postgres::Error) -> bool {
    error.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION)
}

/// Whether a statement that failed with `error` may have been committed
/// all the same: the connection was lost (no SQLSTATE), or the server's
/// session ended around it.
fn outcome_unknown(error: &postgres::Error) -> bool {
    error.code().is_none_or(|code| {
        let class = &code.code()[..2];
        class == "08" || class == "57"
    })
}

/// Whether `batch` only puts blobs.
fn only_blobs(batch: &Batch) -> bool {
    batch
        .ops
        .iter()
        .all(|(space, _, value)| *space == Keyspace::Blobs && value.is_some())
}

/// Whether `error` says the server ended the session (an administrator's
/// or a crash's shutdown, `pg_terminate_backend`): a read can run again
/// on another connection.
fn session_ended(error: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    error.code().is_some_and(|code| {
        *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
    })
}

/// `url` without its password, for messages.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return redact_parameters(url, ' ');
    };
    let start = scheme_end + 3;
    // The user information ends at the last `@`: a password may hold `/`,
    // `?` or `@`, which the parser accepts. (A query value holding `@`
    // makes more of the URL hidden, never less.)
    let mut out = url.to_owned();
    let mut hidden_to = start;
    if let Some(at) = url[start..].rfind('@').map(|i| start + i) {
        if let Some(colon) = url[start..at].find(':') {
            out = format!("{}***{}", &url[..=(start + colon)], &url[at..]);
            hidden_to = start + colon + 1 + 3;
        }
    }
    // The query starts at the first `?` after the hidden password: a `@`
    // in a query value (`?password=a@b`) is no end of user information.
    match out[hidden_to..].find('?').map(|i| hidden_to + i) {
        Some(q) => format!("{}{}", &out[..=q], redact_parameters(&out[q + 1..], '&')),
        None => out,
    }
}

/// `parameters` (`key=value` pairs split by `separator`) with the value of
/// every `password` key hidden, however the key is spelt
/// (percent-encoded, any case).
fn redact_parameters(parameters: &str, separator: char) -> String {
    parameters
        .split(separator)
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if decoded(key).eq_ignore_ascii_case("password") => format!("{key}=***"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(&separator.to_string())
}

/// `text` percent-decoded (bytes that do not decode stay as they are).
fn decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = text
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The client configuration of `url`. TLS is not built in: a URL that
/// requires it is refused here, in words (`sslmode=prefer`, libpq's
/// default, connects without it).
fn parse_url(url: &str) -> Result<postgres::Config, String> {
    let mode = url
        .split(['?', '&', ' '])
        .find_map(|part| part.strip_prefix("sslmode="));
    if let Some(mode) = mode {
        if matches!(mode, "require" | "verify-ca" | "verify-full") {
            return Err(format!(
                "sslmode={mode}: TLS is not built into this convstore; connect over a Unix socket, \
                 to localhost or through a tunnel, without sslmode (or with sslmode=disable)"
            ));
        }
    }
    let mut config = postgres::Config::from_str(url).map_err(|e| message(&e))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    Ok(config)
}

/// A pooled connection: the client and the statements it has prepared.
pub struct Connection {
    client: Client,
    statements: HashMap<String, Statement>,
}

/// Prepares `sql` on `client` once per connection.
fn prepared(
    client: &mut impl GenericClient,
    cache: &mut HashMap<String, Statement>,
    sql: &str,
) -> Result<Statement, postgres::Error> {
    if let Some(statement) = cache.get(sql) {
        return Ok(statement.clone());
    }
    let statement = client.prepare(sql)?;
    cache.insert(sql.to_owned(), statement.clone());
    Ok(statement)
}

/// Opens connections for the pool.
struct Manager {
    config: postgres::Config,
}

/// How long a connection may take to be set up, whatever answers at the
/// address (a server that accepts and then says nothing included).
const CONNECT_DEADLINE: Duration = Duration::from_secs(15);

/// A failure to set up a connection.
#[derive(Debug)]
enum ConnectError {
    /// PostgreSQL's, or the client's.
    Pg(postgres::Error),
    /// Nothing came back within [`CONNECT_DEADLINE`].
    Deadline,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Pg(e) => f.write_str(&message(e)),
            ConnectError::Deadline => write!(
                f,
                "no PostgreSQL answered within {} s",
                CONNECT_DEADLINE.as_secs()
            ),
        }
    }
}

impl std::error::Error for ConnectError {}

/// A client connected to `config`'s server, within [`CONNECT_DEADLINE`]
/// (the client's own timeout covers reaching the address only), with
/// the session settings every connection of convstore has.
fn connect_client(config: &postgres::Config) -> Result<Client, ConnectError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let config = config.clone();
    std::thread::Builder::new()
        .name("convstore-connect".to_owned())
        .spawn(move || {
            let connected = config.connect(NoTls).and_then(|mut client| {
                // Acknowledged means durable, whatever the server's
                // default; a lock held elsewhere for a minute is an error,
                // not a wait without end.
                client.batch_execute("SET synchronous_commit = on; SET lock_timeout = '60s'")?;
                Ok(client)
            });
            // A late client is closed here, not on the caller's thread.
            if let Err(std::sync::mpsc::SendError(Ok(late))) = tx.send(connected) {
                drop(late);
            }
        })
        .map_err(|_| ConnectError::Deadline)?;
    match rx.recv_timeout(CONNECT_DEADLINE) {
        Ok(connected) => connected.map_err(ConnectError::Pg),
        Err(_) => Err(ConnectError::Deadline),
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = ConnectError;

    fn connect(&self) -> Result<Connection, ConnectError> {
        Ok(Connection {
            client: connect_client(&self.config)?,
            statements: HashMap::new(),
        })
    }

    fn is_valid(&self, conn: &mut Connection) -> Result<(), ConnectError> {
        conn.client
            .simple_query("")
            .map(|_| ())
            .map_err(ConnectError::Pg)
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        conn.client.is_closed()
    }
}

/// How [`PgBackend::connect`] treats a database without convstore's
/// schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// Refuse it ([`StoreError::NoDatabase`]).
    Existing,
    /// Create the schema (a new, empty database).
    Create,
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The schema version before (0: none).
    pub from: u32,
    /// The schema version now.
    pub to: u32,
}

/// A convstore database in PostgreSQL (see the module documentation).
pub struct PgBackend {
    source: Source,
    config: postgres::Config,
    url: String,
    /// Whether some process listens for announcements, and when that
    /// was last looked up ([`PgBackend::anyone_listening`]).
    listening: std::sync::Mutex<Option<(std::time::Instant, bool)>>,
}

/// Where a backend's statements run.
enum Source {
    /// On a connection from the pool, each in its own transaction.
    Pool(r2d2::Pool<Manager>),
    /// On one connection, in a transaction it began
    /// ([`Backend::begin_transaction`]); `None` once it is committed.
    Transaction(Box<std::sync::Mutex<Option<r2d2::PooledConnection<Manager>>>>),
    /// Being dropped.
    Gone,
}

/// Closes a client, or a pool of them, on a thread of its own: closing
/// waits for the connection on a runtime of the client's, which cannot
/// start on a thread that runs an asynchronous runtime already (a server,
/// the MCP server), where the last engine may be dropped.
fn close_apart<T: Send + 'static>(closing: T) {
    let _ = std::thread::Builder::new()
        .name("convstore-close".to_owned())
        .spawn(move || drop(closing))
        .map(std::thread::JoinHandle::join);
}

/// The application name of the connections that listen for
/// announcements.
const LISTENER_NAME: &str = "convstore-listen";

/// How long whether anyone listens is taken as known.
const LISTENING_TTL: Duration = Duration::from_secs(1);

impl PgBackend {
    /// Connects to the database at `url` (`postgres://USER@HOST/DB`; a
    /// Unix socket as `host=/run/postgresql`), checks its schema, and
    /// with [`Setup::Create`] sets up a database that has none. A schema
    /// older than this build's asks for `convstore migrate`; a newer one
    /// is refused.
    pub fn connect(url: &str, setup: Setup) -> StoreResult<PgBackend> {
        let shown = redact(url);
        let cannot = |reason: String| StoreError::Open {
            path: shown.clone().into(),
            reason,
        };
        let mut config = parse_url(url).map_err(cannot)?;
        if config.get_application_name().is_none() {
            config.application_name("convstore");
        }
        let manager = Manager {
            config: config.clone(),
        };
        let mut first =
            r2d2::ManageConnection::connect(&manager).map_err(|e| cannot(e.to_string()))?;
        let version = schema_version(&mut first.client).map_err(|e| cannot(message(&e)))?;
        match version {
            Some(v) if v == SCHEMA_VERSION => {
                let missing = missing_tables(&mut first.client).map_err(|e| cannot(message(&e)))?;
                if !missing.is_empty() {
                    return Err(cannot(format!(
                        "its convstore schema is damaged: {} missing (restore the database \
                         from a backup)",
                        if missing.len() == 1 {
                            format!("table {} is", missing[0])
                        } else {
                            format!("tables {} are", missing.join(", "))
                        }
                    )));
                }
            }
            Some(v) if v > SCHEMA_VERSION => {
                return Err(StoreError::UnsupportedSchema {
                    location: shown,
                    found: v,
                    supported: SCHEMA_VERSION,
                })
            }
            Some(v) => {
                return Err(cannot(format!(
                    "its schema is version {v}, this convstore uses version {SCHEMA_VERSION}: \
                     run `convstore migrate` first"
                )))
            }
            None if setup == Setup::Create => {
                // Only an empty schema is set up unasked, as only an empty
                // directory is: tables of something else are refused.
                let others: i64 = first
                    .client
                    .query_one(
                        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
                        &[],
                    )
                    .map_err(|e| cannot(message(&e)))?
                    .get(0);
                if others > 0 {
                    return Err(cannot(format!(
                        "it holds {others} other table{} and no convstore schema; \
                         `convstore migrate` sets convstore's tables up beside them",
                        if others == 1 { "" } else { "s" }
                    )));
                }
                apply_migrations(&mut first.client).map_err(|e| cannot(message(&e)))?;
            }
            None => return Err(StoreError::NoDatabase { path: shown.into() }),
        }
        close_apart(first);
        let pool = r2d2::Pool::builder()
            .max_size(16)
            .min_idle(Some(0))
            .connection_timeout(Duration::from_secs(30))
            .test_on_check_out(true)
            .build_unchecked(manager);
        Ok(PgBackend {
            source: Source::Pool(pool),
            config,
            url: shown,
            listening: std::sync::Mutex::new(None),
        })
    }

    /// The failure to take a connection from the pool.
    fn no_connection(&self, error: &r2d2::Error) -> StoreError {
        StoreError::Backend(Box::new(PgError(format!(
            "no connection to {}: {error}",
            self.url
        ))))
    }

    /// A backend on one connection of the pool, in a transaction `begin`
    /// starts (see [`Backend::begin_transaction`]); `None` for one that
    /// is a transaction already.
    fn begin(&self, begin: &str) -> Option<StoreResult<Arc<dyn Backend>>> {
        let Source::Pool(pool) = &self.source else {
            return None;
        };
        let begun = (|| {
            let mut conn = pool.get().map_err(|e| self.no_connection(&e))?;
            conn.client
                .batch_execute(begin)
                .map_err(|e| backend_error(&e))?;
            Ok(Arc::new(PgBackend {
                source: Source::Transaction(Box::new(std::sync::Mutex::new(Some(conn)))),
                config: self.config.clone(),
                url: self.url.clone(),
                listening: std::sync::Mutex::new(None),
            }) as Arc<dyn Backend>)
        })();
        Some(begun)
    }

    /// Runs `f` on a connection (one from the pool, or the transaction's);
    /// the outer error: there is no connection, the inner: PostgreSQL's.
    fn attempt<T>(
        &self,
        mut f: impl FnMut(&mut Connection) -> Result<T, postgres::Error>,
    ) -> StoreResult<Result<T, postgres::Error>> {
        self.attempt_as(false, &mut f)
    }

    /// [`PgBackend::attempt`]; `read` only reads, so that it is run again
    /// on a new connection after any lost connection, not only after one
    /// the server ended before it ran.
    fn attempt_as<T>(
        &self,
        read: bool,
        f: &mut dyn FnMut(&mut Connection) -> Result<T, postgres::Error>,
    ) -> StoreResult<Result<T, postgres::Error>> {
        match &self.source {
            Source::Pool(pool) => {
                let get = || pool.get().map_err(|e| self.no_connection(&e));
                let mut conn = get()?;
                match f(&mut conn) {
                    // A read whose session the server ended (a restart,
                    // pg_terminate_backend) or whose connection was lost
                    // runs again on a new connection. A write does not:
                    // the session may have ended after its commit, before
                    // its answer was read (see `applied_after_all`).
                    Err(e) if read && (session_ended(&e) || conn.client.is_closed()) => {
                        drop(conn);
                        let mut conn = get()?;
                        Ok(f(&mut conn))
                    }
                    other => Ok(other),
                }
            }
            Source::Transaction(held) => {
                let mut held = held
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let conn = held.as_mut().ok_or_else(|| {
                    StoreError::Backend(Box::new(PgError("the transaction is over".to_owned())))
                })?;
                Ok(f(conn))
            }
            Source::Gone => Err(StoreError::Backend(Box::new(PgError(
                "the database is closed".to_owned(),
            )))),
        }
    }

    /// Runs `f` on a connection, mapping PostgreSQL's errors.
    fn with<T>(
        &self,
        f: impl FnMut(&mut Connection) -> Result<T, postgres::Error>,
    ) -> StoreResult<T> {
        self.attempt(f)?.map_err(|e| backend_error(&e))
    }

    /// [`PgBackend::with`] for a read.
    fn read<T>(
        &self,
        mut f: impl FnMut(&mut Connection) -> Result<T, postgres::Error>,
    ) -> StoreResult<T> {
        self.attempt_as(true, &mut f)?
            .map_err(|e| backend_error(&e))
    }

    /// The batch's writes by row, the last write of each key winning.
    fn rows(batch: &Batch) -> StoreResult<BTreeMap<RowKey, Option<Vec<u8>>>> {
        let mut rows = BTreeMap::new();
        for (space, key, value) in &batch.ops {
            let (table, conversation, key) = locate(*space, key)?;
            rows.insert(
                RowKey {
                    table: table.name,
                    shape_rank: rank_of_shape(table.shape),
                    conversation,
                    key,
                },
                value.clone(),
            );
        }
        Ok(rows)
    }

    /// Applies `batch` if `conditions` hold, as one statement (one round
    /// trip, one implicit transaction): `Ok(false)` when a condition does
    /// not hold, or a concurrent writer won (see [`write_statement`]).
    fn transact(&self, conditions: &[Condition], batch: &Batch) -> StoreResult<bool> {
        let rows = Self::rows(batch)?;
        let located = conditions
            .iter()
            .map(|c| {
                locate(Keyspace::Main, &c.key).map(|(table, conversation, key)| Located {
                    table,
                    conversation,
                    key,
                    expected: c.expected.clone(),
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let notices: Vec<String> = if batch.announced.is_empty() || !self.anyone_listening() {
            Vec::new()
        } else {
            batch
                .announced
                .iter()
                .filter_map(|change| match change {
                    Change::Appended { id, len } => Some(format!("{id} {len}")),
                    Change::Unknown => None,
                })
                .collect()
        };
        let (sql, params) = write_statement(&located, &rows, &notices);
        let result = self.attempt(|conn| {
            let Connection { client, statements } = conn;
            let statement = prepared(client, statements, &sql)?;
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(Param::as_sql).collect();
            client.query_one(&statement, &refs)
        })?;
        match result {
            Ok(row) => Ok(row.get::<_, bool>(0)),
            // A unique key taken first is a lost race only where the batch
            // expected it absent; elsewhere it is a constraint of the
            // database's own, which no retry satisfies.
            Err(e) if lost_race(&e) && (!located.is_empty() || !is_unique_violation(&e)) => {
                Ok(false)
            }
            // Blobs are named by their content: writing them again writes
            // the same.
            Err(e) if outcome_unknown(&e) && located.is_empty() && only_blobs(batch) => Ok(false),
            Err(e) if outcome_unknown(&e) => self.applied_after_all(&located, &rows, &e),
            Err(e) => Err(backend_error(&e)),
        }
    }

    /// Whether a batch whose statement failed without an answer (the
    /// connection lost after it was sent: the commit may have happened)
    /// was applied, read back on another connection from the row a
    /// condition names and the batch rewrites (a conversation's
    /// metadata): the batch's value there says applied, the value the
    /// batch expected says not applied (the store plans the write again).
    /// Anything else (a writer after this one changed it, or no such row)
    /// leaves the outcome unknown: [`StoreError::OutcomeUnknown`], which
    /// the store resolves where it can tell its own writes (an append's
    /// records) apart.
    fn applied_after_all(
        &self,
        conditions: &[Located],
        rows: &BTreeMap<RowKey, Option<Vec<u8>>>,
        error: &postgres::Error,
    ) -> StoreResult<bool> {
        for condition in conditions {
            let key = RowKey {
                table: condition.table.name,
                shape_rank: rank_of_shape(condition.table.shape),
                conversation: condition.conversation.clone(),
                key: condition.key.clone(),
            };
            let Some(Some(written)) = rows.get(&key) else {
                continue;
            };
            let sql = select_sql(condition.table);
            let now: Option<Vec<u8>> = self.read(|conn| {
                let statement = prepared(&mut conn.client, &mut conn.statements, &sql)?;
                let row = match condition.table.shape {
                    Shape::Keyed => conn
                        .client
                        .query_opt(&statement, &[&condition.conversation, &condition.key])?,
                    Shape::Single => conn
                        .client
                        .query_opt(&statement, &[&condition.conversation])?,
                    Shape::Global => conn.client.query_opt(&statement, &[&condition.key])?,
                };
                Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
            })?;
            if now.as_ref() == Some(written) {
                return Ok(true);
            }
            if now == condition.expected {
                return Ok(false);
            }
            break;
        }
        Err(StoreError::OutcomeUnknown {
            what: message(error),
        })
    }

    /// Whether any process listens for announcements (a server with
    /// followers), looked up at most every [`LISTENING_TTL`]: a NOTIFY
    /// takes a lock every commit of the database shares, so appends send
    /// none while nobody listens. A listener that starts meanwhile misses
    /// at most that much, and nothing relies on hearing a hint.
    fn anyone_listening(&self) -> bool {
        let mut known = self
            .listening
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, listening)) = *known {
            if at.elapsed() < LISTENING_TTL {
                return listening;
            }
        }
        let listening = self
            .with(|conn| {
                let statement = prepared(
                    &mut conn.client,
                    &mut conn.statements,
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
                     WHERE application_name = $1 AND datname = current_database())",
                )?;
                conn.client
                    .query_one(&statement, &[&LISTENER_NAME])
                    .map(|row| row.get::<_, bool>(0))
            })
            // Unknown: announce (a hint too many costs little).
            .unwrap_or(true);
        *known = Some((std::time::Instant::now(), listening));
        listening
    }

    /// The database's URL, without its password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Starts a thread that hears announcements on a connection of its own.
    fn listener(&self, sender: Sender<Change>) {
        let mut config = self.config.clone();
        config.application_name(LISTENER_NAME);
        let spawned = std::thread::Builder::new()
            .name("convstore-listen".to_owned())
            .spawn(move || listen(&config, &sender));
        // Without the thread there are no hints, which nothing relies on.
        drop(spawned);
    }
}

/// The conversation ids, keys and values of a table's rows.
type Columns = (Vec<Vec<u8>>, Vec<Vec<u8>>, Vec<Vec<u8>>);

/// A condition of a batch, located in its table.
struct Located {
    table: Table,
    conversation: Vec<u8>,
    key: Vec<u8>,
    expected: Option<Vec<u8>>,
}

/// A parameter of a write statement.
enum Param {
    Bytes(Vec<u8>),
    Array(Vec<Vec<u8>>),
    Texts(Vec<String>),
}

impl Param {
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Bytes(b) => b,
            Param::Array(a) => a,
            Param::Texts(t) => t,
        }
    }
}

/// The one statement that applies a batch: the rows its conditions name
/// are locked and compared (`ok` holds a row when every condition holds),
/// every write of the batch is a data-modifying CTE that writes only if
/// `ok` has its row, and the notifications are sent only then too; the
/// statement answers whether it wrote.
///
/// A condition that expects a value locks its row (`FOR UPDATE`): a
/// writer that changed it first makes this statement see the changed row
/// and write nothing. A key expected absent is inserted without `ON
/// CONFLICT`, so of two writers inserting it one fails on the primary key
/// (the other won: the batch is not applied).
fn write_statement(
    conditions: &[Located],
    rows: &BTreeMap<RowKey, Option<Vec<u8>>>,
    notices: &[String],
) -> (String, Vec<Param>) {
    let mut params: Vec<Param> = Vec::new();
    let push = |param: Param, params: &mut Vec<Param>| {
        params.push(param);
        params.len()
    };
    let mut ctes: Vec<String> = Vec::new();
    let mut checks: Vec<String> = Vec::new();
    let mut absent: std::collections::HashSet<(&'static str, Vec<u8>, Vec<u8>)> =
        std::collections::HashSet::new();
    for (i, c) in conditions.iter().enumerate() {
        let filter = match c.table.shape {
            Shape::Keyed => {
                let a = push(Param::Bytes(c.conversation.clone()), &mut params);
                let b = push(Param::Bytes(c.key.clone()), &mut params);
                format!("conversation_id = ${a} AND key = ${b}")
            }
            Shape::Single => {
                let a = push(Param::Bytes(c.conversation.clone()), &mut params);
                format!("conversation_id = ${a}")
            }
            Shape::Global => {
                let a = push(Param::Bytes(c.key.clone()), &mut params);
                format!("key = ${a}")
            }
        };
        if let Some(value) = &c.expected {
            ctes.push(format!(
                "c{i} AS (SELECT value FROM {} WHERE {filter} FOR UPDATE)",
                c.table.name
            ));
            let v = push(Param::Bytes(value.clone()), &mut params);
            checks.push(format!("(SELECT value FROM c{i}) = ${v}"));
        } else {
            checks.push(format!(
                "NOT EXISTS (SELECT 1 FROM {} WHERE {filter})",
                c.table.name
            ));
            absent.insert((c.table.name, c.conversation.clone(), c.key.clone()));
        }
    }
    let check = if checks.is_empty() {
        "true".to_owned()
    } else {
        checks.join(" AND ")
    };
    ctes.push(format!("ok AS (SELECT 1 AS ok WHERE {check})"));
    // Per table: rows to insert (expected absent), to upsert, to delete.
    let mut writes: BTreeMap<(&'static str, u8, u8), Columns> = BTreeMap::new();
    for (row, value) in rows {
        let kind = match value {
            None => 2,
            Some(_) if absent.contains(&(row.table, row.conversation.clone(), row.key.clone())) => {
                0
            }
            Some(_) => 1,
        };
        let entry = writes.entry((row.table, row.shape_rank, kind)).or_default();
        entry.0.push(row.conversation.clone());
        entry.1.push(row.key.clone());
        entry.2.push(value.clone().unwrap_or_default());
    }
    for (n, ((name, rank, kind), (conversations, keys, values))) in writes.into_iter().enumerate() {
        let shape = shape_of_rank(rank);
        let (columns, pk, arrays) = match shape {
            Shape::Keyed => (
                "conversation_id, key",
                "conversation_id, key",
                vec![conversations, keys],
            ),
            Shape::Single => ("conversation_id", "conversation_id", vec![conversations]),
            Shape::Global => ("key", "key", vec![keys]),
        };
        let mut slots = Vec::new();
        for array in arrays {
            slots.push(format!(
                "${}::bytea[]",
                push(Param::Array(array), &mut params)
            ));
        }
        let cte = if kind == 2 {
            format!(
                "w{n} AS (DELETE FROM {name} WHERE ({pk}) IN (SELECT * FROM unnest({})) \
                 AND EXISTS (SELECT 1 FROM ok))",
                slots.join(", ")
            )
        } else {
            slots.push(format!(
                "${}::bytea[]",
                push(Param::Array(values), &mut params)
            ));
            let conflict = if kind == 1 {
                format!(" ON CONFLICT ({pk}) DO UPDATE SET value = excluded.value")
            } else {
                String::new()
            };
            format!(
                "w{n} AS (INSERT INTO {name} ({columns}, value) SELECT * FROM unnest({}) \
                 WHERE EXISTS (SELECT 1 FROM ok){conflict})",
                slots.join(", ")
            )
        };
        ctes.push(cte);
    }
    let notified = if notices.is_empty() {
        String::new()
    } else {
        let channel = push(Param::Texts(vec![CHANNEL.to_owned()]), &mut params);
        let payloads = push(Param::Texts(notices.to_vec()), &mut params);
        ctes.push(format!(
            "n AS (SELECT pg_notify((${channel}::text[])[1], p) FROM unnest(${payloads}::text[]) p, ok)"
        ));
        ", (SELECT count(*) FROM n)".to_owned()
    };
    let sql = format!(
        "WITH {} SELECT EXISTS (SELECT 1 FROM ok){notified}",
        ctes.join(", ")
    );
    (sql, params)
}

fn rank_of_shape(shape: Shape) -> u8 {
    match shape {
        Shape::Keyed => 0,
        Shape::Single => 1,
        Shape::Global => 2,
    }
}

fn shape_of_rank(rank: u8) -> Shape {
    match rank {
        0 => Shape::Keyed,
        1 => Shape::Single,
        _ => Shape::Global,
    }
}

/// The query of one row's value.
fn select_sql(table: Table) -> String {
    match table.shape {
        Shape::Keyed => format!(
            "SELECT value FROM {} WHERE conversation_id = $1 AND key = $2",
            table.name
        ),
        Shape::Single => format!(
            "SELECT value FROM {} WHERE conversation_id = $1",
            table.name
        ),
        Shape::Global => format!("SELECT value FROM {} WHERE key = $1", table.name),
    }
}

/// The version in `convstore_schema`, or `None` when the database has no
/// convstore schema.
fn schema_version(client: &mut Client) -> Result<Option<u32>, postgres::Error> {
    let exists: bool = client
        .query_one("SELECT to_regclass('convstore_schema') IS NOT NULL", &[])?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let version: Option<i32> = client
        .query_one("SELECT max(version) FROM convstore_schema", &[])?
        .get(0);
    Ok(Some(version.unwrap_or(0).max(0) as u32))
}

/// convstore's tables the current schema lacks.
fn missing_tables(client: &mut Client) -> Result<Vec<String>, postgres::Error> {
    let names: Vec<String> = TABLES.iter().map(|t| (*t).to_owned()).collect();
    let rows = client.query(
        "SELECT t FROM unnest($1::text[]) t WHERE to_regclass(t) IS NULL ORDER BY t",
        &[&names],
    )?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Applies the migrations the database lacks, each in its own
/// transaction, under an advisory lock so that two processes migrating
/// at once apply each once; returns the version before.
fn apply_migrations(client: &mut Client) -> Result<u32, postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock(7377)", &[])?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS convstore_schema (\
             version integer PRIMARY KEY, \
             applied_at timestamptz NOT NULL DEFAULT now(), \
             applied_by text NOT NULL)",
    )?;
    let before: Option<i32> = tx
        .query_one("SELECT max(version) FROM convstore_schema", &[])?
        .get(0);
    let before = before.unwrap_or(0).max(0) as u32;
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let version = index as u32 + 1;
        if version <= before {
            continue;
        }
        tx.batch_execute(sql)?;
        if version == 1 {
            // A convstore database from the start: the store's format.
            tx.execute(
                "INSERT INTO settings (key, value) VALUES ($1, $2)",
                &[
                    &crate::keys::FORMAT,
                    &crate::keys::FORMAT_VERSION.to_be_bytes().as_slice(),
                ],
            )?;
        }
        tx.execute(
            "INSERT INTO convstore_schema (version, applied_by) VALUES ($1, $2)",
            &[
                &(version as i32),
                &concat!("convstore ", env!("CARGO_PKG_VERSION")),
            ],
        )?;
    }
    tx.commit()?;
    Ok(before)
}

/// Brings the database at `url` to this build's schema (creating it in a
/// database that has none); a newer schema is refused.
pub fn migrate(url: &str) -> StoreResult<Migrated> {
    let shown = redact(url);
    let cannot = |reason: String| StoreError::Open {
        path: shown.clone().into(),
        reason,
    };
    let config = parse_url(url).map_err(cannot)?;
    let mut client = connect_client(&config).map_err(|e| cannot(e.to_string()))?;
    if let Some(found) = schema_version(&mut client).map_err(|e| backend_error(&e))? {
        if found > SCHEMA_VERSION {
            return Err(StoreError::UnsupportedSchema {
                location: shown,
                found,
                supported: SCHEMA_VERSION,
            });
        }
    }
    let from = apply_migrations(&mut client).map_err(|e| backend_error(&e))?;
    // A schema said to be current whose tables are gone is not fixed by
    // migrating: say so, as every other command does.
    let missing = missing_tables(&mut client).map_err(|e| backend_error(&e))?;
    if !missing.is_empty() {
        return Err(cannot(format!(
            "its convstore schema is damaged: {} missing (restore the database from a backup)",
            if missing.len() == 1 {
                format!("table {} is", missing[0])
            } else {
                format!("tables {} are", missing.join(", "))
            }
        )));
    }
    Ok(Migrated {
        from,
        to: SCHEMA_VERSION,
    })
}

/// Hears the announcements of appends on a connection of its own and
/// hands them on; after a lost connection, says that some may have been
/// missed and connects again. Ends when the receiver is gone.
fn listen(config: &postgres::Config, sender: &Sender<Change>) {
    let mut pause = Duration::from_millis(100);
    loop {
        if let Ok(mut client) = connect_client(config) {
            if client.batch_execute(&format!("LISTEN {CHANNEL}")).is_ok() {
                pause = Duration::from_millis(100);
                // Anything may have happened while no one listened.
                if sender.send(Change::Unknown).is_err() {
                    return;
                }
                loop {
                    let mut heard: Vec<String> = Vec::new();
                    let mut lost = false;
                    {
                        let mut notifications = client.notifications();
                        let mut iter = notifications.timeout_iter(Duration::from_secs(1));
                        loop {
                            match iter.next() {
                                Ok(Some(n)) => heard.push(n.payload().to_owned()),
                                Ok(None) => break,
                                Err(_) => {
                                    lost = true;
                                    break;
                                }
                            }
                        }
                    }
                    for payload in heard {
                        if let Some(change) = parse_change(&payload) {
                            if sender.send(change).is_err() {
                                return;
                            }
                        }
                    }
                    // A listener nobody reads ends at the next hint.
                    if lost || client.is_closed() {
                        break;
                    }
                }
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// An announcement's payload: `ID LEN`.
fn parse_change(payload: &str) -> Option<Change> {
    let (id, len) = payload.split_once(' ')?;
    Some(Change::Appended {
        id: ConversationId::from_hex(id)?,
        len: len.parse().ok()?,
    })
}

impl Backend for PgBackend {
    fn get(&self, space: Keyspace, key: &[u8]) -> StoreResult<Option<Bytes>> {
        let (table, conversation, key) = locate(space, key)?;
        self.read(|conn| {
            let sql = select_sql(table);
            let statement = prepared(&mut conn.client, &mut conn.statements, &sql)?;
            let row = match table.shape {
                Shape::Keyed => conn.client.query_opt(&statement, &[&conversation, &key])?,
                Shape::Single => conn.client.query_opt(&statement, &[&conversation])?,
                Shape::Global => conn.client.query_opt(&statement, &[&key])?,
            };
            Ok(row.map(|row| Bytes::from(row.get::<_, Vec<u8>>(0))))
        })
    }

    fn scan(&self, space: Keyspace, range: KeyRange, reverse: bool) -> KvIter<'_> {
        let mut parts: VecDeque<Part> = parts(space, &range).into();
        if reverse {
            parts = parts.into_iter().rev().collect();
        }
        Box::new(Scan {
            backend: self,
            parts,
            reverse,
            buffer: VecDeque::new(),
            page: FIRST_PAGE,
            failed: false,
        })
    }

    fn apply(&self, batch: Batch) -> StoreResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // Without conditions only a deadlock or a serialisation failure
        // loses: write again, a few times.
        for attempt in 0..8u32 {
            if self.transact(&[], &batch)? {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5 << attempt.min(6)));
        }
        Err(StoreError::Backend(Box::new(PgError(
            "a write kept losing to others (deadlocks); nothing was stored".to_owned(),
        ))))
    }

    fn apply_if(&self, conditions: &[Condition], batch: Batch) -> StoreResult<bool> {
        self.transact(conditions, &batch)
    }

    fn sync(&self) -> StoreResult<()> {
        // Every commit was durable when it was acknowledged.
        Ok(())
    }

    fn is_server(&self) -> bool {
        true
    }

    fn size_on_disk(&self) -> StoreResult<u64> {
        self.with(|conn| {
            let mut total = 0i64;
            for name in TABLES {
                let row = conn.client.query_one(
                    "SELECT coalesce(pg_total_relation_size(to_regclass($1)), 0)",
                    &[name],
                )?;
                total += row.get::<_, i64>(0);
            }
            Ok(total.max(0) as u64)
        })
    }

    fn is_empty(&self) -> StoreResult<bool> {
        self.with(|conn| {
            let row = conn.client.query_one(
                "SELECT NOT EXISTS (SELECT 1 FROM settings) \
                 AND NOT EXISTS (SELECT 1 FROM conversations)",
                &[],
            )?;
            Ok(row.get(0))
        })
    }

    fn begin_transaction(&self) -> Option<StoreResult<Arc<dyn Backend>>> {
        self.begin("BEGIN")
    }

    fn begin_snapshot(&self) -> Option<StoreResult<Arc<dyn Backend>>> {
        // Its snapshot is taken at its first statement.
        self.begin("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    }

    fn commit_transaction(&self) -> StoreResult<()> {
        let Source::Transaction(held) = &self.source else {
            return Ok(());
        };
        let mut held = held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut conn = held.take().ok_or_else(|| {
            StoreError::Backend(Box::new(PgError("the transaction is over".to_owned())))
        })?;
        conn.client
            .batch_execute("COMMIT")
            .map_err(|e| backend_error(&e))
    }

    fn changes(&self) -> Option<Receiver<Change>> {
        if matches!(self.source, Source::Transaction(_)) {
            return None;
        }
        let (sender, receiver) = std::sync::mpsc::channel();
        self.listener(sender);
        Some(receiver)
    }

    fn describe(&self) -> String {
        self.url.clone()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for PgBackend {
    /// A transaction dropped without its commit is rolled back, so that
    /// its connection goes back to the pool clean; the pool's connections
    /// are closed apart ([`close_apart`]).
    fn drop(&mut self) {
        match std::mem::replace(&mut self.source, Source::Gone) {
            Source::Transaction(held) => {
                let mut held = held
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(mut conn) = held.take() {
                    // A connection that cannot roll back is broken, and
                    // the pool does not reuse it.
                    let _ = conn.client.batch_execute("ROLLBACK");
                }
            }
            Source::Pool(pool) => close_apart(pool),
            Source::Gone => {}
        }
    }
}

/// One table's share of a scan: its rows between two bounds on its
/// stored keys (the seam's keys with the tag left out, where the table
/// leaves it out).
#[derive(Debug, Clone)]
struct Part {
    table: Table,
    tag: u8,
    /// The last tag it covers (whole-key tables cover several).
    last_tag: u8,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
}

/// The tables a range of the seam's keys spans, in key order, each with
/// its bounds.
fn parts(space: Keyspace, range: &KeyRange) -> Vec<Part> {
    if space == Keyspace::Blobs {
        return vec![Part {
            table: BLOBS,
            tag: 0,
            last_tag: u8::MAX,
            lower: range.0.clone(),
            upper: range.1.clone(),
        }];
    }
    let tag_of = |b: &Bound<Vec<u8>>| match b {
        Bound::Included(k) | Bound::Excluded(k) => k.first().copied(),
        Bound::Unbounded => None,
    };
    let first_tag = tag_of(&range.0).unwrap_or(0);
    let last_tag = match &range.1 {
        Bound::Unbounded => u8::MAX,
        // Below every key (the empty key).
        Bound::Excluded(k) if k.is_empty() => return Vec::new(),
        Bound::Included(k) | Bound::Excluded(k) => k.first().copied().unwrap_or(0),
    };
    let mut out: Vec<Part> = Vec::new();
    for tag in first_tag..=last_tag {
        let table = main_table(tag);
        let (lower, upper) = if table.strips_tag {
            // Keys without their tag: the range's bounds where they fall
            // in this tag, none where they fall in another.
            let strip = |b: &Bound<Vec<u8>>| match b {
                Bound::Included(k) if k.first() == Some(&tag) => Bound::Included(k[1..].to_vec()),
                Bound::Excluded(k) if k.first() == Some(&tag) => Bound::Excluded(k[1..].to_vec()),
                _ => Bound::Unbounded,
            };
            (strip(&range.0), strip(&range.1))
        } else {
            // Whole keys: bounded by the tag too, so that the part never
            // returns keys of tags kept in other tables.
            let lower = match tag_of(&range.0) {
                Some(t) if t == tag => range.0.clone(),
                _ if tag == 0 => Bound::Unbounded,
                _ => Bound::Included(vec![tag]),
            };
            let upper = match tag_of(&range.1) {
                Some(t) if t == tag => range.1.clone(),
                _ if tag == u8::MAX => Bound::Unbounded,
                _ => Bound::Excluded(vec![tag + 1]),
            };
            // Neighbouring tags of the same table are one part.
            if let Some(previous) = out.last_mut() {
                if previous.table == table && previous.last_tag + 1 == tag {
                    previous.upper = upper;
                    previous.last_tag = tag;
                    continue;
                }
            }
            (lower, upper)
        };
        out.push(Part {
            table,
            tag,
            last_tag: tag,
            lower,
            upper,
        });
    }
    out
}

/// A scan in progress: the parts left, and the rows read but not yet
/// returned.
struct Scan<'a> {
    backend: &'a PgBackend,
    parts: VecDeque<Part>,
    reverse: bool,
    buffer: VecDeque<(Bytes, Bytes)>,
    page: i64,
    failed: bool,
}

impl Scan<'_> {
    /// Reads the next page of the current part into the buffer; false when
    /// the scan is over.
    fn fill(&mut self) -> StoreResult<bool> {
        while self.buffer.is_empty() {
            let Some(part) = self.parts.front().cloned() else {
                return Ok(false);
            };
            let (sql, params) = page_query(&part, self.reverse, self.page);
            let rows = self.backend.read(|conn| {
                let statement = prepared(&mut conn.client, &mut conn.statements, &sql)?;
                let refs: Vec<&(dyn ToSql + Sync)> =
                    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
                conn.client.query(&statement, &refs)
            })?;
            let full = rows.len() as i64 >= self.page;
            let mut bytes = 0usize;
            let mut last_stored: Option<Vec<u8>> = None;
            for row in rows {
                let (conversation, key, value): (Vec<u8>, Vec<u8>, Vec<u8>) = match part.table.shape
                {
                    Shape::Keyed => (row.get(0), row.get(1), row.get(2)),
                    Shape::Single => (row.get(0), Vec::new(), row.get(1)),
                    Shape::Global => (Vec::new(), row.get(0), row.get(1)),
                };
                bytes += value.len();
                let mut stored = conversation.clone();
                stored.extend_from_slice(&key);
                let seam = seam_key(part.table, part.tag, &conversation, &key);
                last_stored = Some(stored);
                self.buffer
                    .push_back((Bytes::from(seam), Bytes::from(value)));
            }
            if full {
                // More may follow: continue after the last row read, with
                // as many rows as make about PAGE_BYTES.
                if let (Some(last), Some(front)) = (last_stored, self.parts.front_mut()) {
                    if self.reverse {
                        front.upper = Bound::Excluded(last);
                    } else {
                        front.lower = Bound::Excluded(last);
                    }
                }
                let per_row = (bytes / self.page.max(1) as usize).max(1);
                self.page = ((PAGE_BYTES / per_row) as i64).clamp(FIRST_PAGE / 4, LARGEST_PAGE);
            } else {
                self.parts.pop_front();
            }
        }
        Ok(true)
    }
}

impl Iterator for Scan<'_> {
    type Item = StoreResult<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.fill() {
            Ok(true) => self.buffer.pop_front().map(Ok),
            Ok(false) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// A parameter of a page query.
type PageParam = Vec<u8>;

/// The query for the next page of `part`, and its parameters.
fn page_query(part: &Part, reverse: bool, limit: i64) -> (String, Vec<PageParam>) {
    let table = part.table;
    let mut params: Vec<PageParam> = Vec::new();
    let mut clauses: Vec<String> = Vec::new();
    let order = if reverse { "DESC" } else { "ASC" };
    let columns = match table.shape {
        Shape::Keyed => "conversation_id, key, value",
        Shape::Single => "conversation_id, value",
        Shape::Global => "key, value",
    };
    let ordering = match table.shape {
        Shape::Keyed => format!("conversation_id {order}, key {order}"),
        Shape::Single => format!("conversation_id {order}"),
        Shape::Global => format!("key {order}"),
    };
    match table.shape {
        Shape::Global => {
            bound_clause("key", &part.lower, true, &mut clauses, &mut params);
            bound_clause("key", &part.upper, false, &mut clauses, &mut params);
        }
        Shape::Single => {
            bound_clause(
                "conversation_id",
                &part.lower,
                true,
                &mut clauses,
                &mut params,
            );
            bound_clause(
                "conversation_id",
                &part.upper,
                false,
                &mut clauses,
                &mut params,
            );
        }
        Shape::Keyed => keyed_clauses(&part.lower, &part.upper, &mut clauses, &mut params),
    }
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", clauses.join(" AND "))
    };
    let sql = format!(
        "SELECT {columns} FROM {}{filter} ORDER BY {ordering} LIMIT {limit}",
        table.name
    );
    (sql, params)
}

/// `column >= $n` (or `>`, `<`, `<=`) for a bound on a plain column.
fn bound_clause(
    column: &str,
    bound: &Bound<Vec<u8>>,
    lower: bool,
    clauses: &mut Vec<String>,
    params: &mut Vec<PageParam>,
) {
    let (op, value) = match (bound, lower) {
        (Bound::Unbounded, _) => return,
        (Bound::Included(v), true) => (">=", v),
        (Bound::Excluded(v), true) => (">", v),
        (Bound::Included(v), false) => ("<=", v),
        (Bound::Excluded(v), false) => ("<", v),
    };
    params.push(value.clone());
    clauses.push(format!("{column} {op} ${}", params.len()));
}

/// The smallest 16-byte-or-shorter string after every string that
/// starts with `prefix` (`None`: there is none).
fn after_prefix(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The clauses of bounds on a keyed table's stored keys (conversation id,
/// 16 bytes, then the key). A range inside one conversation becomes
/// `conversation_id = $1` and bounds on `key`, so that it is a query of
/// one conversation (one shard, distributed by it).
fn keyed_clauses(
    lower: &Bound<Vec<u8>>,
    upper: &Bound<Vec<u8>>,
    clauses: &mut Vec<String>,
    params: &mut Vec<PageParam>,
) {
    let conversation_of = |b: &Bound<Vec<u8>>| match b {
        Bound::Included(v) | Bound::Excluded(v) if v.len() >= 16 => Some(v[..16].to_vec()),
        _ => None,
    };
    let lower_conversation = conversation_of(lower);
    // One conversation: the lower bound names it, and the upper bound is
    // in it or is the end of its keys.
    if let Some(conversation) = &lower_conversation {
        let upper_in_same = match upper {
            Bound::Included(v) | Bound::Excluded(v)
                if v.len() >= 16 && v[..16] == conversation[..] =>
            {
                Some(true)
            }
            // The first key after every key of the conversation.
            Bound::Excluded(v) => after_prefix(conversation)
                .filter(|end| end == v)
                .map(|_| false),
            _ => None,
        };
        if let Some(has_key_bound) = upper_in_same {
            params.push(conversation.clone());
            clauses.push(format!("conversation_id = ${}", params.len()));
            let key_bound = |b: &Bound<Vec<u8>>| match b {
                Bound::Included(v) => Bound::Included(v[16..].to_vec()),
                Bound::Excluded(v) => Bound::Excluded(v[16..].to_vec()),
                Bound::Unbounded => Bound::Unbounded,
            };
            let lower_key = key_bound(lower);
            // `key >= ''` holds for every key: leave it out.
            if lower_key != Bound::Included(Vec::new()) {
                bound_clause("key", &lower_key, true, clauses, params);
            }
            if has_key_bound {
                bound_clause("key", &key_bound(upper), false, clauses, params);
            }
            return;
        }
    }
    keyed_bound(lower, true, clauses, params);
    keyed_bound(upper, false, clauses, params);
}

/// One bound on a keyed table's stored keys, in general.
fn keyed_bound(
    bound: &Bound<Vec<u8>>,
    lower: bool,
    clauses: &mut Vec<String>,
    params: &mut Vec<PageParam>,
) {
    let (value, inclusive) = match bound {
        Bound::Unbounded => return,
        Bound::Included(v) => (v, true),
        Bound::Excluded(v) => (v, false),
    };
    if value.len() < 16 {
        // Shorter than an id: the id alone decides (an id starting with
        // it is longer, so greater).
        bound_clause("conversation_id", bound, lower, clauses, params);
        return;
    }
    let op = match (lower, inclusive) {
        (true, true) => ">=",
        (true, false) => ">",
        (false, true) => "<=",
        (false, false) => "<",
    };
    params.push(value[..16].to_vec());
    params.push(value[16..].to_vec());
    clauses.push(format!(
        "(conversation_id, key) {op} (${}, ${})",
        params.len() - 1,
        params.len()
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_left_out_of_messages() {
        assert_eq!(
            redact("postgres://me:secret@host/db"),
            "postgres://me:***@host/db"
        );
        assert_eq!(redact("postgres://me@host/db"), "postgres://me@host/db");
        assert_eq!(
            redact("postgres:///db?host=/tmp&password=x&user=y"),
            "postgres:///db?host=/tmp&password=***&user=y"
        );
        // Passwords with `/`, `?` or `@`, encoded keys, keys given twice,
        // key=value strings.
        assert_eq!(
            redact("postgres://u:Xy/Secret@%2Ftmp/db"),
            "postgres://u:***@%2Ftmp/db"
        );
        assert_eq!(redact("postgres://u:a?b@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact("postgres://u:a@b@h/db?x=1"),
            "postgres://u:***@h/db?x=1"
        );
        assert!(!redact("postgres://u:pw@h/db?application_name=a@b").contains("pw"));
        assert_eq!(
            redact("postgres://h/db?password=sec@ret"),
            "postgres://h/db?password=***"
        );
        assert_eq!(
            redact("postgres://u@h/db?password=sec@ret&x=1"),
            "postgres://u@h/db?password=***&x=1"
        );
        assert_eq!(
            redact("postgres://u@h/db?pass%77ord=x&password=y"),
            "postgres://u@h/db?pass%77ord=***&password=***"
        );
        assert_eq!(
            redact("host=/tmp password=x user=u"),
            "host=/tmp password=*** user=u"
        );
    }

    #[test]
    fn a_range_inside_one_conversation_is_a_query_of_it() {
        let id = [7u8; 16];
        let mut start = vec![b'c'];
        start.extend_from_slice(&id);
        let range = super::super::prefixed(start);
        let parts = parts(Keyspace::Main, &range);
        assert_eq!(parts.len(), 1);
        let (sql, params) = page_query(&parts[0], false, 10);
        assert!(sql.contains("WHERE conversation_id = $1 ORDER BY"), "{sql}");
        assert_eq!(params, vec![id.to_vec()]);
    }

    #[test]
    fn whole_key_tables_are_bounded_by_their_tags() {
        let parts = parts(Keyspace::Main, &(Bound::Unbounded, Bound::Unbounded));
        let settings: Vec<&Part> = parts
            .iter()
            .filter(|p| p.table.name == "settings")
            .collect();
        // Runs of tags without a table of their own, between the others.
        assert!(settings.len() > 1);
        for part in settings {
            let (sql, _) = page_query(part, false, 10);
            assert!(sql.contains("key"), "{sql}");
        }
    }
}
