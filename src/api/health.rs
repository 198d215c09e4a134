use axum::Json;
use serde_json::{Value, json};

/// 200 once the process serves requests: the router only exists after migrations and start-up
/// reconciliation finished.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Prometheus text: request counts and time, WebSocket clients, active bundles, summary CAS
/// retries.
pub async fn metrics(
    axum::extract::State(state): axum::extract::State<crate::server::state::AppState>,
) -> impl axum::response::IntoResponse {
    let active = crate::server::clarification::read::count_active(&state).await;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.metrics.render(active),
    )
}
