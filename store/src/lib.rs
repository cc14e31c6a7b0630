//! convstore's storage core: the event model, its JSON contract, and
//! conversations kept as append-only, content-addressed logs in sled.
//!
//! A [`Store`] holds conversations. Each is a log of records, one per
//! [`Event`]; a record's [`Address`] hashes its parent's address and its
//! canonical bytes, so a log is a hash chain whose last address is the
//! conversation's *head*. [`Store::append`] adds events atomically and
//! durably, [`Store::scan`] reads them back as [`LogRecord`]s with their
//! seq, turn and address, and [`Store::verify`] re-hashes everything.
//! Events cross every boundary as JSON: [`json::parse_event`] and
//! [`json::write_event`].
//!
//! ```
//! use convstore_store::{json, AppendOptions, Store, Timestamp};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path().join("db"))?;
//! let now = Timestamp::now();
//! let events = [
//!     json::parse_event(r#"{"type":"turn_start"}"#, now)?,
//!     json::parse_event(r#"{"type":"user","text":"hello"}"#, now)?,
//! ];
//! let (id, appended) = store.create_and_append(Some("demo"), &events, &AppendOptions::default())?;
//! assert_eq!(appended.count, 2);
//! let records: Vec<_> = store.scan(&id, 0..u64::MAX)?.collect::<Result<_, _>>()?;
//! assert_eq!(records[1].event, events[1]);
//! assert_eq!(records[1].address, appended.head);
//! assert!(store.verify(&id)?.is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod append;
pub mod backend;
mod backup;
mod bulk;
mod codec;
mod copy;
pub mod crypto;
mod delete;
mod error;
pub mod event;
mod fork;
mod hash;
mod ids;
mod index;
pub mod interop;
pub mod json;
mod keys;
mod layout;
mod log;
mod names;
mod pins;
mod position;
pub mod readable;
mod redact;
mod retain;
mod staging;
mod store;
pub mod strict;
/// Hooks for tests of damage and old formats (the `testing` feature).
#[cfg(feature = "testing")]
pub mod testing;
mod verify;
mod verify_sealed;
mod views;

pub use append::{event_size, AppendOptions, AppendTurn, Appended, GroupAppend, IdempotencyKey};
pub use backend::sled::opening::address_space_limit;
pub use backend::sled::remove_created_database;
pub use backend::sled::salvage::{salvage, SalvageReport, SalvagedConversation};
pub use backup::BackupReport;
pub use bulk::{BulkAppend, BulkTarget, MEMORY_COMPACTIONS as BULK_MEMORY_COMPACTIONS};
pub use codec::{BlobRef, INLINE_MAX, REDACTED_JSON, REDACTED_TEXT};
pub use copy::remove_unfinished_copies;
pub use crypto::Keyring;
pub use delete::{Deleted, Deletion};
pub use error::{one_line, StoreError, StoreResult};
pub use event::{Compaction, Event, EventKind, EventType, Json, Timestamp, TurnTracker, ViewEvent};
pub use fork::ForkPoint;
pub use hash::{Address, BlobHash};
pub use ids::ConversationId;
pub use index::OverlayIndex;
pub use json::EventError;
pub use keys::FORMAT_VERSION;
pub use log::{
    ChunkIter, ChunkTurns, LogIter, LogRecord, Outranking, RawChunk, Reading, RecordRedaction,
    StoredOverlay,
};
pub use names::ToolNames;
pub use pins::AutoState;
pub use position::{merge_ranges, Seq, Turn};
pub use redact::{RedactField, RedactedRecord, Redaction, RedactionGroup};
pub use retain::{DroppedPayloads, Select, WouldDrop};
pub use store::{
    validate_conversation_name, validate_view_name, ConversationInfo, KindStats, OpenOptions,
    ProgressFn, Store, DEFAULT_BULK_MEMORY_BYTES, DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_SEGMENT_MIN_BYTES, ID_MARKER, MIN_ID_PREFIX,
};
pub use verify::{Verified, VerifyFailure, VerifyReport};
pub use verify_sealed::{SealedFailure, SealedReport};
pub use views::{
    call_bucket, BlockOutline, CallEntry, ViewBlock, ViewState, ViewUpdate, CALL_BUCKETS,
};
