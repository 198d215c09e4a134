//! Tasks: the server function the sidebar reads, and the REST endpoints.

use leptos::prelude::*;
use leptos::server_fn::codec::Json;

use crate::model::{AppError, Changes, FileDiff, Task, TaskPage, TaskQuery, Workflow};

/// One page of the task list (the sidebar, the board): `GET /api/v1/tasks` for the UI.
#[server(prefix = "/api/fn", endpoint = "list_tasks", input = Json)]
pub async fn list_tasks(query: TaskQuery) -> Result<TaskPage, AppError> {
    crate::server::summary::task_view::list_tasks(&super::state()?, &query).await
}

/// One task, reconciled (P7).
#[server(prefix = "/api/fn", endpoint = "get_task")]
pub async fn get_task(task_id: String) -> Result<Task, AppError> {
    crate::server::summary::task_view::get_task(&super::state()?, &task_id).await
}

/// The board's workflows and their steps.
#[server(prefix = "/api/fn", endpoint = "list_workflows")]
pub async fn list_workflows() -> Result<Vec<Workflow>, AppError> {
    crate::server::orchestrator::workflow::list_workflows(&super::state()?).await
}

/// W4: what the task's agents changed (`GET /api/v1/tasks/{id}/changes`).
#[server(prefix = "/api/fn", endpoint = "task_changes")]
pub async fn task_changes(task_id: String) -> Result<Changes, AppError> {
    crate::server::orchestrator::changes::list(&super::state()?, &task_id).await
}

/// W4: one changed file's diff (`GET /api/v1/tasks/{id}/diff?path=`).
#[server(prefix = "/api/fn", endpoint = "task_file_diff")]
pub async fn task_file_diff(task_id: String, path: String) -> Result<FileDiff, AppError> {
    crate::server::orchestrator::changes::file(&super::state()?, &task_id, &path).await
}

/// Moves a card on the board (`PATCH /tasks/{id}` with `step_id`).
#[server(prefix = "/api/fn", endpoint = "move_task")]
pub async fn move_task(task_id: String, step_id: String) -> Result<Task, AppError> {
    use crate::server::orchestrator::tasks::{UpdateTask, update_task};
    let input = UpdateTask {
        title: None,
        step_id: Some(step_id),
        archived: None,
    };
    update_task(&super::state()?, &task_id, input).await
}

/// Archives (or restores) a task (`PATCH /tasks/{id}` with `archived`).
#[server(prefix = "/api/fn", endpoint = "archive_task")]
pub async fn archive_task(task_id: String, archived: bool) -> Result<Task, AppError> {
    use crate::server::orchestrator::tasks::{UpdateTask, update_task};
    let input = UpdateTask {
        title: None,
        step_id: None,
        archived: Some(archived),
    };
    update_task(&super::state()?, &task_id, input).await
}

/// The sidebar's "new task" form: a task whose primary session starts with `prompt`. A form
/// always sends its fields, so an empty prompt field means "no prompt"; everything else is the
/// REST endpoint's validation (one service).
#[server(prefix = "/api/fn", endpoint = "create_task")]
pub async fn create_task(
    title: String,
    prompt: String,
    /// A5: the agent profile; absent or empty is the bundled mock.
    #[server(default)]
    agent_profile_id: Option<String>,
    /// W2: the repository the task works in; absent or empty: a directory of its own.
    #[server(default)]
    repository_id: Option<String>,
) -> Result<Task, AppError> {
    use crate::server::orchestrator::tasks;
    let state = super::state()?;
    let input = tasks::CreateTask {
        title,
        description: String::new(),
        workflow_id: None,
        step_id: None,
        prompt: (!prompt.is_empty()).then_some(prompt),
        agent_profile_id: agent_profile_id.filter(|id| !id.is_empty()),
        repository_id: repository_id.filter(|id| !id.is_empty()),
        base_branch: None,
    };
    tasks::create_task(&state, input).await
}

#[cfg(feature = "ssr")]
pub mod rest {
    use axum::Json;
    use axum::extract::{Path, Query, State};
    use serde::Deserialize;

    use crate::api::{ApiError, ApiJson};
    use crate::model::{Task, TaskPage, TaskQuery};
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
        #[serde(default)]
        repository_id: Option<String>,
        #[serde(default)]
        base_branch: Option<String>,
    }

    pub async fn list(
        State(state): State<AppState>,
        Query(query): Query<TaskQuery>,
    ) -> Result<Json<TaskPage>, ApiError> {
        Ok(Json(task_view::list_tasks(&state, &query).await?))
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

    #[derive(Deserialize)]
    pub struct DeleteTaskQuery {
        #[serde(default)]
        delete_branch: bool,
    }

    pub async fn delete(
        State(state): State<AppState>,
        Path(id): Path<String>,
        Query(query): Query<DeleteTaskQuery>,
    ) -> Result<axum::http::StatusCode, ApiError> {
        tasks::delete_task(&state, &id, query.delete_branch).await?;
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
            repository_id: body.repository_id,
            base_branch: body.base_branch,
        };
        Ok(Json(tasks::create_task(&state, input).await?))
    }
}
