use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::ApiError;
use crate::server::state::AppState;
use crate::server::summary::sessions_view;

/// `GET /tasks/{id}/sessions` — newest first, 500 when the projection fails (P8).
pub async fn list_for_task(
    State(state): State<AppState>,
    Path(task_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let sessions = sessions_view::list_sessions(&state, &task_id).await?;
    Ok(Json(json!({ "sessions": sessions })))
}
