//! Reconciliation (P7): at boot and on every task-list read, existing summaries whose pending
//! action disagrees with the repository are repaired (only that field; revision bumped;
//! `task.status_summary.updated` published) and missing ones are built.

use std::collections::HashMap;

use super::loader::{self, Projection};
use super::projector::{RefreshError, Scope, refresh_task};
use crate::server::repo::{RepoResult, StoredSummary};
use crate::server::state::AppState;

/// The outcome for one task.
#[derive(Debug)]
pub enum Reconciled {
    Fresh(StoredSummary),
    /// The repair failed; readers get no summary, an invalidated flag and the authoritative
    /// pending action.
    Failed(RefreshError),
}

/// Reconciles the given tasks; returns the authoritative projections and each task's summary.
pub async fn reconcile(
    state: &AppState,
    task_ids: &[String],
) -> RepoResult<(HashMap<String, Projection>, HashMap<String, Reconciled>)> {
    let projections = loader::load_many(state.repo.as_ref(), task_ids).await?;
    let mut stored = state.repo.get_summaries(task_ids).await?;
    let mut out = HashMap::with_capacity(task_ids.len());
    for id in task_ids {
        let projection = projections.get(id).cloned().unwrap_or_default();
        let outcome = match stored.remove(id) {
            Some(s) if s.body.pending_action == projection.pending_action && !s.invalidated => {
                Reconciled::Fresh(s)
            }
            Some(_) => refreshed(state, id, Scope::PendingOnly, projection.clone()).await,
            None => refreshed(state, id, Scope::Full, projection.clone()).await,
        };
        out.insert(id.clone(), outcome);
    }
    Ok((projections, out))
}

async fn refreshed(state: &AppState, id: &str, scope: Scope, projection: Projection) -> Reconciled {
    match refresh_task(state, id, scope, Some(projection)).await {
        Ok(s) => Reconciled::Fresh(s),
        Err(e) => {
            tracing::warn!(error = %e, task_id = id, "summary repair failed");
            Reconciled::Failed(e)
        }
    }
}

/// Boot (P7): every task. Returns how many summaries failed to repair.
pub async fn reconcile_all(state: &AppState) -> RepoResult<usize> {
    let ids: Vec<String> = state
        .repo
        .list_tasks()
        .await?
        .into_iter()
        .map(|t| t.id)
        .collect();
    let (_, results) = reconcile(state, &ids).await?;
    Ok(results
        .values()
        .filter(|r| matches!(r, Reconciled::Failed(_)))
        .count())
}
