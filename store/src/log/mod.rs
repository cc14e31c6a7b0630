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

pub use chunk::{ChunkIter, RawChunk};
pub(crate) use chunk::{LoadedChunk, Located};
pub use overlays::StoredOverlay;
pub use scan::{LogIter, LogRecord};

use crate::error::StoreError;
use crate::ids::ConversationId;

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
