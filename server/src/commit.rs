//! Group commit: concurrent writes share one durable flush.
//!
//! Two threads make writes durable, one applying and one flushing, so
//! that the next writes are applied while the last ones are flushed. A
//! small append is handed to the commit thread whole
//! ([`Committer::append`]): it stores it together with the other appends
//! waiting, in one write of the store ([`Store::append_group`]: a sled
//! batch costs two writes of its log whatever its size). A large write is
//! applied without a sync on the blocking pool, then asks
//! [`Committer::durable`]. The commit thread takes every request waiting,
//! stores the appends among them and hands the round to the flush thread.
//! That thread takes every round handed over, makes the database durable
//! with one `Store::flush` (the backend's sync: for sled, its flush, the
//! fsync of new blob files, an `fdatasync` of its log file), and answers
//! them all. Rounds handed over while a flush runs wait for the next one,
//! which starts as soon as the current one ends: a writer waits for at
//! most two flushes, and under load each flush serves many writers.
//!
//! Appends to one conversation in one round are stored in waves: each
//! wave holds at most one append of a conversation, planned (its length
//! checked against `expected_seq`, its idempotency key looked up) after
//! the wave before it was stored, in the order they arrived.
//!
//! Why it is correct: a request's write was applied before it was queued,
//! or by the commit thread before it handed the round over; a flush
//! starts after it took its rounds, so every write of those rounds was
//! applied before the flush started, and the flush makes durable every
//! write applied before it starts.
//!
//! [`Store::append_group`]: convstore_engine::store::Store::append_group

use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use convstore_engine::store::GroupAppend;
use convstore_engine::Engine;
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::routes::{AppendRequest, Appended, Prepared};

type Waiter = oneshot::Sender<Result<(), String>>;

/// Where an append's answer goes, once its round is flushed: what was
/// stored, or why nothing was.
type Answer = oneshot::Sender<Result<Appended, ApiError>>;

/// What the commit thread is asked: to wait for a flush, or to store an
/// append and then wait for the flush.
enum Request {
    Flush(Waiter),
    Append(Queued),
}

/// An append waiting for the commit thread, and whom to tell what was
/// stored once it is durable.
struct Queued {
    request: AppendRequest,
    answer: Answer,
}

/// The answers of a round's appends, sent once the round is flushed.
type Answers = Vec<(Answer, Result<Appended, ApiError>)>;

/// What the commit thread applied in one round, handed to the flush
/// thread: whom to answer once it is durable.
#[derive(Default)]
struct Round {
    waiters: Vec<Waiter>,
    answers: Answers,
}

impl Round {
    fn len(&self) -> usize {
        self.waiters.len() + self.answers.len()
    }

    /// Answers everyone, with the flush's `result`.
    fn answer(self, result: &Result<(), String>) {
        for waiter in self.waiters {
            let _ = waiter.send(result.clone());
        }
        for (answer, stored) in self.answers {
            let _ = answer.send(match (result, stored) {
                (Ok(()), stored) => stored,
                (Err(_), Err(refused)) => Err(refused),
                (Err(message), Ok(_)) => Err(not_durable(message)),
            });
        }
    }
}

/// The group committer: a thread and the queue of writers waiting for it.
pub struct Committer {
    queue: mpsc::Sender<Request>,
}

/// The commit thread; it ends once every [`Committer`] is dropped.
pub type CommitThread = std::thread::JoinHandle<()>;

impl Committer {
    /// Starts the commit thread of `engine`'s store.
    pub fn start(
        engine: Arc<Engine>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<(Committer, CommitThread)> {
        let (queue, waiting) = mpsc::channel::<Request>();
        let (to_flush, flushing) = mpsc::channel::<Round>();
        let flusher_engine = Arc::clone(&engine);
        let flusher = std::thread::Builder::new()
            .name("convstore-flush".to_owned())
            .spawn(move || {
                while let Ok(first) = flushing.recv() {
                    let rounds: Vec<Round> =
                        std::iter::once(first).chain(flushing.try_iter()).collect();
                    let started = Instant::now();
                    let result = flusher_engine.store().flush().map_err(|e| e.to_string());
                    let size = rounds.iter().map(Round::len).sum();
                    metrics.flush(size, started.elapsed());
                    for round in rounds {
                        round.answer(&result);
                    }
                }
            })?;
        let thread = std::thread::Builder::new()
            .name("convstore-commit".to_owned())
            .spawn(move || {
                while let Ok(first) = waiting.recv() {
                    let mut round = Round::default();
                    let mut appends = Vec::new();
                    for request in std::iter::once(first).chain(waiting.try_iter()) {
                        match request {
                            Request::Flush(waiter) => round.waiters.push(waiter),
                            Request::Append(queued) => appends.push(queued),
                        }
                    }
                    // A panic drops the senders of the appends not yet
                    // answered (they are answered with an error) and
                    // leaves the thread running.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        store_appends(&engine, appends, &mut round.answers);
                    }));
                    if to_flush.send(round).is_err() {
                        break;
                    }
                }
                // Every round handed over is flushed and answered before
                // the thread ends.
                drop(to_flush);
                let _ = flusher.join();
            })?;
        Ok((Committer { queue }, thread))
    }

    /// Returns once every write this task applied before the call is
    /// durable.
    pub async fn durable(&self) -> Result<(), ApiError> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .send(Request::Flush(tx))
            .map_err(|_| Self::stopped())?;
        Self::answer(rx).await
    }

    /// Stores `request` on the commit thread with the other appends of
    /// its round, then returns what was stored once it is durable. For
    /// small appends: the thread plans them one after the other.
    pub(crate) async fn append(&self, request: AppendRequest) -> Result<Appended, ApiError> {
        let (answer, answered) = oneshot::channel();
        self.queue
            .send(Request::Append(Queued { request, answer }))
            .map_err(|_| Self::stopped())?;
        answered.await.map_err(|_| Self::stopped())?
    }

    fn stopped() -> ApiError {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down",
        )
    }

    async fn answer(rx: oneshot::Receiver<Result<(), String>>) -> Result<(), ApiError> {
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(not_durable(&message)),
            Err(_) => Err(Self::stopped()),
        }
    }
}

/// Stores the appends of a round, in waves (module docs): each wave's
/// appends are planned, then stored in one write of the store; a
/// conversation's second append waits for the next wave.
fn store_appends(engine: &Engine, mut waiting: Vec<Queued>, answers: &mut Answers) {
    while !waiting.is_empty() {
        let mut named = HashSet::new();
        let (wave, later): (Vec<Queued>, Vec<Queued>) = waiting
            .into_iter()
            .partition(|q| named.insert(q.request.conv().to_owned()));
        waiting = later;
        let mut planned = Vec::with_capacity(wave.len());
        let mut ids = HashSet::new();
        for queued in wave {
            match queued.request.prepare(engine) {
                Prepared::Done(answer) => answers.push((queued.answer, answer)),
                Prepared::Append(plan) if ids.insert(plan.id) => planned.push((queued, plan)),
                // The same conversation under another name (its id).
                Prepared::Append(_) => waiting.push(queued),
            }
        }
        let items: Vec<GroupAppend<'_>> = planned
            .iter()
            .map(|(queued, plan)| GroupAppend {
                id: &plan.id,
                events: queued.request.events(),
                options: plan.options,
            })
            .collect();
        let stored = engine.store().append_group(&items);
        drop(items);
        for ((queued, plan), stored) in planned.into_iter().zip(stored) {
            answers.push((queued.answer, queued.request.finish(engine, plan, stored)));
        }
    }
}

/// The answer to a write applied whose flush failed.
fn not_durable(message: &str) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "storage",
        format!("{message} (the write was applied but could not be made durable)"),
    )
}
