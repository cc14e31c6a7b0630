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

use convstore_store::EventKind;
use serde_json::{json, Value};

use crate::view::ViewEvent;

/// The messages of a view, and what had to be left out to keep them valid.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Messages {
    /// The `messages` array.
    pub messages: Vec<Value>,
    /// Tool calls left out because no result followed them.
    pub dropped_calls: u64,
    /// Tool results left out because their call did not precede them.
    pub dropped_results: u64,
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

    fn result(&mut self, id: &str, content: &str) {
        let declared = self
            .group
            .as_mut()
            .filter(|g| g.declared.iter().any(|d| d == id) && !g.answered.contains(id));
        match declared {
            Some(group) => {
                group.answered.insert(id.to_owned());
                group.has_results = true;
                self.out
                    .messages
                    .push(json!({"role": "tool", "tool_call_id": id, "content": content}));
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

/// The Chat Completions messages of a view.
pub fn to_messages<'a>(view: impl IntoIterator<Item = &'a ViewEvent>) -> Messages {
    let mut builder = Builder::default();
    for v in view {
        match &v.event.kind {
            EventKind::System { text } => builder.push(json!({"role": "system", "content": text})),
            EventKind::User { text } => builder.push(json!({"role": "user", "content": text})),
            EventKind::Assistant { text } => {
                builder.push(json!({"role": "assistant", "content": text}));
                builder.open();
            }
            EventKind::ToolCall {
                id,
                name,
                arguments,
            } => builder.call(id, name, arguments.as_str()),
            EventKind::ToolResult { id, content, .. } => builder.result(id, content),
            _ => {}
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
            if !content.is_some_and(Value::is_string) {
                return Err(format!("message {i}: tool content is not a string"));
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
            "system" | "user" => {
                if !content.is_some_and(Value::is_string) {
                    return Err(format!("message {i}: {role} content is not a string"));
                }
            }
            "assistant" => {
                let calls = m.get("tool_calls");
                if let Some(calls) = calls {
                    open = Some((i, check_calls(i, calls)?, HashSet::new()));
                }
                let has_calls = calls.is_some();
                match content {
                    Some(Value::String(_)) => {}
                    Some(Value::Null) | None if has_calls => {}
                    _ => return Err(format!("message {i}: assistant without content or calls")),
                }
            }
            other => return Err(format!("message {i}: unknown role {other:?}")),
        }
    }
    finish(&mut open)
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
