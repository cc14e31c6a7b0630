//! The web inspector: read-only pages served at `/` (the conversations)
//! and `/c/{conv}` (one conversation: its compactions over its turns, its
//! tokens raw and projected, and its raw log beside its view), and the two
//! routes they read beyond the API's others: `timeline` and `inspect`.
//!
//! The pages are plain HTML, CSS and JavaScript embedded in the binary
//! (`server/assets/`): nothing is fetched from elsewhere, nothing is built.
//! They hold no data: they are served without a token, and the script
//! sends the token the user gives it (kept in the tab's session storage)
//! with every request for data.

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use convstore_engine::inspect::{self, Start};
use convstore_engine::Scope;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::routes::{parse_as_of, resolve_read};
use crate::state::Shared;

type Result<T, E = ApiError> = std::result::Result<T, E>;

const LIST_HTML: &str = include_str!("../assets/index.html");
const CONVERSATION_HTML: &str = include_str!("../assets/conversation.html");
const SCRIPT: &str = include_str!("../assets/inspector.js");
const STYLE: &str = include_str!("../assets/inspector.css");

/// Whether `path` is one of the inspector's pages or assets (served
/// without a token: they hold no data).
pub(crate) fn is_page(path: &str) -> bool {
    path == "/" || path.starts_with("/c/") || path.starts_with("/assets/")
}

fn page(body: &'static str, content_type: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
        ),
    );
    response
}

/// `GET /`: the conversations.
pub(crate) async fn list_page() -> Response {
    page(LIST_HTML, "text/html; charset=utf-8")
}

/// `GET /c/{conv}`: one conversation.
pub(crate) async fn conversation_page() -> Response {
    page(CONVERSATION_HTML, "text/html; charset=utf-8")
}

/// `GET /assets/inspector.js`.
pub(crate) async fn script() -> Response {
    page(SCRIPT, "text/javascript; charset=utf-8")
}

/// `GET /assets/inspector.css`.
pub(crate) async fn style() -> Response {
    page(STYLE, "text/css; charset=utf-8")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimelineQuery {
    as_of: Option<String>,
    buckets: Option<usize>,
}

/// `GET /v1/conversations/{c}/timeline?as_of=&buckets=`: compactions,
/// winners per content type, pins and tokens per bucket of turns.
pub(crate) async fn timeline(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<TimelineQuery>,
) -> Result<Json<Value>> {
    let as_of = parse_as_of(q.as_of.as_deref())?;
    let buckets = q.buckets.unwrap_or(400);
    state
        .blocking(move |engine| {
            let store = engine.store();
            let id = resolve_read(store, &conv)?;
            let scope = Scope::as_of(store, &id, as_of)?;
            Ok(Json(
                inspect::timeline(store, &id, scope, buckets)?.to_json(),
            ))
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InspectQuery {
    from: Option<u64>,
    turn: Option<u64>,
    limit: Option<u64>,
    as_of: Option<String>,
}

/// `GET /v1/conversations/{c}/inspect?from=SEQ|turn=T&limit=N&as_of=`:
/// records of the raw log beside the view events made from them.
pub(crate) async fn inspect(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<InspectQuery>,
) -> Result<Json<Value>> {
    let start = match (q.from, q.turn) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request("give from or turn, not both"));
        }
        (Some(seq), None) => Start::Seq(seq),
        (None, Some(turn)) => Start::Turn(turn),
        (None, None) => Start::Seq(0),
    };
    let limit = q.limit.unwrap_or(200);
    if !(1..=inspect::PAGE_MAX).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit: {limit} is not from 1 to {}",
            inspect::PAGE_MAX
        )));
    }
    let as_of = parse_as_of(q.as_of.as_deref())?;
    state
        .blocking(move |engine| {
            let store = engine.store();
            let id = resolve_read(store, &conv)?;
            let scope = Scope::as_of(store, &id, as_of)?;
            Ok(Json(
                inspect::page(store, &id, scope, start, limit)?.to_json(),
            ))
        })
        .await
}
