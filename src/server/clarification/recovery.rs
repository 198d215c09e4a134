//! L19: crash recovery of detached answers at start-up, before anything else runs.
//! - an empty, unattempted reservation is deleted and its bundle restored to pending;
//! - an attempted reservation stays current: its answer is final (published, delivered);
//! - a bundle left `delivery_pending` without a reservation is restored if still current,
//!   otherwise its marker is cleared.
//!
//! Any repository error aborts start-up (the caller fails loudly).

use crate::model::SessionState;
use crate::server::repo::{RepoResult, Repository};
use crate::server::time::Micros;

#[derive(Debug, Default, PartialEq)]
pub struct Recovered {
    pub deleted_reservations: Vec<String>,
    pub kept_attempted: Vec<String>,
    pub restored_bundles: Vec<String>,
    pub finalized_bundles: Vec<String>,
}

pub async fn recover(repo: &dyn Repository) -> RepoResult<Recovered> {
    let mut out = Recovered::default();
    for turn in repo.unpublished_reservations().await? {
        if turn.reservation == "reserved" && repo.delete_reservation(&turn.id).await? {
            out.deleted_reservations.push(turn.id.clone());
            continue;
        }
        // Attempted (or referenced by a message): the agent may have it; the answer is final.
        if turn.reservation == "reserved" {
            repo.mark_attempted(&turn.id).await?;
        }
        repo.publish_turn(&turn.id).await?;
        if let Some(pending_id) = &turn.resume_pending_id
            && repo.finalize_delivery(pending_id).await?
        {
            out.finalized_bundles.push(pending_id.clone());
        }
        out.kept_attempted.push(turn.id);
    }
    for bundle in repo.bundles_pending_delivery().await? {
        if repo.restore_bundle(&bundle.pending_id).await? {
            out.restored_bundles.push(bundle.pending_id);
        } else if repo.finalize_delivery(&bundle.pending_id).await? {
            out.finalized_bundles.push(bundle.pending_id);
        }
    }
    Ok(out)
}

/// Agent processes die with the server. Sessions that were starting, running or waiting keep
/// their questions answerable: open turns are completed (which detaches their waiting bundles,
/// L9) and the session waits for the human; a later prompt or answer relaunches the agent.
pub async fn recover_sessions(repo: &dyn Repository, now: Micros) -> RepoResult<()> {
    use SessionState::*;
    for s in repo
        .sessions_in_states(&[Starting, Running, WaitingForInput])
        .await?
    {
        for turn in repo.complete_open_turns(&s.id, now).await? {
            repo.detach_turn(&turn).await?;
        }
        repo.detach_session(&s.id).await?;
        if s.state != WaitingForInput {
            repo.set_session_state(&s.id, WaitingForInput, now).await?;
        }
    }
    Ok(())
}
