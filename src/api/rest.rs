//! The REST error contract of spec/api.md: `{"error": {"code", "message"}}`, JSON bodies up to
//! 1 MiB, wrong types → 400, unknown fields ignored.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::model::AppError;

pub const MAX_BODY_BYTES: usize = 1 << 20;

#[derive(Debug)]
pub struct ApiError(pub AppError);

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = json!({ "error": { "code": self.0.code(), "message": self.0.message() } });
        // The id of the request's access-log line (and of any detail logged for it).
        if let Some(id) = crate::server::telemetry::request_id() {
            body["error"]["request_id"] = json!(id);
        }
        if status.is_server_error() {
            body["retryable"] = json!(self.0.retryable());
        }
        (status, axum::Json(body)).into_response()
    }
}

/// `axum::Json` with the error contract above.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // JSON is UTF-8 text: bytes that are not would be skipped unread in a field nobody
        // reads (serde), and the request would write what the client never meant.
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
            .await
            .map_err(|_| {
                ApiError(AppError::PayloadTooLarge(format!(
                    "request body exceeds {MAX_BODY_BYTES} bytes"
                )))
            })?;
        crate::api::front_door::text_body(&bytes, false).map_err(ApiError)?;
        let req = Request::from_parts(parts, axum::body::Body::from(bytes));
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(ApiError(rejection_to_error(rejection))),
        }
    }
}

fn rejection_to_error(rejection: JsonRejection) -> AppError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        AppError::PayloadTooLarge(format!("request body exceeds {MAX_BODY_BYTES} bytes"))
    } else {
        AppError::BadRequest(rejection.body_text())
    }
}

pub async fn not_found() -> ApiError {
    ApiError(AppError::NotFound("no such endpoint".into()))
}

/// Every 4xx/5xx of `/api/v1` carries the JSON error body, including answers no handler wrote
/// (a malformed query string, 405, 413 from the body limit): their text becomes the message.
pub async fn json_errors(req: Request, next: axum::middleware::Next) -> Response {
    let api = req.uri().path().starts_with("/api/v1/");
    let response = next.run(req).await;
    if !api {
        return response;
    }
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_lowercase()
    } else {
        text
    };
    let error = match status.as_u16() {
        400 | 422 => AppError::BadRequest(message),
        401 => AppError::Unauthorized(message),
        403 => AppError::Forbidden(message),
        404 => AppError::NotFound(message),
        405 => AppError::MethodNotAllowed(message),
        409 => AppError::Conflict(message),
        413 => AppError::PayloadTooLarge(message),
        415 => AppError::UnsupportedMediaType(message),
        429 => AppError::TooManyRequests(message),
        503 => AppError::Unavailable(message),
        _ => AppError::Internal(message),
    };
    let mut mapped = ApiError(error).into_response();
    *mapped.status_mut() = status;
    for (name, value) in parts.headers.iter() {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            mapped.headers_mut().insert(name.clone(), value.clone());
        }
    }
    mapped
}
