//! The rest of the command line over HTTP: stats, pins, recall (and a
//! model's recall tool calls), search, diff, export, import, reindex and
//! backup. Each answers what the engine computes for the command, as
//! JSON (or the exported bytes), so that a command run through a server
//! prints what it prints locally.

use std::io::Write;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use convstore_engine::diff::Side;
use convstore_engine::export::{self, ExportFormat};
use convstore_engine::import::{self, ImportFormat};
use convstore_engine::projection::Tokenizer;
use convstore_engine::recall::{self, Target};
use convstore_engine::search::{Hit, SearchQuery, LIMIT_MAX};
use convstore_engine::store::json::write_log_record;
use convstore_engine::store::{EventType, Timestamp};
use convstore_engine::{stats, turns, views, AsOf, Engine, Scope};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::routes::{
    internal, left_out_header, nfc, openai_first, parse_as_of, parse_json_body, read_body,
    resolve_read, resolve_write, stream, streamed, write_permit,
};
use crate::state::Shared;

type Result<T, E = ApiError> = std::result::Result<T, E>;

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(message)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatsQuery {
    tokenizer: Option<String>,
}

/// `GET /v1/conversations/{conv}/stats`: what `stats --json` prints.
pub(crate) async fn stats(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<StatsQuery>,
) -> Result<Json<Value>> {
    let tokenizer = Tokenizer::named(q.tokenizer.as_deref().unwrap_or("chars4"))
        .map_err(|e| bad(format!("tokenizer: {e}")))?;
    state
        .blocking(move |engine| {
            let store = engine.store();
            let id = resolve_read(store, &conv)?;
            Ok(Json(stats::report(store, &id, &tokenizer, &mut |_, _| {})?))
        })
        .await
}

/// Pinned ranges as `pin --list --json` prints them (an open end: null).
fn pins_json(pins: &[(u64, u64)]) -> Value {
    Value::Array(
        pins.iter()
            .map(|&(a, b)| json!([a, (b != u64::MAX).then_some(b)]))
            .collect(),
    )
}

/// `GET /v1/conversations/{conv}/pins`.
pub(crate) async fn pins(
    State(state): State<Shared>,
    Path(conv): Path<String>,
) -> Result<Json<Value>> {
    state
        .blocking(move |engine| {
            let id = resolve_write(engine.store(), &conv)?;
            Ok(Json(pins_json(&engine.store().pins(&id)?)))
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PinBody {
    turns: String,
}

/// `POST /v1/conversations/{conv}/pins` `{"turns": "A..B"}`: pins them;
/// answers every pinned range.
pub(crate) async fn pin(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    body: Body,
) -> Result<Json<Value>> {
    let body = read_body(body, &state.limits).await?;
    let body: PinBody = parse_json_body(&body)?;
    let _write = write_permit(&state).await?;
    state
        .blocking(move |engine| {
            let store = engine.store();
            let id = resolve_write(store, &conv)?;
            let range = turns::existing(store, &id, "turns", &body.turns)?;
            Ok(Json(pins_json(&store.pin(
                &id,
                *range.start(),
                *range.end(),
            )?)))
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UnpinQuery {
    turns: Option<String>,
}

/// `DELETE /v1/conversations/{conv}/pins[?turns=A..B]`: unpins those
/// turns (every turn without `turns`); answers what stays pinned.
pub(crate) async fn unpin(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<UnpinQuery>,
) -> Result<Json<Value>> {
    let _write = write_permit(&state).await?;
    state
        .blocking(move |engine| {
            let store = engine.store();
            let id = resolve_write(store, &conv)?;
            let (from, to) = match &q.turns {
                Some(text) => {
                    let range = turns::existing(store, &id, "turns", text)?;
                    (*range.start(), *range.end())
                }
                None => (0, u64::MAX),
            };
            Ok(Json(pins_json(&store.unpin(&id, from, to)?)))
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecallQuery {
    handle: Option<String>,
    call: Option<String>,
    summary_of: Option<u64>,
    as_of: Option<String>,
    format: Option<String>,
}

/// `GET /v1/conversations/{conv}/recall`: the raw records behind a
/// handle (`SEQ`, `FROM..TO`), a call or a summary, as `recall` prints
/// them (NDJSON, or `format=text`).
pub(crate) async fn recall(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<RecallQuery>,
) -> Result<Response> {
    let text = match q.format.as_deref() {
        None | Some("ndjson") => false,
        Some("text") => true,
        Some(other) => return Err(bad(format!("format: \"{other}\" is not ndjson or text"))),
    };
    let target = match (&q.handle, &q.call, q.summary_of) {
        (Some(handle), None, None) => Target::parse_handle(handle)
            .ok_or_else(|| bad(format!("handle: \"{handle}\" is not SEQ or FROM..TO")))?,
        (None, Some(call), None) => Target::Call(call.clone()),
        (None, None, Some(seq)) => Target::SummaryOf(seq),
        _ => return Err(bad("give one of handle, call or summary_of")),
    };
    let as_of = parse_as_of(q.as_of.as_deref())?;
    let (body, _) = stream(
        &state,
        move |engine| {
            let store = engine.store();
            let id = resolve_read(store, &conv)?;
            let scope = Scope::as_of(store, &id, as_of)?;
            Ok(recall::recall(store, &id, scope, &target)?)
        },
        move |_, found, out| {
            let mut line = Vec::with_capacity(1024);
            for record in &found.records {
                if text {
                    out.write_all(recall::record_text(record).as_bytes())
                        .map_err(|e| internal(e.to_string()))?;
                } else {
                    line.clear();
                    write_log_record(record, &mut line);
                    line.push(b'\n');
                    out.write_all(&line).map_err(|e| internal(e.to_string()))?;
                }
            }
            Ok(())
        },
    )
    .await?;
    let content = if text {
        "text/plain; charset=utf-8"
    } else {
        "application/x-ndjson"
    };
    Ok(streamed(body, content, &[]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolCallQuery {
    max_tokens: Option<u64>,
}

/// `POST /v1/conversations/{conv}/recall` with a model's `recall` tool
/// call as the body: the tool's answer, in the call's own shape.
pub(crate) async fn answer_tool_call(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<ToolCallQuery>,
    body: Body,
) -> Result<Json<Value>> {
    let limits = state.limits.clone();
    let body = read_body(body, &limits).await?;
    let text = String::from_utf8(body.to_vec()).map_err(|_| bad("the tool call is not UTF-8"))?;
    let call = recall::parse_tool_call(&text)?;
    let max_tokens = q.max_tokens.unwrap_or(recall::DEFAULT_MAX_TOKENS);
    state
        .blocking(move |engine| {
            let store = engine.store();
            let id = resolve_read(store, &conv)?;
            Ok(Json(
                recall::answer_tool_call(store, &id, &call, max_tokens)?.message(),
            ))
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchQueryParams {
    q: String,
    conv: Option<String>,
    kind: Option<String>,
    since: Option<String>,
    limit: Option<String>,
}

/// `GET /v1/search?q=...`: ranked hits (`kind` may list several kinds,
/// comma-separated; `since` is an RFC 3339 time).
pub(crate) async fn search(
    State(state): State<Shared>,
    Query(p): Query<SearchQueryParams>,
) -> Result<Json<Value>> {
    // As the command line refuses `convstore search ''`.
    if p.q.trim().is_empty() {
        return Err(bad("q: an empty text".to_owned()));
    }
    let kinds = p
        .kind
        .iter()
        .flat_map(|k| k.split(','))
        .filter(|k| !k.is_empty())
        .map(|k| {
            EventType::from_name(k)
                .ok_or_else(|| bad(format!("kind: \"{k}\" is not an event type")))
        })
        .collect::<Result<Vec<_>>>()?;
    let since = match p.since.as_deref() {
        None => None,
        Some(text) => match AsOf::parse(text) {
            Some(AsOf::Time(time)) => Some(time),
            _ => return Err(bad(format!("since: \"{text}\" is not an RFC 3339 time"))),
        },
    };
    let limit = match p.limit.as_deref() {
        None => 10,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=LIMIT_MAX).contains(&n) => n,
            _ => {
                return Err(bad(format!(
                    "limit: \"{text}\" is not a number from 1 to {LIMIT_MAX}"
                )))
            }
        },
    };
    state
        .blocking(move |engine| {
            let conversation = match &p.conv {
                Some(query) => Some(resolve_read(engine.store(), query)?),
                None => None,
            };
            let hits = engine.search(&SearchQuery {
                text: p.q,
                conversation,
                kinds,
                since,
                limit,
            })?;
            Ok(Json(Value::Array(hits.iter().map(Hit::to_json).collect())))
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiffQuery {
    a: String,
    b: String,
    a_profile: Option<String>,
    b_profile: Option<String>,
}

/// `GET /v1/diff?a=SIDE&b=SIDE[&a_profile=P][&b_profile=P]`: two views
/// compared, aligned by raw seq; a side is `CONV`, `CONV@SEQ` or
/// `CONV@TIME`.
pub(crate) async fn diff(
    State(state): State<Shared>,
    Query(q): Query<DiffQuery>,
) -> Result<Json<Value>> {
    state
        .blocking(move |engine| {
            let store = engine.store();
            let a = Side::resolve(store, &nfc(&q.a), q.a_profile)
                .map_err(|e| ApiError::from(e).context("side A"))?;
            let b = Side::resolve(store, &nfc(&q.b), q.b_profile)
                .map_err(|e| ApiError::from(e).context("side B"))?;
            let diff = engine.diff(&a, &b)?;
            Ok(Json(
                serde_json::to_value(diff).map_err(|e| internal(e.to_string()))?,
            ))
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExportQuery {
    format: String,
    #[serde(default)]
    projected: bool,
    as_of: Option<String>,
}

/// `GET /v1/conversations/{conv}/export?format=ndjson|jp|openai`: the
/// conversation (or `projected`, its view) for other tools.
pub(crate) async fn export(
    State(state): State<Shared>,
    Path(conv): Path<String>,
    Query(q): Query<ExportQuery>,
) -> Result<Response> {
    let format = ExportFormat::named(&q.format).ok_or_else(|| {
        bad(format!(
            "format: \"{}\" is not ndjson, jp or openai",
            q.format
        ))
    })?;
    let as_of = parse_as_of(q.as_of.as_deref())?;
    let projected = q.projected;
    let (left_out, rendered) = tokio::sync::oneshot::channel();
    let write = move |engine: &Engine, (id, scope), out: &mut dyn Write| {
        Ok(export::export(
            engine.store(),
            &id,
            scope,
            projected,
            format,
            out,
            &mut |_| {},
        )?)
    };
    let (body, _) = stream(
        &state,
        move |engine| {
            let store = engine.store();
            let id = resolve_read(store, &conv)?;
            let scope = Scope::as_of(store, &id, as_of)?;
            let openai = format == ExportFormat::Openai;
            openai_first(openai, (id, scope), left_out, |p, out| {
                write(engine, p, out)
            })
        },
        move |engine, prepared, out| prepared.write(out, |p, out| write(engine, p, out)),
    )
    .await?;
    let content = match format {
        ExportFormat::Ndjson => "application/x-ndjson",
        ExportFormat::Jp | ExportFormat::Openai => "application/json",
    };
    let headers = left_out_header(rendered).await;
    Ok(streamed(body, content, &headers))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImportQuery {
    format: String,
    name: Option<String>,
}

/// `POST /v1/import?format=ndjson|jp|openai[&name=N]` with the input as
/// the body (up to `--max-body-bytes`): a new conversation, checked whole
/// first, then visible whole at once. Answers what `import --json` prints.
pub(crate) async fn import(
    State(state): State<Shared>,
    Query(q): Query<ImportQuery>,
    body: Body,
) -> Result<(StatusCode, Json<Value>)> {
    let format = ImportFormat::named(&q.format).ok_or_else(|| {
        bad(format!(
            "format: \"{}\" is not ndjson, jp or openai",
            q.format
        ))
    })?;
    let limits = state.limits.clone();
    let body = read_body(body, &limits).await?;
    let name = q.name.as_deref().map(nfc);
    let _write = write_permit(&state).await?;
    let value = state
        .blocking(move |engine| {
            let store = engine.store();
            if let Some(name) = &name {
                convstore_engine::store::validate_conversation_name(name)?;
                if store.find_name(name)?.is_some() {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "name_taken",
                        format!("a conversation named \"{name}\" already exists"),
                    ));
                }
            }
            let now = Timestamp::now();
            let (id, checked) =
                import::import(store, format, &body[..], now, name.as_deref(), &mut || {})?;
            engine.after_write(&id);
            let info = store.info(&id)?;
            Ok(json!({
                "id": id.hex(),
                "name": info.name,
                "events": checked.events,
                "turns": checked.turns,
                "head": info.head.hex(),
                "kinds": import::kinds_json(&checked.kinds),
                "kept_in_meta": checked.kept_in_meta,
                "warnings": checked.warnings,
            }))
        })
        .await?;
    Ok((StatusCode::CREATED, Json(value)))
}

/// `POST /v1/reindex`: the search index built anew from every log.
pub(crate) async fn reindex(State(state): State<Shared>) -> Result<Json<Value>> {
    let _write = write_permit(&state).await?;
    state
        .blocking(move |engine| {
            let done = engine.reindex()?;
            Ok(Json(
                json!({ "conversations": done.conversations, "records": done.records }),
            ))
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GcBody {
    conversation: Option<String>,
    older_than: Option<String>,
    #[serde(default)]
    all_payloads: bool,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /v1/gc` `{"conversation"?, "older_than"?, "all_payloads"?,
/// "dry_run"?}`: the server's `[retention]` policy (or the age and scope
/// given) run over one conversation or all; answered, as `gc --json`
/// prints it, once what went is durable.
pub(crate) async fn gc(State(state): State<Shared>, body: Body) -> Result<Json<Value>> {
    let body = read_body(body, &state.limits).await?;
    let body: GcBody = parse_json_body(&body)?;
    let _write = write_permit(&state).await?;
    state
        .blocking(move |engine| {
            let retention = convstore_engine::retention::Retention::new(
                &engine.config().retention,
                body.older_than.as_deref(),
                body.all_payloads,
            )?;
            let target = match &body.conversation {
                Some(query) => Some(resolve_write(engine.store(), query)?),
                None => None,
            };
            let report = engine.gc_report(target.as_ref(), &retention, body.dry_run)?;
            // The index drops the texts at the next catch-up if it could
            // not now.
            let _ = engine.take_index_error();
            Ok(Json(report))
        })
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BackupBody {
    dest: String,
}

/// `POST /v1/backup` `{"dest": DIR}`: a verified copy of every
/// conversation, as of one moment, into a new directory on the server's
/// machine, while the server goes on (a read-write token's to ask).
pub(crate) async fn backup(State(state): State<Shared>, body: Body) -> Result<Json<Value>> {
    let body = read_body(body, &state.limits).await?;
    let body: BackupBody = parse_json_body(&body)?;
    let dest = std::path::PathBuf::from(&body.dest);
    if !dest.is_absolute() {
        return Err(bad(format!(
            "dest: \"{}\" is not an absolute path (the server's working directory is not the client's)",
            body.dest
        )));
    }
    state
        .blocking(move |engine| {
            let report = engine.store().backup_checked(&dest, views::check_all)?;
            Ok(Json(json!({
                "ok": true,
                "dest": dest.display().to_string(),
                "conversations": report.conversations,
                "records": report.records,
                "blobs": report.blobs,
                "views": report.views,
                "deleted_meanwhile": report.deleted,
            })))
        })
        .await
}
