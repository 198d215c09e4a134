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

impl Envelope {
    /// Parses what the server sent. Same result as deriving through `Deserialize`, without the
    /// buffering the tagged, flattened and untagged derives need: the envelope's payload is
    /// kept raw and parsed once into the type its `action` names. In the browser bundle that
    /// buffering was a second copy of every payload type's parser (docs/decisions/0012).
    pub fn from_json(text: &str) -> serde_json::Result<Envelope> {
        use serde_json::value::RawValue;
        #[derive(Deserialize)]
        struct Wire<'a> {
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            id: Option<serde_json::Value>,
            action: String,
            #[serde(borrow, default)]
            payload: Option<&'a RawValue>,
            ts: String,
        }
        // `from_slice`, like the server functions' responses: one parser per type in the bundle.
        let wire: Wire = serde_json::from_slice(text.as_bytes())?;
        let payload = wire.payload.map_or("null", RawValue::get);
        let body = match Notification::from_action(&wire.action, payload) {
            Some(Ok(n)) => EnvelopeBody::Notification(Box::new(n)),
            // Unknown actions, and known ones whose payload does not fit, stay raw (untagged).
            _ => EnvelopeBody::Other {
                payload: serde_json::from_slice(payload.as_bytes())?,
                action: wire.action,
            },
        };
        Ok(Envelope {
            kind: wire.kind,
            id: wire.id,
            body,
            ts: wire.ts,
        })
    }
}

impl Notification {
    /// The notification an `action` names, from its raw JSON `payload`; `None` for an action
    /// that is not a notification.
    pub fn from_action(action: &str, payload: &str) -> Option<serde_json::Result<Notification>> {
        use Notification::*;
        fn parse<'a, T: Deserialize<'a>>(payload: &'a str) -> serde_json::Result<T> {
            serde_json::from_slice(payload.as_bytes())
        }
        #[derive(Deserialize)]
        struct TaskP {
            task: Task,
        }
        #[derive(Deserialize)]
        struct TaskIdP {
            task_id: String,
        }
        #[derive(Deserialize)]
        struct SummaryP {
            task_id: String,
            status_summary: Summary,
        }
        #[derive(Deserialize)]
        struct SessionP {
            session: Session,
        }
        #[derive(Deserialize)]
        struct TurnP {
            turn: Turn,
        }
        #[derive(Deserialize)]
        struct BundleP {
            bundle: Bundle,
        }
        #[derive(Deserialize)]
        struct PermissionP {
            permission: Permission,
        }
        #[derive(Deserialize)]
        struct ResyncP {
            reason: String,
            #[serde(default)]
            epoch: Option<String>,
            #[serde(default)]
            missed: Option<u64>,
        }
        /// `MessageChange` without `flatten`: the pending fields sit beside the message.
        #[derive(Deserialize)]
        struct MessageP {
            message: Message,
            #[serde(default)]
            pending_action: Option<PendingAction>,
            #[serde(default)]
            pending_action_revision: Option<PendingActionRevision>,
        }
        let task = |f: fn(Task) -> Notification| parse(payload).map(|p: TaskP| f(p.task));
        let session =
            |f: fn(Session) -> Notification| parse(payload).map(|p: SessionP| f(p.session));
        let turn = |f: fn(Turn) -> Notification| parse(payload).map(|p: TurnP| f(p.turn));
        let bundle = |f: fn(Bundle) -> Notification| parse(payload).map(|p: BundleP| f(p.bundle));
        let permission = |f: fn(Permission) -> Notification| {
            parse(payload).map(|p: PermissionP| f(p.permission))
        };
        let message = |f: fn(MessageChange) -> Notification| {
            parse(payload).map(|p: MessageP| {
                f(MessageChange {
                    message: p.message,
                    pending: p.pending_action_revision.map(|pending_action_revision| {
                        PendingSnapshot {
                            pending_action: p.pending_action,
                            pending_action_revision,
                        }
                    }),
                })
            })
        };
        Some(match action {
            "task.created" => task(|task| TaskCreated { task }),
            "task.updated" => task(|task| TaskUpdated { task }),
            "task.deleted" => parse(payload).map(|p: TaskIdP| TaskDeleted { task_id: p.task_id }),
            "task.status_summary.updated" => parse(payload).map(|p: SummaryP| SummaryUpdated {
                task_id: p.task_id,
                status_summary: p.status_summary,
            }),
            "session.created" => session(|session| SessionCreated { session }),
            "session.state_changed" => session(|session| SessionStateChanged { session }),
            "session.message.added" => message(MessageAdded),
            "session.message.updated" => message(MessageUpdated),
            "session.message.deleted" => message(MessageDeleted),
            "session.turn.started" => turn(|turn| TurnStarted { turn }),
            "session.turn.completed" => turn(|turn| TurnCompleted { turn }),
            "clarification.requested" => bundle(|bundle| ClarificationRequested { bundle }),
            "clarification.answered" => bundle(|bundle| ClarificationAnswered { bundle }),
            "clarification.rejected" => bundle(|bundle| ClarificationRejected { bundle }),
            "clarification.detached" => bundle(|bundle| ClarificationDetached { bundle }),
            "clarification.expired" => bundle(|bundle| ClarificationExpired { bundle }),
            "clarification.stale_dismissed" => {
                bundle(|bundle| ClarificationStaleDismissed { bundle })
            }
            "clarification.restored" => bundle(|bundle| ClarificationRestored { bundle }),
            "permission.requested" => permission(|permission| PermissionRequested { permission }),
            "permission.resolved" => permission(|permission| PermissionResolved { permission }),
            "resync" => parse(payload).map(|p: ResyncP| Resync {
                reason: p.reason,
                epoch: p.epoch,
                missed: p.missed,
            }),
            _ => return None,
        })
    }
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
        let e = parse_both(serde_json::json!({
            "type": "response", "id": 1, "action": "ping", "payload": { "pong": true }, "ts": "t"
        }));
        assert!(matches!(e.body, EnvelopeBody::Other { .. }));
    }

    /// `Envelope::from_json` (the browser's parser) and the derived `Deserialize` agree.
    fn parse_both(v: serde_json::Value) -> Envelope {
        let text = v.to_string();
        let derived: Envelope = serde_json::from_str(&text).unwrap();
        assert_eq!(Envelope::from_json(&text).unwrap(), derived, "{text}");
        derived
    }

    #[test]
    fn the_browser_parser_reads_what_the_derive_reads() {
        let message = serde_json::json!({
            "id": "m", "session_id": "s", "task_id": "t", "turn_id": "u", "author": "agent",
            "kind": "text", "content": "hi", "created_at": "x", "updated_at": "x" });
        let envelope = |action: &str, payload: serde_json::Value| serde_json::json!({ "type": "notification", "action": action, "payload": payload, "ts": "t" });
        for (action, payload) in [
            ("task.deleted", serde_json::json!({ "task_id": "t1" })),
            (
                "resync",
                serde_json::json!({ "reason": "connected", "epoch": "7" }),
            ),
            (
                "resync",
                serde_json::json!({ "reason": "lagged", "missed": 3 }),
            ),
            (
                "session.message.added",
                serde_json::json!({ "message": message }),
            ),
            (
                "session.message.updated",
                serde_json::json!({ "message": message, "pending_action": "clarification",
                    "pending_action_revision": { "epoch": "3", "sequence": 9 } }),
            ),
            (
                "session.message.deleted",
                serde_json::json!({ "message": message, "pending_action": null,
                    "pending_action_revision": { "epoch": "3", "sequence": 10 } }),
            ),
            // A known action whose payload does not fit stays raw, as with `untagged`.
            ("task.deleted", serde_json::json!({ "task": 1 })),
            ("task.created", serde_json::Value::Null),
        ] {
            parse_both(envelope(action, payload));
        }
        let missing = serde_json::json!({ "type": "notification", "action": "resync", "ts": "t" });
        assert!(matches!(
            parse_both(missing).body,
            EnvelopeBody::Other { .. }
        ));
        assert!(Envelope::from_json("{\"type\": \"notification\"}").is_err());
        assert!(Envelope::from_json("not json").is_err());
    }
}
