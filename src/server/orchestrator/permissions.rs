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

/// Answers with `Some(option_id)` or cancels with `None`. The waiting agent call is taken
/// first: only the one who takes it may resolve the request, so an answer can neither race a
/// cancellation nor reach an agent that is gone.
pub async fn respond(
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
