//! L5, N6: once a resume is owed for an answer to an older question, that resume is the
//! session's current turn. The questions and permission requests of the turns it superseded
//! may still hold their agent calls — on the server that runs the session's agent, which is
//! where they are ended, so the agent finishes its turn and takes the answer.

use crate::model::BundleStatus;
use crate::server::runtime::WaiterMsg;
use crate::server::state::AppState;

/// What an agent call waiting for a superseded question hears (L6).
pub const SUPERSEDED: &str = "this turn was superseded (the user already answered an earlier question, \
     which comes next as a new message); continue without asking";

/// Pending but no longer active (a newer turn exists): nobody can answer it (L5).
pub async fn is_superseded(state: &AppState, pending_id: &str) -> bool {
    matches!(state.repo.get_bundle(pending_id).await, Ok(Some(b)) if b.is_superseded())
}

/// Ends the waits of `session_id`'s superseded questions and cancels its superseded
/// permission requests, as held on this server.
pub async fn end_waits(state: &AppState, session_id: &str) {
    release_questions(state, session_id).await;
    if let Err(e) = super::permissions::cancel_superseded(state, session_id).await {
        tracing::warn!(session_id, error = %e, "cannot cancel superseded permission requests");
    }
}

/// The waiting calls of questions a newer turn superseded return instead of waiting for
/// answers nobody can give.
async fn release_questions(state: &AppState, session_id: &str) {
    let Ok(bundles) = state.repo.session_bundles(session_id).await else {
        return;
    };
    for b in bundles.iter().filter(|b| b.status == BundleStatus::Pending) {
        if !state.runtime.waiters.contains(&b.pending_id)
            || !is_superseded(state, &b.pending_id).await
        {
            continue;
        }
        if let Some(waiter) = state.runtime.waiters.take(&b.pending_id) {
            let _ = waiter.send(WaiterMsg::Ended(SUPERSEDED));
        }
    }
}
