use axum::Json;
use serde_json::{Value, json};

use crate::server::events::ListenerState;
use crate::server::orchestrator::gauges;

/// 200 `{"status":"ok"}` once the process serves requests: the router only exists after
/// migrations and start-up reconciliation finished. On PostgreSQL, while the connection that
/// receives the other servers' events is down, 503 with the listener's state: this server's
/// clients would miss what happens elsewhere, so a load balancer should send them elsewhere.
pub async fn healthz(
    axum::extract::State(state): axum::extract::State<crate::server::state::AppState>,
) -> (axum::http::StatusCode, Json<Value>) {
    match state.hub.listener() {
        Some(ListenerState::Reconnecting) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "degraded",
                "server_id": state.runtime.config.server_id,
                "listener": ListenerState::Reconnecting.as_str(),
            })),
        ),
        _ => (axum::http::StatusCode::OK, Json(json!({ "status": "ok" }))),
    }
}

/// Prometheus text: request counts and time, WebSocket clients, active bundles, summary CAS
/// retries, SQLite's write connection use; on PostgreSQL the event listener and whether this
/// server sends its events.
pub async fn metrics(
    axum::extract::State(state): axum::extract::State<crate::server::state::AppState>,
) -> impl axum::response::IntoResponse {
    let active = gauges::active_bundles(&state).await;
    let mut text = state
        .metrics
        .render(active, gauges::write_connection_usage(&state));
    if let Some(listener) = state.hub.listener() {
        text.push_str(&format!(
            "# HELP turnstile_event_listener_connected Whether this server receives the other \
             servers' events (PostgreSQL).\n# TYPE turnstile_event_listener_connected gauge\n\
             turnstile_event_listener_connected{{server_id=\"{}\"}} {}\n",
            state.runtime.config.server_id,
            u8::from(listener == ListenerState::Connected)
        ));
    }
    if let Some(peers) = state.hub.peers() {
        text.push_str(&format!(
            "# HELP turnstile_events_alone Whether this server finds itself alone on its \
             database, so it sends no events (decision 0018).\n# TYPE turnstile_events_alone \
             gauge\nturnstile_events_alone {}\n# HELP turnstile_events_unsent_total Events not \
             sent because no other server listened.\n# TYPE turnstile_events_unsent_total \
             counter\nturnstile_events_unsent_total {}\n",
            u8::from(peers.alone()),
            peers.skipped()
        ));
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
}
