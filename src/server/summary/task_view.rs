//! Builds `Task` values for the wire: every read reconciles the stored summary first (P7), and
//! `task_pending_action` is the authoritative P2 aggregate from the authority's batch query.

use crate::model::{AppError, Task};
use crate::server::repo::TaskRecord;
use crate::server::state::AppState;
use crate::server::summary::reconcile::{Reconciled, reconcile};
use crate::server::time::format_micros;

pub async fn list_tasks(state: &AppState) -> Result<Vec<Task>, AppError> {
    let records = state.repo.list_tasks().await?;
    views(state, records).await
}

pub async fn get_task(state: &AppState, id: &str) -> Result<Task, AppError> {
    let record = state
        .repo
        .get_task(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("task {id}")))?;
    Ok(views(state, vec![record]).await?.remove(0))
}

async fn views(state: &AppState, records: Vec<TaskRecord>) -> Result<Vec<Task>, AppError> {
    let ids: Vec<String> = records.iter().map(|t| t.id.clone()).collect();
    let (mut projections, mut summaries) = reconcile(state, &ids).await?;
    Ok(records
        .into_iter()
        .map(|record| {
            let pending = projections
                .remove(&record.id)
                .unwrap_or_default()
                .pending_action;
            let (status_summary, invalidated) = match summaries.remove(&record.id) {
                Some(Reconciled::Fresh(s)) => (Some(s.to_dto()), false),
                _ => (None, true),
            };
            Task {
                status_summary,
                status_summary_invalidated: invalidated,
                task_pending_action: pending,
                id: record.id,
                title: record.title,
                description: record.description,
                state: record.state,
                workflow_id: record.workflow_id,
                step_id: record.step_id,
                primary_session_id: record.primary_session_id,
                session_count: record.session_count.max(0) as u32,
                archived: record.archived_at.is_some(),
                created_at: format_micros(record.created_at),
                updated_at: format_micros(record.updated_at),
            }
        })
        .collect())
}
