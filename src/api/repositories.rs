//! `/api/v1/repositories` (W1): thin handlers over `orchestrator::repositories`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiJson};
use crate::model::Repository;
use crate::server::orchestrator::repositories::{self, RegisterRepository, RepositoryEdit};
use crate::server::state::AppState;

#[derive(Deserialize)]
pub struct NewRepositoryBody {
    path: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    base_branch: Option<String>,
}

pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let list = repositories::list(&state).await?;
    Ok(Json(json!({ "repositories": list })))
}

pub async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<NewRepositoryBody>,
) -> Result<Json<Repository>, ApiError> {
    let input = RegisterRepository {
        path: body.path,
        name: body.name,
        base_branch: body.base_branch,
    };
    Ok(Json(repositories::register(&state, input).await?))
}

pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Repository>, ApiError> {
    Ok(Json(repositories::get(&state, &id).await?))
}

pub async fn patch(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(edit): ApiJson<RepositoryEdit>,
) -> Result<Json<Repository>, ApiError> {
    Ok(Json(repositories::update(&state, &id, edit).await?))
}

pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    repositories::delete(&state, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
