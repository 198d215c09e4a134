//! The browser's parser for what the WebSocket pushes: [`Push`], what the page needs of a frame
//! (a notification, or the session a subscription confirms), read straight from the text. The
//! derived `Deserialize` of [`Envelope`] (an adjacently tagged enum, a flattened struct, an
//! untagged fallback) runs every payload through serde's `Content`, a second parser for every
//! payload type, and keeps everything else as `serde_json::Value`, whose parser and map would be
//! in the browser bundle only for that (B7, docs/decisions/0013). `Push::from(&Envelope)` says
//! what the derive reads; the tests hold the two to the same answer on every frame.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::notification::{Envelope, EnvelopeBody, MessageChange, Notification, PendingSnapshot};
use super::{
    Bundle, Message, PendingAction, PendingActionRevision, Permission, Session, Summary, Task, Turn,
};

/// What the browser does with a frame from `/ws`.
#[derive(Clone, Debug, PartialEq)]
pub enum Push {
    /// A notification (api.md "WebSocket"), folded into the stores.
    Notification(Box<Notification>),
    /// The response to `subscribe.session`: from now on this session's rows are pushed.
    Subscribed(String),
    /// Anything else (other responses, errors, actions this version does not know).
    Other,
}

const SUBSCRIBE: &str = "subscribe.session";

#[derive(Deserialize)]
struct SessionRef {
    session_id: String,
}

impl Push {
    /// Parses a frame as the server sent it; an error for text that is not an envelope (no
    /// `type`, `action` or `ts`), as the derive reports it.
    pub fn from_json(text: &str) -> serde_json::Result<Push> {
        #[derive(Deserialize)]
        struct Wire<'a> {
            #[serde(rename = "type")]
            _kind: String,
            action: String,
            #[serde(borrow, default)]
            payload: Option<&'a RawValue>,
            #[serde(rename = "ts")]
            _ts: String,
        }
        let wire: Wire = serde_json::from_slice(text.as_bytes())?;
        let payload = wire.payload.map_or("null", RawValue::get);
        Ok(match Notification::from_action(&wire.action, payload) {
            Some(Ok(n)) => Push::Notification(Box::new(n)),
            // A known action whose payload does not fit stays raw in the derive (untagged).
            _ if wire.action == SUBSCRIBE => {
                serde_json::from_slice::<SessionRef>(payload.as_bytes())
                    .map_or(Push::Other, |p| Push::Subscribed(p.session_id))
            }
            _ => Push::Other,
        })
    }
}

impl From<&Envelope> for Push {
    fn from(e: &Envelope) -> Push {
        match &e.body {
            EnvelopeBody::Notification(n) => Push::Notification(n.clone()),
            EnvelopeBody::Other { action, payload } if action == SUBSCRIBE => payload
                .get("session_id")
                .and_then(|v| v.as_str())
                .map_or(Push::Other, |s| Push::Subscribed(s.to_string())),
            EnvelopeBody::Other { .. } => Push::Other,
        }
    }
}

/// A `subscribe.session` or `unsubscribe.session` request frame (api.md "WebSocket").
pub fn session_request(subscribe: bool, session_id: &str) -> String {
    #[derive(Serialize)]
    struct Request<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        id: u32,
        action: &'static str,
        payload: Payload<'a>,
    }
    #[derive(Serialize)]
    struct Payload<'a> {
        session_id: &'a str,
    }
    let request = Request {
        kind: "request",
        id: 1,
        action: if subscribe {
            SUBSCRIBE
        } else {
            "unsubscribe.session"
        },
        payload: Payload { session_id },
    };
    serde_json::to_string(&request).unwrap_or_default()
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

    /// `Push::from_json` (the browser's parser) reads what the derived `Deserialize` reads.
    fn parse_both(v: serde_json::Value) -> Push {
        let text = v.to_string();
        let derived: Envelope = serde_json::from_str(&text).unwrap();
        let push = Push::from_json(&text).unwrap();
        assert_eq!(push, Push::from(&derived), "{text}");
        push
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
        ] {
            assert!(matches!(
                parse_both(envelope(action, payload)),
                Push::Notification(_)
            ));
        }
        // A known action whose payload does not fit stays raw, as with `untagged`.
        for (action, payload) in [
            ("task.deleted", serde_json::json!({ "task": 1 })),
            ("task.created", serde_json::Value::Null),
        ] {
            assert_eq!(parse_both(envelope(action, payload)), Push::Other);
        }
        let missing = serde_json::json!({ "type": "notification", "action": "resync", "ts": "t" });
        assert_eq!(parse_both(missing), Push::Other);
    }

    #[test]
    fn what_is_not_an_envelope_is_an_error_as_with_the_derive() {
        for text in [
            "{\"type\": \"notification\"}",
            "{\"action\": \"ping\", \"ts\": \"t\"}",
            "not json",
        ] {
            assert!(serde_json::from_str::<Envelope>(text).is_err());
            assert!(Push::from_json(text).is_err(), "{text}");
        }
    }

    #[test]
    fn a_subscription_response_names_its_session_and_other_responses_are_ignored() {
        let response = |action: &str, payload: serde_json::Value| {
            serde_json::json!({
            "type": "response", "id": 1, "action": action, "payload": payload, "ts": "t" })
        };
        assert_eq!(
            parse_both(response(
                SUBSCRIBE,
                serde_json::json!({ "session_id": "s1" })
            )),
            Push::Subscribed("s1".into())
        );
        for (action, payload) in [
            (SUBSCRIBE, serde_json::json!({ "session_id": 7 })),
            (SUBSCRIBE, serde_json::Value::Null),
            (
                "unsubscribe.session",
                serde_json::json!({ "session_id": "s1" }),
            ),
            ("ping", serde_json::json!({ "pong": true })),
        ] {
            assert_eq!(parse_both(response(action, payload)), Push::Other);
        }
    }

    #[test]
    fn session_requests_are_what_the_server_reads() {
        let v: serde_json::Value = serde_json::from_str(&session_request(true, "s\"1")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({ "type": "request", "id": 1, "action": "subscribe.session",
                "payload": { "session_id": "s\"1" } })
        );
        let v: serde_json::Value = serde_json::from_str(&session_request(false, "s")).unwrap();
        assert_eq!(v["action"], "unsubscribe.session");
    }
}
