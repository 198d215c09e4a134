use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::ApiError;
use crate::server::state::AppState;

pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let workflows: Vec<_> = state
        .repo
        .list_workflows()
        .await?
        .iter()
        .map(|w| w.to_dto())
        .collect();
    Ok(Json(json!({ "workflows": workflows })))
}

pub async fn list_agent_profiles(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let profiles: Vec<_> = state
        .repo
        .list_agent_profiles()
        .await?
        .iter()
        .map(|p| p.to_dto())
        .collect();
    Ok(Json(json!({ "agent_profiles": profiles })))
}
