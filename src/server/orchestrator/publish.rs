//! The notifications services publish after their writes committed (P10): typed
//! (`model::Notification`), built in one place so payloads match docs/api.md.

use crate::model::{
    Bundle, MessageChange, Notification, PendingAction, PendingActionRevision, PendingSnapshot,
    Task,
};
use crate::server::events::Event;
use crate::server::repo::{
    BundleView, MessageRecord, MessageWritten, PermissionRecord, SessionRecord, TurnRecord,
};
use crate::server::state::AppState;

/// Which `session.message.*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageEvent {
    Added,
    Updated,
    Deleted,
}

/// Which `clarification.*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleEvent {
    Requested,
    Answered,
    Rejected,
    Detached,
    Expired,
    StaleDismissed,
    Restored,
}

impl BundleEvent {
    fn notification(self, bundle: Bundle) -> Notification {
        use Notification as N;
        match self {
            BundleEvent::Requested => N::ClarificationRequested { bundle },
            BundleEvent::Answered => N::ClarificationAnswered { bundle },
            BundleEvent::Rejected => N::ClarificationRejected { bundle },
            BundleEvent::Detached => N::ClarificationDetached { bundle },
            BundleEvent::Expired => N::ClarificationExpired { bundle },
            BundleEvent::StaleDismissed => N::ClarificationStaleDismissed { bundle },
            BundleEvent::Restored => N::ClarificationRestored { bundle },
        }
    }
}

fn send(state: &AppState, n: Notification) {
    state.hub.publish(Event::from(n));
}

/// P1 for one session with its P9 revision (reserved before the authoritative read); `None`
/// when the read fails.
async fn pending_of(state: &AppState, session_id: &str) -> Option<PendingSnapshot> {
    let revision = state.next_pending_revision().await;
    match state
        .repo
        .pending_actions_for_sessions(&[session_id.to_string()])
        .await
    {
        Ok(pending) => Some(PendingSnapshot {
            pending_action: pending.get(session_id).copied().flatten(),
            pending_action_revision: revision,
        }),
        Err(e) => {
            tracing::warn!(error = %e, session_id, "pending action unknown for an event");
            None
        }
    }
}

/// `session.message.*` with the session's pending action when it could be read.
pub async fn message(state: &AppState, event: MessageEvent, m: &MessageRecord) {
    let pending = pending_of(state, &m.session_id).await;
    send(state, message_notification(event, m, pending));
}

/// `session.message.*` for a message as its write returned it: the write's statement read the
/// session's P1 after `revision` was reserved (P9), so no second read. A new message that did
/// not make a reserved turn count, or a rewritten one, changed nothing the projector reads,
/// so its event asks for no refresh (P4, decision 0037).
pub fn message_written(
    state: &AppState,
    event: MessageEvent,
    m: &MessageWritten,
    revision: PendingActionRevision,
) {
    let e = Event::from(message_notification(
        event,
        &m.message,
        as_written(m.pending_action, revision),
    ));
    let changes_projection = match event {
        MessageEvent::Added => m.can_move_turn,
        MessageEvent::Updated => false,
        MessageEvent::Deleted => true,
    };
    state.hub.publish(if changes_projection {
        e
    } else {
        e.without_refresh()
    });
}

fn message_notification(
    event: MessageEvent,
    m: &MessageRecord,
    pending: Option<PendingSnapshot>,
) -> Notification {
    let change = MessageChange {
        message: m.to_dto(),
        pending,
    };
    match event {
        MessageEvent::Added => Notification::MessageAdded(change),
        MessageEvent::Updated => Notification::MessageUpdated(change),
        MessageEvent::Deleted => Notification::MessageDeleted(change),
    }
}

pub fn turn_started(state: &AppState, t: &TurnRecord) {
    send(state, Notification::TurnStarted { turn: t.to_dto() });
}

pub fn turn_completed(state: &AppState, t: &TurnRecord) {
    send(state, Notification::TurnCompleted { turn: t.to_dto() });
}

/// The session with its P1 pending action and P9 revision.
async fn session_dto(state: &AppState, s: &SessionRecord) -> crate::model::Session {
    session_with(s, &pending_of(state, &s.id).await)
}

/// The session with the pending snapshot `pending` (none when it could not be read).
fn session_with(s: &SessionRecord, pending: &Option<PendingSnapshot>) -> crate::model::Session {
    match pending {
        Some(p) => s.to_dto(p.pending_action, Some(p.pending_action_revision.clone())),
        None => s.to_dto(None, None),
    }
}

pub async fn session_created(state: &AppState, s: &SessionRecord) {
    let session = session_dto(state, s).await;
    send(state, Notification::SessionCreated { session });
}

pub async fn session_state_changed(state: &AppState, s: &SessionRecord) {
    let session = session_dto(state, s).await;
    send(state, Notification::SessionStateChanged { session });
}

/// The P1 snapshot a write returned (`SESSION_COLUMNS`, `MESSAGE_WRITTEN`): read by the
/// write's own statement, after `revision` was reserved (P9).
fn as_written(
    pending_action: Option<PendingAction>,
    revision: PendingActionRevision,
) -> Option<PendingSnapshot> {
    Some(PendingSnapshot {
        pending_action,
        pending_action_revision: revision,
    })
}

/// `session.state_changed` for the session as its write returned it (no second read).
pub fn session_state_written(state: &AppState, s: &SessionRecord, revision: PendingActionRevision) {
    let session = session_with(s, &as_written(s.pending_action, revision));
    send(state, Notification::SessionStateChanged { session });
}

/// `session.state_changed`, then `session.message.added`, for one write that changed both
/// (an ask, L7): the session row's P1 as the write returned it serves both, since both
/// describe the same commit.
pub fn session_state_and_message_added(
    state: &AppState,
    s: &SessionRecord,
    m: &MessageRecord,
    revision: PendingActionRevision,
) {
    let pending = as_written(s.pending_action, revision);
    let session = session_with(s, &pending);
    send(state, Notification::SessionStateChanged { session });
    // The state event's refresh reads after the whole commit (P4).
    state.hub.publish(
        Event::from(message_notification(MessageEvent::Added, m, pending)).without_refresh(),
    );
}

/// N6: a permission request the agent is waiting on.
pub fn permission_requested(state: &AppState, p: &PermissionRecord) {
    send(
        state,
        Notification::PermissionRequested {
            permission: p.to_dto(),
        },
    );
}

/// N6: answered, or cancelled because its turn or its agent ended.
pub fn permission_resolved(state: &AppState, p: &PermissionRecord) {
    send(
        state,
        Notification::PermissionResolved {
            permission: p.to_dto(),
        },
    );
}

pub fn bundle(state: &AppState, event: BundleEvent, b: &BundleView) {
    send(state, event.notification(b.to_dto()));
}

/// `clarification.*` for a bundle whose write was committed with a session change already
/// published (its state event came first, L6): the projector's refresh for that event read
/// after this write too, so this event asks for none (P4).
pub fn bundle_announced(state: &AppState, event: BundleEvent, b: &BundleView) {
    state
        .hub
        .publish(Event::from(event.notification(b.to_dto())).without_refresh());
}

/// Publishes `event` for each bundle id (re-read so the payload shows the committed state).
pub async fn bundles_by_id(state: &AppState, event: BundleEvent, pending_ids: &[String]) {
    for id in pending_ids {
        match state.repo.get_bundle(id).await {
            Ok(Some(b)) => bundle(state, event, &b),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(pending_id = %id, error = %e, "cannot re-read bundle for its event")
            }
        }
    }
}

pub fn task_created(state: &AppState, task: &Task) {
    send(state, Notification::TaskCreated { task: task.clone() });
}

/// `task.updated` with the task as it reads now (title, step, archive, primary session).
pub async fn task_updated(state: &AppState, task_id: &str) {
    match crate::server::summary::task_view::get_task(state, task_id).await {
        Ok(task) => send(state, Notification::TaskUpdated { task }),
        Err(e) => tracing::warn!(task_id, error = %e, "cannot read the task for its event"),
    }
}

pub fn task_deleted(state: &AppState, task_id: &str) {
    send(
        state,
        Notification::TaskDeleted {
            task_id: task_id.to_string(),
        },
    );
}
