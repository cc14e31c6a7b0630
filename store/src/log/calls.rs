//! Tool calls by id, from the chunks' call directories (no record is
//! decoded).

use std::collections::HashSet;
use std::ops::Range;

use crate::backend::{self, Bytes, Keyspace};
use crate::codec::{self, CallDirectory};
use crate::error::StoreResult;
use crate::ids::ConversationId;
use crate::keys;
use crate::names::ToolNames;
use crate::store::Store;

impl Store {
    /// The tool calls among records `start..end` as `(seq, call id, name)`,
    /// in log order, from the chunks' call directories (no record is
    /// decoded).
    pub fn tool_calls(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
    ) -> StoreResult<Vec<(u64, String, String)>> {
        let mut out = Vec::new();
        self.visit_tool_calls(id, start, end, |seq, call, name| {
            out.push((seq, call.to_owned(), name.to_owned()));
        })?;
        Ok(out)
    }

    /// The name of the latest tool call with each id among records `0..end`,
    /// from the chunks' call directories (no record is decoded).
    /// The directories are read once; each of rayon's threads decodes them
    /// all and keeps the ids of its hash shard.
    pub fn tool_names(&self, id: &ConversationId, end: u64) -> StoreResult<ToolNames> {
        let mut directories = Vec::new();
        self.visit_call_directories(id, 0, end, |records, value| {
            directories.push((records, value));
        })?;
        ToolNames::par_build(rayon::current_num_threads(), |insert| {
            for (records, value) in &directories {
                visit_directory(records, value, &mut |_, call, name| insert(call, name))?;
            }
            Ok(())
        })
    }

    /// [`Store::tool_names`] for the ids `wanted` only: the call
    /// directories are read from record `end` back until every id is found
    /// (all of them when one was never called), so a projection of a few
    /// turns near the end of a long log reads a few directories.
    pub fn tool_names_of(
        &self,
        id: &ConversationId,
        end: u64,
        wanted: &HashSet<&str>,
    ) -> StoreResult<ToolNames> {
        let mut names = ToolNames::new();
        let mut missing = wanted.len();
        let pin = self.pin_read();
        for (space, piece) in self.spaced_pieces(id, 0, end, &pin)?.into_iter().rev() {
            if missing == 0 {
                break;
            }
            let owner = &piece.owner;
            let from = self.chunk_start(space, owner, piece.start)?;
            let directories = self.kv.scan(
                Keyspace::Main,
                backend::between(
                    keys::call_directory(space, owner, from),
                    keys::call_directory(space, owner, piece.end),
                ),
                true,
            );
            let records = piece.start..piece.end;
            for item in directories {
                let (_, value) = item?;
                let directory: CallDirectory<'_> = codec::decode(&value, "call directory")?;
                // Latest first: the directory's calls are in log order.
                for &(seq, call, name) in directory.calls.iter().rev() {
                    if records.contains(&seq) && wanted.contains(call) && names.get(call).is_none()
                    {
                        names.insert(call, name);
                        missing -= 1;
                    }
                }
                if missing == 0 {
                    break;
                }
            }
        }
        Ok(names)
    }

    /// Calls `visit(seq, call id, name)` for each tool call among records
    /// `start..end`, in log order, from the chunks' call directories.
    pub(crate) fn visit_tool_calls(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
        mut visit: impl FnMut(u64, &str, &str),
    ) -> StoreResult<()> {
        let mut failed = Ok(());
        self.visit_call_directories(id, start, end, |records, value| {
            if failed.is_ok() {
                failed = visit_directory(&records, &value, &mut visit);
            }
        })?;
        failed
    }

    /// Calls `visit(records, directory)` for each call directory of the
    /// chunks holding records `start..end`, in log order, with the seqs of
    /// its calls that belong to them.
    pub(crate) fn visit_call_directories(
        &self,
        id: &ConversationId,
        start: u64,
        end: u64,
        mut visit: impl FnMut(Range<u64>, Bytes),
    ) -> StoreResult<()> {
        let pin = self.pin_read();
        for (space, piece) in self.spaced_pieces(id, start, end, &pin)? {
            let owner = &piece.owner;
            let from = self.chunk_start(space, owner, piece.start)?;
            let directories = self.scan_range(
                keys::call_directory(space, owner, from),
                keys::call_directory(space, owner, piece.end),
            );
            for item in directories {
                let (_, value) = item?;
                visit(piece.start..piece.end, value);
            }
        }
        Ok(())
    }
}

/// Calls `visit(seq, call id, name)` for each call of a call directory
/// whose seq is in `records`.
fn visit_directory(
    records: &Range<u64>,
    value: &[u8],
    visit: &mut dyn FnMut(u64, &str, &str),
) -> StoreResult<()> {
    let directory: CallDirectory<'_> = codec::decode(value, "call directory")?;
    for (seq, call, name) in directory.calls {
        if records.contains(&seq) {
            visit(seq, call, name);
        }
    }
    Ok(())
}
