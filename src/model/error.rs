use leptos::server_fn::codec::JsonEncoding;
use leptos::server_fn::error::{FromServerFnError, ServerFnErrorErr};
use serde::{Deserialize, Serialize};

/// The one error type that crosses the wire (REST bodies and server functions). A conflict is
/// not an internal error: the UI closes a question on 409 but offers a retry on 500 (N5, L18).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "code", content = "message", rename_all = "snake_case")]
pub enum AppError {
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("method not allowed: {0}")]
    MethodNotAllowed(String),
    #[error("conflict: {0}")]
    Conflict(String),
    /// E4: well-formed, but a value breaks its question's form (422).
    #[error("unprocessable: {0}")]
    Unprocessable(String),
    #[error("payload too large: {0}")]
    PayloadTooLarge(String),
    #[error("unsupported media type: {0}")]
    UnsupportedMediaType(String),
    #[error("too many requests: {0}")]
    TooManyRequests(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// L18: failed before anything was accepted; nothing changed, the same request may be
    /// sent again (500 with `retryable: true`).
    #[error("internal error, can be retried: {0}")]
    Retryable(String),
}

impl AppError {
    /// The `error.code` of the REST error body.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::BadRequest(_) => "bad_request",
            AppError::Unauthorized(_) => "unauthorized",
            AppError::Forbidden(_) => "forbidden",
            AppError::NotFound(_) => "not_found",
            AppError::MethodNotAllowed(_) => "method_not_allowed",
            AppError::Conflict(_) => "conflict",
            AppError::Unprocessable(_) => "unprocessable",
            AppError::PayloadTooLarge(_) => "payload_too_large",
            AppError::UnsupportedMediaType(_) => "unsupported_media_type",
            AppError::TooManyRequests(_) => "too_many_requests",
            AppError::Unavailable(_) => "unavailable",
            AppError::Internal(_) | AppError::Retryable(_) => "internal",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            AppError::BadRequest(m)
            | AppError::Unauthorized(m)
            | AppError::Forbidden(m)
            | AppError::UnsupportedMediaType(m)
            | AppError::TooManyRequests(m)
            | AppError::Unavailable(m)
            | AppError::NotFound(m)
            | AppError::MethodNotAllowed(m)
            | AppError::Conflict(m)
            | AppError::Unprocessable(m)
            | AppError::PayloadTooLarge(m)
            | AppError::Internal(m)
            | AppError::Retryable(m) => m,
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            AppError::BadRequest(_) => 400,
            AppError::Unauthorized(_) => 401,
            AppError::Forbidden(_) => 403,
            AppError::NotFound(_) => 404,
            AppError::MethodNotAllowed(_) => 405,
            AppError::Conflict(_) => 409,
            AppError::Unprocessable(_) => 422,
            AppError::PayloadTooLarge(_) => 413,
            AppError::UnsupportedMediaType(_) => 415,
            AppError::TooManyRequests(_) => 429,
            AppError::Unavailable(_) => 503,
            AppError::Internal(_) | AppError::Retryable(_) => 500,
        }
    }

    /// Whether sending the same request again can succeed (L18): only for failures that
    /// changed nothing.
    pub fn retryable(&self) -> bool {
        matches!(self, AppError::Retryable(_) | AppError::Unavailable(_))
    }
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        match value {
            // On the server these are a call's arguments that did not decode: the caller's
            // error (400), said in our words, not an internal one.
            #[cfg(feature = "ssr")]
            ServerFnErrorErr::Args(m) | ServerFnErrorErr::Deserialization(m) => {
                AppError::BadRequest(format!("invalid arguments: {m}"))
            }
            #[cfg(feature = "ssr")]
            ServerFnErrorErr::MissingArg(name) => {
                AppError::BadRequest(format!("invalid arguments: `{name}` is missing"))
            }
            other => AppError::Internal(other.to_string()),
        }
    }
}
