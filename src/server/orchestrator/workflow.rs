//! The workflow guard (N3): a step's `on_turn_complete` runs only when the session has no
//! active bundle; a repository error counts as active (fail closed).

use super::publish;
use crate::model::limits::{self, at_most};
use crate::model::{AppError, Workflow};
use crate::server::repo::StepMove;
use crate::server::repo::{NewWorkflow, NewWorkflowStep};
use crate::server::state::AppState;

pub const MOVE_TO_NEXT: &str = "move_to_next";

pub struct CreateStep {
    pub name: String,
    pub on_turn_complete: Option<String>,
}

/// `POST /workflows`: validated before the write.
pub async fn create_workflow(
    state: &AppState,
    name: String,
    steps: Vec<CreateStep>,
) -> Result<Workflow, AppError> {
    let bad = AppError::BadRequest;
    if name.trim().is_empty() {
        return Err(bad("a workflow needs a name".into()));
    }
    at_most("name", &name, limits::NAME_CHARS).map_err(bad)?;
    if steps.is_empty() || steps.len() > limits::WORKFLOW_STEPS {
        return Err(bad(format!(
            "a workflow has 1–{} steps, got {}",
            limits::WORKFLOW_STEPS,
            steps.len()
        )));
    }
    for (i, s) in steps.iter().enumerate() {
        if s.name.trim().is_empty() {
            return Err(bad("every step needs a name".into()));
        }
        at_most(&format!("steps[{i}].name"), &s.name, limits::NAME_CHARS).map_err(bad)?;
        if let Some(a) = s.on_turn_complete.as_deref().filter(|a| *a != MOVE_TO_NEXT) {
            return Err(bad(format!(
                "unknown on_turn_complete {a:?} (expected \"{MOVE_TO_NEXT}\" or null)"
            )));
        }
    }
    let new = NewWorkflow {
        name,
        is_default: false,
        steps: steps
            .into_iter()
            .map(|s| NewWorkflowStep {
                name: s.name,
                on_turn_complete: s.on_turn_complete,
            })
            .collect(),
    };
    Ok(state
        .repo
        .create_workflow(&new, state.clock.now())
        .await?
        .to_dto())
}

pub async fn list_workflows(state: &AppState) -> Result<Vec<Workflow>, AppError> {
    Ok(state
        .repo
        .list_workflows()
        .await?
        .iter()
        .map(|w| w.to_dto())
        .collect())
}

/// Rounds [`turn_completed`] tries before it defers, failing closed.
const ROUNDS: usize = 8;

/// N3: a turn of `session_id` completed (each completion calls this once). Runs the step's
/// `on_turn_complete` now, or — while the session has an active question, or when that cannot
/// be read (fail closed) — records it as deferred on the turn. Both are guarded in the
/// statement that writes: the move by "no active question", the defer by "a question is still
/// active", so a question asked or rejected meanwhile decides the other way, never neither.
/// Returns true when the task moved.
pub async fn turn_completed(
    state: &AppState,
    session_id: &str,
    task_id: &str,
    turn_id: &str,
) -> bool {
    state
        .hooks
        .run(crate::server::hooks::Point::StepGuard, session_id)
        .await;
    // Each round either moves, finds nothing to do, or defers; a question that comes or goes
    // between the two guarded statements, or another action moving the task first, makes one
    // more round.
    for _ in 0..ROUNDS {
        match advance(state, task_id, session_id, turn_id).await {
            Ok(StepMove::Moved) => return true,
            Ok(StepMove::NotThere) => return false,
            // Another action moved the task meanwhile: this one runs from the new step.
            Ok(StepMove::Stale) => continue,
            Ok(StepMove::Blocked) => match state.repo.defer_while_active(turn_id).await {
                Ok(true) => {
                    tracing::debug!(
                        session_id,
                        turn_id,
                        "workflow action deferred: the session has an active question (N3)"
                    );
                    return false;
                }
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(turn_id, error = %e, "cannot record the deferred workflow action");
                    return false;
                }
            },
            Err(e) => {
                tracing::warn!(session_id, error = %e, "workflow action deferred: authority unavailable (N3 fails closed)");
                break;
            }
        }
    }
    if let Err(e) = state.repo.defer_workflow(turn_id).await {
        tracing::warn!(turn_id, error = %e, "cannot record the deferred workflow action");
    }
    false
}

/// N3/L16: a detached rejection freed the barrier of `turn_id`. Runs the action that turn's
/// completion deferred — at most once (it is taken by compare-and-set). A rejection while the
/// turn is still open finds nothing deferred: the turn's own completion runs it.
pub async fn barrier_released(
    state: &AppState,
    session_id: &str,
    task_id: &str,
    turn_id: &str,
) -> bool {
    match state.repo.take_deferred_workflow(turn_id).await {
        Ok(true) => turn_completed(state, session_id, task_id, turn_id).await,
        Ok(false) => false,
        Err(e) => {
            tracing::warn!(turn_id, error = %e, "cannot take the deferred workflow action");
            false
        }
    }
}

/// Runs the step actions still due (N3/I6) — of one session, or of all at start-up: a server
/// that stopped between a turn's completion and its action left them. Each is taken by
/// compare-and-set, so one racing its own turn's worker runs once.
pub async fn run_due(state: &AppState, session_id: Option<&str>) {
    match state.repo.due_workflows(session_id).await {
        Ok(due) => {
            for (turn_id, session_id, task_id) in due {
                turn_completed(state, &session_id, &task_id, &turn_id).await;
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read the step actions still due"),
    }
}

/// Moves the task to the next step if its step says so (N3): taken from the due turn and
/// guarded by "no active question" and a compare-and-set from the step it was in, so two
/// completions racing cannot move it twice. `NotThere` (settled) also when the step has no
/// action.
async fn advance(
    state: &AppState,
    task_id: &str,
    session_id: &str,
    turn_id: &str,
) -> Result<StepMove, crate::server::repo::RepoError> {
    let Some((step_id, next)) = next_step(state, task_id).await? else {
        state.repo.settle_workflow(turn_id).await?;
        return Ok(StepMove::NotThere);
    };
    let moved = state
        .repo
        .advance_step(
            turn_id,
            task_id,
            session_id,
            &step_id,
            &next,
            state.clock.now(),
        )
        .await?;
    if moved == StepMove::Moved {
        publish::task_updated(state, task_id).await;
    }
    Ok(moved)
}

/// The task's step and the one its `move_to_next` action leads to, if it has one.
async fn next_step(
    state: &AppState,
    task_id: &str,
) -> Result<Option<(String, String)>, crate::server::repo::RepoError> {
    let Some(task) = state.repo.get_task(task_id).await? else {
        return Ok(None);
    };
    let (Some(workflow_id), Some(step_id)) = (&task.workflow_id, &task.step_id) else {
        return Ok(None);
    };
    let Some(workflow) = state
        .repo
        .list_workflows()
        .await?
        .into_iter()
        .find(|w| &w.workflow.id == workflow_id)
    else {
        return Ok(None);
    };
    let Some(pos) = workflow.steps.iter().position(|s| &s.id == step_id) else {
        return Ok(None);
    };
    if workflow.steps[pos].on_turn_complete.as_deref() != Some(MOVE_TO_NEXT) {
        return Ok(None);
    }
    Ok(workflow
        .steps
        .get(pos + 1)
        .map(|next| (step_id.clone(), next.id.clone())))
}
