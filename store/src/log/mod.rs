//! Reading the log: records in order ([`Store::scan`]), undecoded chunks
//! for parallel readers ([`Store::chunks`]), the turn index
//! ([`Store::turn_of`], [`Store::first_seq_of_turn`]), compaction overlays
//! ([`Store::overlays`]), tool call names ([`Store::tool_names`]) and blobs.

mod blobs;
mod calls;
mod chunk;
mod overlays;
mod scan;
mod turns;

pub use chunk::{ChunkIter, ChunkTurns, RawChunk, Reading};
pub(crate) use chunk::{ChunkSource, LoadedChunk, Located};
pub use overlays::{Outranking, StoredOverlay};
pub use scan::{LogIter, LogRecord, RecordRedaction};

use crate::codec::{decode_record, record_to_event};
use crate::error::{StoreError, StoreResult};
use crate::event::Event;
use crate::ids::ConversationId;
use crate::store::Store;

/// The event of record `seq` of `id` from its stored bytes, its blobs
/// loaded from `store`; errors name the record ([`in_record`]).
pub(crate) fn event_of(
    store: &Store,
    id: &ConversationId,
    seq: u64,
    bytes: &[u8],
) -> StoreResult<Event> {
    let record = decode_record(bytes).map_err(|e| in_record(id, seq, &e))?;
    record_to_event(&record, &mut |blob| store.load_blob(blob))
        .map_err(|e| store.unless_deleted(id, in_record(id, seq, &e)))
}

/// An error met reading record `seq` of `id`, naming them: damage stays
/// damage (corrupt data), and a failing disk or database stays what it is
/// (an I/O or database error), not taken for damage.
pub(crate) fn in_record(id: &ConversationId, seq: u64, error: &StoreError) -> StoreError {
    let at = format!("conversation {id}: record {seq}");
    match error {
        StoreError::Io(e) => StoreError::Io(crate::error::io_at(e.kind(), format!("{at}: {e}"))),
        StoreError::Backend(e) => StoreError::Backend(format!("{at}: {e}").into()),
        StoreError::Corrupt { what } => StoreError::Corrupt {
            what: format!("{at}: {what}"),
        },
        other => StoreError::Corrupt {
            what: format!("{at}: {other}"),
        },
    }
}
