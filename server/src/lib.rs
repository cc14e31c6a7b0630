//! `convstore serve`: one database shared by many processes and tools over
//! HTTP/1.1.
//!
//! The server is the one process that has the database open (sled allows
//! one); clients read and write through it: conversations, appends with
//! optimistic concurrency and idempotency keys, the raw log, projected and
//! materialized views, compaction, forks, explain, verify, and live follow
//! of a log or a view as Server-Sent Events. The API is versioned under
//! `/v1` and described by the OpenAPI document in `openapi.json` (served at
//! `/v1/openapi.json`).
//!
//! Design (ARCHITECTURE.md, "The server"):
//!
//! - A tokio runtime runs the HTTP side (hyper through axum, one task per
//!   connection); every store call runs on tokio's blocking pool, since
//!   the engine is synchronous. One [`convstore_engine::Engine`] is shared
//!   (`Arc`) by all requests: it is `Sync`, and the store serialises writes
//!   inside the process.
//! - Appends are applied without a sync, then wait for the group commit
//!   ([`commit`]): one thread makes every write applied before its round
//!   durable with one flush, and answers every append of the round.
//! - Followers read the log from the store at their own pace; an append
//!   wakes them ([`follow`]), so a slow follower is late, never skipped.
//! - The server writes `convstore.server` into the database directory
//!   ([`discovery`]) so that the command line finds it when the database is
//!   held.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
mod commands;
pub mod commit;
pub mod discovery;
mod error;
pub mod follow;
mod http;
mod idempotency;
mod inspector;
pub mod metrics;
mod routes;
mod state;

pub use error::{ApiError, ServeError};
pub use http::{bind, serve, serve_bound, Bound, Limits, ServeOptions};

/// What a request body over `--max-body-bytes` is answered (413), and
/// what the command line says when it finds an input over the limit
/// before sending it.
#[must_use]
pub fn body_too_large_message(limit: u64) -> String {
    format!(
        "the request body is larger than the server's limit of {limit} bytes (serve --max-body-bytes); nothing was stored"
    )
}

/// The header of an `openai` answer (a view, a materialized view, an
/// export) that says what the `messages` array left out:
/// `CALLS,RESULTS,OTHER` (tool calls without a result, results without a
/// call, events no message holds), as the command line says it.
pub const OPENAI_LEFT_OUT: &str = "convstore-openai-left-out";

/// The value of [`OPENAI_LEFT_OUT`] for `dropped`.
#[must_use]
pub fn openai_left_out(dropped: &convstore_engine::format::Dropped) -> String {
    format!("{},{},{}", dropped.calls, dropped.results, dropped.other)
}

/// What a value of [`OPENAI_LEFT_OUT`] says was left out.
#[must_use]
pub fn parse_openai_left_out(value: &str) -> Option<convstore_engine::format::Dropped> {
    let mut counts = value.split(',').map(|n| n.trim().parse::<u64>().ok());
    let (calls, results, other) = (counts.next()??, counts.next()??, counts.next()??);
    counts
        .next()
        .is_none()
        .then_some(convstore_engine::format::Dropped {
            calls,
            results,
            other,
        })
}

/// The refusal of a request without a token, by a server with tokens.
pub const TOKEN_NEEDED: &str = "a token is needed: send Authorization: Bearer TOKEN";
/// The refusal of a token the server does not know.
pub const TOKEN_NOT_VALID: &str = "the token is not valid";
/// The refusal of a write with a read-only token.
pub const TOKEN_READ_ONLY: &str = "the token is read-only; this request writes";

/// The OpenAPI document of the API, as served at `/v1/openapi.json`.
pub const OPENAPI: &str = include_str!("../openapi.json");
