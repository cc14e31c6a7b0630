//! Token estimation: four characters a token. See [`estimate_chars`].

use convstore_store::{Event, EventKind};

/// The characters of an event that a model reads: its texts, and its JSON
/// payloads as written (`arguments`, `delta`, `payload`). Timestamps and
/// metadata are not counted.
pub fn estimate_chars(event: &Event) -> u64 {
    let chars = |s: &str| s.chars().count() as u64;
    match &event.kind {
        EventKind::TurnStart | EventKind::Compaction(_) => 0,
        EventKind::User { text }
        | EventKind::Assistant { text }
        | EventKind::Reasoning { text }
        | EventKind::System { text } => chars(text),
        EventKind::ToolCall {
            name, arguments, ..
        } => chars(name) + chars(arguments.as_str()),
        EventKind::ToolResult { content, .. } => chars(content),
        EventKind::Config { delta } => chars(delta.as_str()),
        EventKind::Extension { payload, .. } => chars(payload.as_str()),
    }
}

/// Estimated tokens for `chars` characters: `ceil(chars / 4)`.
pub fn tokens_for_chars(chars: u64) -> u64 {
    chars.div_ceil(4)
}
