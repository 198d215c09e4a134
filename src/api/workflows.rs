//! Workflows and agent profiles: thin handlers over `orchestrator::{workflow, profiles}`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiJson};
use crate::model::{AgentPreset, AgentProfile, CheckReport, Workflow};
use crate::server::orchestrator::profiles::{self, CreateProfile};
use crate::server::orchestrator::workflow::{self, CreateStep};
use crate::server::state::AppState;

pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let workflows = workflow::list_workflows(&state).await?;
    Ok(Json(json!({ "workflows": workflows })))
}

pub async fn list_agent_profiles(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let profiles = profiles::list(&state).await?;
    Ok(Json(json!({ "agent_profiles": profiles })))
}

#[derive(Deserialize)]
pub struct NewStepBody {
    name: String,
    #[serde(default)]
    on_turn_complete: Option<String>,
}

#[derive(Deserialize)]
pub struct NewWorkflowBody {
    name: String,
    steps: Vec<NewStepBody>,
}

pub async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<NewWorkflowBody>,
) -> Result<Json<Workflow>, ApiError> {
    let steps = body
        .steps
        .into_iter()
        .map(|s| CreateStep {
            name: s.name,
            on_turn_complete: s.on_turn_complete,
        })
        .collect();
    Ok(Json(
        workflow::create_workflow(&state, body.name, steps).await?,
    ))
}

#[derive(Deserialize)]
pub struct NewProfileBody {
    name: String,
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// E1: advertise ACP elicitation (default true).
    #[serde(default)]
    elicitation: Option<bool>,
    /// A4: `authenticate` with this method after `initialize`.
    #[serde(default)]
    auth_method: Option<String>,
}

pub async fn create_agent_profile(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<NewProfileBody>,
) -> Result<Json<AgentProfile>, ApiError> {
    let input = CreateProfile {
        name: body.name,
        command: body.command,
        args: body.args,
        env: body.env,
        elicitation: body.elicitation.unwrap_or(true),
        auth_method: body.auth_method,
    };
    Ok(Json(profiles::create(&state, input).await?))
}

/// A1: `GET /agent-presets`.
pub async fn list_agent_presets(State(state): State<AppState>) -> Json<Value> {
    let presets: Vec<AgentPreset> = profiles::presets(&state);
    Json(json!({ "agent_presets": presets }))
}

/// A2: `POST /agent-profiles/{id}/check`.
pub async fn check_agent_profile(
    State(state): State<AppState>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<CheckReport>, ApiError> {
    Ok(Json(profiles::check(&state, &id).await?))
}

pub async fn update_agent_profile(
    State(state): State<AppState>,
    axum::extract::Path(id): axum::extract::Path<String>,
    ApiJson(edit): ApiJson<profiles::ProfileEdit>,
) -> Result<Json<AgentProfile>, ApiError> {
    Ok(Json(profiles::update(&state, &id, edit).await?))
}
