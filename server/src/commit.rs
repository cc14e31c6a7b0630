//! Group commit: concurrent writes share one durable flush.
//!
//! One thread makes writes durable. A small write is handed to it whole
//! ([`Committer::apply`]): the thread applies it without a sync
//! (`AppendOptions::no_sync`) just before its next flush. A large write is
//! applied without a sync on the blocking pool, then asks
//! [`Committer::durable`]. The thread takes every request waiting, applies
//! the writes among them one after the other, makes the database durable
//! with one `Store::flush` (the backend's sync: for sled, its flush, the
//! fsync of new blob files, an `fdatasync` of its log file), and answers
//! them all. Requests that arrive while a flush runs wait for the next
//! one, which starts as soon as the current one ends: a writer waits for
//! at most two flushes, and under load each flush serves many writers.
//!
//! Why it is correct: a request's write was applied before it was queued,
//! or by the thread before the round's flush; a round flushes after it
//! took its requests from the queue, so every write of a round is applied
//! before the round's flush starts.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use convstore_engine::Engine;
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::metrics::Metrics;

type Waiter = oneshot::Sender<Result<(), String>>;

/// A write the commit thread applies itself before its flush (see
/// [`Committer::apply`]); it reports its own result.
type Job = Box<dyn FnOnce(&Engine) + Send>;

/// What the commit thread is asked: to wait for a flush, or to apply a
/// write and then wait for the flush.
enum Request {
    Flush(Waiter),
    Apply(Job, Waiter),
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
        let thread = std::thread::Builder::new()
            .name("convstore-commit".to_owned())
            .spawn(move || {
                while let Ok(first) = waiting.recv() {
                    let mut group = Vec::new();
                    for request in std::iter::once(first).chain(waiting.try_iter()) {
                        match request {
                            Request::Flush(waiter) => group.push(waiter),
                            Request::Apply(job, waiter) => {
                                // A panicking write drops its result
                                // sender (its request is answered with an
                                // error) and leaves the thread running.
                                let _ =
                                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                        job(&engine);
                                    }));
                                group.push(waiter);
                            }
                        }
                    }
                    let started = Instant::now();
                    let result = engine.store().flush().map_err(|e| e.to_string());
                    metrics.flush(group.len(), started.elapsed());
                    for waiter in group {
                        let _ = waiter.send(result.clone());
                    }
                }
            })?;
        Ok((Committer { queue }, thread))
    }

    /// Returns once every write this task applied before the call is
    /// durable.
    pub async fn durable(&self) -> Result<(), ApiError> {
        let (tx, rx) = oneshot::channel();
        let stopped = || {
            ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "the server is shutting down",
            )
        };
        self.queue.send(Request::Flush(tx)).map_err(|_| stopped())?;
        Self::answer(rx).await
    }

    /// Applies `write` on the commit thread, then returns its result once
    /// it is durable: the writes queued together are applied one after
    /// the other and share the flush that follows them (one thread hop
    /// where a blocking-pool apply and a flush request make two). For
    /// small writes only: the thread applies one write at a time.
    pub async fn apply<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Engine) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let (result_tx, result_rx) = oneshot::channel();
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |engine| {
            let _ = result_tx.send(write(engine));
        });
        self.queue
            .send(Request::Apply(job, tx))
            .map_err(|_| Self::stopped())?;
        let result = result_rx.await.map_err(|_| Self::stopped())?;
        let value = result?;
        Self::answer(rx).await?;
        Ok(value)
    }

    fn stopped() -> ApiError {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down",
        )
    }

    async fn answer(rx: oneshot::Receiver<Result<(), String>>) -> Result<(), ApiError> {
        let stopped = Self::stopped;
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "storage",
                format!("{message} (the write was applied but could not be made durable)"),
            )),
            Err(_) => Err(stopped()),
        }
    }
}
