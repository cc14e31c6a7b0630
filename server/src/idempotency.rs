//! `Idempotency-Key`: a retried append returns the first result instead
//! of storing twice.
//!
//! The server remembers, for each key, a fingerprint of the request (its
//! conversation and body) and the answer of the append that succeeded with
//! it. A request with a known key and the same fingerprint gets that answer
//! again and stores nothing; with another fingerprint it is refused (422).
//! A request that arrives while the first is still being handled waits
//! for it. Failed requests are not remembered (they stored nothing: the
//! retry runs). Keys are kept in memory for the server's lifetime, the
//! newest [`CAPACITY`] of them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;
use convstore_engine::store::ConversationId;
use serde_json::Value;
use tokio::sync::watch;

/// Keys remembered at most (the oldest are forgotten first).
pub const CAPACITY: usize = 100_000;

enum Entry {
    Pending {
        fingerprint: blake3::Hash,
        done: watch::Receiver<()>,
    },
    Done {
        fingerprint: blake3::Hash,
        status: StatusCode,
        body: Value,
    },
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    order: VecDeque<String>,
}

/// The remembered keys.
#[derive(Default, Clone)]
pub(crate) struct Idempotency {
    inner: Arc<Mutex<Inner>>,
}

/// What a key says about a request.
pub(crate) enum Claim {
    /// First of its key: do it, then [`Ticket::finish`].
    New(Ticket),
    /// Done before: answer this.
    Replay(StatusCode, Value),
    /// Being done by another request: wait, then claim again.
    Wait(watch::Receiver<()>),
    /// The key was used for another request.
    Mismatch,
}

/// The right to run the request of a key; dropped without
/// [`Ticket::finish`], the key is free again.
pub(crate) struct Ticket {
    key: String,
    table: Idempotency,
    _done: watch::Sender<()>,
    finished: bool,
}

impl Idempotency {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn claim(&self, key: &str, fingerprint: blake3::Hash) -> Claim {
        let mut inner = self.lock();
        match inner.entries.get(key) {
            Some(Entry::Done {
                fingerprint: f,
                status,
                body,
            }) => {
                if *f == fingerprint {
                    Claim::Replay(*status, body.clone())
                } else {
                    Claim::Mismatch
                }
            }
            Some(Entry::Pending {
                fingerprint: f,
                done,
            }) => {
                if *f == fingerprint {
                    Claim::Wait(done.clone())
                } else {
                    Claim::Mismatch
                }
            }
            None => {
                let (tx, rx) = watch::channel(());
                inner.entries.insert(
                    key.to_owned(),
                    Entry::Pending {
                        fingerprint,
                        done: rx,
                    },
                );
                Claim::New(Ticket {
                    key: key.to_owned(),
                    table: self.clone(),
                    _done: tx,
                    finished: false,
                })
            }
        }
    }
}

impl Idempotency {
    /// Forgets the answers of appends to conversations `ids`: deleted, a
    /// retry must not be told its events are stored.
    pub fn forget_conversations(&self, ids: &[ConversationId]) {
        let ids: Vec<String> = ids.iter().map(ConversationId::hex).collect();
        let mut inner = self.lock();
        inner.entries.retain(|_, entry| match entry {
            Entry::Done { body, .. } => !body["id"]
                .as_str()
                .is_some_and(|id| ids.iter().any(|i| i == id)),
            Entry::Pending { .. } => true,
        });
        let Inner { entries, order } = &mut *inner;
        order.retain(|key| entries.contains_key(key));
    }
}

impl Ticket {
    /// Remembers the answer of the key's request.
    pub fn finish(mut self, status: StatusCode, body: &Value) {
        let mut inner = self.table.lock();
        let fingerprint = match inner.entries.get(&self.key) {
            Some(Entry::Pending { fingerprint, .. }) => *fingerprint,
            _ => return,
        };
        inner.entries.insert(
            self.key.clone(),
            Entry::Done {
                fingerprint,
                status,
                body: body.clone(),
            },
        );
        inner.order.push_back(self.key.clone());
        while inner.order.len() > CAPACITY {
            if let Some(old) = inner.order.pop_front() {
                inner.entries.remove(&old);
            }
        }
        self.finished = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.finished {
            let mut inner = self.table.lock();
            if matches!(inner.entries.get(&self.key), Some(Entry::Pending { .. })) {
                inner.entries.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_refuses_and_frees() {
        let table = Idempotency::default();
        let a = blake3::hash(b"a");
        let Claim::New(ticket) = table.claim("k", a) else {
            panic!("new key")
        };
        assert!(matches!(table.claim("k", a), Claim::Wait(_)));
        assert!(matches!(
            table.claim("k", blake3::hash(b"b")),
            Claim::Mismatch
        ));
        ticket.finish(StatusCode::OK, &serde_json::json!({"x": 1}));
        assert!(matches!(
            table.claim("k", a),
            Claim::Replay(StatusCode::OK, _)
        ));
        // A ticket dropped unfinished frees its key.
        let Claim::New(ticket) = table.claim("j", a) else {
            panic!("new key")
        };
        drop(ticket);
        assert!(matches!(table.claim("j", a), Claim::New(_)));
    }
}
