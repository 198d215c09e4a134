//! Builds `Task` values for the wire: the stored summary plus the authoritative P2 aggregate
//! `task_pending_action`, computed with the authority's batch query (L3).

use std::collections::HashMap;

use crate::model::{AppError, PendingAction, Task};
use crate::server::repo::{SessionRecord, StoredSummary, TaskRecord};
use crate::server::state::AppState;
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
    let task_ids: Vec<String> = records.iter().map(|t| t.id.clone()).collect();
    let sessions = state.repo.sessions_for_tasks(&task_ids).await?;
    let session_ids: Vec<String> = sessions.iter().map(|s| s.id.clone()).collect();
    let pending = state
        .repo
        .pending_actions_for_sessions(&session_ids)
        .await?;
    let summaries = state.repo.get_summaries(&task_ids).await?;
    let mut by_task: HashMap<&str, Vec<&SessionRecord>> = HashMap::new();
    for s in &sessions {
        by_task.entry(s.task_id.as_str()).or_default().push(s);
    }
    Ok(records
        .into_iter()
        .map(|record| {
            let aggregate = PendingAction::aggregate(
                by_task
                    .get(record.id.as_str())
                    .into_iter()
                    .flatten()
                    .map(|s| pending.get(&s.id).copied().flatten()),
            );
            let summary = summaries.get(&record.id);
            to_dto(record, summary, aggregate)
        })
        .collect())
}

fn to_dto(
    record: TaskRecord,
    summary: Option<&StoredSummary>,
    aggregate: Option<PendingAction>,
) -> Task {
    Task {
        status_summary: summary.filter(|s| !s.invalidated).map(|s| s.to_dto()),
        status_summary_invalidated: summary.is_some_and(|s| s.invalidated),
        task_pending_action: aggregate,
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
}
