use axum::Json;
use serde_json::{Value, json};

/// 200 once the process serves requests: the router only exists after migrations and start-up
/// reconciliation finished.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}
