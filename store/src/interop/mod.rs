//! Conversions between convstore's events and the formats tools already
//! speak: JP's `events.json` ([`jp`]) and OpenAI Chat Completions messages
//! ([`openai`]). NDJSON is the event contract itself ([`crate::json`]).

pub mod jp;
pub mod openai;
