//! Several servers: an answer given on one server reaches the call waiting on another.
//! The answering server records an offer and asks the other servers over the event bridge;
//! the one holding the waiting call accepts (compare-and-set), records the delivery and hands
//! the answer over live (L15), then confirms. Without a confirmation within [`OFFER_WAIT`] the
//! offer is withdrawn (compare-and-set) and the answer takes the detached path: an owed resume
//! (L17/L18). One of the two compare-and-sets wins, so the agent gets the answer once (I3, I4).

use std::time::Duration;

use tokio::sync::mpsc;

use super::respond::{resume_prompt, stored_response};
use crate::model::BundleStatus;
use crate::server::hooks::Point;
use crate::server::orchestrator::{forward, publish};
use crate::server::repo::{BundleRecord, HandoffAccepted, RepoError};
use crate::server::runtime::WaiterMsg;
use crate::server::state::AppState;

/// How long the answering server waits for the holder's confirmation.
pub const OFFER_WAIT: Duration = Duration::from_secs(2);

/// What the waiting call hears when this server did not take the offer (withdrawn first, or
/// its delivery could not be recorded): the offering server delivers it as an owed resume.
const WITHDRAWN: &str = "this question was answered on another server while this call waited; \
     the answer arrives as your next prompt";

#[derive(Debug, PartialEq, Eq)]
pub enum Handoff {
    /// The server holding the call delivered the answer (and published it).
    Delivered,
    /// Nobody took it: deliver it as an owed resume.
    NotTaken,
}

/// Offers the claimed answer of `pending_id` to the server whose call waits for it. `Err`
/// only when the offer could not be recorded (nothing was sent).
pub async fn offer(state: &AppState, pending_id: &str) -> Result<Handoff, RepoError> {
    state
        .repo
        .offer_handoff(pending_id, state.clock.now())
        .await?;
    if let Some(reply) = state.hub.offer_answer(pending_id)
        && let Ok(Ok(true)) = tokio::time::timeout(OFFER_WAIT, reply).await
    {
        return Ok(Handoff::Delivered);
    }
    state.hooks.run(Point::Withdraw, pending_id).await;
    match state.repo.withdraw_handoff(pending_id).await {
        Ok(true) => Ok(Handoff::NotTaken),
        // Accepted just before the withdrawal: the holder delivers it.
        Ok(false) => Ok(Handoff::Delivered),
        Err(e) => {
            // Unknown whether the holder took it. The claim keeps its delivery marker, so
            // start-up recovery (L19) puts the question back if it never reached the agent.
            tracing::error!(pending_id, error = %e, "cannot withdraw an answer offer");
            Ok(Handoff::Delivered)
        }
    }
}

/// Serves the offers of other servers until the channel closes (server shutdown).
pub fn serve(state: AppState, mut offers: mpsc::Receiver<String>) {
    tokio::spawn(async move {
        loop {
            let pending_id = tokio::select! {
                _ = state.shutdown.cancelled() => return,
                next = offers.recv() => match next { Some(id) => id, None => return },
            };
            let state = state.clone();
            tokio::spawn(async move { accept(&state, &pending_id).await });
        }
    });
}

/// Takes an offered answer if this server holds its waiting call. Taking it records its
/// delivery in the same transaction, so the agent never holds an answer whose delivery is not
/// recorded (a restart would reopen it, L19). If that fails, or the offer was withdrawn first,
/// the call ends instead: the offering server withdraws and the answer becomes an owed resume.
async fn accept(state: &AppState, pending_id: &str) {
    state.hooks.run(Point::AcceptOffer, pending_id).await;
    let Some(waiter) = state.runtime.waiters.take(pending_id) else {
        return;
    };
    state.hooks.run(Point::Accepting, pending_id).await;
    take_offer(state, pending_id, waiter).await;
    state.hooks.run(Point::Accepted, pending_id).await;
}

async fn take_offer(
    state: &AppState,
    pending_id: &str,
    waiter: tokio::sync::oneshot::Sender<WaiterMsg>,
) {
    // P9: reserved before the write whose session row the state event carries.
    let revision = state.next_pending_revision().await;
    let accepted = match state.hooks.check(Point::Finalize) {
        Ok(()) => {
            state
                .repo
                .accept_handoff(pending_id, state.clock.now())
                .await
        }
        Err(e) => Err(e),
    };
    let bundle = match accepted {
        // The session runs again with the delivery, as for an answer given here (decision
        // 0032): the waiting call does not write it.
        Ok(HandoffAccepted::Delivered { bundle, session }) => {
            if let Some(session) = &session {
                publish::session_state_written(state, session, revision);
            }
            *bundle
        }
        Ok(HandoffAccepted::Withdrawn) => {
            let _ = waiter.send(WaiterMsg::Ended(WITHDRAWN));
            return;
        }
        // L15: the agent ended the question's turn; the offering server owes the answer.
        Ok(HandoffAccepted::TurnEnded) => {
            let _ = waiter.send(WaiterMsg::Ended("the agent ended its turn"));
            return;
        }
        Err(e) => {
            tracing::warn!(pending_id, error = %e, "cannot accept an answer offer; the call ends");
            let _ = waiter.send(WaiterMsg::Ended(WITHDRAWN));
            return;
        }
    };
    let Some(response) = stored_response(&bundle) else {
        // An answered bundle always stores its response; reopened (L19) rather than lost.
        tracing::error!(pending_id, "an accepted answer has no response");
        reopen(state, pending_id).await;
        return;
    };
    let action = if bundle.status == BundleStatus::Rejected {
        publish::BundleEvent::Rejected
    } else {
        publish::BundleEvent::Answered
    };
    let answer = WaiterMsg::Answer {
        response: response.clone(),
    };
    if waiter.send(answer).is_err() {
        // The call ended as the answer arrived: it becomes an owed resume here (L17).
        owe_here(state, &bundle, &response).await;
    }
    publish::bundles_by_id(state, action, &[pending_id.to_string()]).await;
    state.hub.confirm_delivery(pending_id);
}

/// An accepted answer whose call ended as it arrived becomes an owed resume on this server. Its
/// questions come from this server's memory (the asker remembered them, decision 0034) or the
/// database; if neither can be read, its delivery is reopened, so recovery restores it (L19)
/// rather than leaving it answered and lost.
async fn owe_here(state: &AppState, bundle: &BundleRecord, response: &crate::model::Response) {
    let pending_id = bundle.pending_id.as_str();
    let questions = match state.runtime.questions.get(pending_id) {
        Some(q) => q.to_vec(),
        None => match state.repo.get_bundle(pending_id).await {
            Ok(Some(b)) => b.questions,
            other => {
                tracing::error!(
                    pending_id,
                    ?other,
                    "cannot read the questions of an accepted answer"
                );
                reopen(state, pending_id).await;
                return;
            }
        },
    };
    let prompt = resume_prompt(&questions, response);
    match state
        .repo
        .owe_resume(pending_id, &prompt, state.clock.now())
        .await
    {
        Ok(Some(_)) => forward::deliver_owed(state, &bundle.session_id, &bundle.task_id).await,
        Ok(None) => tracing::warn!(pending_id, "the session ended before the answer"),
        Err(e) => {
            tracing::error!(pending_id, error = %e, "cannot owe an accepted answer");
            reopen(state, pending_id).await;
        }
    }
}

/// Marks an accepted answer undelivered again: recovery (L19) restores the question while it
/// is current, rather than the answer staying recorded as delivered and never arriving.
async fn reopen(state: &AppState, pending_id: &str) {
    if let Err(e) = state.repo.reopen_delivery(pending_id).await {
        tracing::error!(pending_id, error = %e, "cannot reopen an undelivered answer");
    }
}
