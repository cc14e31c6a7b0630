//! convstore's projection engine: what a model should see of a conversation
//! after non-destructive compaction (SPEC §4). Pure: events in, view out;
//! no I/O.
//!
//! A projection is two passes over the raw stream. The first feeds every
//! event to a [`Plan`], which collects the compaction overlays, the name of
//! the latest call for each tool call id, and where each turn's first
//! conversation event is; [`Plan::finish`] resolves the overlays
//! ([`resolve`]: disjoint turn spans with a winner per content type, and
//! the summary runs) into a [`Projector`]. The second pass transforms each
//! raw event into zero or more [`ViewEvent`]s, in any order and on any
//! thread ([`Projector::decode_transform_map`]), so a view can be streamed.
//!
//! ```
//! use convstore_projection::{project, LogEvent};
//! use convstore_store::{json::parse_event, Timestamp};
//!
//! let lines = [
//!     r#"{"type":"turn_start"}"#,
//!     r#"{"type":"reasoning","text":"hmm"}"#,
//!     r#"{"type":"assistant","text":"hi"}"#,
//!     r#"{"type":"compaction","from_turn":0,"to_turn":0,"reasoning":"strip"}"#,
//! ];
//! // Each event with its seq and turn.
//! let events = LogEvent::sequence(
//!     lines.iter().map(|line| parse_event(line, Timestamp::now()).unwrap()),
//! );
//! let view = project(&events);
//! assert_eq!(view.len(), 2); // turn_start and assistant: reasoning stripped
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auto;
pub mod bounds;
pub mod config;
pub mod openai;
mod overlay;
mod project;
mod projector;
#[cfg(any(test, feature = "reference"))]
pub mod reference;
mod resolve;
pub mod summarize;
mod tokens;

pub use overlay::{Overlay, Summary, ToolPolicy};
pub use project::project;
pub use projector::{LogEvent, Plan, Projector, ViewEvent, SUMMARY_HEADER};
pub use resolve::{resolve, ContentType, Resolution, Run, Span};
pub use tokens::{estimate_chars, tokens_for_chars, Tokenizer, TokenizerError};
