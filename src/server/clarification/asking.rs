//! Asking (L6–L9): the durable write before anything waits, the waiter, keepalive progress,
//! and detach when the agent stops waiting.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::ask::{Ask, tool_output};
use crate::model::{Response, SessionState};
use crate::server::orchestrator::{publish, sessions};
use crate::server::repo::{NewBundle, SessionRecord};
use crate::server::state::AppState;

/// How a wait ended.
#[derive(Debug)]
pub enum AskOutcome {
    /// The tool result (spec/api.md output shape).
    Answered(serde_json::Value),
    /// Timed out or cancelled: the bundle is detached and stays answerable (L9).
    Detached(&'static str),
    Failed(String),
}

/// Writes the bundle (or finds the identical active one, L8), then waits for its answer.
/// `progress` is called every keepalive interval (L7).
pub async fn ask_and_wait<P, F>(
    state: &AppState,
    session: &SessionRecord,
    ask: Ask,
    cancelled: CancellationToken,
    mut progress: P,
) -> AskOutcome
where
    P: FnMut(u32) -> F + Send,
    F: std::future::Future<Output = ()> + Send,
{
    // The waiter exists before the bundle is visible to anyone: a responder that reads the
    // bundle right after its commit always finds it (L15), never a gap that looks detached.
    let (tx, mut rx) = oneshot::channel::<Response>();
    let pending_id = match existing_identical(state, session, &ask).await {
        Ok(Some(id)) => {
            state.runtime.waiters.put(&id, tx);
            id
        }
        Ok(None) => {
            let id = crate::server::repo::new_id();
            state.runtime.waiters.put(&id, tx);
            // L7: waiting before the question is visible, so whoever sees it sees the wait.
            mark(state, &session.id, SessionState::WaitingForInput).await;
            if let Err(e) = write(state, session, &ask, &id).await {
                state.runtime.waiters.take(&id);
                mark(state, &session.id, SessionState::Running).await;
                return AskOutcome::Failed(e);
            }
            id
        }
        Err(e) => return AskOutcome::Failed(e),
    };
    let keepalive = state.runtime.config.ask_keepalive;
    let deadline = tokio::time::sleep(state.runtime.config.ask_timeout);
    tokio::pin!(deadline);
    let mut ticks = 0u32;
    let mut interval = tokio::time::interval_at(
        tokio::time::Instant::now() + keepalive,
        keepalive.max(Duration::from_millis(10)),
    );
    let stop_reason = loop {
        tokio::select! {
            answer = &mut rx => match answer {
                Ok(response) => return answered(state, &session.id, response).await,
                // An identical repeat call (L8) took over the wait; the bundle stays as it is.
                Err(_) => return AskOutcome::Detached("an identical call took over this question"),
            },
            _ = interval.tick() => {
                ticks += 1;
                progress(ticks).await;
            }
            _ = &mut deadline => break "timed out waiting for the user",
            _ = cancelled.cancelled() => break "the tool call was cancelled",
        }
    };
    // Exactly one of {respond, cancel, timeout} wins the waiter: if a responder already took
    // it, its answer is in flight and this call still delivers it.
    if state.runtime.waiters.take(&pending_id).is_none()
        && let Ok(response) = rx.await
    {
        return answered(state, &session.id, response).await;
    }
    match state.repo.detach_bundle(&pending_id).await {
        Ok(true) => {
            publish::bundles_by_id(
                state,
                "clarification.detached",
                std::slice::from_ref(&pending_id),
            )
            .await
        }
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, pending_id, "detach failed"),
    }
    AskOutcome::Detached(stop_reason)
}

async fn answered(state: &AppState, session_id: &str, response: Response) -> AskOutcome {
    mark(state, session_id, SessionState::Running).await;
    AskOutcome::Answered(tool_output(&response))
}

async fn mark(state: &AppState, session_id: &str, to: SessionState) {
    if let Err(e) = sessions::set_state(state, session_id, to).await {
        tracing::warn!(error = %e, session_id, %to, "cannot change the session state");
    }
}

/// L8: the identical active bundle of this session, if any.
async fn existing_identical(
    state: &AppState,
    session: &SessionRecord,
    ask: &Ask,
) -> Result<Option<String>, String> {
    let key = ask.dedup_key();
    let active = state
        .repo
        .active_bundles(&session.id)
        .await
        .map_err(|e| e.to_string())?;
    Ok(active
        .into_iter()
        .find(|b| b.record.dedup_key == key)
        .map(|b| b.record.pending_id))
}

/// L6: bundle, questions and transcript message in one transaction before anything is
/// published.
async fn write(
    state: &AppState,
    session: &SessionRecord,
    ask: &Ask,
    pending_id: &str,
) -> Result<(), String> {
    let turn_id = state
        .repo
        .current_turn_id(&session.id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the session has no turn to ask in")?;
    let (bundle, message) = state
        .repo
        .insert_bundle(
            &NewBundle {
                pending_id: Some(pending_id.to_string()),
                session_id: session.id.clone(),
                turn_id,
                context: ask.context.clone(),
                dedup_key: ask.dedup_key(),
                questions: ask.questions.clone(),
                message_content: ask.summary_line(),
            },
            state.clock.now(),
        )
        .await
        .map_err(|e| e.to_string())?;
    publish::message(state, "session.message.added", &message).await;
    publish::bundles_by_id(
        state,
        "clarification.requested",
        std::slice::from_ref(&bundle.pending_id),
    )
    .await;
    Ok(())
}
