//! Clarifications and permissions: read a bundle, respond to it, answer a permission request.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiJson};
use crate::model::{AppError, Bundle};
use crate::server::clarification::respond::{self, RespondBody, RespondError};
use crate::server::state::AppState;

pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Bundle>, ApiError> {
    let b = state
        .repo
        .get_bundle(&id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("clarification {id}")))?;
    Ok(Json(b.to_dto()))
}

pub async fn respond(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<RespondBody>,
) -> Response {
    match respond::respond(&state, &id, body).await {
        Ok(r) => Json(respond::to_json(&r)).into_response(),
        Err(RespondError::App(e)) => ApiError(e).into_response(),
        Err(RespondError::Failed { message, retryable }) => {
            let body = json!({ "error": { "code": "internal", "message": message }, "retryable": retryable });
            (axum::http::StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response()
        }
    }
}

#[derive(Deserialize)]
pub struct PermissionBody {
    #[serde(default)]
    option_id: Option<String>,
    #[serde(default)]
    cancelled: Option<bool>,
}

pub async fn respond_permission(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PermissionBody>,
) -> Result<Json<Value>, ApiError> {
    let request = state
        .repo
        .get_permission_request(&id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("permission {id}")))?;
    let (status, outcome) = match (body.option_id, body.cancelled.unwrap_or(false)) {
        (Some(option), false) => {
            let options: Value = serde_json::from_str(&request.options).unwrap_or_default();
            let known = options
                .as_array()
                .is_some_and(|o| o.iter().any(|x| x["id"] == option.as_str()));
            if !known {
                return Err(AppError::BadRequest(format!("unknown option_id {option:?}")).into());
            }
            ("selected", Some(option))
        }
        (None, true) => ("cancelled", None),
        _ => {
            return Err(
                AppError::BadRequest("give either option_id or cancelled: true".into()).into(),
            );
        }
    };
    if !state
        .repo
        .resolve_permission_request(&id, status, outcome.as_deref(), state.clock.now())
        .await?
    {
        return Err(AppError::Conflict(format!("permission {id} is no longer pending")).into());
    }
    if let Some(reply) = state.runtime.permissions.take(&id) {
        let _ = reply.send(outcome.clone());
    }
    state.hub.publish(
        crate::server::events::Event::new(
            "permission.resolved",
            json!({ "permission_id": id, "status": status }),
        )
        .for_task(request.task_id.clone())
        .for_session(request.session_id.clone()),
    );
    Ok(Json(
        json!({ "id": id, "status": status, "option_id": outcome }),
    ))
}
