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

#[derive(serde::Deserialize)]
pub struct NewStepBody {
    name: String,
    #[serde(default)]
    on_turn_complete: Option<String>,
}

#[derive(serde::Deserialize)]
pub struct NewWorkflowBody {
    name: String,
    steps: Vec<NewStepBody>,
}

pub async fn create(
    State(state): State<AppState>,
    super::ApiJson(body): super::ApiJson<NewWorkflowBody>,
) -> Result<Json<crate::model::Workflow>, ApiError> {
    use crate::model::AppError;
    use crate::server::orchestrator::workflow::MOVE_TO_NEXT;
    use crate::server::repo::{NewWorkflow, NewWorkflowStep};
    if body.steps.iter().any(|s| s.name.trim().is_empty()) {
        return Err(AppError::BadRequest("every step needs a name".into()).into());
    }
    if let Some(bad) = body
        .steps
        .iter()
        .filter_map(|s| s.on_turn_complete.as_deref())
        .find(|a| *a != MOVE_TO_NEXT)
    {
        return Err(AppError::BadRequest(format!(
            "unknown on_turn_complete {bad:?} (expected \"{MOVE_TO_NEXT}\" or null)"
        ))
        .into());
    }
    let new = NewWorkflow {
        name: body.name,
        is_default: false,
        steps: body
            .steps
            .into_iter()
            .map(|s| NewWorkflowStep {
                name: s.name,
                on_turn_complete: s.on_turn_complete,
            })
            .collect(),
    };
    Ok(Json(
        state
            .repo
            .create_workflow(&new, state.clock.now())
            .await?
            .to_dto(),
    ))
}

#[derive(serde::Deserialize)]
pub struct NewProfileBody {
    name: String,
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
}

pub async fn create_agent_profile(
    State(state): State<AppState>,
    super::ApiJson(body): super::ApiJson<NewProfileBody>,
) -> Result<Json<crate::model::AgentProfile>, ApiError> {
    use crate::model::AppError;
    use crate::server::repo::NewAgentProfile;
    if state
        .repo
        .get_agent_profile_by_name(&body.name)
        .await?
        .is_some()
    {
        return Err(
            AppError::Conflict(format!("an agent profile named {:?} exists", body.name)).into(),
        );
    }
    let new = NewAgentProfile {
        name: body.name,
        command: body.command,
        args: body.args,
        env: body.env,
    };
    Ok(Json(
        state
            .repo
            .create_agent_profile(&new, state.clock.now())
            .await?
            .to_dto(),
    ))
}
