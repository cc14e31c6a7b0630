//! Reading the common events without building a `serde_json::Value`: an
//! event of one of the flat types (all but `compaction`) whose fields are
//! exactly those of its type, each of the right JSON type, is read straight
//! into an [`Event`]; its JSON fields (`arguments`, `delta`, `payload`,
//! `meta`) are read strictly and written compactly, as the strict reader
//! writes them. Anything else, an error of any kind included, is left to
//! the strict reader (`parse.rs`), which gives the same event or the error
//! in its own words: this reader only ever answers what that one would.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::event::{Event, EventKind, EventType, Json, Timestamp};

/// The fields an event may have, each present or not. `null` is not a
/// value of any of them (it is an error for the strict reader), so a field
/// that is `null` fails here too.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Flat<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, deserialize_with = "present", borrow)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "present")]
    text: Option<String>,
    #[serde(default, deserialize_with = "present")]
    id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    name: Option<String>,
    #[serde(default, deserialize_with = "present")]
    content: Option<String>,
    #[serde(default, deserialize_with = "present")]
    is_error: Option<bool>,
    #[serde(default, deserialize_with = "present", borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present", borrow)]
    delta: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present", borrow)]
    payload: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present", borrow)]
    meta: Option<&'a RawValue>,
}

/// A field that is there: its value, never `null` (an error).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// The event in `text`, if this reader can tell it is the strict reader's
/// answer; `None` leaves it to the strict reader.
pub(super) fn parse(text: &str, default_timestamp: Timestamp) -> Option<Event> {
    let flat: Flat<'_> = serde_json::from_str(text).ok()?;
    let event_type = EventType::from_name(&flat.kind)?;
    let timestamp = match &flat.timestamp {
        None => default_timestamp,
        Some(s) => Timestamp::parse_rfc3339(s)?,
    };
    let meta = match flat.meta {
        None => None,
        Some(raw) => Some(object(raw)?),
    };
    // Which of the type's own fields are there, in the order of `Flat`.
    let fields = [
        flat.text.is_some(),
        flat.id.is_some(),
        flat.name.is_some(),
        flat.content.is_some(),
        flat.is_error.is_some(),
        flat.arguments.is_some(),
        flat.delta.is_some(),
        flat.payload.is_some(),
    ];
    let wanted = match event_type {
        EventType::TurnStart => [false; 8],
        EventType::User | EventType::Assistant | EventType::Reasoning | EventType::System => {
            [true, false, false, false, false, false, false, false]
        }
        EventType::ToolCall => [false, true, true, false, false, true, false, false],
        EventType::ToolResult => [false, true, false, true, true, false, false, false],
        EventType::Config => [false, false, false, false, false, false, true, false],
        EventType::Extension => [false, false, true, false, false, false, false, true],
        EventType::Compaction => return None,
    };
    if fields != wanted {
        return None;
    }
    let kind = match event_type {
        EventType::TurnStart => EventKind::TurnStart,
        EventType::User => EventKind::User { text: flat.text? },
        EventType::Assistant => EventKind::Assistant { text: flat.text? },
        EventType::Reasoning => EventKind::Reasoning { text: flat.text? },
        EventType::System => EventKind::System { text: flat.text? },
        EventType::ToolCall => EventKind::ToolCall {
            id: flat.id?,
            name: flat.name?,
            arguments: object(flat.arguments?)?,
        },
        EventType::ToolResult => EventKind::ToolResult {
            id: flat.id?,
            content: flat.content?,
            is_error: flat.is_error?,
        },
        EventType::Config => EventKind::Config {
            delta: object(flat.delta?)?,
        },
        EventType::Extension => EventKind::Extension {
            name: flat.name?,
            payload: Json::from_value(&crate::strict::from_str(flat.payload?.get()).ok()?),
        },
        EventType::Compaction => return None,
    };
    Some(Event {
        timestamp,
        meta,
        kind,
    })
}

/// A JSON object read strictly and written compactly, as the strict
/// reader stores it.
fn object(raw: &RawValue) -> Option<Json> {
    match crate::strict::from_str(raw.get()).ok()? {
        value @ Value::Object(_) => Some(Json::from_value(&value)),
        _ => None,
    }
}
