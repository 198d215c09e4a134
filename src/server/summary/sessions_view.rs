//! `GET /tasks/{id}/sessions`: sessions newest first, each with its P1 pending action and a P9
//! revision. Fails closed (P8): a projection error is a 500, never a falsely clean list.

use crate::model::{AppError, Session};
use crate::server::state::AppState;

pub async fn list_sessions(state: &AppState, task_id: &str) -> Result<Vec<Session>, AppError> {
    if state.repo.get_task(task_id).await?.is_none() {
        return Err(AppError::NotFound(format!("task {task_id}")));
    }
    let sessions = state.repo.list_sessions(task_id).await?;
    // P9: the sequence is reserved before the authoritative read.
    let revision = state.next_pending_revision().await;
    let ids: Vec<String> = sessions.iter().map(|s| s.id.clone()).collect();
    let pending = state.repo.pending_actions_for_sessions(&ids).await.map_err(|e| {
        tracing::error!(task_id, error = %e, "pending projection failed; refusing a falsely clean list");
        crate::server::telemetry::internal(&e)
    })?;
    Ok(sessions
        .iter()
        .map(|s| {
            s.to_dto(
                pending.get(&s.id).copied().flatten(),
                Some(revision.clone()),
            )
        })
        .collect())
}
