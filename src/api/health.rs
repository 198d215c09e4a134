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

/// `GET /metrics` (decision 0049): this server's metrics and the gauges read now; on
/// PostgreSQL the event listener and whether this server sends its events.
pub async fn metrics(
    axum::extract::State(state): axum::extract::State<crate::server::state::AppState>,
) -> impl axum::response::IntoResponse {
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
    let gauges = crate::server::metrics::Gauges {
        active_bundles: gauges::active_bundles(&state).await,
        running_agents: i64::try_from(state.runtime.agents.count()).unwrap_or(i64::MAX),
        open_permissions: i64::try_from(state.runtime.permissions.len()).unwrap_or(i64::MAX),
        queued_prompts: i64::try_from(state.runtime.queued.total()).unwrap_or(i64::MAX),
        writer: gauges::write_connection_usage(&state),
        pool: gauges::pool_usage(&state),
    };
    let text = state.metrics.render(gauges, |r| {
        if let Some(listener) = state.hub.listener() {
            let family = Family::<Vec<(String, String)>, Gauge>::default();
            family
                .get_or_create(&vec![(
                    "server_id".to_string(),
                    state.runtime.config.server_id.clone(),
                )])
                .set(i64::from(listener == ListenerState::Connected));
            r.register(
                "turnstile_event_listener_connected",
                "Whether this server receives the other servers' events (PostgreSQL)",
                family,
            );
        }
        if let Some(peers) = state.hub.peers() {
            r.register(
                "turnstile_events_alone",
                "Whether this server finds itself alone on its database, so it sends no events (decision 0018)",
                ConstGauge::new(i64::from(peers.alone())),
            );
            r.register(
                "turnstile_events_unsent",
                "Events not sent because no other server listened",
                ConstCounter::new(peers.skipped()),
            );
        }
    });
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::server::metrics::CONTENT_TYPE,
        )],
        text,
    )
}
