//! OpenAI Chat Completions `messages`: [`from_messages`].
//!
//! Mapping: `system` and `developer` → `system`; `user` → `turn_start` +
//! `user` (text parts joined with a newline); `assistant` → `assistant` (when
//! it has text) plus one `tool_call` per entry of `tool_calls` (`arguments`
//! parsed from their JSON string); `tool` → `tool_result`; any other role →
//! an `extension` named `openai_message` holding the message. What has no
//! place in an event (the `developer` role, a content given as parts, an
//! unparsable `arguments` string, other message fields) is kept under the
//! `openai` key of the event's `meta`; the `openai` export reads it back.

use serde_json::{Map, Value};

use crate::event::{Event, EventKind, Timestamp};
use crate::json::{EventError, Json};

/// The `meta` key holding what only the OpenAI form has.
pub const META_KEY: &str = "openai";

fn field(name: &str, problem: &str) -> EventError {
    EventError::Field {
        field: name.to_owned(),
        problem: problem.to_owned(),
    }
}

/// The text of a `content`: a string, the text parts of an array joined with
/// a newline, or nothing for null. Keeps an array form in `openai`; each
/// part that is not text (an image, a file, audio) is reported in `notes`
/// as `ROLE.content[TYPE]`, since only `meta` keeps it.
fn content_text(
    role: &str,
    content: Option<Value>,
    openai: &mut Map<String, Value>,
    notes: &mut Vec<String>,
) -> Result<Option<String>, EventError> {
    match content {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for part in &parts {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text"), Some(text)) => texts.push(text),
                    (kind, _) => notes.push(format!("{role}.content[{}]", kind.unwrap_or("?"))),
                }
            }
            let text = texts.join("\n");
            openai.insert("content".into(), Value::Array(parts.clone()));
            Ok(Some(text))
        }
        Some(_) => Err(field(
            "content",
            "expected a string, an array of parts or null",
        )),
    }
}

fn with_meta(timestamp: Timestamp, kind: EventKind, openai: Map<String, Value>) -> Event {
    let meta = (!openai.is_empty()).then(|| {
        let mut meta = Map::new();
        meta.insert(META_KEY.into(), Value::Object(openai));
        Json::from_value(&Value::Object(meta))
    });
    Event {
        timestamp,
        meta,
        kind,
    }
}

/// Converts one message into events, timestamped `timestamp`. `notes`
/// receives what was kept in `meta` or could not be parsed.
pub fn from_message(
    message: Value,
    timestamp: Timestamp,
    notes: &mut Vec<String>,
) -> Result<Vec<Event>, EventError> {
    let Value::Object(mut fields) = message else {
        return Err(EventError::NotObject);
    };
    let role = match fields.shift_remove("role") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(field("role", "expected a string")),
        None => return Err(field("role", "missing")),
    };
    let mut openai = Map::new();
    let mut events = Vec::new();
    match role.as_str() {
        "system" | "developer" => {
            if role == "developer" {
                openai.insert("role".into(), Value::String(role.clone()));
            }
            let text = content_text(&role, fields.shift_remove("content"), &mut openai, notes)?
                .ok_or_else(|| field("content", "missing"))?;
            keep_extra(&role, &mut fields, &mut openai, notes);
            events.push(with_meta(timestamp, EventKind::System { text }, openai));
        }
        "user" => {
            let text = content_text(&role, fields.shift_remove("content"), &mut openai, notes)?
                .ok_or_else(|| field("content", "missing"))?;
            keep_extra(&role, &mut fields, &mut openai, notes);
            events.push(Event::new(timestamp, EventKind::TurnStart));
            events.push(with_meta(timestamp, EventKind::User { text }, openai));
        }
        "assistant" => {
            let text = content_text(&role, fields.shift_remove("content"), &mut openai, notes)?;
            let calls = match fields.shift_remove("tool_calls") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(calls)) => calls,
                Some(_) => return Err(field("tool_calls", "expected an array")),
            };
            let mut call_events = Vec::with_capacity(calls.len());
            for (i, call) in calls.into_iter().enumerate() {
                call_events.push(tool_call(&call, i, timestamp, notes)?);
            }
            keep_extra(&role, &mut fields, &mut openai, notes);
            if text.is_some() || call_events.is_empty() || !openai.is_empty() {
                let text = text.unwrap_or_default();
                events.push(with_meta(timestamp, EventKind::Assistant { text }, openai));
            }
            events.extend(call_events);
        }
        "tool" => {
            let id = match fields.shift_remove("tool_call_id") {
                Some(Value::String(s)) => s,
                Some(_) => return Err(field("tool_call_id", "expected a string")),
                None => return Err(field("tool_call_id", "missing")),
            };
            let content = content_text(&role, fields.shift_remove("content"), &mut openai, notes)?
                .ok_or_else(|| field("content", "missing"))?;
            keep_extra(&role, &mut fields, &mut openai, notes);
            events.push(with_meta(
                timestamp,
                EventKind::ToolResult {
                    id,
                    content,
                    is_error: false,
                },
                openai,
            ));
        }
        _ => {
            fields.insert("role".into(), Value::String(role.clone()));
            notes.push(format!("role {role} (kept as an extension)"));
            events.push(Event::new(
                timestamp,
                EventKind::Extension {
                    name: "openai_message".into(),
                    payload: Json::from_value(&Value::Object(fields)),
                },
            ));
        }
    }
    Ok(events)
}

fn tool_call(
    call: &Value,
    index: usize,
    timestamp: Timestamp,
    notes: &mut Vec<String>,
) -> Result<Event, EventError> {
    let path = |name: &str| format!("tool_calls.{index}.{name}");
    let id = call["id"]
        .as_str()
        .ok_or_else(|| field(&path("id"), "missing or not a string"))?
        .to_owned();
    let function = &call["function"];
    let name = function["name"]
        .as_str()
        .ok_or_else(|| field(&path("function.name"), "missing or not a string"))?
        .to_owned();
    let raw = match &function["arguments"] {
        Value::String(s) => s.clone(),
        Value::Null => "{}".to_owned(),
        _ => return Err(field(&path("function.arguments"), "expected a string")),
    };
    let mut openai = Map::new();
    // Read strictly: arguments with a key twice or a number out of range
    // would not be kept as written, so they stay text, like any other
    // arguments that are not a JSON object.
    let arguments = match crate::strict::from_str(&raw) {
        Ok(object @ Value::Object(_)) => Json::from_value(&object),
        parsed => {
            let why = match parsed {
                Err(e) if serde_json::from_str::<Value>(&raw).is_ok() => e.to_string(),
                _ => "not a JSON object".to_owned(),
            };
            notes.push(format!(
                "tool call {id}: arguments kept as text in meta ({why})"
            ));
            openai.insert("arguments".into(), Value::String(raw));
            Json::empty_object()
        }
    };
    Ok(with_meta(
        timestamp,
        EventKind::ToolCall {
            id,
            name,
            arguments,
        },
        openai,
    ))
}

/// Other fields of a message go to `openai.extra`, and are reported.
fn keep_extra(
    role: &str,
    fields: &mut Map<String, Value>,
    openai: &mut Map<String, Value>,
    notes: &mut Vec<String>,
) {
    if fields.is_empty() {
        return;
    }
    notes.extend(fields.keys().map(|k| format!("{role}.{k}")));
    openai.insert("extra".into(), Value::Object(std::mem::take(fields)));
}
