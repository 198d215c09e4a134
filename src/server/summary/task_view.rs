//! Builds `Task` values for the wire: every read reconciles the stored summary first (P7), and
//! `task_pending_action` is the authoritative P2 aggregate from the authority's batch query.

use crate::model::limits;
use crate::model::{AppError, Task, TaskPage, TaskQuery};
use std::collections::HashMap;

use crate::server::repo::{SummaryRecord, TaskFilter, TaskRecord};
use crate::server::state::AppState;
use crate::server::summary::reconcile::{Reconciled, reconcile, reconcile_stored};
use crate::server::time::format_micros;

/// One page of the task list; only the page is reconciled (P7).
pub async fn list_tasks(state: &AppState, query: &TaskQuery) -> Result<TaskPage, AppError> {
    let limit = query.limit.unwrap_or(limits::TASK_PAGE_DEFAULT);
    if !(1..=limits::TASK_PAGE_MAX).contains(&limit) {
        return Err(AppError::BadRequest(format!(
            "limit must be between 1 and {}",
            limits::TASK_PAGE_MAX
        )));
    }
    let after = query.cursor.as_deref().map(decode_cursor).transpose()?;
    let title_like = match query.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
        Some(q) => {
            limits::at_most("q", q, limits::QUERY_CHARS).map_err(AppError::BadRequest)?;
            Some(format!("%{}%", escape_like(&q.to_lowercase())))
        }
        None => None,
    };
    let filter = TaskFilter {
        archived: query.archived.unwrap_or(false),
        title_like,
        pending_only: query.pending.unwrap_or(false),
        after,
        // One more than asked: whether another page exists.
        limit: i64::from(limit) + 1,
    };
    let mut rows = state.repo.list_tasks_page(&filter).await?;
    let next_cursor = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|(t, _)| encode_cursor(t.updated_at, &t.id))
    } else {
        None
    };
    // The stored summaries came with the page, read before the authority (P7).
    let mut records = Vec::with_capacity(rows.len());
    let mut stored = HashMap::with_capacity(rows.len());
    for (task, summary) in rows {
        if let Some(summary) = summary {
            stored.insert(task.id.clone(), summary);
        }
        records.push(task);
    }
    Ok(TaskPage {
        tasks: views(state, records, Some(stored)).await?,
        epoch: state.epoch.to_string(),
        next_cursor,
    })
}

/// `%`, `_` and `\` match themselves in a title search.
fn escape_like(q: &str) -> String {
    q.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

fn encode_cursor(updated_at: i64, id: &str) -> String {
    format!("{updated_at}.{id}")
}

fn decode_cursor(cursor: &str) -> Result<(i64, String), AppError> {
    cursor
        .split_once('.')
        .and_then(|(at, id)| Some((at.parse().ok()?, id.to_string())))
        .filter(|(_, id)| !id.is_empty() && id.len() <= 64)
        .ok_or_else(|| AppError::BadRequest("cursor is not one this server gave out".into()))
}

pub async fn get_task(state: &AppState, id: &str) -> Result<Task, AppError> {
    let record = state
        .repo
        .get_task(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("task {id}")))?;
    Ok(views(state, vec![record], None).await?.remove(0))
}

/// Tasks for the wire, reconciled (P7); `stored` are their summaries when already read.
async fn views(
    state: &AppState,
    records: Vec<TaskRecord>,
    stored: Option<HashMap<String, SummaryRecord>>,
) -> Result<Vec<Task>, AppError> {
    let ids: Vec<String> = records.iter().map(|t| t.id.clone()).collect();
    let (mut projections, mut summaries) = match stored {
        Some(stored) => reconcile_stored(state, &ids, stored).await?,
        None => reconcile(state, &ids).await?,
    };
    Ok(records
        .into_iter()
        .map(|record| {
            let projection = projections.remove(&record.id).unwrap_or_default();
            let (status_summary, invalidated) = match summaries.remove(&record.id) {
                Some(Reconciled::Fresh(s)) => (Some(s.to_dto()), false),
                _ => (None, true),
            };
            Task {
                status_summary,
                status_summary_invalidated: invalidated,
                task_pending_action: projection.pending_action,
                id: record.id,
                title: record.title,
                description: record.description,
                state: record.state,
                workflow_id: record.workflow_id,
                step_id: record.step_id,
                primary_session_id: projection.primary_session.map(|p| p.id),
                session_count: projection.session_count,
                archived: record.archived_at.is_some(),
                created_at: format_micros(record.created_at),
                updated_at: format_micros(record.updated_at),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_strangers_are_refused() {
        let c = encode_cursor(1_700_000_000_000_001, "01a2-x");
        assert_eq!(
            decode_cursor(&c).unwrap(),
            (1_700_000_000_000_001, "01a2-x".into())
        );
        for bad in ["", "abc", "12", "x.y", "12."] {
            assert!(decode_cursor(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn searches_match_wildcards_literally() {
        assert_eq!(escape_like("50%_off\\"), "50\\%\\_off\\\\");
    }
}
