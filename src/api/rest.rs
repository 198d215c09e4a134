//! The REST error contract of spec/api.md: `{"error": {"code", "message"}}`, JSON bodies up to
//! 1 MiB, wrong types → 400, unknown fields ignored.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::model::AppError;
use crate::server::repo::RepoError;

pub const MAX_BODY_BYTES: usize = 1 << 20;

#[derive(Debug)]
pub struct ApiError(pub AppError);

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        ApiError(e)
    }
}

impl From<RepoError> for ApiError {
    fn from(e: RepoError) -> Self {
        ApiError(e.into())
    }
}

impl From<RepoError> for AppError {
    fn from(e: RepoError) -> Self {
        match e {
            RepoError::Invalid(m) => AppError::BadRequest(m),
            RepoError::NotFound(m) => AppError::NotFound(m),
            other => {
                tracing::error!(error = %other, "repository failure");
                AppError::Internal(other.to_string())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = json!({ "error": { "code": self.0.code(), "message": self.0.message() } });
        (status, axum::Json(body)).into_response()
    }
}

/// `axum::Json` with the error contract above.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
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
