//! The browser's live state, as plain data: tasks and sessions keyed by id, fed by snapshots
//! (server functions) and pushes (the socket) and merged by revision, so an older value never
//! overwrites a newer one — P3's summary `revision` for tasks, P9's `{epoch, sequence}` for
//! sessions, across server restarts too. No `view!` here: unit-tested natively.

mod id_map;
mod sessions;
mod tasks;
mod transcript;

pub use id_map::{IdMap, IdSet};
pub use sessions::{SessionBook, merge_session};
pub use tasks::{TaskBook, apply_summary, merge_task};
pub use transcript::Transcript;

use crate::model::PendingActionRevision;

/// `a` is strictly newer than `b` (P9); a missing revision is older than any.
pub fn newer(a: Option<&PendingActionRevision>, b: Option<&PendingActionRevision>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.is_newer_than(b),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// Values the store's tests build.
#[cfg(test)]
mod fixtures {
    use crate::model::{
        Message, MessageAuthor, MessageChange, MessageKind, PendingAction, PendingActionRevision,
        PendingSnapshot, Session, SessionState, Summary, SummaryBody, Task,
    };

    pub fn rev(epoch: &str, sequence: u64) -> PendingActionRevision {
        PendingActionRevision {
            epoch: epoch.into(),
            sequence,
        }
    }

    pub fn task(
        id: &str,
        updated_at: &str,
        summary_rev: Option<i64>,
        pending: Option<PendingAction>,
    ) -> Task {
        Task {
            id: id.into(),
            title: id.into(),
            description: String::new(),
            state: "open".into(),
            workflow_id: None,
            step_id: None,
            primary_session_id: None,
            session_count: 0,
            status_summary: summary_rev.map(|revision| Summary {
                revision,
                updated_at: updated_at.into(),
                body: SummaryBody {
                    pending_action: pending,
                    ..Default::default()
                },
            }),
            status_summary_invalidated: false,
            task_pending_action: pending,
            archived: false,
            created_at: "2026-01-01T00:00:00.000000Z".into(),
            updated_at: updated_at.into(),
        }
    }

    pub fn session(
        id: &str,
        pending: Option<PendingAction>,
        r: Option<PendingActionRevision>,
    ) -> Session {
        Session {
            id: id.into(),
            task_id: "t".into(),
            name: id.into(),
            agent_profile_id: None,
            state: SessionState::WaitingForInput,
            is_primary: false,
            started_at: None,
            completed_at: None,
            created_at: "2026-01-01T00:00:00.000000Z".into(),
            pending_action: pending,
            pending_action_revision: r,
        }
    }

    pub fn change(
        session_id: &str,
        id: &str,
        updated_at: &str,
        pending: Option<PendingSnapshot>,
    ) -> MessageChange {
        MessageChange {
            message: Message {
                id: id.into(),
                session_id: session_id.into(),
                task_id: "t".into(),
                turn_id: "u".into(),
                author: MessageAuthor::Agent,
                kind: MessageKind::Text,
                content: updated_at.into(),
                pending_id: None,
                html: None,
                source: None,
                created_at: id.into(),
                updated_at: updated_at.into(),
            },
            pending,
        }
    }
}
