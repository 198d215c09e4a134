//! Request ids: tower-http stamps every request with `x-request-id`; this middleware makes it
//! visible to the code that turns an internal failure into a response, so a user sees a
//! generic message with the id and the log holds the detail under the same id.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request being served on this task, if any.
pub fn request_id() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Runs the rest of the request with its `x-request-id` in scope.
pub async fn scope_request_id(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    REQUEST_ID.scope(id, next.run(req)).await
}

/// An internal failure for the wire: the detail goes to the log, the client gets a reference.
pub fn internal(detail: &dyn std::fmt::Display) -> crate::model::AppError {
    let id = request_id().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    tracing::error!(request_id = %id, error = %detail, "internal error");
    crate::model::AppError::Internal(format!("internal error (request id {id})"))
}
