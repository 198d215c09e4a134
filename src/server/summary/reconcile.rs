//! Reconciliation (P7): at boot and on every task-list read, existing summaries whose pending
//! action disagrees with the repository are repaired (only that field; revision bumped;
//! `task.status_summary.updated` published) and missing ones are built. After the projector
//! lagged (P10), every projected field of every summary is repaired the same way.

use std::collections::HashMap;

use super::loader::{self, Projection};
use super::projector::{RefreshError, Scope, refresh_task, summary_event};
use crate::server::hooks::Point;
use crate::server::repo::{RepoResult, SummaryRecord, SummaryWrite};
use crate::server::state::AppState;

/// The outcome for one task.
#[derive(Debug)]
pub enum Reconciled {
    Fresh(SummaryRecord),
    /// The repair failed; readers get no summary, an invalidated flag and the authoritative
    /// pending action.
    Failed(RefreshError),
}

/// Stale summaries written in one transaction at a time (B5: one sync per chunk, not per task;
/// small enough that other writers wait only briefly).
const BATCH: usize = 500;

/// Reconciles the given tasks; returns the authoritative projections and each task's summary.
/// Stale and missing summaries are written in batches of compare-and-sets; one that loses goes
/// through the projector's own retry loop (P6).
pub async fn reconcile(
    state: &AppState,
    task_ids: &[String],
) -> RepoResult<(HashMap<String, Projection>, HashMap<String, Reconciled>)> {
    let stored = state.repo.get_summaries(task_ids).await?;
    reconcile_stored(state, task_ids, stored).await
}

/// [`reconcile_stored`] (P7 reads and boot): only the pending action of an existing summary
/// is repaired.
pub async fn reconcile_stored(
    state: &AppState,
    task_ids: &[String],
    stored: HashMap<String, SummaryRecord>,
) -> RepoResult<(HashMap<String, Projection>, HashMap<String, Reconciled>)> {
    repair(state, task_ids, stored, Scope::PendingOnly).await
}

/// [`reconcile`] with the stored summaries already read (the task list reads them with its
/// page in one statement, B2); they must have been read before this reads the authority.
/// `scope` says what of an existing summary is repaired: its pending action (P7), or every
/// projected field (P10: a projector that lagged missed events that moved any of them).
async fn repair(
    state: &AppState,
    task_ids: &[String],
    mut stored: HashMap<String, SummaryRecord>,
    scope: Scope,
) -> RepoResult<(HashMap<String, Projection>, HashMap<String, Reconciled>)> {
    // The stored summaries first, then the authority: a change projected between the two
    // reads has bumped the revision, so the older view read here loses its compare-and-set
    // instead of being written back over the newer summary.
    if let Some(first) = task_ids.first() {
        state.hooks.run(Point::ReconcileReads, first).await;
    }
    let projections = loader::load_many(state.repo.as_ref(), task_ids).await?;
    let mut out = HashMap::with_capacity(task_ids.len());
    let mut writes = Vec::new();
    for id in task_ids {
        let projection = projections.get(id).cloned().unwrap_or_default();
        match stored.remove(id) {
            Some(s) => {
                let body = match scope {
                    Scope::PendingOnly => projection.apply_pending_only(s.body.clone()),
                    Scope::Full => projection.apply(s.body.clone()),
                };
                if body == s.body && !s.invalidated {
                    out.insert(id.clone(), Reconciled::Fresh(s));
                } else {
                    writes.push((
                        scope,
                        SummaryWrite {
                            task_id: id.clone(),
                            expected: Some(s.revision),
                            body,
                        },
                    ));
                }
            }
            None => {
                let body = projection.apply(Default::default());
                writes.push((
                    Scope::Full,
                    SummaryWrite {
                        task_id: id.clone(),
                        expected: None,
                        body,
                    },
                ));
            }
        }
    }
    for chunk in writes.chunks(BATCH) {
        let batch: Vec<SummaryWrite> = chunk.iter().map(|(_, w)| w.clone()).collect();
        // The tests' injection point between the read and the compare-and-set (P6).
        for w in &batch {
            state
                .hooks
                .run(crate::server::hooks::Point::BeforeSummaryCas, &w.task_id)
                .await;
        }
        let now = state.clock.now();
        let written = match state.repo.cas_summaries(&batch, now).await {
            Ok(written) => written,
            Err(e) => {
                tracing::warn!(error = %e, "batch summary repair failed; repairing one by one");
                vec![None; batch.len()]
            }
        };
        for ((scope, w), revision) in chunk.iter().zip(written) {
            let outcome = match revision {
                Some(revision) => {
                    let summary = SummaryRecord {
                        task_id: w.task_id.clone(),
                        revision,
                        body: w.body.clone(),
                        invalidated: false,
                        updated_at: now,
                    };
                    state.hub.publish(summary_event(&summary));
                    Reconciled::Fresh(summary)
                }
                // Lost the compare-and-set: our projection may be older than the summary
                // that won, so the projector's loop reads both again.
                None => refreshed(state, &w.task_id, *scope).await,
            };
            out.insert(w.task_id.clone(), outcome);
        }
    }
    Ok((projections, out))
}

async fn refreshed(state: &AppState, id: &str, scope: Scope) -> Reconciled {
    match refresh_task(state, id, scope).await {
        Ok(s) => Reconciled::Fresh(s),
        Err(e) => {
            tracing::warn!(error = %e, task_id = id, "summary repair failed");
            Reconciled::Failed(e)
        }
    }
}

/// Boot (P7): every task. Returns how many summaries failed to repair.
pub async fn reconcile_all(state: &AppState) -> RepoResult<usize> {
    every_task(state, Scope::PendingOnly).await
}

/// After the projector lagged (P10): every task, every projected field. Returns how many
/// summaries failed to repair.
pub async fn refresh_all(state: &AppState) -> RepoResult<usize> {
    every_task(state, Scope::Full).await
}

async fn every_task(state: &AppState, scope: Scope) -> RepoResult<usize> {
    let ids: Vec<String> = state
        .repo
        .list_tasks()
        .await?
        .into_iter()
        .map(|t| t.id)
        .collect();
    let stored = state.repo.get_summaries(&ids).await?;
    let (_, results) = repair(state, &ids, stored, scope).await?;
    Ok(results
        .values()
        .filter(|r| matches!(r, Reconciled::Failed(_)))
        .count())
}
