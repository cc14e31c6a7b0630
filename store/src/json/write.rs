//! Writing an event back as JSON: the inverse of reading it, with the
//! timestamp normalised to RFC 3339 in UTC with microseconds.

use crate::event::{
    Compaction, Event, EventKind, HintAction, ReasoningPolicy, ToolCallKind, ToolCallObject,
    ToolCallPolicy,
};
use crate::log::LogRecord;

/// Writes `event` as one JSON object (no newline).
pub fn write_event(event: &Event, out: &mut Vec<u8>) {
    let mut object = ObjectWriter::begin(out);
    write_event_fields(event, &mut object);
    object.end();
}

/// Writes `record` as `convstore log` prints it: one JSON object of its
/// seq, turn and address, `redacted` (when and why) for a record whose
/// text was removed, and the event's fields (no newline).
pub fn write_log_record(record: &LogRecord, out: &mut Vec<u8>) {
    let mut object = ObjectWriter::begin(out);
    object.u64("seq", record.seq);
    object.u64("turn", record.turn);
    object.string("address", &record.address.hex());
    if let Some(redaction) = &record.redaction {
        // When and why its text was removed, so that a record whose text
        // reads `[redacted]` is told from one that was written so.
        object.key("redacted");
        let mut inner = ObjectWriter::begin(object.out);
        inner.key("at");
        inner.out.push(b'"');
        redaction.time.write_rfc3339(inner.out);
        inner.out.push(b'"');
        inner.string("reason", &redaction.reason);
        inner.end();
    }
    write_event_fields(&record.event, &mut object);
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

    #[inline]
    fn key(&mut self, key: &str) {
        // Field names are short and rarely need escaping (a tool's name
        // in a policy may): checked a byte at a time, written in one go.
        let bytes = key.as_bytes();
        let plain = bytes.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\');
        self.out.reserve(bytes.len() + 4);
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        if plain {
            self.out.push(b'"');
            self.out.extend_from_slice(bytes);
            self.out.extend_from_slice(b"\":");
        } else {
            write_json_string(self.out, key);
            self.out.push(b':');
        }
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
        write_u64(self.out, value);
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

/// Writes `value` in decimal.
fn write_u64(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Writes `s` as a JSON string literal, escaped as serde_json escapes it.
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Eight bytes at a time while none needs escaping (most text).
        if let Some(word) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
            if !needs_escape(word) {
                i += 8;
                continue;
            }
        }
        let b = bytes[i];
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Whether one of the eight bytes of `word` is below 0x20, `"` or `\`
/// (may say so of a byte after one that is: the caller then looks byte by
/// byte). The usual zero-byte test: a byte `x` is zero where
/// `(x - 1) & !x` has its top bit set.
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    let quote = zero(word ^ (ONES * u64::from(b'"')));
    let backslash = zero(word ^ (ONES * u64::from(b'\\')));
    below_space | quote | backslash != 0
}

#[cfg(test)]
mod tests {
    use super::write_json_string;
    use proptest::prelude::*;

    fn written(s: &str) -> String {
        let mut out = Vec::new();
        write_json_string(&mut out, s);
        String::from_utf8(out).expect("valid UTF-8")
    }

    #[test]
    fn escapes_as_serde_json_does_at_every_position() {
        let specials = [
            '"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\0', '\u{1f}', '\u{7f}',
        ];
        for len in 0..20 {
            for at in 0..len.max(1) {
                for special in specials {
                    let s: String = (0..len)
                        .map(|i| if i == at { special } else { 'é' })
                        .collect();
                    assert_eq!(written(&s), serde_json::to_string(&s).expect("a string"));
                }
            }
        }
    }

    #[test]
    fn objects_write_numbers_and_keys_as_serde_json_does() {
        use super::ObjectWriter;
        for value in [0, 7, 10, 99, 100, 4_294_967_296, u64::MAX] {
            for key in ["seq", "from_turn", "a b", "qu\"ote", ""] {
                let mut out = Vec::new();
                let mut object = ObjectWriter::begin(&mut out);
                object.u64(key, value);
                object.u64("next", value / 3);
                object.end();
                let expected = serde_json::json!({ key: value, "next": value / 3 });
                assert_eq!(String::from_utf8(out).expect("UTF-8"), expected.to_string());
            }
        }
    }

    proptest! {
        #[test]
        fn escapes_any_text_as_serde_json_does(s in "(\\PC|[\\x00-\\x1f\"\\\\]){0,80}") {
            prop_assert_eq!(written(&s), serde_json::to_string(&s).expect("a string"));
        }
    }
}
