//! The public JSON contract (SPEC §2): [`parse_event`] reads one event,
//! [`write_event`] writes one back.
//!
//! Parsing is strict: an unknown `type`, a missing, mistyped or unknown
//! field, or invalid JSON is an [`EventError`] that names the field. Writing
//! is the inverse: a parsed event writes back to the same JSON value, with
//! the timestamp normalised to RFC 3339 in UTC with microseconds.

mod fast;
mod parse;
mod write;

pub use crate::event::Json;
pub use parse::{event_from_value, parse_event, EventError};
pub use write::{
    event_to_string, tool_call_policy_json, write_event, write_event_fields, write_json_string,
    write_log_record, ObjectWriter,
};

#[cfg(test)]
mod tests;
