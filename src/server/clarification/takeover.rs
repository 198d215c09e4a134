//! Several servers: a server that stops beating is dead; another server takes its sessions over while
//! it runs (not only at start-up). One compare-and-set on `session_owners` picks the server
//! that does; it recovers each session as start-up recovery would (L19, N6, L9: open turns
//! completed, questions detached and still answerable, permissions cancelled), tells the
//! clients, and delivers owed resumes by relaunching the agent here (`session/load`). The
//! answers its requests had claimed but not yet delivered are settled first, whichever server
//! runs their sessions (decision 0036).

use super::recovery::{self, Recovered};
use crate::server::orchestrator::{publish, worker, workflow};
use crate::server::repo::{AbandonedClaim, ClaimSettled, RepoResult};
use crate::server::state::AppState;
use crate::server::summary::projector::{Scope, refresh_task};
use crate::server::time::Micros;

/// Takes over the sessions of servers not heard from since `dead_before`; returns how many.
pub async fn take_over_dead(state: &AppState, dead_before: i64) -> RepoResult<usize> {
    settle_abandoned_claims(state, "", dead_before).await?;
    let own = &state.runtime.config.server_id;
    let mut taken = 0;
    for (session_id, owner) in state
        .repo
        .sessions_of_dead_servers(own, dead_before)
        .await?
    {
        // The session passes to this server (a new epoch: the dead server's writes are refused
        // from here on, should it come back) before anything of it is touched.
        if state
            .repo
            .transfer_session(&session_id, &owner, own, dead_before)
            .await?
            .is_some()
        {
            state
                .hooks
                .run(crate::server::hooks::Point::TakingOver, &session_id)
                .await;
            tracing::warn!(
                session_id,
                owner,
                "taking over the session of a server that stopped"
            );
            take_over(state, &session_id).await?;
            taken += 1;
        }
    }
    Ok(taken)
}

async fn take_over(state: &AppState, session_id: &str) -> RepoResult<()> {
    let repo = state.repo.as_ref();
    let now = state.clock.now();
    let Some(session) = repo.get_session(session_id).await? else {
        return Ok(());
    };
    let mut out = Recovered::default();
    recovery::settle(repo, |s| s == session_id, &mut out).await?;
    for p in repo.cancel_permissions(Some(session_id), now).await? {
        publish::permission_resolved(state, &p);
    }
    let mut detached = Vec::new();
    if !session.state.is_terminal() {
        let closed = recovery::close_session(repo, &session, now).await?;
        detached.extend(closed.detached);
        if let Some(s) = closed.moved {
            publish::session_state_changed(state, &s).await;
        }
    }
    if !detached.is_empty() {
        publish::bundles_by_id(state, publish::BundleEvent::Detached, &detached).await;
    }
    // N3: the turns closed here, and any whose step action the dead server did not run.
    workflow::run_due(state, Some(session_id)).await;
    if let Err(e) = refresh_task(state, &session.task_id, Scope::Full).await {
        tracing::warn!(session_id, error = %e, "summary refresh after a takeover failed");
    }
    if !repo.owed_resumes(session_id).await?.is_empty() {
        worker::deliver_owed(state, session_id, &session.task_id);
    }
    Ok(())
}

/// L19 across servers: the claims abandoned by `restarted` (this server, at start-up) or by
/// servers not seen since `alive_since` are settled (decision 0036) and announced: a restored
/// question is answerable again on every server.
async fn settle_abandoned_claims(
    state: &AppState,
    restarted: &str,
    alive_since: Micros,
) -> RepoResult<()> {
    let settled = recovery::settle_claims(state.repo.as_ref(), restarted, alive_since).await?;
    announce_settled(state, &settled).await;
    Ok(())
}

/// Restored questions are published, and the summaries of their tasks refreshed.
async fn announce_settled(state: &AppState, settled: &[(AbandonedClaim, ClaimSettled)]) {
    let restored: Vec<&AbandonedClaim> = settled
        .iter()
        .filter(|(_, s)| *s == ClaimSettled::Restored)
        .map(|(c, _)| c)
        .collect();
    if restored.is_empty() {
        return;
    }
    let ids: Vec<String> = restored.iter().map(|c| c.pending_id.clone()).collect();
    publish::bundles_by_id(state, publish::BundleEvent::Restored, &ids).await;
    let tasks: std::collections::BTreeSet<&str> =
        restored.iter().map(|c| c.task_id.as_str()).collect();
    for task in tasks {
        if let Err(e) = refresh_task(state, task, Scope::Full).await {
            tracing::warn!(task, error = %e, "summary refresh after a settled claim failed");
        }
    }
}
