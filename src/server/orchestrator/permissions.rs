//! Permission requests (N6): an agent asks to run a tool; the human picks an option. A request
//! lives only as long as the agent connection that asked: answering one whose agent is gone
//! (turn ended, agent exited, server restarted) is a conflict and sends nothing anywhere.

use crate::model::{AppError, Permission};
use crate::server::state::AppState;

use super::publish;

pub async fn get(state: &AppState, id: &str) -> Result<Permission, AppError> {
    state
        .repo
        .get_permission_request(id)
        .await?
        .map(|p| p.to_dto())
        .ok_or_else(|| AppError::NotFound(format!("permission {id}")))
}

/// P1: the session's pending permission request in its current turn, if any (what the UI
/// shows as the permission prompt).
pub async fn pending_for_session(
    state: &AppState,
    session_id: &str,
) -> Result<Option<Permission>, AppError> {
    let Some(turn) = state.repo.current_turn_id(session_id).await? else {
        return Ok(None);
    };
    Ok(state
        .repo
        .latest_permission_request(session_id, &turn)
        .await?
        .filter(|p| p.status == "pending")
        .map(|p| p.to_dto()))
}

/// Answers with `Some(option_id)` or cancels with `None`, where the agent waits: here, or on
/// the server that runs the session's agent.
pub async fn respond(
    state: &AppState,
    id: &str,
    option_id: Option<String>,
) -> Result<Permission, AppError> {
    if !state.runtime.permissions.contains(id)
        && let Some(request) = state.repo.get_permission_request(id).await?
        && let Some(forwarded) =
            super::forward::permission(state, &request.session_id, id, option_id.as_deref()).await
    {
        return forwarded;
    }
    respond_here(state, id, option_id).await
}

/// `respond` on this server. The waiting agent call is taken first: only the one who takes it
/// may resolve the request, so an answer can neither race a cancellation nor reach an agent
/// that is gone.
pub async fn respond_here(
    state: &AppState,
    id: &str,
    option_id: Option<String>,
) -> Result<Permission, AppError> {
    let request = state
        .repo
        .get_permission_request(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("permission {id}")))?;
    if let Some(option) = &option_id
        && !request.to_dto().options.iter().any(|o| &o.id == option)
    {
        return Err(AppError::BadRequest(format!(
            "unknown option_id {option:?}"
        )));
    }
    let Some(reply) = state.runtime.permissions.take(id) else {
        return Err(AppError::Conflict(format!(
            "permission {id} is {}: its agent is no longer waiting for it",
            if request.status == "pending" {
                "gone"
            } else {
                request.status.as_str()
            }
        )));
    };
    let status = if option_id.is_some() {
        "selected"
    } else {
        "cancelled"
    };
    if !state
        .repo
        .resolve_permission_request(id, status, option_id.as_deref(), state.clock.now())
        .await?
    {
        let _ = reply.send(None);
        return Err(AppError::Conflict(format!(
            "permission {id} is no longer pending"
        )));
    }
    // I8: the agent acts on the decision only once it is on disk (decision 0024); it is
    // committed either way, so a failed sync is reported, not undone.
    if let Err(e) = state.durable().await {
        tracing::error!(permission_id = id, error = %e, "cannot sync a permission decision to disk");
    }
    if reply.send(option_id).is_err() {
        tracing::debug!(
            permission_id = id,
            "the agent stopped waiting as it was answered"
        );
    }
    let resolved = state
        .repo
        .get_permission_request(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("permission {id}")))?;
    publish::permission_resolved(state, &resolved);
    Ok(resolved.to_dto())
}

/// N6: permission requests of turns that are no longer current (an owed resume superseded
/// them) are cancelled: nobody can see or answer them, so their agent must not wait on them.
pub async fn cancel_superseded(state: &AppState, session_id: &str) -> Result<(), AppError> {
    let Some(current) = state.repo.current_turn_id(session_id).await? else {
        return Ok(());
    };
    let pending = state
        .repo
        .pending_permission_requests(session_id)
        .await?
        .into_iter()
        .filter(|p| p.turn_id != current);
    for p in pending {
        if let Some(reply) = state.runtime.permissions.take(&p.id) {
            let _ = reply.send(None);
        }
        if state
            .repo
            .resolve_permission_request(&p.id, "cancelled", None, state.clock.now())
            .await?
            && let Some(resolved) = state.repo.get_permission_request(&p.id).await?
        {
            publish::permission_resolved(state, &resolved);
        }
    }
    Ok(())
}
