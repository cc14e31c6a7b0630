//! Materialized views as stored: [`ViewState`] and blocks of view events.
//!
//! A view is kept as blocks, each holding the view events that came from a
//! range of raw turns, keyed by the block's first turn; the blocks of a
//! view tile its turns in order. What to recompute and how is the
//! caller's business (the projection lives in another crate); the store
//! writes a change to a view — blocks removed, blocks added, the new
//! state — in one atomic batch, so a view is always some complete past
//! state, and its state says which prefix of the log (`len`, `head`) it
//! reflects.
//!
//! View events are stored in the records' own encoding, so texts longer
//! than 1 KiB are blob references shared with the log, not copies.

use serde::{Deserialize, Serialize};

use crate::append::{encode_all, Writes};
use crate::backend::{self, Batch, Keyspace};
use crate::codec::{decode, decode_record, encode, record_to_event};
use crate::error::{StoreError, StoreResult};
use crate::event::{Timestamp, ViewEvent};
use crate::hash::Address;
use crate::ids::ConversationId;
use crate::keys;
use crate::store::Store;

/// What the store keeps about a materialized view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewState {
    /// Its name, unique per conversation.
    pub name: String,
    /// The compaction profile it applies under the log's overlays, if any.
    pub profile: Option<String>,
    /// It reflects records `0..len` of the log.
    pub len: u64,
    /// The address of record `len - 1`: the head it reflects.
    pub head: Address,
    /// How many view events it holds.
    pub events: u64,
    /// When it was created.
    pub created: Timestamp,
}

/// The view events of raw turns `first_turn..=last_turn`.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewBlock {
    /// Its first raw turn.
    pub first_turn: u64,
    /// Its last raw turn.
    pub last_turn: u64,
    /// Its events, in view order.
    pub events: Vec<ViewEvent>,
}

/// A stored view block without its events: see [`Store::view_outline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockOutline {
    /// Its first raw turn.
    pub first_turn: u64,
    /// Its last raw turn.
    pub last_turn: u64,
    /// How many view events it holds.
    pub events: u64,
}

#[derive(Serialize, Deserialize)]
struct BlockRepr<'a> {
    last_turn: u64,
    #[serde(borrow)]
    events: Vec<EventRepr<'a>>,
}

/// The record bytes of the events of a stored view block.
pub(crate) fn block_records(bytes: &[u8]) -> StoreResult<Vec<&[u8]>> {
    let repr: BlockRepr<'_> = decode(bytes, "view block")?;
    Ok(repr.events.into_iter().map(|e| e.record).collect())
}

/// Given a view event's raw seq, whether it is an injected summary event,
/// and its record: the record rewritten, or `None` to leave it.
pub(crate) type RedactEvent<'a> = dyn Fn(u64, bool, &[u8]) -> Option<Vec<u8>> + 'a;

/// Stored view block `bytes` with the record of each event that `redact`
/// rewrites (`None`: leave it) replaced; `None` if no event changed.
/// `redact` is given the raw seq the event came from, whether it is an
/// injected summary event, and its record.
pub(crate) fn redact_block(bytes: &[u8], redact: &RedactEvent<'_>) -> StoreResult<Option<Vec<u8>>> {
    let repr: BlockRepr<'_> = decode(bytes, "view block")?;
    let rewritten: Vec<Option<Vec<u8>>> = repr
        .events
        .iter()
        .map(|e| redact(e.seq, e.summary_of.is_some(), e.record))
        .collect();
    if rewritten.iter().all(Option::is_none) {
        return Ok(None);
    }
    let events = repr
        .events
        .iter()
        .zip(&rewritten)
        .map(|(e, new)| EventRepr {
            record: new.as_deref().unwrap_or(e.record),
            ..*e
        })
        .collect();
    Ok(Some(encode(&BlockRepr {
        last_turn: repr.last_turn,
        events,
    })))
}

#[derive(Clone, Copy, Serialize, Deserialize)]
struct EventRepr<'a> {
    seq: u64,
    turn: u64,
    summary_of: Option<(u64, u64)>,
    #[serde(with = "serde_bytes")]
    record: &'a [u8],
}

/// What a view knows about one tool call id: the name of the latest call
/// with it in the records the view reflects (`None`: no call yet), and the
/// turns holding results with it that came before any such call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallEntry {
    /// The tool call id.
    pub id: String,
    /// The latest call's tool name.
    pub name: Option<String>,
    /// Turns with results for this id and no call before them.
    pub orphans: Vec<u64>,
}

/// How many buckets a view's call index has.
pub const CALL_BUCKETS: u16 = 4096;

/// The bucket of a view's call index that holds `id`.
pub fn call_bucket(id: &str) -> u16 {
    let hash = blake3::hash(id.as_bytes());
    u16::from_be_bytes([hash.as_bytes()[0], hash.as_bytes()[1]]) % CALL_BUCKETS
}

/// A change to a view, written atomically by [`Store::write_view`].
#[derive(Debug, Clone)]
pub struct ViewUpdate {
    /// The `len` of the stored state this change was computed from (`None`:
    /// the view must not exist yet).
    pub expected_len: Option<u64>,
    /// The view's new state (its `events` is recounted by the store).
    pub state: ViewState,
    /// Turn ranges (inclusive) whose blocks are removed: every block whose
    /// first turn lies in one.
    pub removed: Vec<(u64, u64)>,
    /// The blocks added.
    pub blocks: Vec<ViewBlock>,
    /// Empty the call index first.
    pub reset_calls: bool,
    /// Call index buckets to replace (an empty bucket is removed).
    pub calls: Vec<(u16, Vec<CallEntry>)>,
    /// Return before the change is durable (a crash may lose it, never
    /// part of it; a view is rebuilt from the log anyway).
    pub no_sync: bool,
}

/// The 8-byte key of a view: blake3 of its name.
fn view_key(name: &str) -> [u8; 8] {
    let hash = blake3::hash(name.as_bytes());
    let mut key = [0u8; 8];
    key.copy_from_slice(&hash.as_bytes()[..8]);
    key
}

impl Store {
    /// The state of the view `name` of `id`, if it exists.
    pub fn view_state(&self, id: &ConversationId, name: &str) -> StoreResult<Option<ViewState>> {
        match self.get(&keys::view(id, view_key(name)))? {
            None => Ok(None),
            Some(bytes) => {
                let state: ViewState = decode(
                    &bytes,
                    &format!(
                        "state of view \"{name}\" (a view can be dropped with `view --drop` \
                         and rebuilt from the log)"
                    ),
                )?;
                if state.name != name {
                    return Err(StoreError::Corrupt {
                        what: format!(
                            "conversation {id}: the view stored for \"{name}\" is named \"{}\"",
                            state.name
                        ),
                    });
                }
                Ok(Some(state))
            }
        }
    }

    /// Every view of `id`.
    pub fn views(&self, id: &ConversationId) -> StoreResult<Vec<ViewState>> {
        let mut out = Vec::new();
        for item in self.scan_prefix(keys::views(id)) {
            let (_, bytes) = item?;
            out.push(decode(&bytes, "view state")?);
        }
        out.sort_by(|a: &ViewState, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The blocks of view `name` whose turns reach `from_turn` or later,
    /// in order, decoded (blobs loaded).
    pub fn view_blocks(
        &self,
        id: &ConversationId,
        name: &str,
        from_turn: u64,
    ) -> StoreResult<impl Iterator<Item = StoreResult<ViewBlock>> + '_> {
        let key = view_key(name);
        let start = self
            .view_block_at(id, name, from_turn)?
            .map_or(from_turn, |(first, _)| first);
        let id = *id;
        Ok(self
            .kv
            .scan(
                Keyspace::Main,
                backend::through(
                    keys::view_block(&id, key, start),
                    keys::view_block(&id, key, u64::MAX),
                ),
                false,
            )
            .map(move |item| {
                let (k, bytes) = item?;
                // A blob a delete of the conversation took meanwhile.
                self.decode_block(&id, &k, &bytes)
                    .map_err(|e| self.unless_deleted(&id, e))
            }))
    }

    /// The outline of view `name`'s blocks, in order: the first and last
    /// turn and the number of events of each (the events are not decoded).
    pub fn view_outline(&self, id: &ConversationId, name: &str) -> StoreResult<Vec<BlockOutline>> {
        let mut out = Vec::new();
        for item in self.scan_prefix(keys::view_blocks(id, view_key(name))) {
            let (k, bytes) = item?;
            let first_turn = keys::view_block_turn(&k).ok_or_else(|| truncated(id))?;
            let repr: BlockRepr<'_> = decode(&bytes, "view block")?;
            out.push(BlockOutline {
                first_turn,
                last_turn: repr.last_turn,
                events: repr.events.len() as u64,
            });
        }
        Ok(out)
    }

    /// Bucket `bucket` of the call index of view `name`.
    pub fn view_calls(
        &self,
        id: &ConversationId,
        name: &str,
        bucket: u16,
    ) -> StoreResult<Vec<CallEntry>> {
        match self.get(&keys::view_calls(id, view_key(name), bucket))? {
            Some(bytes) => decode(&bytes, "view call index bucket"),
            None => Ok(Vec::new()),
        }
    }

    /// The `(first_turn, last_turn)` of the block of view `name` that holds
    /// `turn`, if one does.
    pub fn view_block_at(
        &self,
        id: &ConversationId,
        name: &str,
        turn: u64,
    ) -> StoreResult<Option<(u64, u64)>> {
        let key = view_key(name);
        let found = self
            .kv
            .scan(
                Keyspace::Main,
                backend::through(
                    keys::view_block(id, key, 0),
                    keys::view_block(id, key, turn),
                ),
                true,
            )
            .next()
            .transpose()?;
        let Some((k, bytes)) = found else {
            return Ok(None);
        };
        let first = keys::view_block_turn(&k).ok_or_else(|| truncated(id))?;
        let repr: BlockRepr<'_> = decode(&bytes, "view block")?;
        Ok((repr.last_turn >= turn).then_some((first, repr.last_turn)))
    }

    fn decode_block(
        &self,
        id: &ConversationId,
        key: &[u8],
        bytes: &[u8],
    ) -> StoreResult<ViewBlock> {
        let first_turn = keys::view_block_turn(key).ok_or_else(|| truncated(id))?;
        let repr: BlockRepr<'_> = decode(bytes, "view block")?;
        let mut events = Vec::with_capacity(repr.events.len());
        for e in repr.events {
            let record = decode_record(e.record)?;
            let event = record_to_event(&record, &mut |blob| self.load_blob(blob))?;
            events.push(ViewEvent {
                seq: e.seq,
                turn: e.turn,
                summary_of: e.summary_of,
                event,
            });
        }
        Ok(ViewBlock {
            first_turn,
            last_turn: repr.last_turn,
            events,
        })
    }

    /// Applies `update` to view `update.state.name` of `id` in one atomic
    /// batch (creating the view if it does not exist), then flushes.
    ///
    /// Fails with [`StoreError::HeadMismatch`] if the stored view is not the
    /// one the update was computed from (another update came first), or if
    /// the log does not hold `update.state.head` at `update.state.len - 1`;
    /// nothing is written then.
    pub fn write_view(&self, id: &ConversationId, update: &ViewUpdate) -> StoreResult<()> {
        let name = &update.state.name;
        let key = view_key(name);
        let mut events = Vec::new();
        for block in &update.blocks {
            events.extend(block.events.iter().map(|e| e.event.clone()));
        }
        // Plain records (an encrypted database's keep every text in the
        // record, as its log's do).
        let layout = if self.is_encrypted() {
            crate::codec::Layout::SealedView
        } else {
            crate::codec::Layout::Plain
        };
        let encoded = encode_all(&events, u64::MAX, layout)?;
        let guard = self.lock_writes();
        let stored = self.get(&keys::view(id, key))?;
        let current: Option<ViewState> = match &stored {
            Some(bytes) => Some(decode(bytes, "view state")?),
            None => None,
        };
        match &current {
            Some(other) if other.name != *name => {
                return Err(StoreError::ViewKeyCollision {
                    name: name.clone(),
                    other: other.name.clone(),
                });
            }
            Some(_) => {}
            None => crate::store::validate_view_name(name)?,
        }
        if current.as_ref().map(|c| c.len) != update.expected_len {
            return Err(StoreError::HeadMismatch {
                expected: update.state.head,
                actual: current.map_or(Address::ROOT, |c| c.head),
            });
        }
        let mut events_now = current.map_or(0, |c| c.events);
        let len = self.meta(id)?.len;
        let at = match update.state.len.checked_sub(1) {
            Some(last) if last < len => self.record(id, last)?.address,
            Some(_) => {
                return Err(StoreError::NoSuchRecord {
                    seq: update.state.len - 1,
                    len,
                })
            }
            None => Address::ROOT,
        };
        if at != update.state.head {
            return Err(StoreError::HeadMismatch {
                expected: update.state.head,
                actual: at,
            });
        }
        let mut writes = Writes::new(self);
        // Another writer sharing the backend may update the view first.
        writes.require(keys::view(id, key), stored.map(|b| b.to_vec()));
        let batch = &mut writes.batch;
        for &(first, last) in &update.removed {
            let blocks = self.kv.scan(
                Keyspace::Main,
                backend::through(
                    keys::view_block(id, key, first),
                    keys::view_block(id, key, last),
                ),
                false,
            );
            for item in blocks {
                let (k, bytes) = item?;
                let repr: BlockRepr<'_> = decode(&bytes, "view block")?;
                events_now -= (repr.events.len() as u64).min(events_now);
                batch.delete(k.to_vec());
            }
        }
        events_now += events.len() as u64;
        if update.reset_calls {
            for item in self.scan_prefix(keys::view_calls_all(id, key)) {
                batch.delete(item?.0.to_vec());
            }
        }
        for (bucket, entries) in &update.calls {
            let k = keys::view_calls(id, key, *bucket);
            if entries.is_empty() {
                batch.delete(k);
            } else {
                batch.put(k, encode(entries));
            }
        }
        let mut records = encoded.iter();
        for block in &update.blocks {
            let mut repr = BlockRepr {
                last_turn: block.last_turn,
                events: Vec::with_capacity(block.events.len()),
            };
            for e in &block.events {
                let record = records.next().ok_or_else(|| StoreError::Corrupt {
                    what: "view events and their encodings differ in number".to_owned(),
                })?;
                repr.events.push(EventRepr {
                    seq: e.seq,
                    turn: e.turn,
                    summary_of: e.summary_of,
                    record: &record.bytes,
                });
            }
            batch.put(keys::view_block(id, key, block.first_turn), encode(&repr));
        }
        let state = ViewState {
            events: events_now,
            ..update.state.clone()
        };
        batch.put(keys::view(id, key), encode(&state));
        self.commit(&encoded, writes).map_err(|e| match e {
            StoreError::Conflict { .. } => StoreError::HeadMismatch {
                expected: update.state.head,
                actual: Address::ROOT,
            },
            e => e,
        })?;
        drop(guard);
        self.synced_or_counted(update.no_sync)?;
        Ok(())
    }

    /// Deletes view `name` of `id`; `false` if there was none. The log is
    /// untouched.
    pub fn drop_view(&self, id: &ConversationId, name: &str) -> StoreResult<bool> {
        let key = view_key(name);
        let guard = self.lock_writes();
        // Not decoded: a view that does not decode can still be dropped.
        if !self.contains(&keys::view(id, key))? {
            return Ok(false);
        }
        let mut batch = Batch::new();
        for item in self.scan_prefix(keys::view_blocks(id, key)) {
            let (k, _) = item?;
            batch.delete(k.to_vec());
        }
        for item in self.scan_prefix(keys::view_calls_all(id, key)) {
            batch.delete(item?.0.to_vec());
        }
        batch.delete(keys::view(id, key));
        self.kv.apply(batch)?;
        drop(guard);
        self.sync()?;
        Ok(true)
    }
}

fn truncated(id: &ConversationId) -> StoreError {
    StoreError::Corrupt {
        what: format!("conversation {id}: a view block key is truncated"),
    }
}
