//! The HTTP side: the router, its layers (tokens, limits, timeouts,
//! compression, metrics, structured errors), the accept loop and graceful
//! shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use convstore_engine::store::ConversationId;
use convstore_engine::Engine;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower_http::compression::CompressionLayer;

use crate::auth::{Scope, Tokens};
use crate::commands;
use crate::commit::Committer;
use crate::discovery::{self, Discovery};
use crate::error::{ApiError, ServeError};
use crate::follow::Notifier;
use crate::idempotency::Idempotency;
use crate::inspector;
use crate::metrics::Metrics;
use crate::routes;
use crate::state::{AppState, Shared, WRITE_PERMITS};

/// What the server accepts, and for how long it waits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest request body (an append's events).
    pub max_body_bytes: usize,
    /// The largest event of an append.
    pub max_event_bytes: u64,
    /// Open connections at most; more are answered 503 and closed.
    pub max_connections: usize,
    /// Requests handled at once at most (to their headers: a stream's body
    /// does not count); more are answered 503.
    pub max_in_flight: usize,
    /// How long a read may take to its answer's headers (408 after it).
    /// Writes are not cut short once they begin: a write that fails stores
    /// nothing, so it is never timed out half done.
    pub request_timeout: Duration,
    /// How long a request body may take to arrive (408 after it; nothing
    /// is stored).
    pub body_timeout: Duration,
    /// How long a client may take to send a request's headers.
    pub header_timeout: Duration,
    /// A follower this many records behind the log is told so.
    pub follow_behind: u64,
    /// How long shutdown waits for requests in flight.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 64 * 1024 * 1024,
            max_event_bytes: convstore_engine::store::DEFAULT_MAX_EVENT_BYTES,
            max_connections: 1024,
            max_in_flight: 256,
            request_timeout: Duration::from_secs(120),
            body_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(10),
            follow_behind: 10_000,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen (port 0: any free port).
    pub listen: SocketAddr,
    /// The tokens accepted; none: every request is allowed (loopback only).
    pub tokens: Option<Tokens>,
    /// The limits.
    pub limits: Limits,
    /// The database directory, where the discovery file goes (none: no
    /// discovery file).
    pub database: Option<PathBuf>,
    /// Whether the MCP endpoint (`/mcp`) offers the `append` and `compact`
    /// tools.
    pub mcp_allow_write: bool,
}

/// Serves `engine` until SIGINT or SIGTERM, then shuts down gracefully:
/// stops accepting, lets requests in flight finish (appends are flushed
/// and answered), ends follow streams, flushes, removes the discovery
/// file and returns. `listening` is called once the socket listens, with
/// its address.
pub fn serve(
    engine: Engine,
    options: &ServeOptions,
    listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let bound = bind(options)?;
    serve_bound(engine, bound, options, listening)
}

/// A socket bound for [`serve_bound`]: options checked, the address taken.
#[derive(Debug)]
pub struct Bound(std::net::TcpListener);

/// Checks `options` and binds their address, before anything else: a
/// command can then refuse bad options or a taken port before it opens
/// (or creates) a database.
pub fn bind(options: &ServeOptions) -> Result<Bound, ServeError> {
    if !options.listen.ip().is_loopback() && options.tokens.is_none() {
        return Err(ServeError::Invalid(format!(
            "--listen {}: not a loopback address; listening beyond this machine needs --token-file FILE (clients then send Authorization: Bearer TOKEN)",
            options.listen
        )));
    }
    if options.limits.max_connections == 0 || options.limits.max_in_flight == 0 {
        return Err(ServeError::Invalid(
            "--max-connections and --max-in-flight must be 1 or more".to_owned(),
        ));
    }
    let listener = std::net::TcpListener::bind(options.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|source| ServeError::Listen {
            addr: options.listen,
            source,
        })?;
    Ok(Bound(listener))
}

/// [`serve`] on a socket [`bind`] bound.
pub fn serve_bound(
    engine: Engine,
    bound: Bound,
    options: &ServeOptions,
    listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("convstore-http")
        .build()
        .map_err(|e| ServeError::Failed(format!("cannot start the runtime: {e}")))?;
    let engine = Arc::new(engine);
    let metrics = Arc::new(Metrics::default());
    let (committer, commit_thread) = Committer::start(Arc::clone(&engine), Arc::clone(&metrics))
        .map_err(|e| ServeError::Failed(format!("cannot start the commit thread: {e}")))?;
    let result = runtime.block_on(run(
        Arc::clone(&engine),
        committer,
        metrics,
        bound,
        options,
        listening,
    ));
    // Blocking work left (a stream's writer whose client is gone) is not
    // waited for past a moment.
    runtime.shutdown_timeout(Duration::from_secs(5));
    // The commit thread ends with the last request's state.
    let waited = Instant::now();
    while !commit_thread.is_finished() && waited.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let final_flush = engine
        .store()
        .flush()
        .map_err(|e| ServeError::Failed(format!("the final flush failed: {e}")));
    // The last reference: the store closes as a command's would (its state
    // file written, sled's files released).
    if let Ok(engine) = Arc::try_unwrap(engine) {
        drop(engine);
    }
    result.and(final_flush)
}

async fn run(
    engine: Arc<Engine>,
    committer: Committer,
    metrics: Arc<Metrics>,
    bound: Bound,
    options: &ServeOptions,
    listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let listener = TcpListener::from_std(bound.0).map_err(|source| ServeError::Listen {
        addr: options.listen,
        source,
    })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Listen {
        addr: options.listen,
        source,
    })?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let instance = discovery::new_instance();
    let written = start_indexer(&engine);
    let state: Shared = Arc::new(AppState {
        engine,
        committer,
        metrics: Arc::clone(&metrics),
        notifier: Notifier::default(),
        idempotency: Idempotency::default(),
        limits: options.limits.clone(),
        tokens: options.tokens.clone(),
        instance: instance.clone(),
        shutdown: shutdown_rx,
        writes: Arc::new(Semaphore::new(WRITE_PERMITS as usize)),
        in_flight: Arc::new(Semaphore::new(options.limits.max_in_flight)),
        written,
        mcp_allow_write: options.mcp_allow_write,
    });
    let app = router(Arc::clone(&state));
    hear_other_writers(&state);
    if let Some(db) = &options.database {
        let url = format!("http://{addr}");
        discovery::write(
            db,
            &Discovery {
                url,
                pid: std::process::id(),
                instance: instance.clone(),
                dir: discovery::dir_id(db),
            },
        )
        .map_err(|e| {
            ServeError::Failed(format!(
                "cannot write {}: {e}",
                discovery::path(db).display()
            ))
        })?;
    }
    listening(addr);

    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let connections = Arc::new(Semaphore::new(options.limits.max_connections));
    let mut signals = Signals::new()?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of descriptors, a connection reset before
                    // accept: try again in a moment.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
                    metrics.refused_connections.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(refuse(stream, options.limits.max_connections));
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(options.limits.header_timeout)
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
                let connection = graceful.watch(connection);
                let metrics = Arc::clone(&metrics);
                metrics.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let _ = connection.await;
                    metrics.connections.fetch_sub(1, Ordering::Relaxed);
                    drop(permit);
                });
            }
            () = signals.next() => break,
        }
    }
    // Stop accepting; end follow streams; let requests in flight finish.
    drop(listener);
    let _ = shutdown_tx.send(true);
    let grace = options.limits.shutdown_grace;
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
    // Appends whose clients went away still run to their flush.
    let _ = tokio::time::timeout(grace, state.writes.acquire_many(WRITE_PERMITS)).await;
    if let Some(db) = &options.database {
        discovery::remove(db, &instance);
    }
    Ok(())
}

/// Conversations written since the search index last caught up with
/// them, for the thread that catches it up (`start_indexer`). A write
/// only marks its conversation; the thread is woken by the first mark
/// after a catch-up, not by every write.
#[derive(Default)]
pub(crate) struct Written {
    state: std::sync::Mutex<WrittenState>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
struct WrittenState {
    ids: std::collections::BTreeSet<ConversationId>,
    closed: bool,
}

impl Written {
    /// Conversation `id` was written.
    pub(crate) fn add(&self, id: ConversationId) {
        let mut state = self.lock();
        let first = state.ids.is_empty();
        state.ids.insert(id);
        if first {
            self.wake.notify_one();
        }
    }

    /// No more writes: the thread catches up a last time and ends.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WrittenState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The conversations written, once there are some and `not_before`
    /// has passed (at once when closed); `None` when closed and none are
    /// left.
    fn next(&self, not_before: Instant) -> Option<Vec<ConversationId>> {
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            if state.closed || (!state.ids.is_empty() && now >= not_before) {
                let ids: Vec<_> = std::mem::take(&mut state.ids).into_iter().collect();
                return (!ids.is_empty() || !state.closed).then_some(ids);
            }
            state = if state.ids.is_empty() {
                self.wake
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            } else {
                self.wake
                    .wait_timeout(state, not_before - now)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0
            };
        }
    }
}

/// The thread that brings the search index up to date after writes the
/// server answered ([`Engine::index_written`]; the engine's subscribers
/// are told of each write as it is answered): it catches up with the
/// conversations written since its last catch-up, all in one commit, at
/// most once per [`INDEX_PAUSE`] and never more than a tenth of the time
/// (a commit of the index costs far more than a small append; a search
/// catches the index up itself, so it never misses a write). It ends
/// after a last catch-up once [`Written::close`] is called.
fn start_indexer(engine: &Arc<Engine>) -> Arc<Written> {
    let written = Arc::new(Written::default());
    let (engine, marks) = (Arc::clone(engine), Arc::clone(&written));
    let _ = std::thread::Builder::new()
        .name("convstore-index".to_owned())
        .spawn(move || {
            let mut next = Instant::now();
            while let Some(ids) = marks.next(next) {
                let started = Instant::now();
                engine.index_written(&ids);
                next = Instant::now() + INDEX_PAUSE.max(started.elapsed() * 9);
            }
        });
    written
}

/// The least time between two catch-ups of the search index after writes
/// (see `start_indexer`).
const INDEX_PAUSE: Duration = Duration::from_secs(1);

/// How often followed conversations are read again on a database other
/// processes write to, whatever the hints say.
const RECHECK: Duration = Duration::from_secs(2);

/// On a database other processes (other servers) write to, wakes the
/// followers of what they append: on each hint the backend hears
/// (PostgreSQL's NOTIFY), and every [`RECHECK`] for every followed
/// conversation, since nothing may rely on a hint arriving. Followers
/// read the log itself; a hint only says when.
fn hear_other_writers(state: &Shared) {
    let Some(changes) = state.engine.store().backend().changes() else {
        return;
    };
    let state = Arc::downgrade(state);
    let _ = std::thread::Builder::new()
        .name("convstore-hints".to_owned())
        .spawn(move || loop {
            let change = changes.recv_timeout(RECHECK);
            let Some(state) = state.upgrade() else {
                return;
            };
            if *state.shutdown.borrow() {
                return;
            }
            match change {
                Ok(convstore_engine::store::backend::Change::Appended { id, len }) => {
                    state.notify(&id, len);
                }
                Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    for id in state.notifier.followed() {
                        if let Ok(info) = state.engine.store().info(&id) {
                            state.notify(&id, info.len);
                        }
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            }
        });
}

/// SIGINT and SIGTERM.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals, ServeError> {
        use tokio::signal::unix::{signal, SignalKind};
        let failed = |e: std::io::Error| ServeError::Failed(format!("cannot watch signals: {e}"));
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).map_err(failed)?,
            terminate: signal(SignalKind::terminate()).map_err(failed)?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// Answers a connection over the limit with 503 and closes it.
async fn refuse(stream: tokio::net::TcpStream, limit: usize) {
    use tokio::io::AsyncWriteExt as _;
    let body = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "busy",
        format!("too many connections (--max-connections {limit}); try again"),
    )
    .body()
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = stream;
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        stream.write_all(response.as_bytes()),
    )
    .await;
    let _ = stream.shutdown().await;
}

/// The routes and their layers.
pub(crate) fn router(state: Shared) -> Router {
    let conversation = "/v1/conversations/{conv}";
    let timeout = state.limits.request_timeout;
    let reads = Router::new()
        .route("/v1/conversations", get(routes::list))
        .route(conversation, get(routes::info))
        .route(&format!("{conversation}/events"), get(routes::log))
        .route(&format!("{conversation}/view"), get(routes::project))
        .route(&format!("{conversation}/views"), get(routes::list_views))
        .route(
            &format!("{conversation}/views/{{name}}"),
            get(routes::read_view),
        )
        .route(&format!("{conversation}/explain"), get(routes::explain))
        .route(
            &format!("{conversation}/timeline"),
            get(inspector::timeline),
        )
        .route(&format!("{conversation}/inspect"), get(inspector::inspect))
        .route(&format!("{conversation}/stats"), get(commands::stats))
        .route(&format!("{conversation}/pins"), get(commands::pins))
        .route(
            &format!("{conversation}/recall"),
            get(commands::recall).post(commands::answer_tool_call),
        )
        .route(&format!("{conversation}/export"), get(commands::export))
        .route("/v1/search", get(commands::search))
        .route("/v1/diff", get(commands::diff))
        .route("/v1/verify", get(routes::verify))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ));
    let writes = Router::new()
        .route("/v1/conversations", post(routes::create))
        .route(&format!("{conversation}/events"), post(routes::append))
        .route(&format!("{conversation}/fork"), post(routes::fork))
        .route(conversation, axum::routing::delete(routes::delete))
        .route(&format!("{conversation}/compact"), post(routes::compact))
        .route(&format!("{conversation}/redact"), post(routes::redact))
        .route(
            &format!("{conversation}/pins"),
            post(commands::pin).delete(commands::unpin),
        )
        .route("/v1/import", post(commands::import))
        .route("/v1/reindex", post(commands::reindex))
        .route("/v1/backup", post(commands::backup))
        .route("/v1/gc", post(commands::gc))
        .route(
            &format!("{conversation}/views/{{name}}"),
            axum::routing::delete(routes::drop_view),
        );
    let follows = Router::new()
        .route(&format!("{conversation}/follow"), get(routes::follow_log))
        .route(
            &format!("{conversation}/views/{{name}}/follow"),
            get(routes::follow_view),
        );
    // The MCP server over streamable HTTP: any Host behind tokens (a
    // server beyond loopback has them), loopback names otherwise.
    let mcp = convstore_mcp::http_service(
        Arc::clone(&state.engine),
        state.mcp_allow_write,
        state.tokens.is_some(),
    );
    let mcp = Router::new()
        .route_service("/mcp", mcp)
        .layer(middleware::from_fn(session_ended));
    Router::new()
        .route("/healthz", get(routes::healthz))
        .route("/metrics", get(routes::metrics))
        .route("/v1/openapi.json", get(routes::openapi))
        .route("/", get(inspector::list_page))
        .route("/c/{conv}", get(inspector::conversation_page))
        .route("/assets/inspector.js", get(inspector::script))
        .route("/assets/inspector.css", get(inspector::style))
        .merge(mcp)
        .merge(reads)
        .merge(writes)
        .merge(follows)
        .fallback(routes::not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(
            state.limits.max_body_bytes,
        ))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), admit))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), observe))
        .layer(CompressionLayer::new().compress_when(compressed_answers()))
        .with_state(state)
}

/// An MCP session ended by its client (`DELETE /mcp`) is answered 204 No
/// Content, not 202 Accepted (rmcp's answer), which MCP clients (the
/// official Python SDK among them) take for a failure to end it.
async fn session_ended(request: Request, next: Next) -> Response {
    let delete = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// The answers worth compressing for a client that accepts gzip: a
/// kilobyte or more, or of a length not known in advance (a streamed view
/// or log), except Server-Sent Events (each event must reach the follower
/// at once) and what gRPC and images compress themselves. An append's
/// answer (a hundred bytes or so) goes as it is: deflating it costs the
/// server and the client more than the bytes it saves.
fn compressed_answers() -> impl tower_http::compression::Predicate {
    use tower_http::compression::predicate::{NotForContentType, Predicate as _, SizeAbove};
    SizeAbove::new(1024)
        .and(NotForContentType::GRPC)
        .and(NotForContentType::IMAGES)
        .and(NotForContentType::SSE)
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method (see /v1/openapi.json)",
    )
}

/// Whether `host` (a `Host` header, or an `Origin`'s authority) names
/// this machine: `localhost`, a loopback address, with any port.
fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Requests a browser may have been made to send: a `Host` other than
/// this machine's on a server without tokens (DNS rebinding: a page of
/// another site whose name now points here), and a write whose `Origin`
/// is another site's (a page's form or `fetch`, which browsers send
/// without asking when the body is text). Without tokens nothing else
/// would stop them; with tokens a page has no token to send.
fn cross_site(state: &AppState, request: &Request) -> Option<&'static str> {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if state.tokens.is_none() && !host.is_empty() && !loopback_host(host) {
        return Some("the Host header names another machine; a server without tokens answers only requests for this one (localhost, a loopback address)");
    }
    let writes = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    if let (true, Some(origin)) = (writes, origin) {
        let authority = origin
            .split_once("://")
            .map_or("", |(_, rest)| rest.trim_end_matches('/'));
        if origin == "null" || !authority.eq_ignore_ascii_case(host) {
            return Some(
                "a write from another site's page (its Origin is not this server) is refused",
            );
        }
    }
    None
}

/// Tokens and the in-flight limit: runs before every handler. A request
/// refused here has its body read and discarded first (up to
/// `routes::DRAIN_BYTES`), so that a client sending it reads why.
async fn admit(State(state): State<Shared>, request: Request, next: Next) -> Response {
    match refusal(&state, request) {
        Ok(request) => admitted(&state, request, next).await,
        Err(refused) => {
            let (response, body) = *refused;
            routes::drain(body).await;
            response
        }
    }
}

/// The request, or the answer refusing it and the body to discard.
fn refusal(
    state: &Shared,
    mut request: Request,
) -> std::result::Result<Request, Box<(Response, axum::body::Body)>> {
    let refuse =
        |response: Response, request: Request| Err(Box::new((response, request.into_body())));
    if let Some(why) = cross_site(state, &request) {
        return refuse(
            ApiError::new(StatusCode::FORBIDDEN, "forbidden", why).into_response(),
            request,
        );
    }
    let path = request.uri().path();
    let open = path == "/healthz" || inspector::is_page(path);
    if let (Some(tokens), false) = (&state.tokens, open) {
        let scope = match tokens.presented(request.headers()) {
            Ok(scope) => scope,
            Err(why) => return refuse(unauthorized(why), request),
        };
        // Answering a model's recall tool call is a read sent as a POST;
        // so is every MCP request while its tools cannot write.
        let reads = matches!(*request.method(), Method::GET | Method::HEAD)
            || (request.method() == Method::POST && path.ends_with("/recall"))
            || (path == "/mcp" && !state.mcp_allow_write);
        if scope == Scope::ReadOnly && !reads {
            return refuse(
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", crate::TOKEN_READ_ONLY)
                    .into_response(),
                request,
            );
        }
        // For the reads that would write (creating a stored view).
        request.extensions_mut().insert(scope);
    }
    Ok(request)
}

/// An admitted request, within the in-flight limit.
async fn admitted(state: &Shared, request: Request, next: Next) -> Response {
    let Ok(_permit) = Arc::clone(&state.in_flight).try_acquire_owned() else {
        state
            .metrics
            .refused_requests
            .fetch_add(1, Ordering::Relaxed);
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!(
                "too many requests in flight (--max-in-flight {}); try again",
                state.limits.max_in_flight
            ),
        )
        .into_response();
    };
    state.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
    let response = next.run(request).await;
    state.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    response
}

fn unauthorized(message: &str) -> Response {
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer"),
    );
    response
}

/// Metrics of every request, and structured errors for the answers that
/// layers and extractors make in plain text (a query that does not parse,
/// a timeout).
async fn observe(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    let response = structured(response).await;
    state.metrics.request(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// A message of the web framework's own (a query string or JSON body
/// that does not deserialize) worded as convstore's: lower case, saying
/// where, then what.
fn plain(text: &str) -> String {
    const WORDINGS: [(&str, &str); 3] = [
        ("Failed to deserialize query string: ", "query string: "),
        (
            "Failed to deserialize the JSON body into the target type: ",
            "body: ",
        ),
        ("Failed to parse the request body as JSON: ", "body: "),
    ];
    WORDINGS
        .iter()
        .find_map(|(theirs, ours)| {
            text.strip_prefix(theirs)
                .map(|rest| format!("{ours}{rest}"))
        })
        .unwrap_or_else(|| text.to_owned())
}

/// An error answer that is not JSON, made JSON.
async fn structured(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = match tokio::time::timeout(Duration::from_secs(1), body.collect()).await {
        Ok(Ok(collected)) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        _ => String::new(),
    };
    let code = match status {
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let message = match status {
        StatusCode::REQUEST_TIMEOUT => "the request took too long (--request-timeout)".to_owned(),
        _ if text.trim().is_empty() => status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase(),
        _ => plain(text.trim()),
    };
    let mut response = ApiError::new(status, code, message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE
            && name != header::CONTENT_LENGTH
            && name != header::CONTENT_ENCODING
        {
            response.headers_mut().insert(name.clone(), value.clone());
        }
    }
    response
}
