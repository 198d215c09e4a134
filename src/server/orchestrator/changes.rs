//! W4: what a task's agents changed, read from the task's worktree under its repository's
//! lock (W7).

use crate::model::{AppError, Changes, FileDiff};
use crate::server::state::AppState;
use crate::server::workspace::{changes, relative_path};

/// The task's worktree and base branch: 404 without the task, 409 without a worktree (a task
/// without a git repository, or none of whose sessions has started: W3 makes the worktree
/// when the first one starts).
async fn worktree_of(
    state: &AppState,
    task_id: &str,
) -> Result<(String, std::path::PathBuf, String), AppError> {
    if state.repo.get_task(task_id).await?.is_none() {
        return Err(AppError::NotFound(format!("task {task_id}")));
    }
    let workspace = state.repo.task_workspace(task_id).await?;
    let Some((repository_id, Some(base))) = workspace.map(|w| (w.repository_id, w.base_branch))
    else {
        return Err(AppError::Conflict(
            "the task works in no git repository: it has no changes to show".into(),
        ));
    };
    let path = state
        .runtime
        .workspaces
        .worktree_of(task_id)
        .map_err(AppError::BadRequest)?;
    if !path.is_dir() {
        return Err(AppError::Conflict(
            "the task has no worktree: it is made when the task's first session starts".into(),
        ));
    }
    Ok((repository_id, path, base))
}

/// `GET /tasks/{id}/changes`.
pub async fn list(state: &AppState, task_id: &str) -> Result<Changes, AppError> {
    let (repository_id, path, base) = worktree_of(state, task_id).await?;
    state
        .runtime
        .workspaces
        .git(&repository_id, move || changes::changes(&path, &base))
        .await
        .map_err(AppError::Conflict)
}

/// `GET /tasks/{id}/diff?path=…`: 400 for a path that is not plain and relative (W9), 404 for
/// a file without changes.
pub async fn file(state: &AppState, task_id: &str, path: &str) -> Result<FileDiff, AppError> {
    let wanted = relative_path(path)?;
    let (repository_id, dir, base) = worktree_of(state, task_id).await?;
    state
        .runtime
        .workspaces
        .git(&repository_id, move || {
            changes::file_diff(&dir, &base, &wanted)
        })
        .await
        .map_err(AppError::Conflict)?
        .ok_or_else(|| AppError::NotFound(format!("{path:?} has no changes")))
}
