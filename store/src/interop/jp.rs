//! JP's `events.json` events: [`from_jp`] and [`to_jp`].
//!
//! Mapping (JP → convstore): `turn_start` → `turn_start`; `chat_request` →
//! `user`; `chat_response` → `assistant` (`message`), `reasoning`
//! (`reasoning`) or `assistant` whose text is the JSON of `data`;
//! `tool_call_request` → `tool_call`; `tool_call_response` → `tool_result`;
//! `config_delta` → `config` (the inline whole-config form too);
//! `compaction` → `compaction`; `inquiry_*` and any other type →
//! `extension` named after the type, with the other fields as its payload.
//!
//! JP base64-encodes every string leaf of `arguments` and `metadata` and
//! the `content` of a tool response. A leaf is decoded only when it is
//! base64 that decodes to UTF-8 and encodes back to the same text; other
//! leaves stay as they are and their paths are remembered. Everything JP
//! has that convstore's event has not (`author`, `metadata`, the timestamp's
//! exact spelling, unknown fields, which form a field had) is kept under the
//! `jp` key of the event's `meta`, so that [`to_jp`] gives back the original
//! event, field for field.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::event::{Compaction, Event, EventKind, Timestamp};
use crate::json::{event_from_value, EventError, Json};

/// The `meta` key holding what only JP has.
pub const META_KEY: &str = "jp";

fn field(name: &str, problem: &str) -> EventError {
    EventError::Field {
        field: name.to_owned(),
        problem: problem.to_owned(),
    }
}

/// Parses JP's timestamp spelling, `2026-03-18 13:19:07.360486` (UTC, no
/// zone, 0 to 6 fractional digits); RFC 3339 is accepted too.
pub fn parse_timestamp(text: &str) -> Option<Timestamp> {
    if let Ok(t) = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f") {
        return Timestamp::from_micros(t.and_utc().timestamp_micros());
    }
    Timestamp::parse_rfc3339(text)
}

/// JP's spelling of a timestamp: six fractional digits with trailing zeros
/// trimmed (at least one kept).
pub fn format_timestamp(t: Timestamp) -> String {
    let full = t.to_string(); // 2026-03-18T13:19:07.360480Z
    let (date_time, fraction) = full.trim_end_matches('Z').split_at(19);
    let digits = fraction.trim_start_matches('.').trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    format!("{} {}.{digits}", &date_time[..10], &date_time[11..])
}

/// Calls `f` with each string leaf of `value` and its path (`/`-separated
/// JSON Pointer segments under `prefix`).
fn for_each_leaf(value: &mut Value, prefix: &str, f: &mut dyn FnMut(&mut String, &str)) {
    match value {
        Value::String(s) => f(s, prefix),
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                for_each_leaf(item, &format!("{prefix}/{i}"), f);
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                for_each_leaf(item, &format!("{prefix}/{}", escape(key)), f);
            }
        }
        _ => {}
    }
}

/// Decodes the base64 string leaves of `value` in place; the paths of the
/// leaves left as they were go to `plain`.
fn decode_leaves(value: &mut Value, prefix: &str, plain: &mut Vec<Value>) {
    for_each_leaf(value, prefix, &mut |s, path| match decode(s) {
        Some(decoded) => *s = decoded,
        None => plain.push(Value::String(path.to_owned())),
    });
}

/// Encodes the string leaves of `value` in place, but those at `plain`.
fn encode_leaves(value: &mut Value, prefix: &str, plain: &[String]) {
    for_each_leaf(value, prefix, &mut |s, path| {
        if !plain.iter().any(|p| p == path) {
            *s = STANDARD.encode(s.as_bytes());
        }
    });
}

/// JSON Pointer escaping of one path segment.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The text `s` encodes, if it is canonical base64 of UTF-8.
fn decode(s: &str) -> Option<String> {
    let bytes = STANDARD.decode(s).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    (STANDARD.encode(text.as_bytes()) == s).then_some(text)
}

fn take_string(fields: &mut Map<String, Value>, name: &str) -> Result<String, EventError> {
    match fields.shift_remove(name) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(field(name, "expected a string")),
        None => Err(field(name, "missing")),
    }
}

/// Converts one JP event. `notes` receives the names of fields that were
/// kept in `meta` because convstore's events have no place for them.
pub fn from_jp(value: Value, notes: &mut Vec<String>) -> Result<Event, EventError> {
    let Value::Object(mut fields) = value else {
        return Err(EventError::NotObject);
    };
    let kind_name = match fields.shift_remove("type") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(field("type", "expected a string")),
        None => return Err(field("type", "missing")),
    };
    let timestamp_text = match fields.shift_remove("timestamp") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(field("timestamp", "expected a string")),
        None => return Err(field("timestamp", "missing")),
    };
    let timestamp = parse_timestamp(&timestamp_text).ok_or_else(|| {
        field(
            "timestamp",
            &format!("\"{timestamp_text}\" is not a timestamp"),
        )
    })?;
    let mut jp = Map::new();
    if format_timestamp(timestamp) != timestamp_text {
        jp.insert("timestamp".into(), Value::String(timestamp_text));
    }
    let kind = match kind_name.as_str() {
        "turn_start" => EventKind::TurnStart,
        "chat_request" => EventKind::User {
            text: take_string(&mut fields, "content")?,
        },
        "chat_response" => {
            if let Some(metadata) = fields.shift_remove("metadata") {
                let mut metadata = metadata;
                let mut plain = Vec::new();
                decode_leaves(&mut metadata, "metadata", &mut plain);
                jp.insert("metadata".into(), metadata);
                if !plain.is_empty() {
                    jp.insert("plain".into(), Value::Array(plain));
                }
            }
            if fields.contains_key("message") {
                EventKind::Assistant {
                    text: take_string(&mut fields, "message")?,
                }
            } else if fields.contains_key("reasoning") {
                EventKind::Reasoning {
                    text: take_string(&mut fields, "reasoning")?,
                }
            } else if let Some(data) = fields.shift_remove("data") {
                jp.insert("data".into(), Value::Bool(true));
                EventKind::Assistant {
                    text: data.to_string(),
                }
            } else {
                return Err(field("message", "missing (or reasoning, or data)"));
            }
        }
        "tool_call_request" => {
            let id = take_string(&mut fields, "id")?;
            let name = take_string(&mut fields, "name")?;
            let mut arguments = match fields.shift_remove("arguments") {
                Some(v @ Value::Object(_)) => v,
                Some(_) => return Err(field("arguments", "expected an object")),
                None => return Err(field("arguments", "missing")),
            };
            let mut plain = Vec::new();
            decode_leaves(&mut arguments, "arguments", &mut plain);
            if let Some(mut metadata) = fields.shift_remove("metadata") {
                decode_leaves(&mut metadata, "metadata", &mut plain);
                jp.insert("metadata".into(), metadata);
            }
            if !plain.is_empty() {
                jp.insert("plain".into(), Value::Array(plain));
            }
            EventKind::ToolCall {
                id,
                name,
                arguments: Json::from_value(&arguments),
            }
        }
        "tool_call_response" => {
            let id = take_string(&mut fields, "id")?;
            let raw = take_string(&mut fields, "content")?;
            let content = if let Some(text) = decode(&raw) {
                text
            } else {
                jp.insert("plain".into(), json!(["content"]));
                raw
            };
            let is_error = match fields.shift_remove("is_error") {
                Some(Value::Bool(b)) => b,
                Some(_) => return Err(field("is_error", "expected a boolean")),
                None => return Err(field("is_error", "missing")),
            };
            EventKind::ToolResult {
                id,
                content,
                is_error,
            }
        }
        "config_delta" => match fields.shift_remove("delta") {
            Some(delta @ Value::Object(_)) => EventKind::Config {
                delta: Json::from_value(&delta),
            },
            Some(_) => return Err(field("delta", "expected an object")),
            None => {
                // The first event may carry the whole configuration inline.
                jp.insert("inline".into(), Value::Bool(true));
                let delta = Value::Object(std::mem::take(&mut fields));
                EventKind::Config {
                    delta: Json::from_value(&delta),
                }
            }
        },
        "compaction" => {
            let mut value = Value::Object(std::mem::take(&mut fields));
            if let Some(Value::Object(summary)) = value.get_mut("summary") {
                let Some(Value::String(text)) = summary.shift_remove("summary") else {
                    return Err(field("summary.summary", "expected a string"));
                };
                if let Some(extra) = summary.keys().next() {
                    return Err(field(&format!("summary.{extra}"), "unknown field"));
                }
                value["summary"] = Value::String(text);
                jp.insert("summary_object".into(), Value::Bool(true));
            }
            value["type"] = Value::String("compaction".into());
            let event = event_from_value(value, timestamp)?;
            let EventKind::Compaction(compaction) = event.kind else {
                return Err(field("type", "expected a compaction"));
            };
            EventKind::Compaction(compaction)
        }
        _ => EventKind::Extension {
            name: kind_name.clone(),
            payload: Json::from_value(&Value::Object(std::mem::take(&mut fields))),
        },
    };
    if !fields.is_empty() {
        notes.extend(fields.keys().map(|k| format!("{kind_name}.{k}")));
        jp.insert("extra".into(), Value::Object(fields));
    }
    let meta = (!jp.is_empty()).then(|| {
        let mut meta = Map::new();
        meta.insert(META_KEY.into(), Value::Object(jp));
        Json::from_value(&Value::Object(meta))
    });
    Ok(Event {
        timestamp,
        meta,
        kind,
    })
}

/// Converts an event to JP's form: the inverse of [`from_jp`]. Events JP
/// has no type for are written as JP would write an unknown type: `system`
/// as `{"type":"system","content":...}`, an extension under its name.
pub fn to_jp(event: &Event) -> Value {
    let mut jp = event
        .meta
        .as_ref()
        .map(Json::to_value)
        .and_then(|m| m.get(META_KEY).cloned())
        .and_then(|v| match v {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    let plain: Vec<String> = jp
        .get("plain")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let timestamp = match jp.shift_remove("timestamp") {
        Some(Value::String(s)) => s,
        _ => format_timestamp(event.timestamp),
    };
    let mut out = Map::new();
    out.insert("timestamp".into(), Value::String(timestamp));
    let set_type = |out: &mut Map<String, Value>, t: &str| {
        out.insert("type".into(), Value::String(t.to_owned()));
    };
    let mut metadata = jp.shift_remove("metadata");
    if let Some(m) = metadata.as_mut() {
        encode_leaves(m, "metadata", &plain);
    }
    match &event.kind {
        EventKind::TurnStart => set_type(&mut out, "turn_start"),
        EventKind::User { text } => {
            set_type(&mut out, "chat_request");
            out.insert("content".into(), Value::String(text.clone()));
        }
        EventKind::Assistant { text } => {
            set_type(&mut out, "chat_response");
            if jp.get("data") == Some(&Value::Bool(true)) {
                let data = serde_json::from_str(text).unwrap_or(Value::String(text.clone()));
                out.insert("data".into(), data);
            } else {
                out.insert("message".into(), Value::String(text.clone()));
            }
        }
        EventKind::Reasoning { text } => {
            set_type(&mut out, "chat_response");
            out.insert("reasoning".into(), Value::String(text.clone()));
        }
        EventKind::ToolCall {
            id,
            name,
            arguments,
        } => {
            set_type(&mut out, "tool_call_request");
            out.insert("id".into(), Value::String(id.clone()));
            out.insert("name".into(), Value::String(name.clone()));
            let mut arguments = arguments.to_value();
            encode_leaves(&mut arguments, "arguments", &plain);
            out.insert("arguments".into(), arguments);
        }
        EventKind::ToolResult {
            id,
            content,
            is_error,
        } => {
            set_type(&mut out, "tool_call_response");
            out.insert("id".into(), Value::String(id.clone()));
            let content = if plain.iter().any(|p| p == "content") {
                content.clone()
            } else {
                STANDARD.encode(content.as_bytes())
            };
            out.insert("content".into(), Value::String(content));
            out.insert("is_error".into(), Value::Bool(*is_error));
        }
        EventKind::System { text } => {
            set_type(&mut out, "system");
            out.insert("content".into(), Value::String(text.clone()));
        }
        EventKind::Config { delta } => {
            set_type(&mut out, "config_delta");
            if jp.get("inline") == Some(&Value::Bool(true)) {
                if let Value::Object(fields) = delta.to_value() {
                    out.extend(fields);
                }
            } else {
                out.insert("delta".into(), delta.to_value());
            }
        }
        EventKind::Extension { name, payload } => {
            set_type(&mut out, name);
            match payload.to_value() {
                Value::Object(fields) => out.extend(fields),
                other => {
                    out.insert("payload".into(), other);
                }
            }
        }
        EventKind::Compaction(c) => compaction_to_jp(c, &jp, &mut out),
    }
    if let Some(m) = metadata {
        out.insert("metadata".into(), m);
    }
    if let Some(Value::Object(extra)) = jp.shift_remove("extra") {
        out.extend(extra);
    }
    Value::Object(out)
}

fn compaction_to_jp(c: &Compaction, jp: &Map<String, Value>, out: &mut Map<String, Value>) {
    let event = Event::new(
        Timestamp::from_micros(0).unwrap_or_else(Timestamp::now),
        EventKind::Compaction(c.clone()),
    );
    let Value::Object(mut fields) =
        serde_json::from_str(&crate::json::event_to_string(&event)).unwrap_or(Value::Null)
    else {
        return;
    };
    fields.shift_remove("timestamp");
    if jp.get("summary_object") == Some(&Value::Bool(true)) {
        if let Some(summary) = fields.get_mut("summary") {
            *summary = json!({ "summary": summary.take() });
        }
    }
    out.extend(fields);
}

#[cfg(test)]
#[path = "jp_tests.rs"]
mod tests;
