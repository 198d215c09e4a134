//! What the WebSocket pushes (docs/api.md "WebSocket"): one typed enum shared by the server,
//! which publishes it, and the browser, which applies it to its stores. On the wire it is the
//! envelope's `action` and `payload`.

use serde::{Deserialize, Serialize};

use super::{
    Bundle, Message, PendingAction, PendingActionRevision, Permission, Session, Summary, Task, Turn,
};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", content = "payload")]
pub enum Notification {
    #[serde(rename = "task.created")]
    TaskCreated { task: Task },
    #[serde(rename = "task.updated")]
    TaskUpdated { task: Task },
    #[serde(rename = "task.deleted")]
    TaskDeleted { task_id: String },
    /// P3/P10: a task's summary changed (its `revision` orders them).
    #[serde(rename = "task.status_summary.updated")]
    SummaryUpdated {
        task_id: String,
        status_summary: Summary,
    },
    #[serde(rename = "session.created")]
    SessionCreated { session: Session },
    /// Carries the session's P1 pending action and its P9 revision.
    #[serde(rename = "session.state_changed")]
    SessionStateChanged { session: Session },
    #[serde(rename = "session.message.added")]
    MessageAdded(MessageChange),
    #[serde(rename = "session.message.updated")]
    MessageUpdated(MessageChange),
    #[serde(rename = "session.message.deleted")]
    MessageDeleted(MessageChange),
    #[serde(rename = "session.turn.started")]
    TurnStarted { turn: Turn },
    #[serde(rename = "session.turn.completed")]
    TurnCompleted { turn: Turn },
    #[serde(rename = "clarification.requested")]
    ClarificationRequested { bundle: Bundle },
    #[serde(rename = "clarification.answered")]
    ClarificationAnswered { bundle: Bundle },
    #[serde(rename = "clarification.rejected")]
    ClarificationRejected { bundle: Bundle },
    #[serde(rename = "clarification.detached")]
    ClarificationDetached { bundle: Bundle },
    #[serde(rename = "clarification.expired")]
    ClarificationExpired { bundle: Bundle },
    #[serde(rename = "clarification.stale_dismissed")]
    ClarificationStaleDismissed { bundle: Bundle },
    /// L18: a claim that was not accepted was undone; the question is open again.
    #[serde(rename = "clarification.restored")]
    ClarificationRestored { bundle: Bundle },
    #[serde(rename = "permission.requested")]
    PermissionRequested { permission: Permission },
    #[serde(rename = "permission.resolved")]
    PermissionResolved { permission: Permission },
    /// P10: refetch every snapshot (sent on connect, after a restart and on lag).
    #[serde(rename = "resync")]
    Resync {
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        missed: Option<u64>,
    },
}

/// A transcript row that changed, with its session's pending action when it was known (P9).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageChange {
    pub message: Message,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingSnapshot>,
}

/// P1 for one session at one P9 revision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingSnapshot {
    pub pending_action: Option<PendingAction>,
    pub pending_action_revision: PendingActionRevision,
}

impl Notification {
    /// The envelope's `action`.
    pub fn action(&self) -> &'static str {
        use Notification::*;
        match self {
            TaskCreated { .. } => "task.created",
            TaskUpdated { .. } => "task.updated",
            TaskDeleted { .. } => "task.deleted",
            SummaryUpdated { .. } => "task.status_summary.updated",
            SessionCreated { .. } => "session.created",
            SessionStateChanged { .. } => "session.state_changed",
            MessageAdded(_) => "session.message.added",
            MessageUpdated(_) => "session.message.updated",
            MessageDeleted(_) => "session.message.deleted",
            TurnStarted { .. } => "session.turn.started",
            TurnCompleted { .. } => "session.turn.completed",
            ClarificationRequested { .. } => "clarification.requested",
            ClarificationAnswered { .. } => "clarification.answered",
            ClarificationRejected { .. } => "clarification.rejected",
            ClarificationDetached { .. } => "clarification.detached",
            ClarificationExpired { .. } => "clarification.expired",
            ClarificationStaleDismissed { .. } => "clarification.stale_dismissed",
            ClarificationRestored { .. } => "clarification.restored",
            PermissionRequested { .. } => "permission.requested",
            PermissionResolved { .. } => "permission.resolved",
            Resync { .. } => "resync",
        }
    }

    /// The session a notification is about, if any.
    pub fn session_id(&self) -> Option<&str> {
        use Notification::*;
        match self {
            SessionCreated { session } | SessionStateChanged { session } => Some(&session.id),
            MessageAdded(m) | MessageUpdated(m) | MessageDeleted(m) => Some(&m.message.session_id),
            TurnStarted { turn } | TurnCompleted { turn } => Some(&turn.session_id),
            ClarificationRequested { bundle }
            | ClarificationAnswered { bundle }
            | ClarificationRejected { bundle }
            | ClarificationDetached { bundle }
            | ClarificationExpired { bundle }
            | ClarificationStaleDismissed { bundle }
            | ClarificationRestored { bundle } => Some(&bundle.session_id),
            PermissionRequested { permission } | PermissionResolved { permission } => {
                Some(&permission.session_id)
            }
            TaskCreated { .. }
            | TaskUpdated { .. }
            | TaskDeleted { .. }
            | SummaryUpdated { .. }
            | Resync { .. } => None,
        }
    }

    /// The task a notification is about, if any.
    pub fn task_id(&self) -> Option<&str> {
        use Notification::*;
        match self {
            TaskCreated { task } | TaskUpdated { task } => Some(&task.id),
            TaskDeleted { task_id } | SummaryUpdated { task_id, .. } => Some(task_id),
            SessionCreated { session } | SessionStateChanged { session } => Some(&session.task_id),
            MessageAdded(m) | MessageUpdated(m) | MessageDeleted(m) => Some(&m.message.task_id),
            ClarificationRequested { bundle }
            | ClarificationAnswered { bundle }
            | ClarificationRejected { bundle }
            | ClarificationDetached { bundle }
            | ClarificationExpired { bundle }
            | ClarificationStaleDismissed { bundle }
            | ClarificationRestored { bundle } => Some(&bundle.task_id),
            PermissionRequested { permission } | PermissionResolved { permission } => {
                Some(&permission.task_id)
            }
            TurnStarted { .. } | TurnCompleted { .. } | Resync { .. } => None,
        }
    }

    /// Sent only to clients that subscribed to the session (transcript rows).
    pub fn is_session_scoped(&self) -> bool {
        matches!(
            self,
            Notification::MessageAdded(_)
                | Notification::MessageUpdated(_)
                | Notification::MessageDeleted(_)
        )
    }

    /// P4: after these the projector re-reads the task's pending state.
    pub fn refreshes_projection(&self) -> bool {
        use Notification::*;
        !matches!(
            self,
            TaskCreated { .. }
                | TaskUpdated { .. }
                | TaskDeleted { .. }
                | SummaryUpdated { .. }
                | Resync { .. }
        )
    }
}

/// The WebSocket envelope the server sends (`type: "notification"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<serde_json::Value>,
    #[serde(flatten)]
    pub body: EnvelopeBody,
    pub ts: String,
}

/// A notification, or anything else the server says (responses, errors) kept raw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EnvelopeBody {
    Notification(Box<Notification>),
    Other {
        action: String,
        #[serde(default)]
        payload: serde_json::Value,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_shape_is_action_and_payload() {
        let n = Notification::TaskDeleted {
            task_id: "t1".into(),
        };
        let v = serde_json::to_value(&n).unwrap();
        assert_eq!(
            v,
            serde_json::json!({ "action": "task.deleted", "payload": { "task_id": "t1" } })
        );
        assert_eq!(n.action(), "task.deleted");
        let back: Notification = serde_json::from_value(v).unwrap();
        assert_eq!(back, n);
    }

    #[test]
    fn message_events_omit_unknown_pending_fields() {
        let raw = serde_json::json!({
            "action": "session.message.added",
            "payload": { "message": {
                "id": "m", "session_id": "s", "task_id": "t", "turn_id": "u", "author": "agent",
                "kind": "text", "content": "hi", "created_at": "x", "updated_at": "x" } }
        });
        let n: Notification = serde_json::from_value(raw).unwrap();
        let Notification::MessageAdded(m) = &n else {
            panic!("{n:?}")
        };
        assert!(m.pending.is_none());
        let with = serde_json::json!({
            "action": "session.message.added",
            "payload": { "message": {
                "id": "m", "session_id": "s", "task_id": "t", "turn_id": "u", "author": "agent",
                "kind": "text", "content": "hi", "created_at": "x", "updated_at": "x" },
                "pending_action": null,
                "pending_action_revision": { "epoch": "3", "sequence": 9 } }
        });
        let n: Notification = serde_json::from_value(with).unwrap();
        let Notification::MessageAdded(m) = &n else {
            panic!("{n:?}")
        };
        assert_eq!(
            m.pending.as_ref().unwrap().pending_action_revision.sequence,
            9
        );
        assert_eq!(m.pending.as_ref().unwrap().pending_action, None);
    }

    #[test]
    fn unknown_actions_stay_raw_in_the_envelope() {
        let e: Envelope = serde_json::from_value(serde_json::json!({
            "type": "response", "id": 1, "action": "ping", "payload": { "pong": true }, "ts": "t"
        }))
        .unwrap();
        assert!(matches!(e.body, EnvelopeBody::Other { .. }));
    }
}
