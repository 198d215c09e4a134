//! Clarifications and permissions: read a bundle, respond to it, answer a permission request.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::Value;

use super::{ApiError, ApiJson};
use crate::model::{AppError, Bundle, Permission};
use crate::server::clarification::read;
use crate::server::clarification::respond::{self, RespondBody};
use crate::server::orchestrator::permissions;
use crate::server::state::AppState;

pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Bundle>, ApiError> {
    Ok(Json(read::bundle(&state, &id).await?))
}

pub async fn respond(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<RespondBody>,
) -> Result<Json<Value>, ApiError> {
    let r = respond::respond(&state, &id, body).await?;
    Ok(Json(respond::to_json(&r)))
}

#[derive(Deserialize)]
pub struct PermissionBody {
    #[serde(default)]
    option_id: Option<String>,
    #[serde(default)]
    cancelled: Option<bool>,
}

pub async fn get_permission(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Permission>, ApiError> {
    Ok(Json(permissions::get(&state, &id).await?))
}

pub async fn respond_permission(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PermissionBody>,
) -> Result<Json<Permission>, ApiError> {
    let option = match (body.option_id, body.cancelled.unwrap_or(false)) {
        (Some(option), false) => Some(option),
        (None, true) => None,
        _ => {
            return Err(
                AppError::BadRequest("give either option_id or cancelled: true".into()).into(),
            );
        }
    };
    Ok(Json(permissions::respond(&state, &id, option).await?))
}
