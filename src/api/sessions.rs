//! Sessions, prompts, transcripts and turns.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiJson};
use crate::model::Session;
use crate::server::orchestrator::{sessions, transcript};
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

#[derive(Deserialize)]
pub struct CreateSessionBody {
    #[serde(default)]
    agent_profile_id: Option<String>,
    prompt: String,
}

pub async fn create(
    State(state): State<AppState>,
    Path(task_id): Path<String>,
    ApiJson(body): ApiJson<CreateSessionBody>,
) -> Result<Json<Session>, ApiError> {
    let input = sessions::NewSessionInput {
        agent_profile_id: body.agent_profile_id,
        prompt: body.prompt,
        role: sessions::Role::Secondary,
    };
    let s = sessions::create_session(&state, &task_id, input).await?;
    Ok(Json(sessions::view(&state, &s.id).await?))
}

pub async fn make_primary(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(sessions::make_primary(&state, &id).await?))
}

#[derive(Deserialize)]
pub struct PromptBody {
    content: String,
}

pub async fn prompt(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<Json<Value>, ApiError> {
    let accepted = sessions::send_prompt(&state, &id, body.content).await?;
    Ok(Json(json!(accepted)))
}

pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    sessions::cancel(&state, &id).await?;
    Ok(Json(json!({ "cancelled": true })))
}

/// `POST /sessions/{id}/retry`: relaunch the agent and deliver an owed answer (L18).
pub async fn retry(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let resumed = sessions::retry(&state, &id).await?;
    Ok(Json(json!({ "resumed": resumed })))
}

#[derive(Deserialize)]
pub struct MessagesQuery {
    after: Option<String>,
    before: Option<String>,
    limit: Option<i64>,
}

/// `GET /sessions/{id}/messages`: ascending; `?after=` onward from a message (default: from the
/// start), `?before=` the newest page before a message.
pub async fn messages(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<MessagesQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = q.limit.unwrap_or(500);
    let messages = match q.before {
        Some(before) => {
            transcript::page_before(&state, &id, Some(&before), limit)
                .await?
                .messages
        }
        None => transcript::after(&state, &id, q.after.as_deref(), limit).await?,
    };
    Ok(Json(json!({ "messages": messages })))
}

pub async fn turns(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let turns = transcript::turns(&state, &id).await?;
    Ok(Json(json!({ "turns": turns })))
}

/// `DELETE /messages/{id}` — authority does not move (L4).
pub async fn delete_message(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    transcript::delete_message(&state, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
