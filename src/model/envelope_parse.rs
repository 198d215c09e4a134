//! The browser's parser for what the WebSocket pushes: the same result as the derived
//! `Deserialize` of [`Envelope`], without its buffering. The derive (an adjacently tagged enum,
//! a flattened struct, an untagged fallback) runs every payload through serde's `Content`, a
//! second parser for every payload type in the wasm bundle (docs/decisions/0013).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::notification::{Envelope, EnvelopeBody, MessageChange, Notification, PendingSnapshot};
use super::{
    Bundle, Message, PendingAction, PendingActionRevision, Permission, Session, Summary, Task, Turn,
};

impl Envelope {
    /// Parses what the server sent. Same result as deriving through `Deserialize`, without the
    /// buffering the tagged, flattened and untagged derives need: the envelope's payload is
    /// kept raw and parsed once into the type its `action` names. In the browser bundle that
    /// buffering was a second copy of every payload type's parser (docs/decisions/0012).
    pub fn from_json(text: &str) -> serde_json::Result<Envelope> {
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

    #[test]
    fn unknown_actions_stay_raw() {
        let e = parse_both(serde_json::json!({
            "type": "response", "id": 1, "action": "ping", "payload": { "pong": true }, "ts": "t"
        }));
        assert!(matches!(e.body, EnvelopeBody::Other { .. }));
    }
}
