//! The workflow guard (N3): a step's `on_turn_complete` runs only when the session has no
//! active bundle; a repository error counts as active (fail closed).

use super::publish;
use crate::server::repo::TaskPatch;
use crate::server::state::AppState;

pub const MOVE_TO_NEXT: &str = "move_to_next";

/// Runs the task's step action after a turn of `session_id` completed (or after a detached
/// rejection released the barrier, L16). Returns true when the task moved.
pub async fn on_turn_complete(state: &AppState, session_id: &str, task_id: &str) -> bool {
    match state.repo.active_bundles(session_id).await {
        Ok(active) if active.is_empty() => {}
        Ok(_) => {
            tracing::debug!(
                session_id,
                "workflow action deferred: the session has an active question (N3)"
            );
            return false;
        }
        Err(e) => {
            tracing::warn!(session_id, error = %e, "workflow action skipped: authority unavailable (N3 fails closed)");
            return false;
        }
    }
    match advance(state, task_id).await {
        Ok(moved) => moved,
        Err(e) => {
            tracing::warn!(task_id, error = %e, "workflow action failed");
            false
        }
    }
}

async fn advance(state: &AppState, task_id: &str) -> Result<bool, crate::server::repo::RepoError> {
    let Some(task) = state.repo.get_task(task_id).await? else {
        return Ok(false);
    };
    let (Some(workflow_id), Some(step_id)) = (&task.workflow_id, &task.step_id) else {
        return Ok(false);
    };
    let Some(workflow) = state
        .repo
        .list_workflows()
        .await?
        .into_iter()
        .find(|w| &w.workflow.id == workflow_id)
    else {
        return Ok(false);
    };
    let Some(pos) = workflow.steps.iter().position(|s| &s.id == step_id) else {
        return Ok(false);
    };
    if workflow.steps[pos].on_turn_complete.as_deref() != Some(MOVE_TO_NEXT) {
        return Ok(false);
    }
    let Some(next) = workflow.steps.get(pos + 1) else {
        return Ok(false);
    };
    let patch = TaskPatch {
        step_id: Some(next.id.clone()),
        ..Default::default()
    };
    state
        .repo
        .update_task(task_id, &patch, state.clock.now())
        .await?;
    publish::task_updated(state, task_id);
    Ok(true)
}
