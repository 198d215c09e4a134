//! Several servers: a session's agent runs on one server, the one `session_owners` names while its
//! heartbeat is fresh. A server that was out of touch with the database for the TTL may have
//! had its sessions taken over (`clarification::takeover`); it must not go on running their
//! agents next to the new owner's. So it stops them itself: all of them once its heartbeat has
//! failed for two thirds of the TTL (before anyone may take over), and, when it is back, each
//! one whose owner row no longer names it.

use std::time::Duration;

use super::worker;
use crate::server::state::AppState;

/// How long a server keeps its agents running while it cannot record its heartbeat.
pub fn fence_after(ttl: Duration) -> Duration {
    ttl * 2 / 3
}

/// Stops the agents of every session this server runs (its heartbeat failed too long).
pub fn fence_all(state: &AppState) -> usize {
    let sessions = state.runtime.owned.keys();
    for session_id in &sessions {
        tracing::warn!(
            session_id,
            "cannot record this server's heartbeat; stopping the agent before another server takes the session over"
        );
        worker::fence(state, session_id);
    }
    sessions.len()
}

/// Stops the agents of the sessions this server runs whose owner row no longer names it.
pub async fn fence_lost(state: &AppState) -> usize {
    let own = &state.runtime.config.server_id;
    let mut fenced = 0;
    for session_id in state.runtime.owned.keys() {
        match state.repo.live_owner(&session_id, i64::MIN).await {
            Ok(Some(owner)) if &owner == own => {}
            Ok(_) => {
                worker::fence(state, &session_id);
                state.runtime.owned.take(&session_id);
                fenced += 1;
            }
            Err(e) => tracing::warn!(session_id, error = %e, "cannot read the session's server"),
        }
    }
    fenced
}
