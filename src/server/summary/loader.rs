//! The loader (P4): what the summary should say, read from the repository through the
//! authority's batch query. Never from event payloads or remembered ids.

use std::collections::HashMap;

use crate::model::{PendingAction, PrimarySessionRef, SessionState, SummaryBody};
use crate::server::repo::{RepoResult, Repository};

/// The fields of a summary that are derived from sessions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Projection {
    /// P2 aggregate over input-capable sessions.
    pub pending_action: Option<PendingAction>,
    pub primary_session: Option<PrimarySessionRef>,
    pub activity: Option<String>,
    /// How many sessions the task has (the task view's `session_count`; not a summary field).
    pub session_count: u32,
}

impl Projection {
    /// The full projector (P4) replaces the session-derived fields and keeps the rest
    /// (last error, queued prompts).
    pub fn apply(&self, mut body: SummaryBody) -> SummaryBody {
        body.pending_action = self.pending_action;
        body.primary_session = self.primary_session.clone();
        body.activity = self.activity.clone();
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
    let sessions = repo.task_sessions(task_ids).await?;
    let mut out: HashMap<String, Projection> = task_ids
        .iter()
        .map(|id| (id.clone(), Projection::default()))
        .collect();
    for s in &sessions {
        let Some(p) = out.get_mut(&s.task_id) else {
            continue;
        };
        p.session_count += 1;
        p.pending_action = PendingAction::aggregate([p.pending_action, s.pending_action]);
        if s.is_primary {
            p.primary_session = Some(PrimarySessionRef {
                id: s.session_id.clone(),
                state: s.state,
            });
            p.activity = activity(s.state);
        }
    }
    Ok(out)
}

pub async fn load(repo: &dyn Repository, task_id: &str) -> RepoResult<Projection> {
    Ok(load_many(repo, &[task_id.to_string()])
        .await?
        .remove(task_id)
        .unwrap_or_default())
}
