//! The notifications services publish after their writes committed (P10), in one place so
//! payload shapes match spec/api.md.

use serde_json::json;

use crate::server::events::Event;
use crate::server::repo::{
    MessageRecord, PermissionRecord, SessionRecord, StoredBundle, TurnRecord,
};
use crate::server::state::AppState;

/// `session.message.*` with the session's pending action and its P9 revision (reserved
/// before the authoritative read); the pending fields are omitted when the read fails.
pub async fn message(state: &AppState, action: &str, m: &MessageRecord) {
    let revision = state.next_pending_revision();
    let mut payload = json!({ "message": m.to_dto() });
    match state
        .repo
        .pending_actions_for_sessions(std::slice::from_ref(&m.session_id))
        .await
    {
        Ok(pending) => {
            payload["pending_action"] = json!(pending.get(&m.session_id).copied().flatten());
            payload["pending_action_revision"] = json!(revision);
        }
        Err(e) => tracing::warn!(error = %e, "pending action unknown for a message event"),
    }
    state.hub.publish(
        Event::new(action, payload)
            .for_task(m.task_id.clone())
            .for_session(m.session_id.clone()),
    );
}

pub fn turn(state: &AppState, action: &str, t: &TurnRecord) {
    state.hub.publish(
        Event::new(action, json!({ "turn": t.to_dto() }))
            .for_task(t.task_id.clone())
            .for_session(t.session_id.clone()),
    );
}

/// `session.*` with the session's P1 pending action and its P9 revision (reserved before the
/// authoritative read); without them when the read fails.
pub async fn session(state: &AppState, action: &str, s: &SessionRecord) {
    let revision = state.next_pending_revision();
    let dto = match state
        .repo
        .pending_actions_for_sessions(std::slice::from_ref(&s.id))
        .await
    {
        Ok(pending) => s.to_dto(pending.get(&s.id).copied().flatten(), Some(revision)),
        Err(e) => {
            tracing::warn!(error = %e, "pending action unknown for a session event");
            s.to_dto(None, None)
        }
    };
    state.hub.publish(
        Event::new(action, json!({ "session": dto }))
            .for_task(s.task_id.clone())
            .for_session(s.id.clone()),
    );
}

/// N6: a permission request the agent is waiting on.
pub fn permission_requested(state: &AppState, p: &PermissionRecord) {
    state.hub.publish(
        Event::new(
            "permission.requested",
            json!({ "permission": p.to_dto(), "permission_id": p.id, "session_id": p.session_id }),
        )
        .for_task(p.task_id.clone())
        .for_session(p.session_id.clone()),
    );
}

/// N6: answered, or cancelled because its turn or its agent ended.
pub fn permission_resolved(state: &AppState, p: &PermissionRecord) {
    state.hub.publish(
        Event::new(
            "permission.resolved",
            json!({ "permission": p.to_dto(), "permission_id": p.id, "status": p.status }),
        )
        .for_task(p.task_id.clone())
        .for_session(p.session_id.clone()),
    );
}

pub fn bundle(state: &AppState, action: &str, b: &StoredBundle) {
    state.hub.publish(
        Event::new(action, json!({ "bundle": b.to_dto() }))
            .for_task(b.record.task_id.clone())
            .for_session(b.record.session_id.clone()),
    );
}

/// Publishes `action` for each bundle id (re-read so the payload shows the committed state).
pub async fn bundles_by_id(state: &AppState, action: &str, pending_ids: &[String]) {
    for id in pending_ids {
        match state.repo.get_bundle(id).await {
            Ok(Some(b)) => bundle(state, action, &b),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(pending_id = %id, error = %e, "cannot re-read bundle for its event")
            }
        }
    }
}

pub fn task_updated(state: &AppState, task_id: &str) {
    state.hub.publish(
        Event::new("task.updated", json!({ "task_id": task_id })).for_task(task_id.to_string()),
    );
}
