//! The `/v1` API: one handler per route. Each resolves its conversation
//! as the command line does (commands that write take a name, a full id
//! or `id:PREFIX`; reads also take a bare id prefix), runs the engine on
//! the blocking pool and answers JSON, or streams.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use convstore_engine::compact::{CompactRequest, Status};
use convstore_engine::error::turns_note;
use convstore_engine::fork::ForkAt;
use convstore_engine::format::{self, text_line, write_view_event, Dropped, Format};
use convstore_engine::pipeline::{self, AsOf, Scope};
use convstore_engine::projection::bounds::{Bound, RangeError};
use convstore_engine::projection::{Tokenizer, ViewEvent};
use convstore_engine::store::event::{ReasoningPolicy, ToolCallPolicy};
use convstore_engine::store::{
    json as event_json, Address, AppendOptions, ConversationId, ConversationInfo, Event,
    IdempotencyKey, Store, StoreError, Timestamp, ID_MARKER,
};
use convstore_engine::views::{self, Refresh};
use convstore_engine::{Engine, Error};
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::follow;
use crate::idempotency::Claim;
use crate::state::Shared;

type Result<T, E = ApiError> = std::result::Result<T, E>;

// ---------------------------------------------------------------- helpers

/// A conversation argument as the command line reads it (Unicode NFC).
pub(crate) fn nfc(text: &str) -> String {
    use unicode_normalization::UnicodeNormalization as _;
    text.nfc().collect()
}

/// The conversation a read names (a bare id prefix too).
pub(crate) fn resolve_read(store: &Store, query: &str) -> Result<ConversationId> {
    Ok(store.resolve(&nfc(query))?)
}

/// The conversation a write names (a name, a full id or `id:PREFIX`).
pub(crate) fn resolve_write(store: &Store, query: &str) -> Result<ConversationId> {
    Ok(store.resolve_exact(&nfc(query))?)
}

pub(crate) fn parse_as_of(text: Option<&str>) -> Result<Option<AsOf>> {
    text.map(|text| {
        AsOf::parse(text).ok_or_else(|| {
            ApiError::bad_request(format!(
                "as_of: \"{text}\" is neither a record seq nor an RFC 3339 time (e.g. 2026-03-01T12:00:00Z)"
            ))
        })
    })
    .transpose()
}

fn parse_format(text: Option<&str>) -> Result<Format> {
    Ok(match text.unwrap_or("ndjson") {
        "ndjson" => Format::Ndjson,
        "json" => Format::Json,
        "openai" => Format::Openai,
        "text" => Format::Text,
        other => {
            return Err(ApiError::bad_request(format!(
                "format: \"{other}\" is not a format (ndjson, json, openai, text)"
            )))
        }
    })
}

fn content_type(format: Format) -> &'static str {
    match format {
        Format::Ndjson => "application/x-ndjson",
        Format::Json | Format::Openai => "application/json",
        Format::Text => "text/plain; charset=utf-8",
    }
}

/// `A..B` (inclusive), `A..`, `..B`, `A..=B` or `N`.
fn parse_turns(text: &str) -> Result<std::ops::RangeInclusive<u64>> {
    convstore_engine::turns::parse(text)
        .map_err(|e| ApiError::bad_request(format!("turns {text}: {e}")))
}

pub(crate) fn internal(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
}

/// A conversation as `list --json` shows it.
pub(crate) fn summary_json(c: &ConversationInfo) -> Value {
    json!({
        "id": c.id.hex(),
        "name": c.name,
        "events": c.len,
        "turns": c.turns,
        "head": c.head.hex(),
        "created": c.created.to_string(),
        "parent": c.fork.map(|p| p.parent.hex()),
    })
}

/// Bytes written on the blocking pool, sent to a response body in pieces
/// of about 64 KiB (the channel is small: memory stays bounded whatever
/// the size of the answer, and a client that does not read stops the
/// writer).
pub(crate) struct ChannelWriter {
    tx: mpsc::Sender<std::io::Result<Bytes>>,
    buf: Vec<u8>,
    /// Whether what was written so far ends a line (or nothing was).
    line_start: bool,
}

const PIECE: usize = 64 * 1024;

impl ChannelWriter {
    fn new(tx: mpsc::Sender<std::io::Result<Bytes>>) -> Self {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(PIECE),
            line_start: true,
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let piece = std::mem::replace(&mut self.buf, Vec::with_capacity(PIECE));
        self.tx.blocking_send(Ok(Bytes::from(piece))).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }

    /// Ends the body with an error: its last line is the error object
    /// (`{"error": {"code": ..., "message": ...}}`, on a line of its own),
    /// and then the connection is cut, so a client sees a cut answer, never
    /// a short one that looks whole, and can still say why. Where the body
    /// stopped mid-line, the newline put before the error line is not the
    /// body's: the error object says so (`"newline_added": true`).
    fn fail(&mut self, error: &ApiError) {
        let mut body = error.body();
        if !self.line_start {
            self.buf.push(b'\n');
            body["newline_added"] = true.into();
        }
        self.buf.extend_from_slice(body.to_string().as_bytes());
        self.buf.push(b'\n');
        if self.send().is_ok() {
            let _ = self
                .tx
                .blocking_send(Err(std::io::Error::other(error.message.clone())));
        }
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if let Some(&last) = data.last() {
            self.line_start = last == b'\n';
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() >= PIECE {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

fn channel_body(rx: mpsc::Receiver<std::io::Result<Bytes>>) -> Body {
    // (poll_fn: a closed channel keeps answering None, however often it is
    // polled; compression polls once more after the end.)
    let mut rx = rx;
    let mut failed: Option<std::io::Error> = None;
    Body::from_stream(futures_util::stream::poll_fn(move |cx| {
        if let Some(e) = failed.take() {
            return std::task::Poll::Ready(Some(Err(e)));
        }
        match rx.poll_recv(cx) {
            // The error cuts the connection; answering `Pending` once first
            // lets the connection write out the error line sent before it.
            std::task::Poll::Ready(Some(Err(e))) => {
                failed = Some(e);
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
            other => other,
        }
    }))
}

/// Streams what `write` writes, after `prepare` succeeded (its error is
/// the answer otherwise). Both run on the blocking pool.
pub(crate) async fn stream<P: Send + 'static>(
    state: &Shared,
    prepare: impl FnOnce(&Engine) -> Result<P> + Send + 'static,
    write: impl FnOnce(&Engine, P, &mut ChannelWriter) -> Result<()> + Send + 'static,
) -> Result<(Body, mpsc::Sender<std::io::Result<Bytes>>)> {
    let (tx, rx) = mpsc::channel(4);
    let (ready_tx, ready_rx) = oneshot::channel();
    let engine = Arc::clone(&state.engine);
    let writer_tx = tx.clone();
    tokio::task::spawn_blocking(move || {
        let prepared = match prepare(&engine) {
            Ok(prepared) => {
                let _ = ready_tx.send(Ok(()));
                prepared
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        let mut out = ChannelWriter::new(writer_tx);
        let result = write(&engine, prepared, &mut out)
            .and_then(|()| out.flush().map_err(|e| internal(e.to_string())));
        if let Err(e) = result {
            out.fail(&e);
        }
    });
    ready_rx
        .await
        .map_err(|_| internal("the worker stopped"))??;
    Ok((channel_body(rx), tx))
}

pub(crate) fn streamed(
    body: Body,
    content_type: &'static str,
    headers: &[(&'static str, String)],
) -> Response {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().insert(*name, value);
        }
    }
    response
}

fn io_error(e: &std::io::Error) -> ApiError {
    internal(e.to_string())
}

// ----------------------------------------------------------- server-wide

pub(crate) async fn healthz(State(state): State<Shared>, headers: HeaderMap) -> Json<Value> {
    let mut health = json!({
        "status": "ok",
        "instance": state.instance,
        "version": env!("CARGO_PKG_VERSION"),
        // A client checks a large body against it before sending: a body
        // over it is answered 413 while it is still being sent.
        "max_body_bytes": state.limits.max_body_bytes,
    });
    // And, where the server has tokens, what the token it presents may
    // do: a request refused for its token is answered while its body is
    // still being sent too.
    if let Some(tokens) = &state.tokens {
        health["token"] = json!(match tokens.presented(&headers) {
            Ok(crate::auth::Scope::ReadWrite) => "read-write",
            Ok(crate::auth::Scope::ReadOnly) => "read-only",
            Err(why) if why == crate::TOKEN_NEEDED => "missing",
            Err(_) => "not valid",
        });
    }
    Json(health)
}

pub(crate) async fn metrics(State(state): State<Shared>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

pub(crate) async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], crate::OPENAPI).into_response()
}

// ---------------------------------------------------------- conversations

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    prefix: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
}

/// The most conversations a page holds.
const MAX_PAGE: usize = 10_000;

pub(crate) async fn list(
    State(state): State<Shared>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>> {
    let limit = q.limit.unwrap_or(1000);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit: {limit} is not 1 to {MAX_PAGE}"
        )));
    }
    state
        .blocking(move |engine| {
            let mut all = engine.store().conversations()?;
            all.sort_by_key(|c| (c.created, c.id));
            let prefix = q.prefix.as_deref().map(nfc);
            let mut start = 0;
            if let Some(after) = &q.after {
                let after = ConversationId::from_hex(after).ok_or_else(|| {
                    ApiError::bad_request(format!("after: \"{after}\" is not a conversation id"))
                })?;
                start = all
                    .iter()
                    .position(|c| c.id == after)
                    .map(|i| i + 1)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("after: no conversation {}", after.hex()))
                    })?;
            }
            let mut page = Vec::new();
            let mut next = None;
            for c in &all[start..] {
                let matches = prefix
                    .as_deref()
                    .is_none_or(|p| c.name.as_deref().is_some_and(|n| n.starts_with(p)));
                if !matches {
                    continue;
                }
                if page.len() == limit {
                    next = page.last().map(|v: &Value| v["id"].clone());
                    break;
                }
                page.push(summary_json(c));
            }
            Ok(Json(json!({ "conversations": page, "next": next })))
        })
        .await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    name: Option<String>,
}

pub(crate) async fn create(
    State(state): State<Shared>,
    body: Body,
) -> Result<(StatusCode, Json<Value>)> {
    let body = read_body(body, &state.limits).await?;
    let request: CreateBody = if body.iter().all(u8::is_ascii_whitespace) {
        CreateBody::default()
    } else {
        parse_json_body(&body)?
    };
    let _write = write_permit(&state).await?;
    let info = state
        .blocking(move |engine| {
            let name = request.name.as_deref().map(nfc);
            let id = engine.store().create_conversation(name.as_deref())?;
            Ok(engine.store().info(&id)?)
        })
        .await?;
    state.committer.durable().await?;
    Ok((StatusCode::CREATED, Json(summary_json(&info))))
}

pub(crate) fn parse_json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    let text =
        std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the body is not UTF-8"))?;
    let value = convstore_engine::store::strict::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))?;
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(e.to_string()))
}

pub(crate) async fn info(
    State(state): State<Shared>,
    Path(conv): Path<String>,
) -> Result<Response> {
    state
        .blocking(move |engine| {
            let store = engine.store();
            let id = resolve_read(store, &conv)?;
            let info = store.info(&id)?;
            let mut value = summary_json(&info);
            let mut lineage = Vec::new();
            for (conversation, point) in store.lineage(&id)? {
                let c = store.info(&conversation)?;
                lineage.push(json!({
                    "id": conversation.hex(),
                    "name": c.name,
                    "events": c.len,
                    "head": c.head.hex(),
                    "parent": point.map(|p| p.parent.hex()),
                    "shared": point.map(|p| p.at),
                    "fork_head": point.map(|p| p.base.hex()),
                }));
            }
            value["lineage"] = Value::Array(lineage);
            let mut response = Json(value).into_response();
            if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", info.head.hex())) {
                response.headers_mut().insert(header::ETAG, etag);
            }
            Ok(response)
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkBody {
    at_turn: Option<u64>,
    at_seq: Option<u64>,
    name: Option<String>,
    compact: Option<String>,
}

pub(crate) async fn fork(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    body: Body,
) -> Result<(StatusCode, Json<Value>)> {
    let body = read_body(body, &state.limits).await?;
    let request: ForkBody = parse_json_body(if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        &body
    })?;
    if request.at_turn.is_some() && request.at_seq.is_some() {
        return Err(ApiError::bad_request(
            "at_turn and at_seq: give one or the other",
        ));
    }
    let _write = write_permit(&state).await?;
    let (value, id, len) = state
        .blocking(move |engine| {
            let store = engine.store();
            let parent = resolve_read(store, &conv)?;
            let at = match (request.at_turn, request.at_seq) {
                (Some(turn), _) => ForkAt::Turn(turn),
                (None, Some(seq)) => ForkAt::Seq(seq),
                (None, None) => ForkAt::End,
            };
            let name = request.name.as_deref().map(nfc);
            let forked = engine
                .fork(&parent, at, name.as_deref(), request.compact.as_deref())
                .map_err(|e| match (e, at) {
                    (e @ Error::NoSuchTurn { .. }, ForkAt::Turn(turn)) => {
                        ApiError::from(e).context(&format!("at_turn {turn}"))
                    }
                    (e @ Error::Store(_), ForkAt::Seq(seq)) => {
                        ApiError::from(e).context(&format!("at_seq {seq}"))
                    }
                    (e @ Error::EmptyFork, _) => ApiError::from(e).context("compact"),
                    (e, _) => e.into(),
                })?;
            let fork = store.info(&forked.id)?;
            Ok((
                json!({
                    "id": forked.id.hex(),
                    "name": fork.name,
                    "parent": parent.hex(),
                    "at": forked.at,
                    "shared": forked.at,
                    "after_seq": forked.at.checked_sub(1),
                    "events": fork.len,
                    "head": forked.head.hex(),
                    "compacted": forked.compacted,
                }),
                forked.id,
                fork.len,
            ))
        })
        .await?;
    state.committer.durable().await?;
    state.notify(&id, len);
    Ok((StatusCode::CREATED, Json(value)))
}

// ----------------------------------------------------------------- events

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppendQuery {
    expected_seq: Option<u64>,
    auto: Option<bool>,
}

/// Whether a conversation argument names an id rather than a name: an
/// append never creates a conversation from it.
fn names_an_id(query: &str) -> bool {
    query.starts_with(ID_MARKER)
        || (query.len() == 32 && query.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// An append body's events, and the NDJSON line each was on (from 1;
/// `None` for a JSON array, whose elements count from 0), so that errors
/// and warnings name places as the command line does.
pub(crate) struct BodyEvents {
    events: Vec<Event>,
    lines: Option<Vec<usize>>,
}

/// The events of an append body: a JSON array of events, or NDJSON (one
/// event a line). An error names the element or line.
fn parse_events(body: &[u8], ndjson: bool, limit: u64, now: Timestamp) -> Result<BodyEvents> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not UTF-8 (at byte {})",
            e.valid_up_to()
        ))
    })?;
    let input = |at: String, problem: String| ApiError::from(Error::Input { at, problem });
    // A byte order mark is skipped, as the command line's readers skip it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if ndjson {
        let mut events = Vec::new();
        let mut lines = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            if line.len() as u64 > limit {
                return Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "event_too_large",
                    format!("line {}: longer than the limit of {limit} bytes", i + 1),
                ));
            }
            events.push(
                event_json::parse_event(line, now)
                    .map_err(|e| input(format!("line {}", i + 1), e.to_string()))?,
            );
            lines.push(i + 1);
        }
        return Ok(BodyEvents {
            events,
            lines: Some(lines),
        });
    }
    let value = convstore_engine::store::strict::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))?;
    let Value::Array(items) = value else {
        return Err(ApiError::bad_request(
            "the body is neither a JSON array of events nor NDJSON (send Content-Type: application/x-ndjson for one event a line)",
        ));
    };
    let events = convstore_engine::parse_event_array(items, now)?;
    Ok(BodyEvents {
        events,
        lines: None,
    })
}

/// Reads a request body of at most `limits.max_body_bytes` bytes, within
/// `limits.body_timeout`. The rest of a body over the limit is read and
/// discarded ([`drain`]), so that a client still sending it reads the 413
/// rather than a connection reset.
pub(crate) async fn read_body(body: Body, limits: &crate::http::Limits) -> Result<Bytes> {
    let (limit, timeout) = (limits.max_body_bytes, limits.body_timeout);
    let timed_out = |what: String| {
        Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!("{what}; nothing was stored"),
        ))
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let mut body = body;
    let mut bytes = bytes::BytesMut::new();
    loop {
        // A body must arrive within `timeout`, and never stall for long:
        // a stalled upload holds a request slot.
        let wait = BODY_STALL.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        let frame = match tokio::time::timeout(wait, body.frame()).await {
            Err(_) if tokio::time::Instant::now() >= deadline => {
                return timed_out(format!(
                    "the request body did not arrive within {} s",
                    timeout.as_secs()
                ))
            }
            Err(_) => {
                return timed_out(format!(
                    "the request body stalled (nothing for {} s)",
                    BODY_STALL.as_secs()
                ))
            }
            Ok(None) => return Ok(bytes.freeze()),
            Ok(Some(frame)) => frame,
        };
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    if bytes.len() + data.len() > limit {
                        drop(bytes);
                        drain(body).await;
                        return Err(too_large(limit));
                    }
                    bytes.extend_from_slice(&data);
                }
            }
            Err(e) => {
                return Err(ApiError::bad_request(format!(
                    "reading the request body failed: {e}; nothing was stored"
                )));
            }
        }
    }
}

/// How much of a refused request's body the server reads and discards
/// before it answers, so that a client that sends its whole body before
/// reading the answer (as most do) reads the refusal rather than a broken
/// pipe. Larger bodies are cut off; the command line asks `/healthz`
/// first for those.
pub(crate) const DRAIN_BYTES: usize = 4 << 20;

/// Reads and discards up to [`DRAIN_BYTES`] of a refused request's body,
/// for at most two seconds.
pub(crate) async fn drain(body: Body) {
    let mut body = body;
    let mut seen = 0usize;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while seen <= DRAIN_BYTES {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                seen += frame.data_ref().map_or(0, bytes::Buf::remaining);
            }
            _ => return,
        }
    }
}

/// How long a request body may go without a byte arriving.
const BODY_STALL: Duration = Duration::from_secs(10);

pub(crate) fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        crate::body_too_large_message(limit as u64),
    )
}

pub(crate) async fn write_permit(state: &Shared) -> Result<tokio::sync::OwnedSemaphorePermit> {
    Arc::clone(&state.writes)
        .acquire_owned()
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "the server is shutting down",
            )
        })
}

/// The address an `If-Match` header expects.
/// `If-Match`: the head the append expects (an ETag, quoted or not), or
/// `*`: any head, but the conversation must exist (RFC 9110: the
/// condition holds if there is a current representation).
fn if_match(headers: &HeaderMap) -> Result<Option<IfMatch>> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    if text == "*" {
        return Ok(Some(IfMatch::Exists));
    }
    let bare = text.trim_start_matches("W/").trim_matches('"');
    Address::from_hex(&bare.to_ascii_lowercase())
        .map(|head| Some(IfMatch::Head(head)))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "If-Match: {text} is not a 64-digit hex address (the head, as an ETag) or *"
            ))
        })
}

/// What an `If-Match` header asks of an append.
#[derive(Debug, Clone, Copy)]
enum IfMatch {
    /// This head.
    Head(Address),
    /// Any head of an existing conversation.
    Exists,
}

/// A conflict answer: the head and length found.
fn conflict(message: String, head: Address, len: u64) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "conflict", message)
        .with("head", json!(head.hex()))
        .with("events", json!(len))
}

/// Appends with bodies up to this size are applied by the commit thread.
const SMALL_APPEND: usize = 64 * 1024;

pub(crate) struct Appended {
    id: ConversationId,
    name: Option<String>,
    first_seq: u64,
    count: u64,
    head: Address,
    created: bool,
    /// What an earlier request with the same idempotency key stored.
    replayed: bool,
    /// Results whose call id no call has, calls that reuse an id (stored
    /// all the same, as the command line does).
    warnings: Vec<String>,
}

/// The call id warnings of appending `body`'s events to the first `len`
/// records of `id` (`None`: a new conversation).
fn call_warnings(
    store: &Store,
    log: Option<(&ConversationId, u64)>,
    body: &BodyEvents,
) -> convstore_engine::Result<Vec<String>> {
    let mut check = convstore_engine::calls::CallCheck::default();
    for (i, event) in body.events.iter().enumerate() {
        check.observe(body.lines.as_ref().map_or(i, |lines| lines[i]), event);
    }
    let what = if body.lines.is_some() {
        "line"
    } else {
        "event"
    };
    check.against(store, log, what)
}

/// How many times an append looks for its conversation again when
/// deletes and creations by other requests race it.
const RETRIES: u8 = 3;

/// An append as a request asks it: to the conversation `conv` names
/// exactly, or to a new one named so. With an idempotency key that an
/// earlier append of the conversation stored (through this server before
/// a restart, or another server on the same database), nothing is stored
/// and that append is its answer.
pub(crate) struct AppendRequest {
    conv: String,
    body: BodyEvents,
    expected_seq: Option<u64>,
    expect_head: Option<Address>,
    must_exist: bool,
    idempotency: Option<IdempotencyKey>,
}

/// What an append request comes to once read against the store.
pub(crate) enum Prepared {
    /// Answered: replayed, refused before any write, or a new
    /// conversation created with the events.
    Done(Result<Appended>),
    /// To append to an existing conversation, with these options; then
    /// [`AppendRequest::finish`].
    Append(PlannedAppend),
}

/// An append to an existing conversation, read and checked, not stored.
pub(crate) struct PlannedAppend {
    pub id: ConversationId,
    pub options: AppendOptions,
    name: Option<String>,
    warnings: Vec<String>,
}

impl AppendRequest {
    /// The conversation as the request names it.
    pub(crate) fn conv(&self) -> &str {
        &self.conv
    }

    /// The events to append.
    pub(crate) fn events(&self) -> &[Event] {
        &self.body.events
    }

    /// Reads what the append needs: an existing conversation's name,
    /// length and head (checked against `expected_seq`), an idempotency
    /// key stored before, the call id warnings. A new conversation is
    /// created with the events here (without a sync).
    pub(crate) fn prepare(&self, engine: &Engine) -> Prepared {
        match self.prepare_or_fail(engine) {
            Ok(prepared) => prepared,
            Err(e) => Prepared::Done(Err(e)),
        }
    }

    fn prepare_or_fail(&self, engine: &Engine) -> Result<Prepared> {
        let store = engine.store();
        let conv = self.conv.as_str();
        let events = &self.body.events[..];
        // A conversation deleted between the look and the use is looked
        // for again (an append by name then creates it); so is one another
        // request created meanwhile.
        let retry = |e: &StoreError| {
            matches!(e, StoreError::NoSuchConversation { .. }) && self.may_create()
        };
        for attempt in 0..=RETRIES {
            if let Some(id) = store.find_exact(conv)? {
                let info = match store.info(&id) {
                    Ok(info) => info,
                    Err(e) if retry(&e) => continue,
                    Err(e) => return Err(e.into()),
                };
                let earlier = match &self.idempotency {
                    Some(key) => store
                        .idempotent_append(&id, key)
                        .map_err(idempotency_error)?,
                    None => None,
                };
                if let Some(earlier) = earlier {
                    return Ok(Prepared::Done(Ok(Appended {
                        id,
                        name: info.name,
                        first_seq: earlier.first_seq,
                        count: earlier.count,
                        head: earlier.head,
                        created: earlier.created,
                        replayed: true,
                        warnings: Vec::new(),
                    })));
                }
                let warnings = match call_warnings(store, Some((&id, info.len)), &self.body) {
                    Ok(warnings) => warnings,
                    Err(Error::Store(e)) if retry(&e) => continue,
                    Err(e) => return Err(e.into()),
                };
                let mut expect = self.expect_head;
                if let Some(seq) = self.expected_seq {
                    if info.len != seq {
                        return Err(conflict(
                            format!(
                                "conflict: the conversation has {} events, not the expected {seq}; nothing was stored",
                                info.len
                            ),
                            info.head,
                            info.len,
                        ));
                    }
                    // The head at that length: the store checks it atomically.
                    expect = Some(expect.unwrap_or(info.head));
                }
                let options = AppendOptions::new()
                    .expecting(expect)
                    .unsynced(true)
                    .idempotent(self.idempotency);
                return Ok(Prepared::Append(PlannedAppend {
                    id,
                    options,
                    name: info.name,
                    warnings,
                }));
            }
            if self.must_exist {
                return Err(ApiError::new(
                    StatusCode::PRECONDITION_FAILED,
                    "precondition_failed",
                    format!("If-Match: * and no conversation named \"{conv}\"; nothing was stored"),
                ));
            }
            if !self.may_create() {
                return Err(StoreError::NoSuchConversation {
                    query: conv.to_owned(),
                    hint: None,
                }
                .into());
            }
            let options = AppendOptions::new()
                .unsynced(true)
                .idempotent(self.idempotency);
            match store.create_and_append(Some(conv), events, &options) {
                Ok((id, appended)) => {
                    return Ok(Prepared::Done(Ok(Appended {
                        id,
                        name: Some(conv.to_owned()),
                        first_seq: appended.first_seq,
                        count: appended.count,
                        head: appended.head,
                        created: true,
                        replayed: false,
                        warnings: call_warnings(store, None, &self.body)?,
                    })))
                }
                // Another request created it first: append to it.
                Err(StoreError::NameTaken { .. }) if attempt < RETRIES => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            "the conversation kept being created and deleted meanwhile; nothing was stored; try again",
        ))
    }

    /// The answer to `planned` once the store appended it (`stored`).
    pub(crate) fn finish(
        &self,
        engine: &Engine,
        planned: PlannedAppend,
        stored: std::result::Result<convstore_engine::store::Appended, StoreError>,
    ) -> Result<Appended> {
        self.finish_trying(engine, planned, stored, RETRIES)
    }

    /// [`AppendRequest::finish`], applying the request anew at most
    /// `retries` times where the conversation was deleted under it.
    fn finish_trying(
        &self,
        engine: &Engine,
        planned: PlannedAppend,
        stored: std::result::Result<convstore_engine::store::Appended, StoreError>,
        retries: u8,
    ) -> Result<Appended> {
        match stored {
            Ok(appended) => Ok(Appended {
                id: planned.id,
                name: planned.name,
                first_seq: appended.first_seq,
                count: appended.count,
                head: appended.head,
                created: appended.created,
                replayed: appended.replayed,
                warnings: planned.warnings,
            }),
            Err(e @ StoreError::IdempotencyKeyReused) => Err(idempotency_error(e)),
            Err(e @ StoreError::HeadMismatch { .. }) => {
                let now = engine.store().info(&planned.id)?;
                let message = match self.expected_seq {
                    Some(seq) if now.len != seq => format!(
                        "conflict: the conversation has {} events, not the expected {seq}; nothing was stored",
                        now.len
                    ),
                    _ => e.to_string(),
                };
                Err(conflict(message, now.head, now.len))
            }
            // Deleted between the look and the append: a request that would
            // have created it (by name, expecting nothing of it) creates it
            // now, trying again a few times while deletes go on.
            Err(StoreError::NoSuchConversation { .. }) if self.may_create() && retries > 0 => {
                self.apply_trying(engine, retries - 1)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the request creates the conversation it names if there is
    /// none: named by a name, with no condition on what it holds.
    fn may_create(&self) -> bool {
        let expects_records = self.expected_seq.is_some_and(|s| s > 0)
            || self.expect_head.is_some_and(|h| h != Address::ROOT);
        !self.must_exist && !names_an_id(&self.conv) && !expects_records
    }

    /// Applies the append on its own (without a sync).
    fn apply(&self, engine: &Engine) -> Result<Appended> {
        self.apply_trying(engine, RETRIES)
    }

    fn apply_trying(&self, engine: &Engine, retries: u8) -> Result<Appended> {
        match self.prepare(engine) {
            Prepared::Done(answer) => answer,
            Prepared::Append(planned) => {
                let stored =
                    engine
                        .store()
                        .append(&planned.id, &self.body.events, &planned.options);
                self.finish_trying(engine, planned, stored, retries)
            }
        }
    }
}

/// The answer to a request whose idempotency key was used for another.
fn idempotency_error(e: StoreError) -> ApiError {
    match e {
        StoreError::IdempotencyKeyReused => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            "Idempotency-Key was used for another request; nothing was stored".to_owned(),
        ),
        other => other.into(),
    }
}

pub(crate) async fn append(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<AppendQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let condition = if_match(&headers)?;
    let expect_head = match condition {
        Some(IfMatch::Head(head)) => Some(head),
        _ => None,
    };
    let must_exist = matches!(condition, Some(IfMatch::Exists));
    let idempotency_key = match headers.get("idempotency-key") {
        Some(v) => {
            let key = v
                .to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= 255)
                .ok_or_else(|| {
                    ApiError::bad_request("Idempotency-Key: 1 to 255 visible ASCII characters")
                })?;
            Some(key.to_owned())
        }
        None => None,
    };
    let ndjson = match headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    {
        Some(t) if t.starts_with("application/x-ndjson") || t.starts_with("application/jsonl") => {
            Some(true)
        }
        Some(t) if t.starts_with("application/json") => Some(false),
        _ => None,
    };
    let limits = state.limits.clone();
    let body = read_body(body, &limits).await?;
    let ndjson = ndjson.unwrap_or_else(|| {
        body.iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_none_or(|b| *b != b'[')
    });
    let conv = nfc(&conv);
    // A request with a key already answered is answered again; one being
    // handled is waited for. The key is also stored with the append, so
    // that a retry after a restart, or through another server, is
    // answered again too.
    let mut durable_key = None;
    let ticket = match &idempotency_key {
        Some(key) => {
            let mut hasher = blake3::Hasher::new();
            hasher.update(conv.as_bytes());
            hasher.update(&[0]);
            hasher.update(format!("{:?}|{:?}|{:?}", q.expected_seq, condition, q.auto).as_bytes());
            hasher.update(&[0]);
            hasher.update(&body);
            let fingerprint = hasher.finalize();
            durable_key = Some(IdempotencyKey::new(key, *fingerprint.as_bytes()));
            // Keys are per conversation, as the store keeps them.
            let scoped = format!("{conv}\u{0}{key}");
            loop {
                match state.idempotency.claim(&scoped, fingerprint) {
                    Claim::New(ticket) => break Some(ticket),
                    Claim::Replay(status, value) => {
                        state
                            .metrics
                            .idempotent_replays
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let mut response = (status, Json(value)).into_response();
                        response
                            .headers_mut()
                            .insert("idempotency-replay", HeaderValue::from_static("true"));
                        return Ok(response);
                    }
                    Claim::Wait(mut done) => {
                        let _ = done.changed().await;
                    }
                    Claim::Mismatch => {
                        return Err(ApiError::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "idempotency_key_reused",
                            format!("Idempotency-Key \"{key}\" was used for another request; nothing was stored"),
                        ))
                    }
                }
            }
        }
        None => None,
    };
    let permit = write_permit(&state).await?;
    // From here on the write runs to its end even if the client goes away:
    // what is applied is made durable and answered (or remembered under its
    // key), never left half done.
    let task_state = Arc::clone(&state);
    let task = tokio::spawn(async move {
        let state = task_state;
        let _permit = permit;
        let now = Timestamp::now();
        let max_event = limits.max_event_bytes;
        // A database server makes each commit durable itself and runs
        // writers in parallel: no commit thread, no flush to wait for.
        let server_backend = state.engine.store().backend().is_server();
        let small = body.len() <= SMALL_APPEND && !server_backend;
        let conv2 = conv.clone();
        let expected_seq = q.expected_seq;
        let parse = move || -> Result<BodyEvents> {
            let events = parse_events(&body, ndjson, max_event, now)?;
            if events.events.is_empty() {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "empty",
                    "no events to append: send a JSON array of events or NDJSON",
                ));
            }
            Ok(events)
        };
        let request = move |body| AppendRequest {
            conv: conv2,
            body,
            expected_seq,
            expect_head,
            must_exist,
            idempotency: durable_key,
        };
        // A small append is parsed here and stored by the commit thread
        // with the others of its round, right before their flush; a large
        // one is parsed and applied on the blocking pool, then waits for a
        // flush.
        let applied = if small {
            match parse() {
                Ok(events) => state.committer.append(request(events)).await,
                Err(e) => Err(e),
            }
        } else {
            let applied = state
                .blocking(move |engine| request(parse()?).apply(engine))
                .await;
            match applied {
                Ok(appended) if server_backend => Ok(appended),
                Ok(appended) => state.committer.durable().await.map(|()| appended),
                Err(e) => Err(e),
            }
        };
        let appended = match applied {
            Ok(appended) => appended,
            Err(e) => {
                if e.code == "conflict" {
                    state
                        .metrics
                        .conflicts
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                return Err(e);
            }
        };
        let len = appended.first_seq + appended.count;
        if appended.replayed {
            // Stored by an earlier request with this key (before a restart,
            // or through another server): its result, nothing stored now.
            state
                .metrics
                .idempotent_replays
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let value = json!({
                "id": appended.id.hex(),
                "name": appended.name,
                "first_seq": appended.first_seq,
                "count": appended.count,
                "head": appended.head.hex(),
                "events": len,
                "created": appended.created,
            });
            // The first answer's status too.
            let status = if appended.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            if let Some(ticket) = ticket {
                ticket.finish(status, &value);
            }
            return Ok::<_, ApiError>((status, value, true));
        }
        state.notify(&appended.id, len);
        state
            .metrics
            .appends
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        state
            .metrics
            .appended_events
            .fetch_add(appended.count, std::sync::atomic::Ordering::Relaxed);
        let mut value = json!({
            "id": appended.id.hex(),
            "name": appended.name,
            "first_seq": appended.first_seq,
            "count": appended.count,
            "head": appended.head.hex(),
            "events": len,
            "created": appended.created,
        });
        if !appended.warnings.is_empty() {
            value["warnings"] = json!(appended.warnings);
        }
        // `[retention] after_compaction`: an append that stored a
        // compaction runs the policy (the events stand whatever it does).
        let (id, first) = (appended.id, appended.first_seq);
        let retain = state.engine.config().retention.after_compaction;
        let retention = if retain {
            state
                .blocking(move |engine| {
                    let compacted = engine.store().scan(&id, first..len)?.any(|r| {
                        r.is_ok_and(|r| {
                            matches!(
                                r.event.kind,
                                convstore_engine::store::EventKind::Compaction(_)
                            )
                        })
                    });
                    if compacted {
                        engine.after_compaction(&id);
                    }
                    Ok(engine.take_retention_error())
                })
                .await
        } else {
            Ok(None)
        };
        if let Ok(Some(error)) | Err(ApiError { message: error, .. }) = retention {
            value["warning"] = json!(format!(
                "the events were stored, but [retention] could not drop the payloads the compaction covers: {error}"
            ));
        }
        if q.auto == Some(true) {
            // The events are stored: a failure here is reported, not an
            // error (a retry would store them twice).
            let id = appended.id;
            let auto = state
                .blocking(move |engine| {
                    let report = engine.auto_compact(&id, false);
                    let info = engine.store().info(&id)?;
                    Ok((report, info))
                })
                .await;
            match auto {
                Ok((Ok(Some(report)), info)) => {
                    state.notify(&id, info.len);
                    value["head"] = json!(info.head.hex());
                    value["events"] = json!(info.len);
                    value["auto"] = json!({
                        "fold": report.fold,
                        "from_turn": report.from,
                        "to_turn": report.to,
                        "profile": report.profile,
                        "tokens_before": report.tokens_before,
                        "tokens_after": report.tokens_after,
                        "summarizer_error": report.summarizer_error.as_ref().map(ToString::to_string),
                    });
                }
                Ok((Ok(None), _)) => value["auto"] = Value::Null,
                Ok((Err(e), _)) => {
                    value["warning"] = json!(format!(
                        "the events were stored, but automatic compaction failed: {e}"
                    ));
                }
                Err(e) => {
                    value["warning"] = json!(format!(
                        "the events were stored, but automatic compaction failed: {}",
                        e.message
                    ));
                }
            }
        }
        let status = if appended.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        if let Some(ticket) = ticket {
            ticket.finish(status, &value);
        }
        Ok::<_, ApiError>((status, value, false))
    });
    let (status, value, replayed) = task
        .await
        .map_err(|e| internal(format!("the append task failed: {e}")))??;
    let mut response = (status, Json(value.clone())).into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotency-replay", HeaderValue::from_static("true"));
    }
    if let Some(head) = value["head"].as_str() {
        if let Ok(etag) = HeaderValue::from_str(&format!("\"{head}\"")) {
            response.headers_mut().insert(header::ETAG, etag);
        }
    }
    Ok(response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogQuery {
    from: Option<u64>,
    limit: Option<u64>,
    as_of: Option<String>,
}

pub(crate) async fn log(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<LogQuery>,
) -> Result<Response> {
    let as_of = parse_as_of(q.as_of.as_deref())?;
    if q.limit == Some(0) {
        return Err(ApiError::bad_request(
            "limit: 0 is not a number of events (1 or more)",
        ));
    }
    let prepare = move |engine: &Engine| -> Result<(ConversationId, u64, u64, u64, u64)> {
        let store = engine.store();
        let id = resolve_read(store, &conv)?;
        let len = store.info(&id)?.len;
        let scope =
            Scope::as_of(store, &id, as_of).map_err(|e| ApiError::from(e).context("as_of"))?;
        let from = q.from.unwrap_or(0);
        if from > scope.end {
            return Err(ApiError::from(StoreError::NoSuchRecord {
                seq: from,
                len: scope.end,
            })
            .context("from"));
        }
        let to = q
            .limit
            .map_or(scope.end, |l| scope.end.min(from.saturating_add(l)));
        Ok((id, from, to, scope.end, len))
    };
    let (tx_meta, rx_meta) = oneshot::channel();
    let (body, _) = stream(
        &state,
        move |engine| {
            let prepared = prepare(engine)?;
            let _ = tx_meta.send((prepared.2, prepared.3, prepared.4));
            Ok(prepared)
        },
        |engine, (id, from, to, _, _), out| {
            let mut line = Vec::with_capacity(1024);
            for record in engine.store().scan(&id, from..to)? {
                let record = record?;
                line.clear();
                convstore_engine::store::json::write_log_record(&record, &mut line);
                line.push(b'\n');
                out.write_all(&line).map_err(|e| io_error(&e))?;
            }
            Ok(())
        },
    )
    .await?;
    let (to, end, len) = rx_meta.await.map_err(|_| internal("the worker stopped"))?;
    let mut headers = vec![("convstore-events", len.to_string())];
    if to < end {
        headers.push(("convstore-next-seq", to.to_string()));
    }
    Ok(streamed(body, "application/x-ndjson", &headers))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FollowQuery {
    from: Option<u64>,
}

/// Where a follow stream starts: after `Last-Event-ID`, else at `from`,
/// else at the end; a record the log of `len` records does not hold is
/// refused.
fn follow_start(headers: &HeaderMap, from: Option<u64>, len: u64) -> Result<u64> {
    if let Some(last) = headers.get("last-event-id") {
        let text = last.to_str().unwrap_or("").trim();
        let seq: u64 = text.parse().map_err(|_| {
            ApiError::bad_request(format!("Last-Event-ID: \"{text}\" is not a record seq"))
        })?;
        if seq >= len {
            return Err(
                ApiError::from(StoreError::NoSuchRecord { seq, len }).context("Last-Event-ID")
            );
        }
        return Ok(seq + 1);
    }
    match from {
        Some(from) if from > len => Err(ApiError::bad_request(format!(
            "from: {from} is past the end of the log (it has {len} records)"
        ))),
        Some(from) => Ok(from),
        None => Ok(len),
    }
}

fn sse_response(rx: mpsc::Receiver<Bytes>) -> Response {
    let mut rx = rx;
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|item| item.map(Ok::<_, std::convert::Infallible>))
    }));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

pub(crate) async fn follow_log(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<FollowQuery>,
    headers: HeaderMap,
) -> Result<Response> {
    // Whatever was applied before is durable before it is sent.
    state.committer.durable().await?;
    let (id, len) = state
        .blocking(move |engine| {
            let id = resolve_read(engine.store(), &conv)?;
            Ok((id, engine.store().info(&id)?.len))
        })
        .await?;
    let start = follow_start(&headers, q.from, len)?;
    let (tx, rx) = mpsc::channel(follow::CHANNEL_MESSAGES);
    let _ = tx.try_send(Bytes::from_static(b"retry: 1000\n\n"));
    tokio::spawn(follow::raw(Arc::clone(&state), id, start, len, tx));
    Ok(sse_response(rx))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ViewFollowQuery {
    profile: Option<String>,
}

pub(crate) async fn follow_view(
    State(state): State<Shared>,
    Path((conv, name)): Path<(String, String)>,
    Query(q): Query<ViewFollowQuery>,
) -> Result<Response> {
    state.committer.durable().await?;
    let profile = q.profile.clone();
    let name2 = name.clone();
    let (id, len) = state
        .blocking(move |engine| {
            let id = resolve_write(engine.store(), &conv)?;
            // Creates it, checks the name and profile.
            engine
                .refresh_view(&id, &name2, profile.as_deref())
                .map_err(view_error)?;
            Ok((id, engine.store().info(&id)?.len))
        })
        .await?;
    let (tx, rx) = mpsc::channel(follow::CHANNEL_MESSAGES);
    let _ = tx.try_send(Bytes::from_static(b"retry: 1000\n\n"));
    tokio::spawn(follow::view(
        Arc::clone(&state),
        id,
        name,
        q.profile,
        len,
        tx,
    ));
    Ok(sse_response(rx))
}

// ------------------------------------------------------------------ views

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProjectQuery {
    format: Option<String>,
    profile: Option<String>,
    as_of: Option<String>,
    turns: Option<String>,
}

pub(crate) async fn project(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<ProjectQuery>,
) -> Result<Response> {
    let format = parse_format(q.format.as_deref())?;
    let as_of = parse_as_of(q.as_of.as_deref())?;
    let turns = q.turns.as_deref().map(parse_turns).transpose()?;
    let turns_text = q.turns.clone();
    let profile = q.profile.clone();
    let (left_out, rendered) = oneshot::channel();
    let (body, _) = stream(
        &state,
        move |engine| {
            let store = engine.store();
            let id = resolve_read(store, &conv)?;
            let scope =
                Scope::as_of(store, &id, as_of).map_err(|e| ApiError::from(e).context("as_of"))?;
            if let (Some(range), Some(text)) = (&turns, &turns_text) {
                let count = scope.turns(store, &id)?;
                if *range.start() >= count {
                    return Err(ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "bad_range",
                        format!("turns {text}: names no turn ({})", turns_note(count)),
                    ));
                }
            }
            let projector = views::projector(store, &id, scope.end, profile.as_deref())
                .map_err(|e| ApiError::from(e).context("profile"))?;
            let prepared = ProjectAnswer {
                id,
                scope,
                projector,
                turns,
            };
            openai_first(format == Format::Openai, prepared, left_out, |p, out| {
                write_projection(engine, p, format, out)
            })
        },
        move |engine, prepared, out| {
            prepared.write(out, |p, out| write_projection(engine, p, format, out))
        },
    )
    .await?;
    let headers = left_out_header(rendered).await;
    Ok(streamed(body, content_type(format), &headers))
}

/// A projection to answer, resolved.
pub(crate) struct ProjectAnswer {
    id: ConversationId,
    scope: Scope,
    projector: convstore_engine::projection::Projector,
    turns: Option<std::ops::RangeInclusive<u64>>,
}

/// Writes a projection in `format`: what an `openai` array left out.
fn write_projection(
    engine: &Engine,
    answer: ProjectAnswer,
    format: Format,
    out: &mut dyn Write,
) -> Result<Dropped> {
    let ProjectAnswer {
        id,
        scope,
        projector,
        turns,
    } = answer;
    let store = engine.store();
    let wanted = |v: &ViewEvent| turns.as_ref().is_none_or(|r| r.contains(&v.turn));
    let io = |e: std::io::Error| io_error(&e);
    match format {
        Format::Ndjson | Format::Json => {
            let json = format == Format::Json;
            let mut first = true;
            if json {
                out.write_all(b"[").map_err(io)?;
            }
            let format = |view: Vec<ViewEvent>| {
                let mut bytes = Vec::with_capacity(view.len() * 256);
                for v in view.iter().filter(|v| wanted(v)) {
                    if json {
                        bytes.push(b',');
                    }
                    write_view_event(v, &mut bytes);
                    if !json {
                        bytes.push(b'\n');
                    }
                }
                bytes
            };
            pipeline::stream_map(store, &id, scope, &projector, format, |bytes| {
                let skip = usize::from(json && first && !bytes.is_empty());
                first &= bytes.is_empty();
                out.write_all(&bytes[skip..])?;
                Ok(())
            })?;
            if json {
                out.write_all(b"]\n").map_err(io)?;
            }
        }
        Format::Openai => {
            let mut events = Vec::new();
            pipeline::stream(store, &id, scope, &projector, |v| {
                if wanted(v) {
                    events.push(v.clone());
                }
                Ok(())
            })?;
            return Ok(format::write_openai(out, &events)?);
        }
        Format::Text => {
            pipeline::stream(store, &id, scope, &projector, |v| {
                if wanted(v) {
                    writeln!(out, "{}", text_line(v))?;
                }
                Ok(())
            })?;
        }
    }
    Ok(Dropped::default())
}

/// An answer prepared: rendered whole already (an `openai` one), or to
/// stream.
pub(crate) enum Rendered<P> {
    /// The whole answer.
    Whole(Vec<u8>),
    /// What streaming it needs.
    Streamed(P),
}

impl<P> Rendered<P> {
    /// Writes the answer: the bytes rendered, or what `stream` writes.
    pub(crate) fn write(
        self,
        out: &mut dyn Write,
        stream: impl FnOnce(P, &mut dyn Write) -> Result<Dropped>,
    ) -> Result<()> {
        match self {
            Rendered::Whole(bytes) => out.write_all(&bytes).map_err(|e| io_error(&e)),
            Rendered::Streamed(prepared) => stream(prepared, out).map(|_| ()),
        }
    }
}

/// For an `openai` answer: renders it whole with `render` before the
/// answer starts (a `messages` array is built whole anyway) and sends
/// what it left out on `left_out`, for [`left_out_header`]. Answers in
/// other formats are left to stream.
pub(crate) fn openai_first<P>(
    openai: bool,
    prepared: P,
    left_out: oneshot::Sender<Dropped>,
    render: impl FnOnce(P, &mut dyn Write) -> Result<Dropped>,
) -> Result<Rendered<P>> {
    if !openai {
        return Ok(Rendered::Streamed(prepared));
    }
    let mut bytes = Vec::new();
    let dropped = render(prepared, &mut bytes)?;
    let _ = left_out.send(dropped);
    Ok(Rendered::Whole(bytes))
}

/// The [`crate::OPENAI_LEFT_OUT`] header of an answer [`openai_first`]
/// rendered; none for one it left to stream.
pub(crate) async fn left_out_header(
    rendered: oneshot::Receiver<Dropped>,
) -> Vec<(&'static str, String)> {
    match rendered.await {
        Ok(dropped) => vec![(crate::OPENAI_LEFT_OUT, crate::openai_left_out(&dropped))],
        Err(_) => Vec::new(),
    }
}

fn view_error(e: Error) -> ApiError {
    match e {
        Error::ViewProfile { name, existing } => ApiError::new(
            StatusCode::CONFLICT,
            "view_profile",
            format!("view \"{name}\" exists with {existing}; drop it (DELETE the view) to change its profile"),
        ),
        e => e.into(),
    }
}

pub(crate) async fn list_views(
    State(state): State<Shared>,
    Path(conv): Path<String>,
) -> Result<Json<Value>> {
    state
        .blocking(move |engine| {
            let store = engine.store();
            let id = resolve_write(store, &conv)?;
            let items: Vec<Value> = store
                .views(&id)?
                .iter()
                .map(|state| {
                    json!({
                        "name": state.name,
                        "profile": state.profile,
                        "events": state.events,
                        "records": state.len,
                        "head": state.head.hex(),
                    })
                })
                .collect();
            Ok(Json(Value::Array(items)))
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ViewQuery {
    format: Option<String>,
    profile: Option<String>,
}

pub(crate) async fn read_view(
    State(state): State<Shared>,
    Path((conv, name)): Path<(String, String)>,
    Query(q): Query<ViewQuery>,
    scope: Option<axum::Extension<crate::auth::Scope>>,
) -> Result<Response> {
    let format = parse_format(q.format.as_deref())?;
    // A read-only token reads a stored view (and keeps it current, as
    // any read does) but does not create one: that would store data.
    let read_only = scope.is_some_and(|s| s.0 == crate::auth::Scope::ReadOnly);
    let (tx_meta, rx_meta) = oneshot::channel();
    let (left_out, rendered) = oneshot::channel();
    let (body, _) = stream(
        &state,
        move |engine| {
            let id = resolve_write(engine.store(), &conv)?;
            if read_only && engine.store().view_state(&id, &name)?.is_none() {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    format!(
                        "the token is read-only: view \"{name}\" does not exist, and creating it writes"
                    ),
                ));
            }
            let (view, refresh) = engine
                .refresh_view(&id, &name, q.profile.as_deref())
                .map_err(view_error)?;
            let _ = tx_meta.send((view.clone(), refresh));
            openai_first(format == Format::Openai, (id, view.name), left_out, |p, out| {
                write_view(engine, p, format, out)
            })
        },
        move |engine, prepared, out| {
            prepared.write(out, |p, out| write_view(engine, p, format, out))
        },
    )
    .await?;
    let mut headers = left_out_header(rendered).await;
    let (view, refresh) = rx_meta.await.map_err(|_| internal("the worker stopped"))?;
    let refresh = match refresh {
        Refresh::Current => "current".to_owned(),
        Refresh::Built => "built".to_owned(),
        Refresh::Updated(ranges) => format!(
            "updated {}",
            ranges
                .iter()
                .map(|(a, b)| format!("{a}..{b}"))
                .collect::<Vec<_>>()
                .join(",")
        ),
    };
    headers.extend([
        ("convstore-view-refresh", refresh),
        ("convstore-view-records", view.len.to_string()),
        ("convstore-view-events", view.events.to_string()),
    ]);
    Ok(streamed(body, content_type(format), &headers))
}

/// Writes materialized view `name` of conversation `id` in `format`: what
/// an `openai` array left out.
fn write_view(
    engine: &Engine,
    (id, name): (ConversationId, String),
    format: Format,
    out: &mut dyn Write,
) -> Result<Dropped> {
    Ok(format::write_events(out, format, &mut |sink| {
        views::read(engine.store(), &id, &name, sink)
    })?)
}

pub(crate) async fn drop_view(
    State(state): State<Shared>,
    Path((conv, name)): Path<(String, String)>,
) -> Result<Json<Value>> {
    let _write = write_permit(&state).await?;
    let value = state
        .blocking(move |engine| {
            let id = resolve_write(engine.store(), &conv)?;
            if !engine.store().drop_view(&id, &name)? {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("no view named \"{name}\""),
                ));
            }
            Ok(json!({ "dropped": name }))
        })
        .await?;
    state.committer.durable().await?;
    Ok(Json(value))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedactBody {
    seq: u64,
    #[serde(default)]
    field: Option<String>,
    reason: String,
}

/// `POST /v1/conversations/{conv}/redact`: removes one text of one record
/// for good (see `Store::redact`); answered once the redaction and its
/// event are durable.
pub(crate) async fn redact(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    body: Body,
) -> Result<Json<Value>> {
    let body = read_body(body, &state.limits).await?;
    let body: RedactBody = parse_json_body(&body)?;
    let field = match body.field.as_deref() {
        None => None,
        Some(name) => Some(
            convstore_engine::store::RedactField::parse(name).ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!(
                        "field \"{}\": one of text, arguments, content, payload, delta, meta",
                        convstore_engine::store::one_line(name)
                    ),
                )
            })?,
        ),
    };
    let _write = write_permit(&state).await?;
    let (redaction, id) = state
        .blocking(move |engine| {
            let id = resolve_write(engine.store(), &conv)?;
            let redaction = engine.redact(&id, body.seq, field, &body.reason)?;
            // The index catches up at its next write or search if it
            // could not now.
            let _ = engine.take_index_error();
            Ok((redaction, id))
        })
        .await?;
    state.committer.durable().await?;
    state.notify(&id, redaction.event.first_seq + redaction.event.count);
    Ok(Json(convstore_engine::redaction_json(&redaction, &id)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteQuery {
    #[serde(default)]
    with_forks: bool,
}

/// `DELETE /v1/conversations/{conv}`: deletes it for good (see
/// `Store::delete`); answered once the deletion is durable.
pub(crate) async fn delete(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<DeleteQuery>,
) -> Result<Json<Value>> {
    let _write = write_permit(&state).await?;
    let deletion = state
        .blocking(move |engine| {
            let id = resolve_write(engine.store(), &conv)?;
            let deletion = engine.delete(&id, q.with_forks)?;
            // The index drops the documents at the next catch-up if it
            // could not now.
            let _ = engine.take_index_error();
            Ok(deletion)
        })
        .await?;
    let ids: Vec<ConversationId> = deletion.conversations.iter().map(|c| c.id).collect();
    state.idempotency.forget_conversations(&ids);
    for id in &ids {
        state.notifier.forget(id);
    }
    state.committer.durable().await?;
    Ok(Json(convstore_engine::deletion_json(&deletion)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExplainQuery {
    turn: Option<u64>,
    as_of: Option<String>,
}

pub(crate) async fn explain(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<ExplainQuery>,
) -> Result<Json<Value>> {
    let turn = q
        .turn
        .ok_or_else(|| ApiError::bad_request("turn: missing (the turn to explain)"))?;
    let as_of = parse_as_of(q.as_of.as_deref())?;
    state
        .blocking(move |engine| {
            let id = resolve_read(engine.store(), &conv)?;
            Ok(Json(engine.explain(&id, as_of, turn)?.to_json()))
        })
        .await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
#[allow(clippy::struct_excessive_bools)]
pub(crate) struct CompactBody {
    profile: Option<String>,
    reasoning: Option<String>,
    tool_calls: Option<String>,
    summary: Option<String>,
    #[serde(default)]
    summarize: bool,
    #[serde(default)]
    revert: bool,
    instructions: Option<String>,
    #[serde(default)]
    force: bool,
    tokenizer: Option<String>,
    from: Option<String>,
    to: Option<String>,
    keep_last: Option<u64>,
    #[serde(default)]
    dry_run: bool,
    recall_hints: Option<bool>,
}

/// A compaction request from its JSON body, checked as the command line
/// checks its flags.
fn compact_request(body: &CompactBody) -> Result<CompactRequest> {
    let mut request = CompactRequest::default();
    if body.revert
        && (body.reasoning.is_some()
            || body.tool_calls.is_some()
            || body.summary.is_some()
            || body.summarize
            || body.profile.is_some())
    {
        return Err(ApiError::bad_request(
            "revert cannot be used with reasoning, tool_calls, summary, summarize or profile",
        ));
    }
    if body.summary.is_some() && body.summarize {
        return Err(ApiError::bad_request(
            "summary and summarize: give one or the other",
        ));
    }
    if body.to.is_some() && body.keep_last.is_some() {
        return Err(ApiError::bad_request(
            "to and keep_last: give one or the other",
        ));
    }
    if body.summary.as_deref().is_some_and(|s| s.trim().is_empty()) {
        return Err(ApiError::bad_request("summary: an empty text"));
    }
    request.profile.clone_from(&body.profile);
    request.reasoning = match body.reasoning.as_deref() {
        None => None,
        Some("strip") => Some(ReasoningPolicy::Strip),
        Some("keep") => Some(ReasoningPolicy::Keep),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "reasoning: \"{other}\" is not a policy (strip, keep)"
            )))
        }
    };
    request.tool_calls = match body.tool_calls.as_deref() {
        None => None,
        Some("strip") => Some(ToolCallPolicy::Strip),
        Some("strip-requests" | "strip_requests") => Some(ToolCallPolicy::StripRequests),
        Some("strip-responses" | "strip_responses") => Some(ToolCallPolicy::StripResponses),
        Some("omit") => Some(ToolCallPolicy::Omit),
        Some("keep") => Some(ToolCallPolicy::Keep),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "tool_calls: \"{other}\" is not a policy (strip, strip-requests, strip-responses, omit, keep)"
            )))
        }
    };
    request.summary.clone_from(&body.summary);
    request.summarize = body.summarize;
    request.revert = body.revert;
    request.instructions.clone_from(&body.instructions);
    request.force = body.force;
    request.from = body
        .from
        .as_deref()
        .map(|t| Bound::parse(t).map_err(|e| ApiError::bad_request(format!("from {t}: {e}"))))
        .transpose()?;
    request.to = match (&body.to, body.keep_last) {
        (Some(t), _) => {
            Some(Bound::parse(t).map_err(|e| ApiError::bad_request(format!("to {t}: {e}")))?)
        }
        (None, Some(n)) => Some(Bound::BeforeLast(n)),
        (None, None) => None,
    };
    request.dry_run = body.dry_run;
    request.recall_hints = body.recall_hints;
    Ok(request)
}

pub(crate) async fn compact(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    body: Body,
) -> Result<Json<Value>> {
    let body = read_body(body, &state.limits).await?;
    let body: CompactBody = if body.iter().all(u8::is_ascii_whitespace) {
        CompactBody::default()
    } else {
        parse_json_body(&body)?
    };
    let request = compact_request(&body)?;
    let tokenizer_name = body
        .tokenizer
        .clone()
        .unwrap_or_else(|| "chars4".to_owned());
    let _write = write_permit(&state).await?;
    let (value, id, len) = state
        .blocking(move |engine| {
            let store = engine.store();
            let id = resolve_write(store, &conv)?;
            let info = store.info(&id)?;
            let tokenizer = Tokenizer::named(&tokenizer_name)
                .map_err(|e| ApiError::from(Error::from(e)).context("tokenizer"))?;
            let keep_last = engine.config().compaction.keep_last;
            let to_flag = match (&body.to, body.keep_last) {
                (Some(t), _) => format!("to {t}"),
                (None, Some(n)) => format!("keep_last {n}"),
                (None, None) if keep_last > 0 => {
                    format!("keep_last = {keep_last} (configuration)")
                }
                (None, None) => "the last turn".to_owned(),
            };
            let keeps = body.to.is_none() && (body.keep_last.is_some() || keep_last > 0);
            let from_flag = body
                .from
                .as_deref()
                .map_or_else(|| "turn 0".to_owned(), |t| format!("from {t}"));
            let note = turns_note(info.turns);
            let unprocessable = |m: String| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "bad_range", m);
            let report = engine.compact(&id, &request, &tokenizer).map_err(|e| match e {
                Error::Range(range) => match range {
                    RangeError::NoTurns => unprocessable(format!("{} has no turns", info.label())),
                    RangeError::From(e) => unprocessable(format!("{from_flag}: {e}")),
                    RangeError::To(_) if keeps => {
                        unprocessable(format!("{to_flag} leaves no turn to compact ({note})"))
                    }
                    RangeError::To(e) => unprocessable(format!("{to_flag}: {e}")),
                    RangeError::Empty { first, end } if keeps => unprocessable(format!(
                        "{from_flag} with {to_flag} leaves no turn to compact: turn {first} is after turn {end} ({note})"
                    )),
                    RangeError::Empty { first, end } => unprocessable(format!(
                        "{from_flag} {to_flag}: the range {first}..{end} is empty (from is after to)"
                    )),
                    RangeError::AfterLast { .. } => {
                        unprocessable(format!("{from_flag}: names no turn ({note})"))
                    }
                },
                other => other.into(),
            })?;
            let (tokens_before, tokens_after) =
                (report.before.total_tokens(), report.after.total_tokens());
            if report.status == Status::Inflated && !body.dry_run {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "inflated",
                    format!(
                        "{} (force stores it anyway)",
                        Error::Inflated {
                            before: tokens_before,
                            after: tokens_after,
                        }
                    ),
                )
                .with("report", report.to_json()));
            }
            let value = report.to_json();
            Ok((value, id, store.info(&id)?.len))
        })
        .await?;
    state.committer.durable().await?;
    state.notify(&id, len);
    Ok(Json(value))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifyQuery {
    conversation: Option<String>,
}

pub(crate) async fn verify(
    State(state): State<Shared>,
    Query(q): Query<VerifyQuery>,
) -> Result<Json<Value>> {
    state
        .blocking(move |engine| {
            let id = match &q.conversation {
                Some(query) => Some(resolve_read(engine.store(), query)?),
                None => None,
            };
            if engine.store().is_locked_by_key() {
                return Ok(Json(convstore_engine::keyless_verification_json(
                    engine.store(),
                    id.as_ref(),
                )?));
            }
            Ok(Json(convstore_engine::verification_json(
                engine,
                id.as_ref(),
                engine.verify(id.as_ref())?,
            )?))
        })
        .await
}

/// Any other path under `/v1`, or a method a path does not take.
pub(crate) async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        "no such endpoint (see /v1/openapi.json)",
    )
}
