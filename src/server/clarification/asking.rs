//! Asking (L6–L9): the durable write before anything waits, the waiter, keepalive progress,
//! and detach when the agent stops waiting.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::ask::Ask;
use crate::model::AppError;
use crate::server::orchestrator::publish;
use crate::server::orchestrator::superseded::SUPERSEDED;
use crate::server::repo::{BundleView, NewAsk, RepoResult, SessionRecord};
use crate::server::runtime::WaiterMsg;
use crate::server::state::AppState;

/// How a wait ended.
#[derive(Debug)]
pub enum AskOutcome {
    /// The answer (or the skip) as accepted; the caller shapes it for its agent (the MCP
    /// tool's output, or an elicitation's content).
    Answered(crate::model::Response),
    /// Timed out or cancelled: the bundle is detached and stays answerable (L9).
    Detached(&'static str),
    /// The question is not (or no longer) the session's to ask: its turn was superseded or
    /// closed, or an identical call took the wait over.
    Ended(&'static str),
    /// The repository failed; the error carries no database text (it is logged).
    Failed(AppError),
}

/// Writes the bundle (or, when an identical one is active, takes over its wait, L8), then
/// waits for its answer.
/// `progress` is called every keepalive interval (L7); `written` gets the bundle's pending id
/// once it is written (E7: a link the agent completes is answered through it).
pub async fn ask_and_wait<P, F>(
    state: &AppState,
    session: &SessionRecord,
    ask: Ask,
    cancelled: CancellationToken,
    mut progress: P,
    written: Option<oneshot::Sender<String>>,
) -> AskOutcome
where
    P: FnMut(u32) -> F + Send,
    F: std::future::Future<Output = ()> + Send,
{
    // The waiter exists before the bundle is visible to anyone: a responder that reads the
    // bundle right after its commit always finds it (L15), never a gap that looks detached.
    let (tx, mut rx) = oneshot::channel::<WaiterMsg>();
    // The reply the agent sent before asking ends before the question (stream.rs); what of it
    // is unwritten is written with the question.
    let replies = crate::server::orchestrator::worker::sync(state, &session.id).await;
    let id = crate::server::repo::new_id();
    state.runtime.waiters.put(&id, tx);
    let pending_id = match write(state, session, &ask, &id, replies).await {
        Ok(Written::Asked { superseded: false }) => id,
        // A resume owed for an earlier answer may have become current right after our commit
        // (the insert found the agent's turn current): then this question is already
        // superseded and nobody will answer it. (`superseded::end_waits` covers the other
        // order.)
        Ok(Written::Asked { superseded: true }) => {
            if state.runtime.waiters.take(&id).is_some() {
                return AskOutcome::Ended(SUPERSEDED);
            }
            id
        }
        // Nothing written: the agent's turn is no longer current, or (L8) an identical
        // question of this session is active, which the insert leaves alone (one read fewer
        // per ask than looking for it first): this call takes over that question's wait and
        // the earlier call ends.
        Ok(Written::NotCurrent) => {
            let Some(tx) = state.runtime.waiters.take(&id) else {
                return AskOutcome::Ended(SUPERSEDED);
            };
            match existing_identical(state, session, &ask).await {
                Ok(Some(existing)) => {
                    if let Some(old) = state.runtime.waiters.put(&existing, tx) {
                        let _ = old.send(WaiterMsg::Ended(
                            "an identical call took over this question",
                        ));
                    }
                    existing
                }
                Ok(None) => return AskOutcome::Ended(SUPERSEDED),
                Err(e) => return AskOutcome::Failed(e.into()),
            }
        }
        Err(e) => {
            state.runtime.waiters.take(&id);
            return AskOutcome::Failed(e.into());
        }
    };
    if let Some(written) = written {
        let _ = written.send(pending_id.clone());
    }
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
            message = &mut rx => match message {
                // The responder moved the session back to `running` with the delivery.
                Ok(WaiterMsg::Answer { response }) => {
                    return AskOutcome::Answered(response);
                }
                Ok(WaiterMsg::Ended(reason)) => return AskOutcome::Ended(reason),
                // The responder that took the waiter could not record the delivery: nothing
                // was delivered and the question is pending again. Wait on.
                Err(_) => {
                    let (tx, again) = oneshot::channel();
                    state.runtime.waiters.put(&pending_id, tx);
                    rx = again;
                }
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
        && let Ok(WaiterMsg::Answer { response }) = rx.await
    {
        return AskOutcome::Answered(response);
    }
    match state.repo.detach_bundle(&pending_id).await {
        Ok(true) => {
            publish::bundles_by_id(
                state,
                publish::BundleEvent::Detached,
                std::slice::from_ref(&pending_id),
            )
            .await
        }
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, pending_id, "detach failed"),
    }
    AskOutcome::Detached(stop_reason)
}

/// L8: the identical active bundle of this session, if any.
async fn existing_identical(
    state: &AppState,
    session: &SessionRecord,
    ask: &Ask,
) -> RepoResult<Option<String>> {
    let key = ask.dedup_key();
    let active = state.repo.active_bundles(&session.id).await?;
    Ok(active
        .into_iter()
        .find(|b| b.record.dedup_key == key)
        .map(|b| b.record.pending_id))
}

/// What [`write`] did.
enum Written {
    /// The agent's turn is no longer current: nothing was written.
    NotCurrent,
    /// Written and published; `superseded`: already no longer active when read back.
    Asked { superseded: bool },
}

/// L6/L7: the agent's owed reply (`replies`), bundle, questions, transcript message and the
/// session's `waiting_for_input` in one transaction guarded by the current turn; published
/// after the commit, the reply first, then the state, so nobody sees the question before the
/// session waits. After the commit one slim read tells whether the bundle is already
/// superseded; its event is built from what was written. A question that writes nothing still
/// writes the reply.
async fn write(
    state: &AppState,
    session: &SessionRecord,
    ask: &Ask,
    pending_id: &str,
    replies: Vec<crate::server::repo::ReplyWrite>,
) -> RepoResult<Written> {
    let new = NewAsk {
        pending_id: pending_id.to_string(),
        session_id: session.id.clone(),
        context: ask.context.clone(),
        dedup_key: ask.dedup_key(),
        questions: ask.questions.clone(),
        message_content: ask.summary_line(),
        source: ask.source,
        replies,
    };
    // P9: reserved before the transaction whose statements read the P1 its events carry, in
    // their order.
    let mut reply_revisions = Vec::with_capacity(new.replies.len());
    for _ in &new.replies {
        reply_revisions.push(state.next_pending_revision().await);
    }
    let revision = state.next_pending_revision().await;
    let written = match state
        .repo
        .ask_in_current_turn(&new, state.clock.now())
        .await
    {
        Ok(Some(written)) => written,
        Ok(None) => {
            crate::server::orchestrator::worker::write_replies(state, new.replies).await;
            return Ok(Written::NotCurrent);
        }
        Err(e) => {
            crate::server::orchestrator::worker::write_replies(state, new.replies).await;
            return Err(e);
        }
    };
    for ((reply, m), r) in new
        .replies
        .iter()
        .zip(&written.replies)
        .zip(reply_revisions)
    {
        if let Some(m) = m {
            let event = crate::server::orchestrator::worker::reply_event(reply);
            publish::message_written(state, event, m, r);
        }
    }
    state.runtime.counters.note_foreign_row(&session.id);
    publish::session_state_and_message_added(state, &written.session, &written.message, revision);
    state
        .hooks
        .run(crate::server::hooks::Point::AskWritten, pending_id)
        .await;
    // The bundle as written (the insert returned its row; its questions are the ones just
    // stored) and whether it is still active now (L5: a newer turn may have superseded it
    // since the commit): one slim read instead of reading the whole bundle back.
    let questions = std::sync::Arc::new(ask.questions.clone());
    let superseded = match state.repo.bundle_standing(pending_id).await {
        Ok(Some((active, superseded))) => {
            let view = BundleView {
                record: written.bundle,
                questions: questions.to_vec(),
                active,
            };
            // The answer validates against these without reading them (decision 0034);
            // remembered before anyone hears of the question, so a prompt answer finds them.
            state.runtime.questions.put(pending_id, questions);
            // Written with the session's `waiting_for_input`, announced above (P4).
            publish::bundle_announced(state, publish::BundleEvent::Requested, &view);
            state
                .hooks
                .run(crate::server::hooks::Point::AskRead, pending_id)
                .await;
            // L5: superseded means a newer turn is current, never "answered": an answer given
            // since the commit is this call's to take (L15).
            superseded
        }
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(pending_id, error = %e, "cannot check the new bundle's activity");
            false
        }
    };
    Ok(Written::Asked { superseded })
}
