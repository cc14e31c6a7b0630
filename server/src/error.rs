//! Structured errors: `{"error": {"code": ..., "message": ...}}`, with the
//! message the command line would print after `error: `.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use convstore_engine::store::StoreError;
use convstore_engine::Error;
use serde_json::{json, Map, Value};

/// An error answer: a status, a stable code, a one-line message and
/// optional fields (a conflict's current head and length).
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable machine-readable code (`not_found`, `conflict`, ...).
    pub code: &'static str,
    /// One line, as the command line says it.
    pub message: String,
    /// More fields of the error object.
    pub extra: Map<String, Value>,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: one_line(&message.into()),
            extra: Map::new(),
        }
    }

    /// A 400 with code `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// With one more field in the error object.
    #[must_use]
    pub fn with(mut self, key: &str, value: Value) -> ApiError {
        self.extra.insert(key.to_owned(), value);
        self
    }

    /// The same error, its message after `context: ` (as the command line
    /// prefixes a flag's name).
    #[must_use]
    pub fn context(mut self, context: &str) -> ApiError {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".to_owned(), json!(self.code));
        error.insert("message".to_owned(), json!(self.message));
        for (k, v) in &self.extra {
            error.insert(k.clone(), v.clone());
        }
        json!({ "error": error })
    }
}

fn one_line(message: &str) -> String {
    message.replace(['\n', '\r'], " ")
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        let message = error.to_string();
        let (status, code) = match &error {
            Error::Store(store) => return store_error(store, message),
            Error::UnsupportedLocation { .. } | Error::Invalid(_) | Error::Input { .. } => {
                (StatusCode::BAD_REQUEST, "bad_request")
            }
            Error::Config(_) => (StatusCode::BAD_REQUEST, "bad_config"),
            Error::ConfigFile { .. } | Error::ConfigIn { .. } => {
                (StatusCode::INTERNAL_SERVER_ERROR, "bad_config")
            }
            Error::Summarizer { .. } | Error::EmptySummary(_) => {
                (StatusCode::BAD_GATEWAY, "summarizer_failed")
            }
            Error::SummarizerSetup { .. } => (StatusCode::BAD_REQUEST, "summarizer_setup"),
            Error::Tokenizer(_) => (StatusCode::BAD_REQUEST, "bad_tokenizer"),
            Error::Bound(_)
            | Error::Range(_)
            | Error::NoTurnInRange { .. }
            | Error::BadTurns { .. }
            | Error::NoSuchTurn { .. }
            | Error::NothingAsOf(_) => (StatusCode::BAD_REQUEST, "bad_range"),
            Error::EmptyConversation(..)
            | Error::NoPolicy
            | Error::InstructionsWithoutSummarizer
            | Error::SummaryProfile(_)
            | Error::ReservedViewName(_)
            | Error::EmptyFork => (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable"),
            Error::Inflated { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "inflated"),
            Error::ViewProfile { .. } => (StatusCode::CONFLICT, "view_profile"),
            Error::ViewBusy(_) | Error::Busy(_) => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            Error::ViewVanished(_) => (StatusCode::CONFLICT, "view_vanished"),
            Error::NoSuchCall(_) => (StatusCode::NOT_FOUND, "no_such_call"),
            Error::NotSummarized { .. } => (StatusCode::NOT_FOUND, "not_summarized"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        ApiError::new(status, code, message)
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        let message = error.to_string();
        store_error(&error, message)
    }
}

fn store_error(error: &StoreError, message: String) -> ApiError {
    let (status, code) = match error {
        StoreError::NoSuchConversation { .. } => (StatusCode::NOT_FOUND, "not_found"),
        StoreError::NoSuchRecord { .. } => (StatusCode::NOT_FOUND, "no_such_record"),
        StoreError::InvalidQuery { .. } | StoreError::InvalidName { .. } => {
            (StatusCode::BAD_REQUEST, "bad_name")
        }
        StoreError::AmbiguousConversation { .. } => (StatusCode::BAD_REQUEST, "ambiguous"),
        StoreError::NameTaken { .. } | StoreError::ViewKeyCollision { .. } => {
            (StatusCode::CONFLICT, "name_taken")
        }
        StoreError::HasForks { .. } => {
            let message = message.replace("--with-forks", "with_forks=true");
            return ApiError::new(StatusCode::CONFLICT, "has_forks", message);
        }
        StoreError::HeadMismatch { actual, .. } => {
            return ApiError::new(StatusCode::CONFLICT, "conflict", message)
                .with("head", json!(actual.hex()))
        }
        StoreError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
        StoreError::EventTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "event_too_large"),
        StoreError::EmptyAppend => (StatusCode::BAD_REQUEST, "empty"),
        StoreError::Destination { .. } | StoreError::OlderFormat { .. } => {
            (StatusCode::CONFLICT, "bad_destination")
        }
        StoreError::NotRedactable { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "not_redactable"),
        StoreError::Corrupt { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "corrupt"),
        // An encrypted database served without its key, or a conversation
        // whose data key was deleted.
        StoreError::Encrypted { .. } => (StatusCode::FORBIDDEN, "encrypted"),
        StoreError::Key { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "key"),
        StoreError::Io(_) | StoreError::Backend(_) | StoreError::OutcomeUnknown { .. } => {
            (StatusCode::INTERNAL_SERVER_ERROR, "storage")
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    };
    ApiError::new(status, code, message)
}

/// Why [`crate::serve`] could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The options cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// The address could not be listened on.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Something else failed (the runtime, the discovery file, the final
    /// flush).
    #[error("{0}")]
    Failed(String),
}
