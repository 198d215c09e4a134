//! L19: crash recovery at start-up, before anything else runs.
//! - a reservation never made owed is deleted and its bundle restored to pending;
//! - an owed resume (attempted, with its prompt) stays owed: its answer is final and it is
//!   delivered by the session's next launch (start-up kicks it, L18);
//! - an attempted turn of an older server (no prompt kept) is published as it was;
//! - a bundle left `delivery_pending` without an owed resume was never handed over: it is
//!   restored if still current, otherwise its marker is cleared — decided by who claimed it,
//!   not by who runs its session (decision 0036): a claim is settled once the server whose
//!   request made it is gone (restarted, or no heartbeat for the TTL), never while that
//!   request may still accept or undo it;
//! - permission requests die with the agents that asked (N6): all pending ones are cancelled.
//!
//! Any repository error aborts start-up (the caller fails loudly).

use crate::model::SessionState;
use crate::server::repo::{AbandonedClaim, ClaimSettled, RepoResult, Repository, SessionRecord};
use crate::server::time::Micros;

#[derive(Debug, Default, PartialEq)]
pub struct Recovered {
    pub deleted_reservations: Vec<String>,
    pub kept_owed: Vec<String>,
    pub restored_bundles: Vec<String>,
    pub finalized_bundles: Vec<String>,
    pub cancelled_permissions: Vec<String>,
}

/// Start-up recovery for a server alone on its database (every claim is abandoned).
pub async fn recover(repo: &dyn Repository, now: Micros) -> RepoResult<Recovered> {
    recover_except(repo, now, &[], "", Micros::MAX).await
}

/// [`recover`] at the start of server `restarted`, leaving alone the sessions in `keep`
/// (their agent runs on another live server) and the claims of servers seen
/// beating since `alive_since`.
pub async fn recover_except(
    repo: &dyn Repository,
    now: Micros,
    keep: &[String],
    restarted: &str,
    alive_since: Micros,
) -> RepoResult<Recovered> {
    let mut out = Recovered::default();
    settle(repo, |session| !keep.iter().any(|k| k == session), &mut out).await?;
    for (claim, settled) in settle_claims(repo, restarted, alive_since).await? {
        match settled {
            ClaimSettled::Restored => out.restored_bundles.push(claim.pending_id),
            ClaimSettled::Finalized => out.finalized_bundles.push(claim.pending_id),
            ClaimSettled::Untouched => {}
        }
    }
    out.cancelled_permissions = repo
        .cancel_permissions_except(keep, now)
        .await?
        .into_iter()
        .map(|p| p.id)
        .collect();
    Ok(out)
}

/// L19 for the sessions `mine` accepts: reservations never made owed are deleted (their
/// bundles restored), owed resumes kept. (Undelivered claims are settled by their claimer's
/// fate, [`settle_claims`].)
pub(super) async fn settle(
    repo: &dyn Repository,
    mine: impl Fn(&str) -> bool,
    out: &mut Recovered,
) -> RepoResult<()> {
    for turn in repo.unpublished_reservations().await? {
        if !mine(&turn.session_id) {
            continue;
        }
        if turn.reservation == "reserved" {
            if repo.delete_reservation(&turn.id).await? {
                out.deleted_reservations.push(turn.id.clone());
            } else {
                // Referenced by a message: it counts already; publish it as it is.
                repo.mark_attempted(&turn.id).await?;
                repo.publish_turn(&turn.id).await?;
            }
            continue;
        }
        if turn.resume_prompt.is_some() {
            out.kept_owed.push(turn.id);
        } else {
            repo.publish_turn(&turn.id).await?;
        }
    }
    Ok(())
}

/// L19 across servers (decision 0036): every claim whose request is gone — made by
/// `restarted` (a server starting: nothing of it is in flight) or by a server not seen since
/// `alive_since` — is restored if still current, otherwise finalized. Each settles only while
/// it is still that claim, so a new claim made meanwhile is left alone.
pub async fn settle_claims(
    repo: &dyn Repository,
    restarted: &str,
    alive_since: Micros,
) -> RepoResult<Vec<(AbandonedClaim, ClaimSettled)>> {
    let mut settled = Vec::new();
    for claim in repo.abandoned_claims(restarted, alive_since).await? {
        let outcome = repo.settle_abandoned(&claim).await?;
        if outcome != ClaimSettled::Untouched {
            tracing::warn!(pending_id = %claim.pending_id, claimed_by = ?claim.claimed_by,
                ?outcome, "settled an answer whose request died with its server (L19)");
        }
        settled.push((claim, outcome));
    }
    Ok(settled)
}

/// What [`recover_sessions`] did.
#[derive(Debug, Default)]
pub struct RecoveredSessions {
    /// The task of every session it closed: each summary is refreshed (P3, P4), since a
    /// session that only moved to `waiting_for_input` changes its task's activity too.
    pub tasks: std::collections::BTreeSet<String>,
}

/// Agent processes die with the server. Sessions that were starting, running or waiting keep
/// their questions answerable: open turns are completed (which detaches their waiting bundles,
/// L9) and the session waits for the human; a later prompt or answer relaunches the agent.
/// Owed resumes are not open turns: they stay owed.
pub async fn recover_sessions(repo: &dyn Repository, now: Micros) -> RepoResult<RecoveredSessions> {
    recover_sessions_except(repo, now, &[]).await
}

/// [`recover_sessions`], leaving alone the sessions in `keep`.
pub async fn recover_sessions_except(
    repo: &dyn Repository,
    now: Micros,
    keep: &[String],
) -> RepoResult<RecoveredSessions> {
    let mut out = RecoveredSessions::default();
    for s in repo.sessions_to_recover().await? {
        if keep.contains(&s.id) {
            continue;
        }
        close_session(repo, &s, now).await?;
        out.tasks.insert(s.task_id.clone());
    }
    Ok(out)
}

/// What [`close_session`] changed. The open turns it completed are left with their step
/// actions due (N3): the caller runs them once the application state exists.
pub(super) struct Closed {
    /// Bundles it detached (L9: still answerable).
    pub detached: Vec<String>,
    /// The session after its move to `waiting_for_input`, when it moved.
    pub moved: Option<SessionRecord>,
}

/// A session whose agent is gone: its open turns complete (owed resumes aside), its questions
/// detach and stay answerable (L9), its queued prompts are gone with its server, and it waits
/// for input.
pub(super) async fn close_session(
    repo: &dyn Repository,
    s: &SessionRecord,
    now: Micros,
) -> RepoResult<Closed> {
    let mut closed = Closed {
        detached: Vec::new(),
        moved: None,
    };
    for turn in repo.complete_open_turns(&s.id, now).await? {
        closed.detached.extend(repo.detach_turn(&turn).await?);
    }
    closed.detached.extend(repo.detach_session(&s.id).await?);
    // The prompts queued behind its turn were in its server's memory (P3).
    repo.set_queued_prompts(&s.id, 0).await?;
    if s.state != SessionState::WaitingForInput {
        closed.moved = repo
            .set_session_state(&s.id, SessionState::WaitingForInput, now)
            .await?;
    }
    Ok(closed)
}
