//! The loader (P4): what the summary should say, read from the repository through the
//! authority's batch query. Never from event payloads or remembered ids.

use std::collections::HashMap;

use crate::model::{PendingAction, PrimarySessionRef, SessionState, SummaryBody};
use crate::server::repo::{RepoResult, Repository, SummaryRecord, TaskSession};

/// The fields of a summary that are derived from sessions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Projection {
    /// P2 aggregate over input-capable sessions.
    pub pending_action: Option<PendingAction>,
    pub primary_session: Option<PrimarySessionRef>,
    pub activity: Option<String>,
    /// How many sessions the task has (the task view's `session_count`; not a summary field).
    pub session_count: u32,
    /// P3: prompts queued behind the open turns of its sessions.
    pub queued_prompt_count: u32,
}

impl Projection {
    /// The full projector (P4) replaces the session-derived fields and keeps the rest (the
    /// last error).
    pub fn apply(&self, mut body: SummaryBody) -> SummaryBody {
        body.pending_action = self.pending_action;
        body.primary_session = self.primary_session.clone();
        body.activity = self.activity.clone();
        body.queued_prompt_count = self.queued_prompt_count;
        body
    }

    /// Reconciliation (P7) replaces only the pending action.
    pub fn apply_pending_only(&self, mut body: SummaryBody) -> SummaryBody {
        body.pending_action = self.pending_action;
        body
    }
}

fn activity(state: SessionState) -> Option<String> {
    match state {
        SessionState::Starting | SessionState::Running => Some("generating".into()),
        SessionState::WaitingForInput | SessionState::Created => Some("idle".into()),
        _ => None,
    }
}

/// Projections for many tasks with one query: each task's sessions with their P1 pending
/// action (the authority's `task_sessions`).
pub async fn load_many(
    repo: &dyn Repository,
    task_ids: &[String],
) -> RepoResult<HashMap<String, Projection>> {
    Ok(project(task_ids, &repo.task_sessions(task_ids).await?))
}

pub async fn load(repo: &dyn Repository, task_id: &str) -> RepoResult<Projection> {
    Ok(load_many(repo, &[task_id.to_string()])
        .await?
        .remove(task_id)
        .unwrap_or_default())
}

/// The task's stored summary and its projection, read in one statement (one snapshot): the
/// summary is never older than the projection applied to it (the projector, P4 and P6).
pub async fn load_with_summary(
    repo: &dyn Repository,
    task_id: &str,
) -> RepoResult<(Option<SummaryRecord>, Projection)> {
    let ids = [task_id.to_string()];
    let (sessions, mut summaries) = repo.task_sessions_with_summaries(&ids).await?;
    let projection = project(&ids, &sessions).remove(task_id).unwrap_or_default();
    Ok((summaries.remove(task_id), projection))
}

/// P2 over each task's sessions.
fn project(task_ids: &[String], sessions: &[TaskSession]) -> HashMap<String, Projection> {
    let mut out: HashMap<String, Projection> = task_ids
        .iter()
        .map(|id| (id.clone(), Projection::default()))
        .collect();
    for s in sessions {
        let Some(p) = out.get_mut(&s.task_id) else {
            continue;
        };
        p.session_count += 1;
        p.queued_prompt_count = p.queued_prompt_count.saturating_add(s.queued_prompts);
        p.pending_action = PendingAction::aggregate([p.pending_action, s.pending_action]);
        if s.is_primary {
            p.primary_session = Some(PrimarySessionRef {
                id: s.session_id.clone(),
                state: s.state,
            });
            p.activity = activity(s.state);
        }
    }
    out
}
