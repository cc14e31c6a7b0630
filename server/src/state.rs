//! What every request shares.

use std::sync::Arc;

use convstore_engine::store::ConversationId;
use convstore_engine::Engine;
use tokio::sync::{watch, Semaphore};

use crate::auth::Tokens;
use crate::commit::Committer;
use crate::error::ApiError;
use crate::follow::Notifier;
use crate::http::Limits;
use crate::idempotency::Idempotency;
use crate::metrics::Metrics;

/// The server's shared state.
pub(crate) struct AppState {
    pub engine: Arc<Engine>,
    pub committer: Committer,
    pub metrics: Arc<Metrics>,
    pub notifier: Notifier,
    pub idempotency: Idempotency,
    pub limits: Limits,
    pub tokens: Option<Tokens>,
    /// This run's discovery instance (answered by `/healthz`).
    pub instance: String,
    /// Turns true when the server shuts down: follow streams end.
    pub shutdown: watch::Receiver<bool>,
    /// Writes in progress hold a permit; shutdown takes them all.
    pub writes: Arc<Semaphore>,
    /// Requests being handled hold a permit (`--max-in-flight`).
    pub in_flight: Arc<Semaphore>,
    /// Conversations written, for the thread that brings the search index
    /// up to date.
    pub written: Arc<crate::http::Written>,
    /// Whether the MCP endpoint's tools may write.
    pub mcp_allow_write: bool,
}

pub(crate) type Shared = Arc<AppState>;

/// The permits of [`AppState::writes`].
pub(crate) const WRITE_PERMITS: u32 = 1 << 20;

impl AppState {
    /// Runs `work` on the blocking pool with the engine.
    pub async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Engine) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let engine = Arc::clone(&self.engine);
        tokio::task::spawn_blocking(move || work(&engine))
            .await
            .map_err(|e| {
                ApiError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("a worker failed: {e}"),
                )
            })?
    }

    /// Tells followers of `id` and the engine's subscribers (MCP
    /// sessions) that it has `len` records, all durable, and has the
    /// search index catch up with it.
    pub fn notify(&self, id: &ConversationId, len: u64) {
        self.notifier.notify(id, len);
        self.engine.tell_listeners(id);
        self.written.add(*id);
    }
}

impl Drop for AppState {
    fn drop(&mut self) {
        self.written.close();
    }
}
