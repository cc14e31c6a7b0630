//! A view as an OpenAI Chat Completions `messages` array: [`to_messages`],
//! and [`validate`] for the rules it keeps.
//!
//! Mapping: `system` → `system`; `user` → `user`; `assistant` →
//! `assistant` with its text; `tool_call` → an entry of `tool_calls` (with
//! `arguments` as a JSON string) on the assistant message right before it
//! (or a new assistant message with `content: null`); `tool_result` → a
//! `tool` message with `tool_call_id`. `turn_start`, `reasoning`, `config`
//! and `extension` events are left out.
//!
//! To keep the list valid, a call whose result does not follow it (before
//! the next user, system or assistant message) is dropped from its message,
//! a result whose call is missing, omitted or not directly before it is
//! dropped, and an assistant message left with neither text nor calls is
//! dropped. [`Messages::dropped_calls`] and [`Messages::dropped_results`]
//! count them.

use std::collections::HashSet;

use convstore_store::interop::openai::META_KEY;
use convstore_store::{Event, EventKind};
use serde_json::{json, Map, Value};

use crate::projector::ViewEvent;

/// The messages of a view, and what had to be left out to keep them valid.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Messages {
    /// The `messages` array.
    pub messages: Vec<Value>,
    /// Tool calls left out because no result followed them.
    pub dropped_calls: u64,
    /// Tool results left out because their call did not precede them.
    pub dropped_results: u64,
    /// Events Chat Completions has no message for: `reasoning`, `config`,
    /// `extension` and `compaction` (`turn_start` only marks where turns
    /// begin, and is not counted).
    pub left_out: u64,
}

/// The open assistant message that tool calls attach to.
struct Group {
    message: usize,
    declared: Vec<String>,
    answered: HashSet<String>,
    has_results: bool,
}

#[derive(Default)]
struct Builder {
    out: Messages,
    group: Option<Group>,
}

impl Builder {
    fn close(&mut self) {
        let Some(group) = self.group.take() else {
            return;
        };
        let message = &mut self.out.messages[group.message];
        let Some(Value::Array(calls)) = message.get_mut("tool_calls") else {
            return;
        };
        let before = calls.len();
        calls.retain(|c| {
            c["id"]
                .as_str()
                .is_some_and(|id| group.answered.contains(id))
        });
        self.out.dropped_calls += (before - calls.len()) as u64;
        if calls.is_empty() {
            if let Value::Object(m) = message {
                m.remove("tool_calls");
            }
            if message["content"].is_null() {
                self.out.messages.remove(group.message);
            }
        }
    }

    fn push(&mut self, message: Value) {
        self.close();
        self.out.messages.push(message);
    }

    fn call(&mut self, id: &str, name: &str, arguments: &str) {
        let attachable = self
            .group
            .as_ref()
            .is_some_and(|g| !g.has_results && !g.declared.iter().any(|d| d == id));
        if !attachable {
            self.push(json!({"role": "assistant", "content": null}));
            self.open();
        }
        let Some(group) = self.group.as_mut() else {
            return;
        };
        group.declared.push(id.to_owned());
        let message = &mut self.out.messages[group.message];
        if let Value::Object(m) = message {
            let calls = m
                .entry("tool_calls")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(calls) = calls {
                calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }));
            }
        }
    }

    fn result(&mut self, id: &str, content: Value) {
        let declared = self
            .group
            .as_mut()
            .filter(|g| g.declared.iter().any(|d| d == id) && !g.answered.contains(id));
        match declared {
            Some(group) => {
                group.answered.insert(id.to_owned());
                group.has_results = true;
                let mut message = Map::new();
                message.insert("role".into(), Value::String("tool".into()));
                message.insert("tool_call_id".into(), Value::String(id.to_owned()));
                message.insert("content".into(), content);
                self.out.messages.push(Value::Object(message));
            }
            None => self.out.dropped_results += 1,
        }
    }

    fn open(&mut self) {
        self.group = Some(Group {
            message: self.out.messages.len() - 1,
            declared: Vec::new(),
            answered: HashSet::new(),
            has_results: false,
        });
    }
}

/// What an imported message kept under `meta.openai`: the `developer` role,
/// content given as parts, `arguments` that were not a JSON object, other
/// message fields.
#[derive(Default)]
struct Hints {
    role: Option<String>,
    content: Option<Value>,
    arguments: Option<String>,
    extra: Map<String, Value>,
}

impl Hints {
    fn of(event: &Event) -> Hints {
        let Some(Value::Object(mut openai)) = event
            .meta
            .as_ref()
            .map(convstore_store::Json::to_value)
            .and_then(|mut m| m.get_mut(META_KEY).map(Value::take))
        else {
            return Hints::default();
        };
        Hints {
            role: openai
                .get("role")
                .and_then(Value::as_str)
                .map(str::to_owned),
            content: openai.shift_remove("content").filter(Value::is_array),
            arguments: openai
                .get("arguments")
                .and_then(Value::as_str)
                .map(str::to_owned),
            extra: match openai.shift_remove("extra") {
                Some(Value::Object(extra)) => extra,
                _ => Map::new(),
            },
        }
    }

    /// A message with this role and text, as the hints say it was written.
    fn message(self, role: &str, text: &str) -> Value {
        let mut message = Map::new();
        let role = match self.role {
            Some(r) if role == "system" && r == "developer" => r,
            _ => role.to_owned(),
        };
        message.insert("role".into(), Value::String(role));
        message.insert(
            "content".into(),
            self.content
                .unwrap_or_else(|| Value::String(text.to_owned())),
        );
        for (key, value) in self.extra {
            message.entry(key).or_insert(value);
        }
        Value::Object(message)
    }
}

/// The Chat Completions messages of a view. Events imported from this format
/// are written back as they came (see [`convstore_store::interop::openai`]).
pub fn to_messages<'a>(view: impl IntoIterator<Item = &'a ViewEvent>) -> Messages {
    let mut builder = Builder::default();
    for v in view {
        let event = &v.event;
        match &event.kind {
            EventKind::System { text } => builder.push(Hints::of(event).message("system", text)),
            EventKind::User { text } => builder.push(Hints::of(event).message("user", text)),
            EventKind::Assistant { text } => {
                builder.push(Hints::of(event).message("assistant", text));
                builder.open();
            }
            EventKind::ToolCall {
                id,
                name,
                arguments,
            } => {
                let raw = Hints::of(event)
                    .arguments
                    .filter(|_| arguments.as_str() == "{}");
                builder.call(id, name, raw.as_deref().unwrap_or(arguments.as_str()));
            }
            EventKind::ToolResult { id, content, .. } => {
                let hints = Hints::of(event);
                let content = hints
                    .content
                    .unwrap_or_else(|| Value::String(content.clone()));
                builder.result(id, content);
            }
            EventKind::TurnStart => {}
            EventKind::Reasoning { .. }
            | EventKind::Config { .. }
            | EventKind::Extension { .. }
            | EventKind::Compaction(_) => builder.out.left_out += 1,
        }
    }
    builder.close();
    builder.out
}

/// Checks the rules of a Chat Completions `messages` array that
/// [`to_messages`] promises: known roles with string content (null only for
/// an assistant message with tool calls); tool calls with a string id, type
/// `function`, a name and `arguments` that is a JSON object's text; every
/// call answered by exactly one `tool` message among the tool messages that
/// directly follow its assistant message, and no other tool messages.
pub fn validate(messages: &[Value]) -> Result<(), String> {
    let mut open: Option<(usize, Vec<String>, HashSet<String>)> = None;
    let finish = |open: &mut Option<(usize, Vec<String>, HashSet<String>)>| -> Result<(), String> {
        if let Some((at, declared, answered)) = open.take() {
            if let Some(missing) = declared.iter().find(|id| !answered.contains(*id)) {
                return Err(format!(
                    "message {at}: tool call {missing} has no tool message"
                ));
            }
        }
        Ok(())
    };
    for (i, message) in messages.iter().enumerate() {
        let Value::Object(m) = message else {
            return Err(format!("message {i} is not an object"));
        };
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let content = m.get("content");
        if role == "tool" {
            let id = m
                .get("tool_call_id")
                .and_then(Value::as_str)
                .ok_or(format!("message {i}: tool message without tool_call_id"))?;
            if !content.is_some_and(is_content) {
                return Err(format!("message {i}: tool content is not text"));
            }
            let Some((_, declared, answered)) = open.as_mut() else {
                return Err(format!(
                    "message {i}: tool message {id} follows no tool call"
                ));
            };
            if !declared.iter().any(|d| d == id) || !answered.insert(id.to_owned()) {
                return Err(format!(
                    "message {i}: tool message {id} answers no open call"
                ));
            }
            continue;
        }
        finish(&mut open)?;
        match role {
            "system" | "developer" | "user" => {
                if !content.is_some_and(is_content) {
                    return Err(format!("message {i}: {role} content is not text"));
                }
            }
            "assistant" => {
                let calls = m.get("tool_calls");
                if let Some(calls) = calls {
                    open = Some((i, check_calls(i, calls)?, HashSet::new()));
                }
                let has_calls = calls.is_some();
                match content {
                    Some(c) if is_content(c) => {}
                    Some(Value::Null) | None if has_calls => {}
                    _ => return Err(format!("message {i}: assistant without content or calls")),
                }
            }
            other => return Err(format!("message {i}: unknown role {other:?}")),
        }
    }
    finish(&mut open)
}

/// A string, or an array of content parts.
fn is_content(content: &Value) -> bool {
    match content {
        Value::String(_) => true,
        Value::Array(parts) => parts.iter().all(|p| p["type"].is_string()),
        _ => false,
    }
}

fn check_calls(i: usize, calls: &Value) -> Result<Vec<String>, String> {
    let Value::Array(calls) = calls else {
        return Err(format!("message {i}: tool_calls is not an array"));
    };
    if calls.is_empty() {
        return Err(format!("message {i}: tool_calls is empty"));
    }
    let mut ids = Vec::new();
    for call in calls {
        let id = call["id"]
            .as_str()
            .ok_or(format!("message {i}: a call has no id"))?;
        if ids.iter().any(|d| d == id) {
            return Err(format!("message {i}: call id {id} repeats"));
        }
        if call["type"] != "function" || !call["function"]["name"].is_string() {
            return Err(format!("message {i}: call {id} is not a named function"));
        }
        let arguments = call["function"]["arguments"]
            .as_str()
            .ok_or(format!("message {i}: call {id} arguments are not a string"))?;
        match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(_)) => {}
            _ => {
                return Err(format!(
                    "message {i}: call {id} arguments are not a JSON object"
                ))
            }
        }
        ids.push(id.to_owned());
    }
    Ok(ids)
}
