//! `/api/v1/tasks/{id}/changes` and `/diff` (W4): thin handlers over
//! `orchestrator::changes`.

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;

use super::ApiError;
use crate::model::{Changes, FileDiff};
use crate::server::orchestrator::changes;
use crate::server::state::AppState;

pub async fn list(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Changes>, ApiError> {
    Ok(Json(changes::list(&state, &id).await?))
}

#[derive(Deserialize)]
pub struct DiffQuery {
    path: String,
}

pub async fn diff(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<DiffQuery>,
) -> Result<Json<FileDiff>, ApiError> {
    Ok(Json(changes::file(&state, &id, &query.path).await?))
}
