//! Reading an event from JSON, strictly: an unknown `type`, a missing,
//! mistyped or unknown field, or invalid JSON is an [`EventError`] naming
//! the field.

use serde_json::{Map, Value};

use crate::event::{
    Compaction, Event, EventKind, EventType, HintAction, Json, ReasoningPolicy, Timestamp,
    ToolCallKind, ToolCallObject, ToolCallPolicy, ToolHint,
};

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
    if let Some(event) = super::fast::parse(text, default_timestamp) {
        return Ok(event);
    }
    parse_strictly(text, default_timestamp)
}

/// serde's message for `error`; for an event on one line (an NDJSON line,
/// whose number the caller names) `at column N` rather than serde's `at
/// line 1 column N`, so that an error line names one line number.
fn syntax_error(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let suffix = format!(" at line 1 column {}", error.column());
    match message.strip_suffix(&suffix) {
        Some(rest) if error.line() == 1 => format!("{rest} at column {}", error.column()),
        _ => message,
    }
}

/// [`parse_event`] through a `serde_json::Value`: every event, and every
/// error's message.
pub(super) fn parse_strictly(text: &str, default_timestamp: Timestamp) -> Parse<Event> {
    let value: Value =
        crate::strict::from_str(text).map_err(|e| EventError::Syntax(syntax_error(&e)))?;
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

/// What a compaction field outside its policies holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum InfoValue {
    /// A string.
    Text,
    /// A non-negative integer.
    Integer,
    /// A boolean.
    Boolean,
}

/// The fields of a compaction beside its policies: bookkeeping, which never
/// changes the view, and `recall_hints`, which (when true) makes its
/// stripped results and summaries name the records they stand for.
const INFO_FIELDS: [(&str, InfoValue); 11] = [
    ("profile", InfoValue::Text),
    ("model", InfoValue::Text),
    ("tokens_before", InfoValue::Integer),
    ("tokens_after", InfoValue::Integer),
    ("summarizer", InfoValue::Text),
    ("prompt_hash", InfoValue::Text),
    ("first_address", InfoValue::Text),
    ("last_address", InfoValue::Text),
    ("created_by", InfoValue::Text),
    ("tokenizer", InfoValue::Text),
    ("recall_hints", InfoValue::Boolean),
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
        let Some(&(name, kind)) = INFO_FIELDS.iter().find(|(name, _)| *name == key) else {
            continue;
        };
        let value = fields.take(name).unwrap_or(Value::Null);
        let (fits, expected) = match kind {
            InfoValue::Text => (value.is_string(), "expected a string"),
            InfoValue::Integer => (value.as_u64().is_some(), "expected a non-negative integer"),
            InfoValue::Boolean => (value.is_boolean(), "expected a boolean"),
        };
        if !fits {
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
