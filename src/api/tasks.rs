//! Tasks: the server function the sidebar reads, and the REST endpoints.

use leptos::prelude::*;

use crate::model::{AppError, Task};

/// The sidebar's task list (reconciled like `GET /api/v1/tasks`).
#[server(prefix = "/api/fn", endpoint = "list_tasks")]
pub async fn list_tasks() -> Result<Vec<Task>, AppError> {
    let state = use_context::<crate::server::state::AppState>().ok_or_else(|| {
        AppError::Internal("the server state is missing from this request".into())
    })?;
    crate::server::summary::task_view::list_tasks(&state).await
}

/// The sidebar's "new task" form: a task whose primary session starts with `prompt`. A form
/// always sends its fields, so an empty prompt field means "no prompt"; everything else is the
/// REST endpoint's validation (one service).
#[server(prefix = "/api/fn", endpoint = "create_task")]
pub async fn create_task(title: String, prompt: String) -> Result<Task, AppError> {
    use crate::server::orchestrator::tasks;
    let state = use_context::<crate::server::state::AppState>().ok_or_else(|| {
        AppError::Internal("the server state is missing from this request".into())
    })?;
    let input = tasks::CreateTask {
        title,
        description: String::new(),
        workflow_id: None,
        step_id: None,
        prompt: (!prompt.is_empty()).then_some(prompt),
        agent_profile_id: None,
    };
    tasks::create_task(&state, input).await
}

#[cfg(feature = "ssr")]
pub mod rest {
    use axum::Json;
    use axum::extract::{Path, State};
    use serde::Deserialize;
    use serde_json::{Value, json};

    use crate::api::{ApiError, ApiJson};
    use crate::model::Task;
    use crate::server::orchestrator::tasks::{self, CreateTask};
    use crate::server::state::AppState;
    use crate::server::summary::task_view;

    #[derive(Deserialize)]
    pub struct CreateTaskBody {
        title: String,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        workflow_id: Option<String>,
        #[serde(default)]
        step_id: Option<String>,
        #[serde(default)]
        agent_profile_id: Option<String>,
        #[serde(default)]
        prompt: Option<String>,
    }

    pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
        let tasks = task_view::list_tasks(&state).await?;
        Ok(Json(
            json!({ "tasks": tasks, "epoch": state.epoch.to_string() }),
        ))
    }

    pub async fn get(
        State(state): State<AppState>,
        Path(id): Path<String>,
    ) -> Result<Json<Task>, ApiError> {
        Ok(Json(task_view::get_task(&state, &id).await?))
    }

    #[derive(Deserialize)]
    pub struct PatchTaskBody {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        step_id: Option<String>,
        #[serde(default)]
        archived: Option<bool>,
    }

    pub async fn patch(
        State(state): State<AppState>,
        Path(id): Path<String>,
        ApiJson(body): ApiJson<PatchTaskBody>,
    ) -> Result<Json<Task>, ApiError> {
        let input = tasks::UpdateTask {
            title: body.title,
            step_id: body.step_id,
            archived: body.archived,
        };
        Ok(Json(tasks::update_task(&state, &id, input).await?))
    }

    pub async fn delete(
        State(state): State<AppState>,
        Path(id): Path<String>,
    ) -> Result<axum::http::StatusCode, ApiError> {
        tasks::delete_task(&state, &id).await?;
        Ok(axum::http::StatusCode::NO_CONTENT)
    }

    pub async fn create(
        State(state): State<AppState>,
        ApiJson(body): ApiJson<CreateTaskBody>,
    ) -> Result<Json<Task>, ApiError> {
        let input = CreateTask {
            title: body.title,
            description: body.description.unwrap_or_default(),
            workflow_id: body.workflow_id,
            step_id: body.step_id,
            prompt: body.prompt,
            agent_profile_id: body.agent_profile_id,
        };
        Ok(Json(tasks::create_task(&state, input).await?))
    }
}
