use crate::model::limits::{self, at_most};
use crate::model::{AppError, Task};
use crate::server::repo::{NewTask, NewTaskWorkspace, new_id};
use crate::server::state::AppState;
use crate::server::summary::task_view;
use crate::server::workspace::git;

pub struct CreateTask {
    pub title: String,
    pub description: String,
    pub workflow_id: Option<String>,
    pub step_id: Option<String>,
    /// Launches the primary session with this first prompt.
    pub prompt: Option<String>,
    /// The session's agent (the bundled `mock` unless given); needs a prompt.
    pub agent_profile_id: Option<String>,
    /// W2: the repository the task works in (none: a directory of its own).
    pub repository_id: Option<String>,
    /// W2: the branch its worktree starts from (default: the repository's); needs a git
    /// repository.
    pub base_branch: Option<String>,
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
    let workspace = match &input.repository_id {
        Some(id) => Some(workspace_of(state, id, input.base_branch).await?),
        None if input.base_branch.is_some() => {
            return Err(bad("base_branch needs a repository_id".into()));
        }
        None => None,
    };
    let new = NewTask {
        title: title.to_string(),
        description: input.description,
        workflow_id: Some(workflow.workflow.id.clone()),
        step_id: Some(step_id),
    };
    let record = match workspace {
        None => state.repo.create_task(&new, state.clock.now()).await?,
        Some(workspace) => {
            let id = new_id();
            let workspace = NewTaskWorkspace {
                // W3/W9: the task's branch is named by the server, never by the client.
                branch: workspace
                    .base_branch
                    .as_ref()
                    .map(|_| git::task_branch(title, &id)),
                ..workspace
            };
            state
                .repo
                .create_task_in(&id, &new, &workspace, state.clock.now())
                .await?
                .ok_or_else(|| bad("the repository was deleted meanwhile".into()))?
        }
    };
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

/// W2: the repository a new task names, checked: it exists, and a base branch (given or the
/// repository's) exists in it; a plain directory takes none.
async fn workspace_of(
    state: &AppState,
    repository_id: &str,
    base_branch: Option<String>,
) -> Result<NewTaskWorkspace, AppError> {
    let repository = state
        .repo
        .get_repository(repository_id)
        .await?
        .ok_or_else(|| AppError::BadRequest(format!("unknown repository_id {repository_id:?}")))?;
    let base_branch = match (repository.git, base_branch) {
        (false, Some(_)) => {
            return Err(AppError::Unprocessable(
                "the repository is a plain directory: it has no branches".into(),
            ));
        }
        (false, None) => None,
        (true, Some(branch)) => {
            super::repositories::existing_branch(&repository.path, &branch).await?;
            Some(branch)
        }
        (true, None) => repository.base_branch,
    };
    Ok(NewTaskWorkspace {
        repository_id: repository.id,
        base_branch,
        branch: None,
    })
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

/// `DELETE /tasks/{id}`: stops the task's agents, then deletes it with everything it owns,
/// its directory or worktree too (W6; with `delete_branch` also the task's branch). A
/// directory that cannot be removed is logged: the task is gone either way.
pub async fn delete_task(state: &AppState, id: &str, delete_branch: bool) -> Result<(), AppError> {
    if state.repo.get_task(id).await?.is_none() {
        return Err(AppError::NotFound(format!("task {id}")));
    }
    for s in state.repo.list_sessions(id).await? {
        super::worker::stop(state, &s.id);
    }
    let workspace = state.repo.task_workspace(id).await?;
    state.repo.delete_task(id).await?;
    if let Err(e) = state
        .runtime
        .workspaces
        .remove(id, workspace, delete_branch)
        .await
    {
        tracing::warn!(task = %id, error = %e, "the deleted task's directory is left");
    }
    super::publish::task_deleted(state, id);
    Ok(())
}
