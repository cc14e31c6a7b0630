//! The public JSON contract (SPEC §2): [`parse_event`] reads one event,
//! [`write_event`] writes one back.
//!
//! Parsing is strict: an unknown `type`, a missing, mistyped or unknown
//! field, or invalid JSON is an [`EventError`] that names the field. Writing
//! is the inverse: a parsed event writes back to the same JSON value, with
//! the timestamp normalised to RFC 3339 in UTC with microseconds.

use serde_json::{Map, Value};

use crate::event::{
    Compaction, Event, EventKind, EventType, HintAction, ReasoningPolicy, Timestamp, ToolCallKind,
    ToolCallObject, ToolCallPolicy, ToolHint,
};

/// A JSON value kept as its compact text, as written by serde_json.
///
/// Payloads (`arguments`, `delta`, `payload`, `meta`) travel as text: the
/// store never needs their structure, and writing them back is a copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Json(String);

impl Json {
    /// The compact text of `value`.
    pub fn from_value(value: &Value) -> Self {
        Self(value.to_string())
    }

    /// An empty object, `{}`.
    pub fn empty_object() -> Self {
        Self("{}".to_owned())
    }

    /// Text read back from the store. Callers guarantee it is JSON that
    /// this module wrote.
    pub(crate) fn from_stored(text: String) -> Self {
        Self(text)
    }

    /// The compact JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// The value this text denotes.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

/// Why an event could not be read from JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The text is not JSON.
    #[error("invalid JSON: {0}")]
    Syntax(String),
    /// The JSON is not an object.
    #[error("an event must be a JSON object")]
    NotObject,
    /// A field is missing, mistyped, unknown or has a value out of range.
    #[error("field `{field}`: {problem}")]
    Field {
        /// The field's path, such as `tool_calls.tools.fs_read.request`.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl EventError {
    fn field(field: impl Into<String>, problem: impl Into<String>) -> Self {
        EventError::Field {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

type Parse<T> = Result<T, EventError>;

/// Reads one event from JSON text. `default_timestamp` is used when the event
/// carries none.
pub fn parse_event(text: &str, default_timestamp: Timestamp) -> Parse<Event> {
    let value: Value =
        crate::strict::from_str(text).map_err(|e| EventError::Syntax(e.to_string()))?;
    event_from_value(value, default_timestamp)
}

/// Reads one event from a JSON value. `default_timestamp` is used when the
/// event carries none.
pub fn event_from_value(value: Value, default_timestamp: Timestamp) -> Parse<Event> {
    let Value::Object(map) = value else {
        return Err(EventError::NotObject);
    };
    let mut fields = Fields { map };
    let type_name = fields.string("type")?;
    let Some(event_type) = EventType::from_name(&type_name) else {
        return Err(EventError::field(
            "type",
            format!("unknown event type \"{type_name}\""),
        ));
    };
    let timestamp = match fields.take("timestamp") {
        None => default_timestamp,
        Some(Value::String(s)) => Timestamp::parse_rfc3339(&s).ok_or_else(|| {
            EventError::field("timestamp", format!("\"{s}\" is not an RFC 3339 date-time"))
        })?,
        Some(_) => return Err(EventError::field("timestamp", "expected a string")),
    };
    let meta = match fields.take("meta") {
        None => None,
        Some(value @ Value::Object(_)) => Some(Json::from_value(&value)),
        Some(_) => return Err(EventError::field("meta", "expected an object")),
    };
    let kind = match event_type {
        EventType::TurnStart => EventKind::TurnStart,
        EventType::User => EventKind::User {
            text: fields.string("text")?,
        },
        EventType::Assistant => EventKind::Assistant {
            text: fields.string("text")?,
        },
        EventType::Reasoning => EventKind::Reasoning {
            text: fields.string("text")?,
        },
        EventType::System => EventKind::System {
            text: fields.string("text")?,
        },
        EventType::ToolCall => EventKind::ToolCall {
            id: fields.string("id")?,
            name: fields.string("name")?,
            arguments: fields.object("arguments")?,
        },
        EventType::ToolResult => EventKind::ToolResult {
            id: fields.string("id")?,
            content: fields.string("content")?,
            is_error: fields.boolean("is_error")?,
        },
        EventType::Config => EventKind::Config {
            delta: fields.object("delta")?,
        },
        EventType::Extension => EventKind::Extension {
            name: fields.string("name")?,
            payload: Json::from_value(&fields.required("payload")?),
        },
        EventType::Compaction => EventKind::Compaction(compaction(&mut fields)?),
    };
    fields.finish("")?;
    Ok(Event {
        timestamp,
        meta,
        kind,
    })
}

/// The bookkeeping fields of a compaction, with whether each is an integer.
const INFO_FIELDS: [(&str, bool); 10] = [
    ("profile", false),
    ("model", false),
    ("tokens_before", true),
    ("tokens_after", true),
    ("summarizer", false),
    ("prompt_hash", false),
    ("first_address", false),
    ("last_address", false),
    ("created_by", false),
    ("tokenizer", false),
];

fn compaction(fields: &mut Fields) -> Parse<Compaction> {
    let from_turn = fields.turn("from_turn")?;
    let to_turn = fields.turn("to_turn")?;
    if to_turn < from_turn {
        return Err(EventError::field(
            "to_turn",
            format!("the range {from_turn}..{to_turn} is inverted (to_turn < from_turn)"),
        ));
    }
    let summary = fields.optional_string("summary")?;
    let reasoning = match fields.take("reasoning") {
        None => None,
        Some(Value::String(s)) if s == "strip" => Some(ReasoningPolicy::Strip),
        Some(Value::String(s)) if s == "keep" => Some(ReasoningPolicy::Keep),
        Some(_) => {
            return Err(EventError::field(
                "reasoning",
                "expected \"strip\" or \"keep\"",
            ))
        }
    };
    let tool_calls = match fields.take("tool_calls") {
        None => None,
        Some(value) => Some(tool_call_policy(value)?),
    };
    let revert = match fields.take("revert") {
        None => None,
        Some(Value::Bool(b)) => Some(b),
        Some(_) => return Err(EventError::field("revert", "expected a boolean")),
    };
    if revert == Some(true) && (summary.is_some() || reasoning.is_some() || tool_calls.is_some()) {
        return Err(EventError::field(
            "revert",
            "cannot be combined with summary, reasoning or tool_calls",
        ));
    }
    let mut info = Map::new();
    let keys: Vec<String> = fields.map.keys().cloned().collect();
    for key in keys {
        let Some(&(name, integer)) = INFO_FIELDS.iter().find(|(name, _)| *name == key) else {
            continue;
        };
        let value = fields.take(name).unwrap_or(Value::Null);
        let fits = if integer {
            value.as_u64().is_some()
        } else {
            value.is_string()
        };
        if !fits {
            let expected = if integer {
                "expected a non-negative integer"
            } else {
                "expected a string"
            };
            return Err(EventError::field(name, expected));
        }
        info.insert(key, value);
    }
    Ok(Compaction {
        from_turn,
        to_turn,
        summary,
        reasoning,
        tool_calls,
        revert,
        info: (!info.is_empty()).then(|| Json::from_value(&Value::Object(info))),
    })
}

fn tool_call_policy(value: Value) -> Parse<ToolCallPolicy> {
    const FIELD: &str = "tool_calls";
    match value {
        Value::String(s) => match s.as_str() {
            "keep" => Ok(ToolCallPolicy::Keep),
            "omit" => Ok(ToolCallPolicy::Omit),
            "strip" => Ok(ToolCallPolicy::Strip),
            "strip-requests" => Ok(ToolCallPolicy::StripRequests),
            "strip-responses" => Ok(ToolCallPolicy::StripResponses),
            _ => Err(EventError::field(
                FIELD,
                format!(
                    "unknown policy \"{s}\" (expected \"strip\", \"strip-requests\", \
                     \"strip-responses\", \"omit\", \"keep\" or an object)"
                ),
            )),
        },
        Value::Object(map) => {
            let mut fields = Fields { map };
            let policy = match fields
                .string("policy")
                .map_err(|e| nest(FIELD, e))?
                .as_str()
            {
                "strip" => ToolCallKind::Strip,
                "omit" => ToolCallKind::Omit,
                "keep" => ToolCallKind::Keep,
                other => {
                    return Err(EventError::field(
                        "tool_calls.policy",
                        format!(
                            "unknown policy \"{other}\" (expected \"strip\", \"omit\" or \"keep\")"
                        ),
                    ))
                }
            };
            let mut object = ToolCallObject {
                policy,
                request: None,
                response: None,
                tools: None,
            };
            if policy == ToolCallKind::Strip {
                object.request = fields
                    .optional_boolean("request")
                    .map_err(|e| nest(FIELD, e))?;
                object.response = fields
                    .optional_boolean("response")
                    .map_err(|e| nest(FIELD, e))?;
                object.tools = match fields.take("tools") {
                    None => None,
                    Some(Value::Object(tools)) => Some(tool_hints(tools)?),
                    Some(_) => {
                        return Err(EventError::field("tool_calls.tools", "expected an object"))
                    }
                };
            }
            fields.finish(FIELD)?;
            Ok(ToolCallPolicy::Object(object))
        }
        _ => Err(EventError::field(FIELD, "expected a string or an object")),
    }
}

fn tool_hints(tools: Map<String, Value>) -> Parse<Vec<(String, ToolHint)>> {
    let mut hints = Vec::with_capacity(tools.len());
    for (name, value) in tools {
        let path = format!("tool_calls.tools.{name}");
        let Value::Object(map) = value else {
            return Err(EventError::field(path, "expected an object"));
        };
        let mut fields = Fields { map };
        let mut action = |side: &str| -> Parse<Option<HintAction>> {
            match fields.take(side) {
                None => Ok(None),
                Some(Value::String(s)) if s == "keep" => Ok(Some(HintAction::Keep)),
                Some(Value::String(s)) if s == "strip" => Ok(Some(HintAction::Strip)),
                Some(_) => Err(EventError::field(
                    format!("{path}.{side}"),
                    "expected \"keep\" or \"strip\"",
                )),
            }
        };
        let hint = ToolHint {
            request: action("request")?,
            response: action("response")?,
        };
        fields.finish(&path)?;
        hints.push((name, hint));
    }
    Ok(hints)
}

fn nest(parent: &str, error: EventError) -> EventError {
    match error {
        EventError::Field { field, problem } => {
            EventError::field(format!("{parent}.{field}"), problem)
        }
        other => other,
    }
}

/// The fields of a JSON object, taken one by one; what is left over is an
/// error.
struct Fields {
    map: Map<String, Value>,
}

impl Fields {
    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.shift_remove(key)
    }

    fn required(&mut self, key: &str) -> Parse<Value> {
        self.take(key)
            .ok_or_else(|| EventError::field(key, "missing"))
    }

    fn string(&mut self, key: &str) -> Parse<String> {
        match self.required(key)? {
            Value::String(s) => Ok(s),
            _ => Err(EventError::field(key, "expected a string")),
        }
    }

    fn optional_string(&mut self, key: &str) -> Parse<Option<String>> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(EventError::field(key, "expected a string")),
        }
    }

    fn boolean(&mut self, key: &str) -> Parse<bool> {
        match self.required(key)? {
            Value::Bool(b) => Ok(b),
            _ => Err(EventError::field(key, "expected a boolean")),
        }
    }

    fn optional_boolean(&mut self, key: &str) -> Parse<Option<bool>> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(_) => Err(EventError::field(key, "expected a boolean")),
        }
    }

    fn object(&mut self, key: &str) -> Parse<Json> {
        match self.required(key)? {
            value @ Value::Object(_) => Ok(Json::from_value(&value)),
            _ => Err(EventError::field(key, "expected an object")),
        }
    }

    fn turn(&mut self, key: &str) -> Parse<u64> {
        self.required(key)?
            .as_u64()
            .ok_or_else(|| EventError::field(key, "expected a non-negative integer"))
    }

    /// Fails on the first field nobody took.
    fn finish(self, parent: &str) -> Parse<()> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(key) => {
                let field = if parent.is_empty() {
                    key.clone()
                } else {
                    format!("{parent}.{key}")
                };
                Err(EventError::field(field, "unknown field"))
            }
        }
    }
}

/// Writes `event` as one JSON object (no newline).
pub fn write_event(event: &Event, out: &mut Vec<u8>) {
    let mut object = ObjectWriter::begin(out);
    write_event_fields(event, &mut object);
    object.end();
}

/// The JSON text of `event`.
pub fn event_to_string(event: &Event) -> String {
    let mut out = Vec::new();
    write_event(event, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Writes the fields of `event` into an object being written, so callers can
/// put their own fields (`seq`, `turn`, ...) beside them.
pub fn write_event_fields(event: &Event, object: &mut ObjectWriter<'_>) {
    object.string("type", event.kind.event_type().as_str());
    match &event.kind {
        EventKind::TurnStart => {}
        EventKind::User { text }
        | EventKind::Assistant { text }
        | EventKind::Reasoning { text }
        | EventKind::System { text } => object.string("text", text),
        EventKind::ToolCall {
            id,
            name,
            arguments,
        } => {
            object.string("id", id);
            object.string("name", name);
            object.raw("arguments", arguments.as_str());
        }
        EventKind::ToolResult {
            id,
            content,
            is_error,
        } => {
            object.string("id", id);
            object.string("content", content);
            object.boolean("is_error", *is_error);
        }
        EventKind::Config { delta } => object.raw("delta", delta.as_str()),
        EventKind::Extension { name, payload } => {
            object.string("name", name);
            object.raw("payload", payload.as_str());
        }
        EventKind::Compaction(compaction) => write_compaction(compaction, object),
    }
    object.key("timestamp");
    object.out.push(b'"');
    event.timestamp.write_rfc3339(object.out);
    object.out.push(b'"');
    if let Some(meta) = &event.meta {
        object.raw("meta", meta.as_str());
    }
}

fn write_compaction(c: &Compaction, object: &mut ObjectWriter<'_>) {
    object.u64("from_turn", c.from_turn);
    object.u64("to_turn", c.to_turn);
    if let Some(summary) = &c.summary {
        object.string("summary", summary);
    }
    match c.reasoning {
        Some(ReasoningPolicy::Strip) => object.string("reasoning", "strip"),
        Some(ReasoningPolicy::Keep) => object.string("reasoning", "keep"),
        None => {}
    }
    if let Some(policy) = &c.tool_calls {
        object.raw("tool_calls", &tool_call_policy_json(policy));
    }
    if let Some(revert) = c.revert {
        object.boolean("revert", revert);
    }
    if let Some(info) = &c.info {
        object.members(info.as_str());
    }
}

/// The JSON text of a tool-call policy, in the form it was written.
pub fn tool_call_policy_json(policy: &ToolCallPolicy) -> String {
    let name = match policy {
        ToolCallPolicy::Keep => "keep",
        ToolCallPolicy::Omit => "omit",
        ToolCallPolicy::Strip => "strip",
        ToolCallPolicy::StripRequests => "strip-requests",
        ToolCallPolicy::StripResponses => "strip-responses",
        ToolCallPolicy::Object(object) => return tool_call_object_json(object),
    };
    let mut out = Vec::new();
    write_json_string(&mut out, name);
    String::from_utf8(out).unwrap_or_default()
}

fn tool_call_object_json(policy: &ToolCallObject) -> String {
    let mut out = Vec::new();
    let mut object = ObjectWriter::begin(&mut out);
    object.string(
        "policy",
        match policy.policy {
            ToolCallKind::Strip => "strip",
            ToolCallKind::Omit => "omit",
            ToolCallKind::Keep => "keep",
        },
    );
    if let Some(request) = policy.request {
        object.boolean("request", request);
    }
    if let Some(response) = policy.response {
        object.boolean("response", response);
    }
    if let Some(tools) = &policy.tools {
        let mut map = Vec::new();
        let mut tools_object = ObjectWriter::begin(&mut map);
        for (name, hint) in tools {
            let mut hint_text = Vec::new();
            let mut hint_object = ObjectWriter::begin(&mut hint_text);
            for (side, action) in [("request", hint.request), ("response", hint.response)] {
                match action {
                    Some(HintAction::Keep) => hint_object.string(side, "keep"),
                    Some(HintAction::Strip) => hint_object.string(side, "strip"),
                    None => {}
                }
            }
            hint_object.end();
            tools_object.raw(name, std::str::from_utf8(&hint_text).unwrap_or("{}"));
        }
        tools_object.end();
        object.raw("tools", std::str::from_utf8(&map).unwrap_or("{}"));
    }
    object.end();
    String::from_utf8(out).unwrap_or_default()
}

/// Writes a JSON object field by field, in the order given.
pub struct ObjectWriter<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> ObjectWriter<'a> {
    /// Opens an object.
    pub fn begin(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, empty: true }
    }

    fn key(&mut self, key: &str) {
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        write_json_string(self.out, key);
        self.out.push(b':');
    }

    /// A string field.
    pub fn string(&mut self, key: &str, value: &str) {
        self.key(key);
        write_json_string(self.out, value);
    }

    /// A field whose value is JSON text, written as it is.
    pub fn raw(&mut self, key: &str, json: &str) {
        self.key(key);
        self.out.extend_from_slice(json.as_bytes());
    }

    /// An integer field.
    pub fn u64(&mut self, key: &str, value: u64) {
        self.key(key);
        self.out.extend_from_slice(value.to_string().as_bytes());
    }

    /// A boolean field.
    pub fn boolean(&mut self, key: &str, value: bool) {
        self.key(key);
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    /// The members of a compact JSON object's text (`{"a":1}`), written as
    /// fields of this one.
    pub fn members(&mut self, object_json: &str) {
        let inner = object_json
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or("");
        if inner.is_empty() {
            return;
        }
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out.extend_from_slice(inner.as_bytes());
    }

    /// Closes the object.
    pub fn end(self) {
        self.out.push(b'}');
    }
}

/// Writes `s` as a JSON string literal, escaped as serde_json escapes it.
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
