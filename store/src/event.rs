//! The event model: [`Event`], [`EventKind`], [`Compaction`] and the turn
//! rule ([`TurnTracker`]).
//!
//! These types are the in-memory form of the public JSON contract (SPEC §2).
//! Their JSON form lives in [`crate::json`], their stored form in
//! `codec.rs`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A point in time: microseconds since the Unix epoch, UTC.
///
/// Events are timestamped to the microsecond; finer input is truncated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Timestamp(i64);

/// The earliest timestamp RFC 3339 can write: 0000-01-01T00:00:00Z.
const MIN_MICROS: i64 = -62_167_219_200_000_000;
/// One past the latest: 10000-01-01T00:00:00Z.
const END_MICROS: i64 = 253_402_300_800_000_000;

impl Timestamp {
    /// The earliest timestamp: 0000-01-01T00:00:00Z.
    pub const EARLIEST: Timestamp = Timestamp(MIN_MICROS);

    /// The current time.
    pub fn now() -> Self {
        Self(chrono::Utc::now().timestamp_micros())
    }

    /// A timestamp from microseconds since the epoch, if RFC 3339 can write
    /// it (years 0000 to 9999).
    pub fn from_micros(micros: i64) -> Option<Self> {
        (MIN_MICROS..END_MICROS)
            .contains(&micros)
            .then_some(Self(micros))
    }

    /// Microseconds since the epoch.
    pub fn as_micros(self) -> i64 {
        self.0
    }

    /// Parses an RFC 3339 date-time (`2025-01-05T04:00:00Z`,
    /// `2025-01-05T05:00:00.123456789+01:00`). Offsets are converted to UTC;
    /// digits past the microsecond are dropped.
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let parsed = chrono::DateTime::parse_from_rfc3339(text).ok()?;
        Self::from_micros(parsed.timestamp_micros())
    }
}

impl Timestamp {
    /// Writes RFC 3339 in UTC with exactly six fractional digits
    /// (`2025-01-05T04:00:00.000000Z`, 27 bytes) into `out`. Written by hand:
    /// views print one per event.
    pub fn write_rfc3339(self, out: &mut Vec<u8>) {
        let micros = self.0.rem_euclid(1_000_000) as u32;
        let seconds = self.0.div_euclid(1_000_000);
        let days = seconds.div_euclid(86_400);
        let second_of_day = seconds.rem_euclid(86_400) as u32;
        // Filled in place on the stack, then copied once; the date (the
        // same for most events of a log) is remembered per thread.
        let mut text = *b"0000-00-00T00:00:00.000000Z";
        text[..10].copy_from_slice(&date_text(days));
        put_digits(&mut text[11..13], second_of_day / 3600);
        put_digits(&mut text[14..16], second_of_day / 60 % 60);
        put_digits(&mut text[17..19], second_of_day % 60);
        put_digits(&mut text[20..26], micros);
        out.extend_from_slice(&text);
    }
}

/// `YYYY-MM-DD` of the day `days` after 1970-01-01, the last one asked
/// for remembered per thread.
fn date_text(days: i64) -> [u8; 10] {
    thread_local! {
        static LAST: std::cell::Cell<Option<(i64, [u8; 10])>> = const { std::cell::Cell::new(None) };
    }
    if let Some((day, text)) = LAST.get() {
        if day == days {
            return text;
        }
    }
    // Civil date from days since 1970-01-01 (Howard Hinnant's
    // days_from_civil, inverted).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut text = *b"0000-00-00";
    // Years 0000 to 9999 only (`Timestamp::from_micros`): never negative.
    put_digits(&mut text[0..4], year as u32);
    put_digits(&mut text[5..7], month as u32);
    put_digits(&mut text[8..10], day as u32);
    LAST.set(Some((days, text)));
    text
}

/// `value` in decimal, right-aligned and zero-padded to fill `slots`.
fn put_digits(slots: &mut [u8], mut value: u32) {
    for slot in slots.iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

impl fmt::Display for Timestamp {
    /// RFC 3339 in UTC with exactly six fractional digits:
    /// `2025-01-05T04:00:00.000000Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = Vec::with_capacity(27);
        self.write_rfc3339(&mut out);
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

/// One entry of a conversation: what happened, when, and free-form metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When it happened. The store assigns the current time when the input
    /// has none.
    pub timestamp: Timestamp,
    /// Any JSON object, kept verbatim.
    pub meta: Option<Json>,
    /// What happened.
    pub kind: EventKind,
}

impl Event {
    /// An event of `kind` at `timestamp` without metadata.
    pub fn new(timestamp: Timestamp, kind: EventKind) -> Self {
        Self {
            timestamp,
            meta: None,
            kind,
        }
    }
}

/// The kinds of event (SPEC §2), with their fields.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// Opens a turn (see [`TurnTracker`]).
    TurnStart,
    /// The user's message.
    User {
        /// The message.
        text: String,
    },
    /// The model's message.
    Assistant {
        /// The message.
        text: String,
    },
    /// The model's thinking.
    Reasoning {
        /// The thinking.
        text: String,
    },
    /// The model asks for a tool to run.
    ToolCall {
        /// Call id; a [`EventKind::ToolResult`] answers it.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments, a JSON object.
        arguments: Json,
    },
    /// A tool's answer to a call.
    ToolResult {
        /// The id of the call answered.
        id: String,
        /// What the tool returned.
        content: String,
        /// Whether the tool failed.
        is_error: bool,
    },
    /// A system instruction; never compacted.
    System {
        /// The instruction.
        text: String,
    },
    /// A settings change; never compacted.
    Config {
        /// The change, a JSON object.
        delta: Json,
    },
    /// Anything else, kept verbatim (for example JP's `inquiry_*`).
    Extension {
        /// What kind of extension this is.
        name: String,
        /// Any JSON value.
        payload: Json,
    },
    /// A compaction overlay (SPEC §4).
    Compaction(Compaction),
}

/// The kind of an event without its fields: what `stats` counts by and what
/// the JSON `type` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    /// `turn_start`
    TurnStart,
    /// `user`
    User,
    /// `assistant`
    Assistant,
    /// `reasoning`
    Reasoning,
    /// `tool_call`
    ToolCall,
    /// `tool_result`
    ToolResult,
    /// `system`
    System,
    /// `config`
    Config,
    /// `extension`
    Extension,
    /// `compaction`
    Compaction,
}

impl EventType {
    /// Every type, in the order of SPEC §2's table.
    pub const ALL: [EventType; 10] = [
        EventType::TurnStart,
        EventType::User,
        EventType::Assistant,
        EventType::Reasoning,
        EventType::ToolCall,
        EventType::ToolResult,
        EventType::System,
        EventType::Config,
        EventType::Extension,
        EventType::Compaction,
    ];

    /// The JSON `type` value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::TurnStart => "turn_start",
            EventType::User => "user",
            EventType::Assistant => "assistant",
            EventType::Reasoning => "reasoning",
            EventType::ToolCall => "tool_call",
            EventType::ToolResult => "tool_result",
            EventType::System => "system",
            EventType::Config => "config",
            EventType::Extension => "extension",
            EventType::Compaction => "compaction",
        }
    }

    /// The type a JSON `type` value names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Position in [`EventType::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether events of this type are *conversation events*: every kind
    /// except `config`, `system` and `compaction`. Only these make a
    /// `turn_start` open a new turn, and only these are compacted.
    pub fn is_conversation(self) -> bool {
        !matches!(
            self,
            EventType::Config | EventType::System | EventType::Compaction
        )
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EventKind {
    /// The type of this event.
    pub fn event_type(&self) -> EventType {
        match self {
            EventKind::TurnStart => EventType::TurnStart,
            EventKind::User { .. } => EventType::User,
            EventKind::Assistant { .. } => EventType::Assistant,
            EventKind::Reasoning { .. } => EventType::Reasoning,
            EventKind::ToolCall { .. } => EventType::ToolCall,
            EventKind::ToolResult { .. } => EventType::ToolResult,
            EventKind::System { .. } => EventType::System,
            EventKind::Config { .. } => EventType::Config,
            EventKind::Extension { .. } => EventType::Extension,
            EventKind::Compaction(_) => EventType::Compaction,
        }
    }
}

/// Assigns turn indices to a stream of events (SPEC §2, the turn rule).
///
/// Turn indices start at 0. A `turn_start` opens a new turn only when the
/// current turn already holds a conversation event; every event belongs to
/// the current turn. So `system, turn_start, user` is all turn 0, and
/// `turn_start, turn_start` is turns 0 and 1 (a `turn_start` is itself a
/// conversation event).
///
/// # Invariants
/// - I8: the turn of an event depends only on the events before it, so
///   appending never changes the turn of a stored record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnTracker {
    turn: u64,
    holds_conversation_event: bool,
}

impl TurnTracker {
    /// A tracker at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The turn of the next event of type `kind`, advancing the tracker past
    /// it.
    pub fn next(&mut self, kind: EventType) -> u64 {
        if kind == EventType::TurnStart && self.holds_conversation_event {
            self.turn += 1;
            self.holds_conversation_event = false;
        }
        if kind.is_conversation() {
            self.holds_conversation_event = true;
        }
        self.turn
    }

    /// A tracker in the state it has after a stream whose last event is in
    /// `turn`, which `holds_conversation_event` or not.
    pub fn resumed(turn: u64, holds_conversation_event: bool) -> Self {
        Self {
            turn,
            holds_conversation_event,
        }
    }

    /// The current turn: the turn of the last event seen (0 for none).
    pub fn current(&self) -> u64 {
        self.turn
    }

    /// Whether the current turn already holds a conversation event.
    pub fn holds_conversation_event(&self) -> bool {
        self.holds_conversation_event
    }

    /// The number of turns in the stream seen so far: 0 for a stream with no
    /// event, else the current turn plus one.
    pub fn turn_count(&self, events_seen: u64) -> u64 {
        if events_seen == 0 {
            0
        } else {
            self.turn + 1
        }
    }
}

/// A compaction overlay (SPEC §4): policies over an inclusive turn range.
///
/// The policies as given are kept in the form they were written (`"strip"`
/// stays a string, an object stays an object), so that an event round-trips
/// unchanged; [`Compaction::summary_policy`], [`Compaction::reasoning_policy`]
/// and [`Compaction::tool_call_policy`] give their meaning, `revert`
/// included.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    /// First covered turn (inclusive).
    pub from_turn: u64,
    /// Last covered turn (inclusive; clamped to the last turn when projecting).
    pub to_turn: u64,
    /// Replaces every conversation event of the covered turns.
    pub summary: Option<String>,
    /// Policy for `reasoning` events.
    pub reasoning: Option<ReasoningPolicy>,
    /// Policy for `tool_call` and `tool_result` events.
    pub tool_calls: Option<ToolCallPolicy>,
    /// `"revert": true` sets all three policies to keep. Never combined with
    /// another policy. `Some(false)` is kept as written and means nothing.
    pub revert: Option<bool>,
    /// Bookkeeping (`profile`, `model`, `tokens_before`, `tokens_after`): a
    /// JSON object of the fields given, shown but never changing the view.
    pub info: Option<Json>,
}

impl Compaction {
    /// Whether this is a revert (`"revert": true`).
    pub fn is_revert(&self) -> bool {
        self.revert == Some(true)
    }
}

/// Policy for `reasoning` events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReasoningPolicy {
    /// Remove them.
    Strip,
    /// Leave them (competes like any other policy).
    Keep,
}

/// Policy for tool calls and results, in the form it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolCallPolicy {
    /// `"keep"`
    Keep,
    /// `"omit"`: remove calls and results.
    Omit,
    /// `"strip"`: strip requests and responses.
    Strip,
    /// `"strip-requests"`
    StripRequests,
    /// `"strip-responses"`
    StripResponses,
    /// The object form `{"policy": ..., "request": ..., "response": ...,
    /// "tools": {...}}`.
    Object(ToolCallObject),
}

/// The object form of a tool-call policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallObject {
    /// `policy`: `"strip"`, `"omit"` or `"keep"`.
    pub policy: ToolCallKind,
    /// `request`: strip arguments (default true). Only with `"strip"`.
    pub request: Option<bool>,
    /// `response`: strip results (default true). Only with `"strip"`.
    pub response: Option<bool>,
    /// `tools`: per-tool hints, in the order written. Only with `"strip"`.
    pub tools: Option<Vec<(String, ToolHint)>>,
}

/// The `policy` of an object-form tool-call policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolCallKind {
    /// `"strip"`
    Strip,
    /// `"omit"`
    Omit,
    /// `"keep"`
    Keep,
}

/// A per-tool hint: replaces the policy's flags for one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ToolHint {
    /// `request`: `"keep"` or `"strip"` the arguments.
    pub request: Option<HintAction>,
    /// `response`: `"keep"` or `"strip"` the result.
    pub response: Option<HintAction>,
}

/// What a per-tool hint says about one side of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HintAction {
    /// Leave it.
    Keep,
    /// Strip it.
    Strip,
}

/// A JSON value kept as its compact text, as written by serde_json.
///
/// Payloads (`arguments`, `delta`, `payload`, `meta`) travel as text: the
/// store never needs their structure, and writing them back is a copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Json(String);

impl Json {
    /// The compact text of `value`.
    pub fn from_value(value: &serde_json::Value) -> Self {
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
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }
}

/// An event of the view, with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewEvent {
    /// The raw seq it was produced from (for an injected summary event: the
    /// first event its run drops).
    pub seq: u64,
    /// The raw turn it was produced from.
    pub turn: u64,
    /// For injected summary events: the raw turns the run replaces.
    pub summary_of: Option<(u64, u64)>,
    /// The event as the model sees it.
    pub event: Event,
}

#[cfg(test)]
#[path = "event_tests.rs"]
mod tests;
