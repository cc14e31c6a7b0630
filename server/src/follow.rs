//! Live follow: a conversation's raw log, or one of its views, as
//! Server-Sent Events.
//!
//! An acknowledged write tells the [`Notifier`] the conversation's new
//! length (every record below it durable). Each follower has a task that
//! reads the log from its own cursor, in batches of at most
//! [`BATCH_BYTES`], and sends them through a small channel to its
//! connection: a follower that does not read stops its task (the channel
//! is full), which then reads on from where it was, so nothing is ever
//! skipped. When a follower is more than `--follow-behind` records behind
//! the log, it gets an `event: behind` saying how far; it catches up at
//! its own pace.
//!
//! Raw log events: `id: SEQ`, `event: record`, `data:` the record as
//! `convstore log` prints it. A reconnecting client sends `Last-Event-ID`
//! and resumes after it.
//!
//! View events: `id: SEQ` (the last record the view reflects), `event:
//! view`, `data: {"from_turn": F, "events": [...]}`: from turn F on, the
//! view is now these events (the events before turn F are unchanged since
//! the previous event). The first event of a stream has `from_turn` 0: the
//! whole view. The server compares the view's stored blocks with what it
//! sent last, so a change in the middle of the view (a compaction) sends
//! the view from the first block that changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use convstore_engine::format::write_view_event;
use convstore_engine::store::json::write_log_record;
use convstore_engine::store::ConversationId;
use convstore_engine::Engine;
use tokio::sync::{mpsc, watch};

use crate::error::ApiError;
use crate::state::Shared;

/// The most bytes of events read into one message of a follow stream.
pub const BATCH_BYTES: usize = 256 * 1024;

/// Messages a follow stream buffers ahead of its connection.
pub const CHANNEL_MESSAGES: usize = 4;

/// How often an idle follow stream sends a comment (so that a dead
/// connection is noticed).
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// Tells followers of a conversation how long its durable log is.
#[derive(Default)]
pub struct Notifier {
    channels: Mutex<HashMap<ConversationId, watch::Sender<u64>>>,
}

impl Notifier {
    /// Conversation `id` has `len` records, all durable.
    pub fn notify(&self, id: &ConversationId, len: u64) {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = channels.get(id) {
            if tx.receiver_count() == 0 {
                channels.remove(id);
                return;
            }
            tx.send_if_modified(|known| {
                let newer = len > *known;
                if newer {
                    *known = len;
                }
                newer
            });
        }
    }

    /// Conversation `id` was deleted: its followers are told so, and
    /// their streams end.
    pub fn forget(&self, id: &ConversationId) {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        channels.remove(id);
    }

    /// The conversations someone follows.
    pub fn followed(&self) -> Vec<ConversationId> {
        let channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        channels
            .iter()
            .filter(|(_, tx)| tx.receiver_count() > 0)
            .map(|(id, _)| *id)
            .collect()
    }

    /// A receiver of `id`'s durable length, starting at `len` or later.
    pub fn subscribe(&self, id: &ConversationId, len: u64) -> watch::Receiver<u64> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = channels.entry(*id).or_insert_with(|| watch::channel(len).0);
        tx.send_if_modified(|known| {
            let newer = len > *known;
            if newer {
                *known = len;
            }
            newer
        });
        tx.subscribe()
    }
}

/// After a storage error (the database unreachable for now): says so in
/// a comment and waits a moment; false if the follower or the server is
/// gone meanwhile.
async fn retry_later(tx: &mpsc::Sender<Bytes>, shutdown: &mut watch::Receiver<bool>) -> bool {
    if tx
        .send(Bytes::from_static(
            b": the database cannot be read now; retrying\n\n",
        ))
        .await
        .is_err()
    {
        return false;
    }
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(1)) => true,
        () = tx.closed() => false,
        _ = shutdown.changed() => false,
    }
}

/// Reads records `from..end` of `id` as SSE events, stopping after about
/// [`BATCH_BYTES`]; returns them and the seq after the last one.
fn read_batch(
    engine: &Engine,
    id: &ConversationId,
    from: u64,
    end: u64,
) -> Result<(Vec<u8>, u64), ApiError> {
    let mut out = Vec::with_capacity(8192);
    let mut next = from;
    for record in engine.store().scan(id, from..end)? {
        let record = record?;
        out.extend_from_slice(format!("id: {}\nevent: record\ndata: ", record.seq).as_bytes());
        write_log_record(&record, &mut out);
        out.extend_from_slice(b"\n\n");
        next = record.seq + 1;
        if out.len() >= BATCH_BYTES {
            break;
        }
    }
    Ok((out, next))
}

/// An SSE event with this name and one-line data.
/// Ends a follow stream of conversation `id`, deleted meanwhile, with an
/// `error` event saying so.
async fn deleted(tx: &mpsc::Sender<Bytes>, id: &ConversationId) {
    let error = crate::error::ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "not_found",
        format!("conversation {id} was deleted"),
    );
    let _ = tx.send(sse("error", &error.body().to_string())).await;
}

fn sse(event: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// What a follow stream sends until its connection ends or the server
/// shuts down.
pub(crate) async fn raw(
    state: Shared,
    id: ConversationId,
    from: u64,
    len: u64,
    tx: mpsc::Sender<Bytes>,
) {
    let mut lengths = state.notifier.subscribe(&id, len);
    let mut shutdown = state.shutdown.clone();
    let behind_limit = state.limits.follow_behind;
    let mut cursor = from;
    let mut told_behind = false;
    let _open = Gauge::new(&state);
    loop {
        let mut len = *lengths.borrow_and_update();
        while cursor < len {
            let at = cursor;
            let read = state
                .blocking(move |engine| read_batch(engine, &id, at, len))
                .await;
            let (bytes, next) = match read {
                Ok(read) => read,
                Err(error) if error.code == "storage" => {
                    // The database is unreachable for now: a follower
                    // waits for it, late but never skipped.
                    if !retry_later(&tx, &mut shutdown).await {
                        return;
                    }
                    continue;
                }
                Err(error) => {
                    let _ = tx.send(sse("error", &error.body().to_string())).await;
                    return;
                }
            };
            if next == at {
                break;
            }
            tokio::select! {
                sent = tx.send(Bytes::from(bytes)) => if sent.is_err() { return },
                _ = shutdown.changed() => return,
            }
            cursor = next;
            len = len.max(*lengths.borrow());
            let behind = len - cursor;
            if behind > behind_limit && !told_behind {
                told_behind = true;
                state
                    .metrics
                    .followers_behind
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let data = serde_json::json!({
                    "next_seq": cursor,
                    "events": len,
                    "behind": behind,
                    "message": format!("this follower is {behind} records behind the log; it gets every one of them, in order"),
                });
                if tx.send(sse("behind", &data.to_string())).await.is_err() {
                    return;
                }
            } else if behind == 0 {
                told_behind = false;
            }
        }
        tokio::select! {
            changed = lengths.changed() => if changed.is_err() { return deleted(&tx, &id).await },
            () = tx.closed() => return,
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(KEEPALIVE) => {
                if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A view's blocks as a follower last got them: `(first turn, digest)`.
type Sent = Vec<(u64, blake3::Hash)>;

/// The view `name` refreshed, compared with `sent`: the SSE event to send
/// (if anything changed) and the new digests.
fn view_change(
    engine: &Engine,
    id: &ConversationId,
    name: &str,
    profile: Option<&str>,
    sent: &Sent,
    first: bool,
) -> Result<(Option<Vec<u8>>, Sent), ApiError> {
    let (state, _) = engine.refresh_view(id, name, profile)?;
    let mut digests = Sent::new();
    let mut events: Vec<u8> = Vec::new();
    let mut from_turn: Option<u64> = None;
    let mut line = Vec::new();
    for (i, block) in engine.store().view_blocks(id, name, 0)?.enumerate() {
        let block = block?;
        let mut hasher = blake3::Hasher::new();
        let mut bytes = Vec::new();
        for e in block.events {
            line.clear();
            write_view_event(&e, &mut line);
            hasher.update(&line);
            hasher.update(b"\n");
            if !bytes.is_empty() {
                bytes.push(b',');
            }
            bytes.extend_from_slice(&line);
        }
        let digest = hasher.finalize();
        let same = sent.get(i) == Some(&(block.first_turn, digest));
        if from_turn.is_none() && !same {
            from_turn = Some(block.first_turn);
        }
        if from_turn.is_some() && !bytes.is_empty() {
            if !events.is_empty() {
                events.push(b',');
            }
            events.extend_from_slice(&bytes);
        }
        digests.push((block.first_turn, digest));
    }
    if from_turn.is_none() && digests.len() < sent.len() {
        // The view lost its last blocks.
        from_turn = Some(sent[digests.len()].0);
    }
    let from_turn = if first { Some(0) } else { from_turn };
    let Some(from_turn) = from_turn else {
        return Ok((None, digests));
    };
    let mut out = Vec::with_capacity(events.len() + 128);
    out.extend_from_slice(
        format!(
            "id: {}\nevent: view\ndata: {{\"from_turn\":{from_turn},\"events\":[",
            state.len.saturating_sub(1)
        )
        .as_bytes(),
    );
    out.extend_from_slice(&events);
    out.extend_from_slice(b"]}\n\n");
    Ok((Some(out), digests))
}

/// What a view follow stream sends.
pub(crate) async fn view(
    state: Shared,
    id: ConversationId,
    name: String,
    profile: Option<String>,
    len: u64,
    tx: mpsc::Sender<Bytes>,
) {
    let mut lengths = state.notifier.subscribe(&id, len);
    let mut shutdown = state.shutdown.clone();
    let mut sent = Sent::new();
    let mut first = true;
    let _open = Gauge::new(&state);
    loop {
        lengths.borrow_and_update();
        let (name2, profile2, old) = (name.clone(), profile.clone(), std::mem::take(&mut sent));
        let change = state
            .blocking(move |engine| {
                view_change(engine, &id, &name2, profile2.as_deref(), &old, first)
            })
            .await;
        match change {
            Ok((message, digests)) => {
                sent = digests;
                first = false;
                if let Some(message) = message {
                    tokio::select! {
                        s = tx.send(Bytes::from(message)) => if s.is_err() { return },
                        _ = shutdown.changed() => return,
                    }
                }
            }
            Err(error) if error.code == "storage" => {
                // Unreachable for now: the next change is the whole view.
                first = true;
                if !retry_later(&tx, &mut shutdown).await {
                    return;
                }
                continue;
            }
            Err(error) => {
                let _ = tx.send(sse("error", &error.body().to_string())).await;
                return;
            }
        }
        tokio::select! {
            changed = lengths.changed() => if changed.is_err() { return deleted(&tx, &id).await },
            () = tx.closed() => return,
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(KEEPALIVE) => {
                if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Counts an open follow stream while it lives.
struct Gauge(Arc<crate::metrics::Metrics>);

impl Gauge {
    fn new(state: &Shared) -> Gauge {
        state
            .metrics
            .followers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Gauge(Arc::clone(&state.metrics))
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        self.0
            .followers
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
