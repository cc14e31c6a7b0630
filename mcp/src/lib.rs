//! convstore as a Model Context Protocol server, on the official Rust SDK
//! (rmcp): [`Service`] over an [`Engines`] source.
//!
//! - Resources: each conversation's projected view
//!   (`convstore://conversations/ID/view`, NDJSON) and raw log
//!   (`convstore://conversations/ID/log`, NDJSON), subscribable: a write to
//!   a conversation sends `notifications/resources/updated` for both (to
//!   `resources/subscribe` subscribers, and to `subscriptions/listen`
//!   streams of protocol 2026-07-28).
//! - Tools: `list_conversations`, `get_view` (format, profile, as of),
//!   `recall`, `search`, `diff`, and, only when built with `allow_write`,
//!   `append` and `compact`.
//!
//! The command line serves it on stdio (`convstore mcp`), opening the
//! database for each request ([`Engines::PerCall`]) so that other
//! processes can use it in between, and noticing their writes by watching
//! the database's files. A server that holds an [`Engine`] for its
//! lifetime (`convstore serve`) builds the same service over it
//! ([`Engines::Shared`]) and mounts it on its HTTP router with rmcp's
//! streamable HTTP transport; writes through that engine notify
//! subscribers through [`Engine::subscribe`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use convstore_engine::compact::CompactRequest;
use convstore_engine::diff::Side;
use convstore_engine::format::{write_events, Format};
use convstore_engine::projection::config::Config;
use convstore_engine::projection::Tokenizer;
use convstore_engine::recall::{self, CallShape, ToolCall};
use convstore_engine::search::SearchQuery;
use convstore_engine::store::json::write_log_record;
use convstore_engine::store::{AppendOptions, ConversationId, EventType};
use convstore_engine::{AsOf, Engine, Location, OpenOptions};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, Peer, ServerHandler};
use serde_json::{json, Map, Value};
use tokio::sync::broadcast;

/// Where the service gets an engine for each request.
#[derive(Clone)]
pub enum Engines {
    /// One engine for the server's lifetime (a server that owns the
    /// database).
    Shared(Arc<Engine>),
    /// The database opened for each request and closed after it, waiting up
    /// to `wait` for another process that has it open.
    PerCall {
        /// The database.
        location: Location,
        /// Its configuration (profiles for `get_view`, `diff`, `compact`).
        config: Arc<Config>,
        /// How long to wait for the database.
        wait: Duration,
    },
}

impl Engines {
    fn with<R>(&self, f: impl FnOnce(&Engine) -> convstore_engine::Result<R>) -> Result<R, String> {
        match self {
            Engines::Shared(engine) => f(engine).map_err(|e| e.to_string()),
            Engines::PerCall {
                location,
                config,
                wait,
            } => {
                let keyring =
                    convstore_engine::config_file::keyring(config).map_err(|e| e.to_string())?;
                let options = OpenOptions::existing().wait(*wait).encryption(keyring);
                let engine = Engine::open(location, &options)
                    .map_err(|e| e.to_string())?
                    .with_config(Config::clone(config));
                f(&engine).map_err(|e| e.to_string())
            }
        }
    }

    /// The database directory, for watching (per-call engines only).
    fn watched(&self) -> Option<PathBuf> {
        match self {
            Engines::Shared(_) => None,
            Engines::PerCall { location, .. } => match location {
                Location::Path(path) => Some(path.clone()),
                _ => None,
            },
        }
    }
}

/// The MCP service: build it with [`Service::new`], then serve it on a
/// transport (stdio: [`serve_stdio`]).
#[derive(Clone)]
pub struct Service {
    engines: Engines,
    allow_write: bool,
    /// Conversations written (ids), for subscribers.
    changes: broadcast::Sender<ConversationId>,
    /// `resources/subscribe` subscriptions: canonical URI (by id) → each
    /// peer with the URI it subscribed with (by name or by id), which its
    /// notifications carry.
    subscribers: Arc<Mutex<Subscribers>>,
    /// What the watcher of another process's writes compares against:
    /// the database file's stamp and every head, taken when the first
    /// subscription arrives (before it is answered), so that a write right
    /// after a subscribe is noticed.
    baseline: Arc<Mutex<Option<Baseline>>>,
    /// `subscriptions/listen` streams open.
    listening: Arc<AtomicUsize>,
}

/// Canonical resource URI → each subscribed peer and the URI it gave.
type Subscribers = HashMap<String, Vec<(Peer<RoleServer>, String)>>;

const PREFIX: &str = "convstore://conversations/";

fn view_uri(id: &ConversationId) -> String {
    format!("{PREFIX}{}/view", id.hex())
}

fn log_uri(id: &ConversationId) -> String {
    format!("{PREFIX}{}/log", id.hex())
}

/// `(conversation, "view" | "log")` of a resource URI (the conversation as
/// written: an id, or a name).
fn parse_uri(uri: &str) -> Option<(String, &str)> {
    let rest = uri.strip_prefix(PREFIX)?;
    let (conv, what) = rest.rsplit_once('/')?;
    matches!(what, "view" | "log").then(|| (conv.to_owned(), what))
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(Map::new()),
    }
}

fn text_result(text: String) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

fn error_result(text: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

impl Service {
    /// A service over `engines`; `allow_write` adds the `append` and
    /// `compact` tools.
    pub fn new(engines: Engines, allow_write: bool) -> Service {
        let (changes, _) = broadcast::channel(1024);
        let service = Service {
            engines,
            allow_write,
            changes,
            subscribers: Arc::new(Mutex::new(HashMap::new())),
            baseline: Arc::new(Mutex::new(None)),
            listening: Arc::new(AtomicUsize::new(0)),
        };
        service.start_watching();
        service
    }

    /// Tells subscribers of writes: through the shared engine's own
    /// listeners, or by watching the database's files for other processes'
    /// writes (then comparing each conversation's head).
    fn start_watching(&self) {
        let changes = self.changes.clone();
        match &self.engines {
            Engines::Shared(engine) => {
                let receiver = engine.subscribe();
                std::thread::spawn(move || {
                    while let Ok(id) = receiver.recv() {
                        let _ = changes.send(id);
                    }
                });
            }
            Engines::PerCall { .. } => {
                let Some(dir) = self.engines.watched() else {
                    return;
                };
                let engines = self.engines.clone();
                let subscribers = Arc::clone(&self.subscribers);
                let listening = Arc::clone(&self.listening);
                let interested = move || {
                    listening.load(Ordering::Relaxed) > 0
                        || subscribers.lock().is_ok_and(|s| !s.is_empty())
                };
                let baseline = Arc::clone(&self.baseline);
                std::thread::spawn(move || {
                    watch(&dir, &engines, &changes, &baseline, &interested);
                });
            }
        }
        // Forward changes to `resources/subscribe` subscribers.
        let mut receiver = self.changes.subscribe();
        let subscribers = Arc::clone(&self.subscribers);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                loop {
                    let id = match receiver.recv().await {
                        Ok(id) => id,
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    };
                    for uri in [view_uri(&id), log_uri(&id)] {
                        let peers = subscribers
                            .lock()
                            .map(|s| s.get(&uri).cloned().unwrap_or_default())
                            .unwrap_or_default();
                        for (peer, as_given) in peers {
                            let _ = peer
                                .notify_resource_updated(ResourceUpdatedNotificationParam::new(
                                    as_given,
                                ))
                                .await;
                        }
                    }
                }
            });
        }
    }

    async fn blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> convstore_engine::Result<R> + Send + 'static,
    ) -> Result<R, String> {
        let engines = self.engines.clone();
        tokio::task::spawn_blocking(move || engines.with(f))
            .await
            .map_err(|e| format!("the request failed: {e}"))?
    }

    fn tools(&self) -> Vec<Tool> {
        let conversation =
            json!({"type": "string", "description": "A conversation's name, id or id prefix."});
        let mut tools = vec![
            Tool::new(
                "list_conversations",
                "List the conversations: name, id, records, turns, head.",
                schema(json!({"type": "object", "properties": {}})),
            ),
            Tool::new(
                "get_view",
                "A conversation's projected view: what a model sees after compaction. Formats: ndjson (with seq, turn, summary_of), openai (Chat Completions messages), text.",
                schema(json!({"type": "object", "properties": {
                    "conversation": conversation,
                    "format": {"type": "string", "enum": ["ndjson", "openai", "text"], "default": "ndjson"},
                    "profile": {"type": "string", "description": "Apply this profile over every turn on top of the log's compactions (as `diff --profile`)."},
                    "as_of": {"type": "string", "description": "The view as of a record seq or an RFC 3339 time."}
                }, "required": ["conversation"]})),
            ),
            Tool::new(
                "recall",
                format!("{} The conversation is named by `conversation`.", recall::TOOL_DESCRIPTION),
                schema({
                    let mut params = recall::tool_parameters();
                    params["properties"]["conversation"] = conversation.clone();
                    params["properties"]["max_tokens"] = json!({"type": "integer", "minimum": 1, "default": 4000, "description": "The answer's budget (four characters a token; 120 at least, a smaller one is raised to it)."});
                    params["required"] = json!(["conversation"]);
                    params
                }),
            ),
            Tool::new(
                "search",
                "Ranked full-text search (BM25) across conversations: each hit with conversation, seq, turn, a snippet and whether the current view shows it (visible, stripped, dropped, summarized). Query syntax: words (all must match), \"a phrase\", -word, a OR b.",
                schema(json!({"type": "object", "properties": {
                    "query": {"type": "string"},
                    "conversation": conversation,
                    "kind": {"type": "array", "items": {"type": "string", "enum": ["user", "assistant", "reasoning", "tool_call", "tool_result", "system", "config", "extension", "compaction"]}},
                    "since": {"type": "string", "description": "Only records at or after this time (RFC 3339), or this long ago (90m, 5h, 2d, 1w)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10}
                }, "required": ["query"]})),
            ),
            Tool::new(
                "diff",
                "Compare two views aligned by raw seq: per turn, what one shows that the other strips, drops or summarizes, and the tokens per type. A side is a conversation, optionally as of a seq or time, optionally with a profile.",
                schema(json!({"type": "object", "properties": {
                    "a": {"type": "string", "description": "CONV, CONV@SEQ or CONV@TIME"},
                    "b": {"type": "string", "description": "CONV, CONV@SEQ or CONV@TIME"},
                    "profile_a": {"type": "string"},
                    "profile_b": {"type": "string"}
                }, "required": ["a", "b"]})),
            ),
        ];
        if self.allow_write {
            tools.push(Tool::new(
                "append",
                "Append events (convstore's JSON events, SPEC §2) to a conversation, creating it if needed; all or nothing. Returns the new head.",
                schema(json!({"type": "object", "properties": {
                    "conversation": {"type": "string", "description": "A conversation's name (created if it does not exist), or its id."},
                    "events": {"type": "array", "items": {"type": "object"}},
                    "expect_head": {"type": "string", "description": "Append only if the head is this address."}
                }, "required": ["conversation", "events"]})),
            ));
            tools.push(Tool::new(
                "compact",
                "Append a compaction overlay (never rewrites history): a profile, or policies, over a turn range.",
                schema(json!({"type": "object", "properties": {
                    "conversation": conversation,
                    "profile": {"type": "string"},
                    "reasoning": {"type": "string", "enum": ["strip", "keep"]},
                    "tool_calls": {"type": "string", "enum": ["strip", "strip-requests", "strip-responses", "omit", "keep"]},
                    "summary": {"type": "string"},
                    "from_turn": {"type": "integer", "minimum": 0},
                    "to_turn": {"type": "integer", "minimum": 0},
                    "recall_hints": {"type": "boolean"},
                    "dry_run": {"type": "boolean"}
                }, "required": ["conversation"]})),
            ));
        }
        tools
    }

    async fn call(&self, name: &str, args: Map<String, Value>) -> Result<String, String> {
        let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_owned);
        let number = |key: &str| args.get(key).and_then(Value::as_u64);
        let conv = text("conversation");
        let need_conv = || {
            conv.clone()
                .ok_or_else(|| "`conversation` is required".to_owned())
        };
        match name {
            "list_conversations" => {
                self.blocking(|engine| {
                    let list: Vec<Value> = engine
                        .store()
                        .conversations()?
                        .iter()
                        .map(|c| json!({"id": c.id.hex(), "name": c.name, "records": c.len, "turns": c.turns, "head": c.head.hex(), "view": view_uri(&c.id), "log": log_uri(&c.id)}))
                        .collect();
                    Ok(Value::Array(list).to_string())
                })
                .await
            }
            "get_view" => {
                let conv = need_conv()?;
                let format = match text("format").as_deref() {
                    None | Some("ndjson") => Format::Ndjson,
                    Some("openai") => Format::Openai,
                    Some("text") => Format::Text,
                    Some(other) => return Err(format!("no format \"{other}\" (ndjson, openai, text)")),
                };
                let as_of = match text("as_of") {
                    Some(t) => Some(AsOf::parse(&t).ok_or(format!("\"{t}\" is neither a seq nor an RFC 3339 time"))?),
                    None => None,
                };
                let profile = text("profile");
                self.blocking(move |engine| view_text(engine, &conv, format, as_of, profile))
                    .await
            }
            "recall" => {
                let conv = need_conv()?;
                let max_tokens = number("max_tokens").unwrap_or(4000).max(1);
                let mut arguments = args.clone();
                arguments.remove("conversation");
                arguments.remove("max_tokens");
                let call = ToolCall {
                    shape: CallShape::Bare,
                    arguments: Value::Object(arguments),
                };
                let answer = self
                    .blocking(move |engine| {
                        let id = engine.store().resolve(&conv)?;
                        recall::answer_tool_call(engine.store(), &id, &call, max_tokens)
                    })
                    .await?;
                if answer.is_error {
                    Err(answer.text)
                } else {
                    Ok(answer.text)
                }
            }
            "search" => {
                let query = text("query").ok_or("`query` is required")?;
                let kinds: Vec<EventType> = match args.get("kind") {
                    Some(Value::Array(kinds)) => kinds
                        .iter()
                        .map(|k| k.as_str().and_then(EventType::from_name).ok_or(format!("no event kind {k}")))
                        .collect::<Result<_, _>>()?,
                    _ => Vec::new(),
                };
                let since = match text("since") {
                    Some(t) => Some(
                        convstore_engine::search::parse_since(&t)
                            .map_err(|e| format!("`since`: {e}"))?,
                    ),
                    None => None,
                };
                let limit = usize::try_from(number("limit").unwrap_or(10).clamp(1, 1000)).unwrap_or(10);
                self.blocking(move |engine| {
                    let conversation = match &conv {
                        Some(c) => Some(engine.store().resolve(c)?),
                        None => None,
                    };
                    let hits = engine.search(&SearchQuery { text: query, conversation, kinds, since, limit })?;
                    let hits: Vec<Value> = hits.iter().map(|h| json!({
                        "conversation": h.conversation.hex(), "name": h.name, "seq": h.seq, "turn": h.turn,
                        "kind": h.kind.as_str(), "score": h.score, "snippet": h.snippet, "view": h.visibility.as_str(),
                    })).collect();
                    Ok(Value::Array(hits).to_string())
                })
                .await
            }
            "diff" => {
                let (a, b) = (text("a").ok_or("`a` is required")?, text("b").ok_or("`b` is required")?);
                let (pa, pb) = (text("profile_a"), text("profile_b"));
                self.blocking(move |engine| {
                    let side = |written: &str, profile: Option<String>| -> convstore_engine::Result<Side> {
                        if let Some(id) = engine.store().find(written)? {
                            return Ok(Side { conversation: id, as_of: None, profile });
                        }
                        match written.rsplit_once('@') {
                            Some((c, point)) => Ok(Side {
                                conversation: engine.store().resolve(c)?,
                                as_of: Some(AsOf::parse(point).ok_or_else(|| convstore_engine::Error::Invalid(format!("{written}: \"{point}\" is neither a seq nor a time")))?),
                                profile,
                            }),
                            None => Ok(Side { conversation: engine.store().resolve(written)?, as_of: None, profile }),
                        }
                    };
                    let d = engine.diff(&side(&a, pa)?, &side(&b, pb)?)?;
                    let total = |t: &[u64; 10]| t.iter().sum::<u64>();
                    Ok(json!({
                        "shared_records": d.shared,
                        "tokens_a": total(&d.a.tokens),
                        "tokens_b": total(&d.b.tokens),
                        "turns": d.turns.iter().map(|t| json!({"turn": t.turn, "changes": t.changes.iter().map(|c| json!({
                            "kind": c.kind.as_str(), "a": c.a.as_str(), "b": c.b.as_str(), "seqs": c.seqs,
                            "tokens_a": c.tokens_a, "tokens_b": c.tokens_b,
                        })).collect::<Vec<_>>()})).collect::<Vec<_>>(),
                    }).to_string())
                })
                .await
            }
            "append" if self.allow_write => {
                let conv = need_conv()?;
                let events = match args.get("events") {
                    Some(Value::Array(events)) => events.clone(),
                    _ => return Err("`events` must be an array of events".to_owned()),
                };
                let expect = match text("expect_head") {
                    Some(h) => Some(
                        convstore_engine::store::Address::from_hex(&h.to_ascii_lowercase())
                            .ok_or(format!("`expect_head`: \"{h}\" is not a 64-digit hex address"))?,
                    ),
                    None => None,
                };
                let (id, head) = self
                    .blocking(move |engine| {
                        let events = convstore_engine::parse_event_array(
                            events,
                            convstore_engine::store::Timestamp::now(),
                        )?;
                        if events.is_empty() {
                            return Err(convstore_engine::Error::Invalid("no events to append".to_owned()));
                        }
                        let options = AppendOptions::new().expecting(expect);
                        let store = engine.store();
                        let (id, appended) = match store.find_exact(&conv)? {
                            Some(id) => (id, store.append(&id, &events, &options)?),
                            None => store.create_and_append(Some(&conv), &events, &options)?,
                        };
                        engine.after_write(&id);
                        Ok((id, appended.head))
                    })
                    .await?;
                // Subscribers hear of it as of any write: from the engine's
                // listeners (shared), or the watcher (per call).
                Ok(json!({"conversation": id.hex(), "head": head.hex()}).to_string())
            }
            "compact" if self.allow_write => {
                let conv = need_conv()?;
                let mut request = CompactRequest::default();
                request.profile = text("profile");
                request.reasoning = match text("reasoning").as_deref() {
                    None => None,
                    Some("strip") => Some(convstore_engine::store::event::ReasoningPolicy::Strip),
                    Some("keep") => Some(convstore_engine::store::event::ReasoningPolicy::Keep),
                    Some(o) => return Err(format!("`reasoning`: no policy \"{o}\"")),
                };
                {
                    use convstore_engine::store::event::ToolCallPolicy as P;
                    request.tool_calls = match text("tool_calls").as_deref() {
                        None => None,
                        Some("strip") => Some(P::Strip),
                        Some("strip-requests") => Some(P::StripRequests),
                        Some("strip-responses") => Some(P::StripResponses),
                        Some("omit") => Some(P::Omit),
                        Some("keep") => Some(P::Keep),
                        Some(o) => return Err(format!("`tool_calls`: no policy \"{o}\"")),
                    };
                }
                request.summary = text("summary");
                if request.summary.as_deref().is_some_and(|s| s.trim().is_empty()) {
                    return Err("`summary`: an empty text".to_owned());
                }
                if let (Some(from), Some(to)) = (number("from_turn"), number("to_turn")) {
                    if from > to {
                        return Err(format!(
                            "`from_turn` {from} `to_turn` {to}: the range is inverted (from comes after to)"
                        ));
                    }
                }
                request.from = number("from_turn").map(convstore_engine::projection::bounds::Bound::Turn);
                request.to = number("to_turn").map(convstore_engine::projection::bounds::Bound::Turn);
                request.recall_hints = args.get("recall_hints").and_then(Value::as_bool);
                request.dry_run = args.get("dry_run").and_then(Value::as_bool).unwrap_or(false);
                let dry_run = request.dry_run;
                let (_, report) = self
                    .blocking(move |engine| {
                        let id = engine.store().resolve_exact(&conv)?;
                        Ok((id, engine.compact(&id, &request, &Tokenizer::Chars4)?))
                    })
                    .await?;
                // Refused, as the command line and the HTTP API refuse it.
                if report.status == convstore_engine::compact::Status::Inflated && !dry_run {
                    return Err(convstore_engine::Error::Inflated {
                        before: report.before.total_tokens(),
                        after: report.after.total_tokens(),
                    }
                    .to_string());
                }
                Ok(json!({
                    "status": report.status.as_str(),
                    "from_turn": report.from_turn,
                    "to_turn": report.to_turn,
                    "tokens_before": report.before.total_tokens(),
                    "tokens_after": report.after.total_tokens(),
                    "head": report.head.map(|h| h.hex()),
                })
                .to_string())
            }
            "append" | "compact" => Err(format!("`{name}` writes: start the server with --allow-write to use it")),
            other => Err(format!("no tool named `{other}`")),
        }
    }
}

/// Checks a tool's arguments against its input schema, as far as the
/// schemas of these tools go (`type`, `enum`, `minimum`, `maximum`, array
/// `items`, `required`, and no argument it does not name): an argument of
/// the wrong type is refused, never taken for an absent one (a
/// `dry_run` of `"yes"` must not store). `null` stands for an argument
/// not given, and is removed.
fn check_arguments(
    schema: &Map<String, Value>,
    args: &mut Map<String, Value>,
) -> Result<(), String> {
    args.retain(|_, value| !value.is_null());
    let properties = schema.get("properties").and_then(Value::as_object);
    for (key, value) in args.iter() {
        let Some(property) = properties.and_then(|p| p.get(key)) else {
            let known: Vec<String> = properties
                .into_iter()
                .flat_map(|p| p.keys())
                .map(|k| format!("`{k}`"))
                .collect();
            let takes = if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            };
            return Err(format!(
                "unknown argument `{key}` (this tool takes {takes})"
            ));
        };
        check_value(key, property, value)?;
    }
    for key in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !args.contains_key(key) {
            return Err(format!("`{key}` is required"));
        }
    }
    Ok(())
}

/// Checks one argument (named `path`) against its schema.
fn check_value(path: &str, schema: &Value, value: &Value) -> Result<(), String> {
    let kind = schema.get("type").and_then(Value::as_str);
    let fits = match kind {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        _ => true,
    };
    if !fits {
        let got = match value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(n) if n.is_f64() => "a fractional number",
            Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
            Value::Number(_) => "a number out of range",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        let wanted = match kind {
            Some("string") => "a string",
            Some("integer") => "an integer",
            Some("number") => "a number",
            Some("boolean") => "a boolean",
            Some("array") => "an array",
            _ => "an object",
        };
        return Err(format!("`{path}` must be {wanted}, not {got} ({value})"));
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
            return Err(format!(
                "`{path}`: {value} is not one of {}",
                allowed.join(", ")
            ));
        }
    }
    let number = value
        .as_i64()
        .map(i128::from)
        .or_else(|| value.as_u64().map(i128::from));
    let bound = |key: &str| schema.get(key).and_then(Value::as_i64).map(i128::from);
    if let (Some(n), Some(least)) = (number, bound("minimum")) {
        if n < least {
            return Err(format!("`{path}` must be at least {least}, not {n}"));
        }
    }
    if let (Some(n), Some(most)) = (number, bound("maximum")) {
        if n > most {
            return Err(format!("`{path}` must be at most {most}, not {n}"));
        }
    }
    if let (Some(items), Some(values)) = (schema.get("items"), value.as_array()) {
        for (i, item) in values.iter().enumerate() {
            check_value(&format!("{path}[{i}]"), items, item)?;
        }
    }
    Ok(())
}

/// A conversation's view as text in `format`.
fn view_text(
    engine: &Engine,
    conv: &str,
    format: Format,
    as_of: Option<AsOf>,
    profile: Option<String>,
) -> convstore_engine::Result<String> {
    let id = engine.store().resolve(conv)?;
    let mut out: Vec<u8> = Vec::new();
    match profile {
        None => {
            write_events(&mut out, format, &mut |sink| {
                engine.project(&id, as_of, |v| sink(v.clone()))
            })?;
        }
        Some(profile) => {
            // The view B of a diff against itself with the profile.
            let side = Side {
                conversation: id,
                as_of,
                profile: Some(profile),
            };
            let view = convstore_engine::diff::view(
                engine.store(),
                &side,
                engine.config(),
                engine.secrets(),
            )?;
            write_events(&mut out, format, &mut |sink| {
                for v in &view {
                    sink(v.clone())?;
                }
                Ok(())
            })?;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A conversation's raw log as NDJSON.
fn log_text(engine: &Engine, id: &ConversationId) -> convstore_engine::Result<String> {
    let store = engine.store();
    let len = store.info(id)?.len;
    let mut out = Vec::new();
    for record in store.scan(id, 0..len)? {
        write_log_record(&record?, &mut out);
        out.push(b'\n');
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Watches the database directory for writes (other processes', and this
/// server's own): while anyone is subscribed, each time the database's
/// `db` file changes, opens the database and sends the id of each
/// conversation whose head moved. Without subscribers it opens nothing,
/// so it keeps nobody else from the database.
fn watch(
    dir: &std::path::Path,
    engines: &Engines,
    changes: &broadcast::Sender<ConversationId>,
    baseline: &Mutex<Option<Baseline>>,
    interested: &dyn Fn() -> bool,
) {
    loop {
        std::thread::sleep(Duration::from_millis(200));
        if !interested() {
            if let Ok(mut known) = baseline.lock() {
                *known = None;
            }
            continue;
        }
        let Ok(mut known) = baseline.lock() else {
            return;
        };
        let Some(before) = known.as_ref() else {
            // Subscribed to through `subscriptions/listen`: what is there
            // now is the baseline.
            *known = Baseline::take(dir, engines);
            continue;
        };
        let now = Baseline::stamp(dir);
        if now == before.stamp {
            continue;
        }
        // The database was busy: try again at the next round.
        let Some(current) = Baseline::take(dir, engines) else {
            continue;
        };
        for (id, head) in &current.heads {
            if before.heads.get(id) != Some(head) {
                let _ = changes.send(*id);
            }
        }
        *known = Some(current);
    }
}

/// The heads of a database watched for other processes' writes, and the
/// stamp (modification time, length) of its `db` file when they were read.
struct Baseline {
    stamp: Option<(std::time::SystemTime, u64)>,
    heads: HashMap<ConversationId, String>,
}

impl Baseline {
    fn stamp(dir: &std::path::Path) -> Option<(std::time::SystemTime, u64)> {
        let meta = std::fs::metadata(dir.join("db")).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    }

    /// Every head now (`None` while the database cannot be opened).
    fn take(dir: &std::path::Path, engines: &Engines) -> Option<Baseline> {
        let stamp = Baseline::stamp(dir);
        let heads = engines
            .with(|engine| {
                Ok(engine
                    .store()
                    .conversations()?
                    .into_iter()
                    .map(|c| (c.id, c.head.hex()))
                    .collect())
            })
            .ok()?;
        Some(Baseline { stamp, heads })
    }
}

impl ServerHandler for Service {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new("convstore", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "convstore keeps LLM conversations as append-only logs and serves compacted views. \
             Nothing compaction hides is lost: `recall` gives back the raw events behind a \
             `(recall ...)` handle, `search` finds text across conversations, `diff` compares views.",
        )
    }

    /// A request of a method the protocol defines reaches here only when
    /// its params do not read as that method's (`tools/call` with
    /// `arguments` that are not an object, say): invalid params (-32602),
    /// naming what is wrong, rather than an unknown method.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let problem = match request.method.as_str() {
            "tools/call" => request.params_as::<CallToolRequestParams>().err(),
            "tools/list" | "resources/list" | "resources/templates/list" => {
                request.params_as::<PaginatedRequestParams>().err()
            }
            "resources/read" => request.params_as::<ReadResourceRequestParams>().err(),
            "resources/subscribe" => request.params_as::<SubscribeRequestParams>().err(),
            "resources/unsubscribe" => request.params_as::<UnsubscribeRequestParams>().err(),
            _ => {
                return Err(ErrorData::new(
                    rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                    request.method,
                    None,
                ))
            }
        };
        let why = problem.map_or_else(String::new, |e| format!(": {e}"));
        Err(ErrorData::invalid_params(
            format!("{}: invalid params{why}", request.method),
            None,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut args = request.arguments.unwrap_or_default();
        let checked = match self.tools().iter().find(|t| t.name == request.name) {
            Some(tool) => check_arguments(&tool.input_schema, &mut args),
            None => Ok(()),
        };
        if let Err(problem) = checked {
            return Ok(error_result(problem));
        }
        Ok(match self.call(&request.name, args).await {
            Ok(text) => text_result(text),
            Err(problem) => error_result(problem),
        })
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let list = self
            .blocking(|engine| Ok(engine.store().conversations()?))
            .await
            .map_err(|e| ErrorData::internal_error(e, None))?;
        let mut resources = Vec::new();
        for c in list {
            let label = c.label();
            resources.push(
                Resource::new(view_uri(&c.id), format!("{label} view"))
                    .with_description(format!("The projected view of {label} (NDJSON, with seq, turn, summary_of): what a model sees."))
                    .with_mime_type("application/x-ndjson"),
            );
            resources.push(
                Resource::new(log_uri(&c.id), format!("{label} log"))
                    .with_description(format!(
                        "The raw log of {label} (NDJSON records with seq, turn, address)."
                    ))
                    .with_mime_type("application/x-ndjson"),
            );
        }
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(format!("{PREFIX}{{conversation}}/view"), "view")
                .with_description(
                    "A conversation's projected view (NDJSON); the conversation by name or id.",
                ),
            ResourceTemplate::new(format!("{PREFIX}{{conversation}}/log"), "log").with_description(
                "A conversation's raw log (NDJSON); the conversation by name or id.",
            ),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        let Some((conv, what)) = parse_uri(&uri) else {
            return Err(ErrorData::resource_not_found(
                format!("no resource {uri}"),
                None,
            ));
        };
        let view = what == "view";
        let text = self
            .blocking(move |engine| {
                if view {
                    view_text(engine, &conv, Format::Ndjson, None, None)
                } else {
                    let id = engine.store().resolve(&conv)?;
                    log_text(engine, &id)
                }
            })
            .await
            .map_err(|e| ErrorData::resource_not_found(e, None))?;
        let contents = match ResourceContents::text(text, uri) {
            ResourceContents::TextResourceContents {
                uri, text, meta, ..
            } => ResourceContents::TextResourceContents {
                uri,
                mime_type: Some("application/x-ndjson".to_owned()),
                text,
                meta,
            },
            other => other,
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = self.canonical(&request.uri).await?;
        if let Ok(mut subscribers) = self.subscribers.lock() {
            subscribers
                .entry(uri)
                .or_default()
                .push((context.peer.clone(), request.uri.clone()));
        }
        // Watching another process's writes: the heads as they are now
        // (once the subscriber counts, so that the watcher keeps them)
        // are what later writes are told against.
        if let Some(dir) = self.engines.watched() {
            let engines = self.engines.clone();
            let baseline = Arc::clone(&self.baseline);
            let _ = tokio::task::spawn_blocking(move || {
                if let Ok(mut known) = baseline.lock() {
                    if known.is_none() {
                        *known = Baseline::take(&dir, &engines);
                    }
                }
            })
            .await;
        }
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = self.canonical(&request.uri).await?;
        if let Ok(mut subscribers) = self.subscribers.lock() {
            subscribers.remove(&uri);
        }
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut receiver = self.changes.subscribe();
        let _listening = Listening::start(&self.listening);
        let wanted: BTreeSet<String> = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = receiver.recv() => {
                    let id = match changed {
                        Ok(id) => id,
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return Ok(()),
                    };
                    for uri in [view_uri(&id), log_uri(&id)] {
                        if wanted.contains(&uri) {
                            let _ = context.sink().notify_resource_updated(uri).await;
                        }
                    }
                }
            }
        }
    }
}

/// Counts an open `subscriptions/listen` stream while it lives.
struct Listening(Arc<AtomicUsize>);

impl Listening {
    fn start(count: &Arc<AtomicUsize>) -> Listening {
        count.fetch_add(1, Ordering::Relaxed);
        Listening(Arc::clone(count))
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Service {
    /// A resource URI with the conversation as its id (subscriptions may
    /// name it by name).
    async fn canonical(&self, uri: &str) -> Result<String, ErrorData> {
        let Some((conv, what)) = parse_uri(uri) else {
            return Err(ErrorData::resource_not_found(
                format!("no resource {uri}"),
                None,
            ));
        };
        let what = what.to_owned();
        let id = self
            .blocking(move |engine| Ok(engine.store().resolve(&conv)?))
            .await
            .map_err(|e| ErrorData::resource_not_found(e, None))?;
        Ok(format!("{PREFIX}{}/{what}", id.hex()))
    }
}

/// Serves `service` on stdin and stdout until the client closes them.
pub async fn serve_stdio(service: Service) -> Result<(), String> {
    use rmcp::ServiceExt as _;
    let running = service
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP session did not start: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| format!("the MCP session failed: {e}"))?;
    Ok(())
}

/// The MCP server over streamable HTTP, for `convstore serve` to mount
/// (at `/mcp`): a session per client, each over the server's one engine
/// (writes through the server reach subscribers through
/// [`Engine::subscribe`]). `any_host`: accept any `Host` header (a server
/// listening beyond loopback, behind its tokens); otherwise loopback
/// names only (DNS rebinding).
pub fn http_service(
    engine: Arc<Engine>,
    allow_write: bool,
    any_host: bool,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    Service,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    };
    let mut config = StreamableHttpServerConfig::default();
    if any_host {
        config = config.disable_allowed_hosts();
    }
    StreamableHttpService::new(
        move || {
            Ok(Service::new(
                Engines::Shared(Arc::clone(&engine)),
                allow_write,
            ))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// Runs the stdio server on a runtime of its own (for the command line).
pub fn run_stdio(service_engines: Engines, allow_write: bool) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the server's runtime: {e}"))?;
    runtime.block_on(async move { serve_stdio(Service::new(service_engines, allow_write)).await })
}
