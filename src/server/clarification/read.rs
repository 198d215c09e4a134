//! Reading questions: one bundle, the overlay's active question (N4), the L2 count.

use crate::model::{AppError, Bundle};
use crate::server::state::AppState;

pub async fn bundle(state: &AppState, pending_id: &str) -> Result<Bundle, AppError> {
    state
        .repo
        .get_bundle(pending_id)
        .await?
        .map(|b| b.to_dto())
        .ok_or_else(|| AppError::NotFound(format!("clarification {pending_id}")))
}

/// N4: the overlay shows only the active bundle of the session (L2), the newest one.
pub async fn active_question(
    state: &AppState,
    session_id: &str,
) -> Result<Option<Bundle>, AppError> {
    let active = state.repo.active_bundles(session_id).await?;
    Ok(active.last().map(|b| b.to_dto()))
}
