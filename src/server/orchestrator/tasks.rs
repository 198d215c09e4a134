use crate::model::limits::{self, at_most};
use crate::model::{AppError, Task};
use crate::server::repo::NewTask;
use crate::server::state::AppState;
use crate::server::summary::task_view;

pub struct CreateTask {
    pub title: String,
    pub description: String,
    pub workflow_id: Option<String>,
    pub step_id: Option<String>,
    /// Launches the primary session with this first prompt.
    pub prompt: Option<String>,
    /// The session's agent (the bundled `mock` unless given); needs a prompt.
    pub agent_profile_id: Option<String>,
}

/// Creates a task on its workflow (the default one unless given) at the given step (the first
/// one unless given), and with a prompt its primary session. Every input — the session's
/// included — is validated before anything is written; REST and the UI call this one function.
pub async fn create_task(state: &AppState, input: CreateTask) -> Result<Task, AppError> {
    let bad = AppError::BadRequest;
    let title = input.title.trim();
    if title.is_empty() {
        return Err(bad("title must not be empty".into()));
    }
    at_most("title", title, limits::TITLE_CHARS).map_err(bad)?;
    at_most("description", &input.description, limits::DESCRIPTION_CHARS).map_err(bad)?;
    if input.agent_profile_id.is_some() && input.prompt.is_none() {
        return Err(bad(
            "agent_profile_id needs a prompt to launch a session".into()
        ));
    }
    if let Some(prompt) = &input.prompt {
        super::sessions::validate_prompt("prompt", prompt)?;
        super::sessions::ensure_agent_room(state)?;
    }
    let profile = match &input.agent_profile_id {
        Some(id) => Some(
            state
                .repo
                .get_agent_profile(id)
                .await?
                .ok_or_else(|| bad(format!("unknown agent_profile_id {id:?}")))?,
        ),
        // A5: a task that starts an agent without naming one gets the server's default.
        None if input.prompt.is_some() => Some(super::sessions::default_agent(state).await?),
        None => None,
    };
    let workflow = match &input.workflow_id {
        Some(id) => state
            .repo
            .list_workflows()
            .await?
            .into_iter()
            .find(|w| &w.workflow.id == id)
            .ok_or_else(|| AppError::BadRequest(format!("unknown workflow_id {id:?}")))?,
        None => state
            .repo
            .default_workflow()
            .await?
            .ok_or_else(|| AppError::Internal("the default workflow is missing".into()))?,
    };
    let step_id = match &input.step_id {
        Some(id) if workflow.steps.iter().any(|s| &s.id == id) => id.clone(),
        Some(id) => {
            return Err(AppError::BadRequest(format!(
                "step_id {id:?} is not a step of workflow {:?}",
                workflow.workflow.id
            )));
        }
        None => workflow
            .steps
            .first()
            .map(|s| s.id.clone())
            .ok_or_else(|| AppError::Internal("workflow without steps".into()))?,
    };
    let record = state
        .repo
        .create_task(
            &NewTask {
                title: title.to_string(),
                description: input.description,
                workflow_id: Some(workflow.workflow.id.clone()),
                step_id: Some(step_id),
            },
            state.clock.now(),
        )
        .await?;
    if let Some(prompt) = input.prompt {
        let launch = super::sessions::NewSessionInput {
            agent_profile_id: profile.map(|p| p.id),
            prompt,
            role: super::sessions::Role::Primary,
        };
        super::sessions::create_session(state, &record.id, launch).await?;
    }
    let task = task_view::get_task(state, &record.id).await?;
    super::publish::task_created(state, &task);
    Ok(task)
}

pub struct UpdateTask {
    pub title: Option<String>,
    pub step_id: Option<String>,
    pub archived: Option<bool>,
}

/// `PATCH /tasks/{id}`: validated before the write; a step must belong to the task's workflow.
pub async fn update_task(state: &AppState, id: &str, input: UpdateTask) -> Result<Task, AppError> {
    let task = state
        .repo
        .get_task(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("task {id}")))?;
    if let Some(title) = &input.title {
        if title.trim().is_empty() {
            return Err(AppError::BadRequest("title must not be empty".into()));
        }
        at_most("title", title.trim(), limits::TITLE_CHARS).map_err(AppError::BadRequest)?;
    }
    if let Some(step) = &input.step_id {
        let workflow = state
            .repo
            .list_workflows()
            .await?
            .into_iter()
            .find(|w| Some(&w.workflow.id) == task.workflow_id.as_ref());
        if !workflow.is_some_and(|w| w.steps.iter().any(|s| &s.id == step)) {
            return Err(AppError::BadRequest(format!(
                "step_id {step:?} is not a step of the task's workflow"
            )));
        }
    }
    let patch = crate::server::repo::TaskPatch {
        title: input.title.map(|t| t.trim().to_string()),
        step_id: input.step_id,
        archived: input.archived,
    };
    state
        .repo
        .update_task(id, &patch, state.clock.now())
        .await?;
    super::publish::task_updated(state, id).await;
    task_view::get_task(state, id).await
}

/// `DELETE /tasks/{id}`: stops the task's agents, then deletes it with everything it owns.
pub async fn delete_task(state: &AppState, id: &str) -> Result<(), AppError> {
    if state.repo.get_task(id).await?.is_none() {
        return Err(AppError::NotFound(format!("task {id}")));
    }
    for s in state.repo.list_sessions(id).await? {
        super::worker::stop(state, &s.id);
    }
    state.repo.delete_task(id).await?;
    super::publish::task_deleted(state, id);
    Ok(())
}
