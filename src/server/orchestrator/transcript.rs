//! Reading a session's transcript: pages newest-last, paged upward for long sessions (the UI),
//! or onward from a message (`GET /sessions/{id}/messages?after=`).

use super::publish;
use crate::model::{AppError, Message, MessagePage, Turn};
use crate::server::state::AppState;

/// Messages a page holds at most.
pub const MAX_PAGE: i64 = 1000;
/// What the task page loads first, and per "load earlier".
pub const UI_PAGE: i64 = 200;

fn check(limit: i64) -> Result<(), AppError> {
    if (1..=MAX_PAGE).contains(&limit) {
        Ok(())
    } else {
        Err(AppError::BadRequest(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )))
    }
}

async fn ensure_session(state: &AppState, session_id: &str) -> Result<(), AppError> {
    match state.repo.get_session(session_id).await? {
        Some(_) => Ok(()),
        None => Err(AppError::NotFound(format!("session {session_id}"))),
    }
}

/// The newest `limit` messages before `before` (or the newest overall), oldest first.
pub async fn page_before(
    state: &AppState,
    session_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<MessagePage, AppError> {
    check(limit)?;
    ensure_session(state, session_id).await?;
    let mut rows = state
        .repo
        .list_messages_before(session_id, before, limit + 1)
        .await?;
    let more_before = rows.len() > limit as usize;
    if more_before {
        rows.remove(0);
    }
    Ok(MessagePage {
        messages: rows.iter().map(|m| m.to_dto()).collect(),
        more_before,
    })
}

/// Up to `limit` messages after `after` (or from the start), oldest first.
pub async fn after(
    state: &AppState,
    session_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<Message>, AppError> {
    check(limit)?;
    ensure_session(state, session_id).await?;
    Ok(state
        .repo
        .list_messages(session_id, after, limit)
        .await?
        .iter()
        .map(|m| m.to_dto())
        .collect())
}

/// The session's turns in L1 order.
pub async fn turns(state: &AppState, session_id: &str) -> Result<Vec<Turn>, AppError> {
    ensure_session(state, session_id).await?;
    Ok(state
        .repo
        .list_turns(session_id)
        .await?
        .iter()
        .map(|t| t.to_dto())
        .collect())
}

/// Deletes a message; authority does not move (L4).
pub async fn delete_message(state: &AppState, id: &str) -> Result<(), AppError> {
    let Some(m) = state.repo.delete_message(id).await? else {
        return Err(AppError::NotFound(format!("message {id}")));
    };
    publish::message(state, publish::MessageEvent::Deleted, &m).await;
    Ok(())
}
