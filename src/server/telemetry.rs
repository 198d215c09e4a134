//! Request ids and the access log. tower-http stamps every request with `x-request-id`; the
//! access log writes one line per request under that id, and [`scope_request_id`] makes it
//! visible to the code that turns a failure into a response, so a user sees the id in the
//! error body and the log holds the request line (and any detail) under the same id.

use std::time::Duration;

use axum::extract::Request;
use axum::http;
use axum::middleware::Next;
use axum::response::Response;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{MakeSpan, OnResponse, TraceLayer};
use tracing::Span;

/// The access log's tracing target: `RUST_LOG=turnstile::access=off` silences it.
pub const ACCESS_TARGET: &str = "turnstile::access";

/// One `info` line per request, when its response starts: method, path (never the query,
/// which may carry a login token), status, latency and the server's request id. It must run
/// inside the layer that sets the id.
pub fn access_log()
-> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, AccessSpan, (), AccessLine, (), (), ()> {
    TraceLayer::new_for_http()
        .make_span_with(AccessSpan)
        .on_request(())
        .on_response(AccessLine)
        .on_body_chunk(())
        .on_eos(())
        .on_failure(())
}

/// The access log's span: the request's method, path and id.
#[derive(Clone, Copy)]
pub struct AccessSpan;

impl<B> MakeSpan<B> for AccessSpan {
    fn make_span(&mut self, req: &http::Request<B>) -> Span {
        let id = req
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-");
        tracing::info_span!(
            target: ACCESS_TARGET,
            "request",
            method = %req.method(),
            path = %req.uri().path(),
            request_id = %id,
        )
    }
}

/// The access log's line, written in the request's span.
#[derive(Clone, Copy)]
pub struct AccessLine;

impl<B> OnResponse<B> for AccessLine {
    fn on_response(self, response: &http::Response<B>, latency: Duration, span: &Span) {
        let _in = span.enter();
        tracing::info!(
            target: ACCESS_TARGET,
            status = response.status().as_u16(),
            latency_ms = latency.as_secs_f64() * 1000.0,
            "served"
        );
    }
}

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
