//! ACP elicitation as a question source (spec/elicitation.md, decision 0043): the agents'
//! `elicitation/create` requests, queued by the session workers, become bundles that wait in
//! `asking::ask_and_wait` like every question; `schema` converts them and their outcomes.

pub mod schema;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::asking::{AskOutcome, ask_and_wait};
use super::respond::{RespondBody, respond};
use crate::model::{Answer, MessageAuthor, MessageKind};
use crate::server::orchestrator::{publish, worker};
use crate::server::repo::NewMessage;
use crate::server::runtime::Elicitation;
use crate::server::state::AppState;
use schema::{Elicited, cancelled, form_ask, result, url_ask};

/// Asks the agents' elicitations (E2) until shutdown, each in a task of its own as the MCP
/// tool's calls are: one that waits for its answer blocks no other.
pub fn serve(state: AppState, mut queue: mpsc::Receiver<Elicitation>) {
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                _ = state.shutdown.cancelled() => return,
                next = queue.recv() => match next { Some(e) => e, None => return },
            };
            let state = state.clone();
            tokio::spawn(async move { ask(&state, next).await });
        }
    });
}

/// E2: the elicitation becomes a bundle of the session's current turn, written before
/// anything waits, and waits like any question (L6–L19); its outcome goes back to the agent
/// (E5). A request that cannot be shown is refused (`-32602`) with nothing written.
async fn ask(state: &AppState, elicitation: Elicitation) {
    let Elicitation { session_id, ask } = elicitation;
    let session = match state.repo.get_session(&session_id).await {
        Ok(Some(session)) => session,
        Ok(None) => return, // the reply is dropped: the agent is told `cancel`
        Err(e) => {
            tracing::warn!(session_id, error = %e, "cannot read the session of an elicitation");
            return;
        }
    };
    let theirs = ask.request.get("sessionId").and_then(Value::as_str);
    if let (Some(theirs), Some(ours)) = (theirs, session.acp_session_id.as_deref())
        && theirs != ours
    {
        let _ = ask.reply.send(Err(format!(
            "session {theirs:?} is not one this client runs"
        )));
        return;
    }
    let elicited = match shape(&ask.request) {
        Ok(elicited) => elicited,
        Err(why) => {
            tracing::info!(
                session_id,
                why,
                "an elicitation the overlay cannot show was refused"
            );
            say_refused(state, &session_id, &why).await;
            let _ = ask.reply.send(Err(why));
            return;
        }
    };
    let stop = state.shutdown.child_token();
    // E7: a link the agent may complete itself (`elicitation/complete` for its id).
    let link = (ask.request.get("mode").and_then(Value::as_str) == Some("url"))
        .then(|| ask.request.get("elicitationId").and_then(Value::as_str))
        .flatten()
        .map(str::to_string);
    let mut completed = link
        .as_deref()
        .map(|id| state.runtime.completions.wait(&session_id, id));
    let mut reply = ask.reply;
    let withdrawn = ask.withdrawn;
    let (written, mut pending_id) = oneshot::channel();
    let wait = ask_and_wait(
        state,
        &session,
        elicited.ask,
        stop.clone(),
        |_| async {},
        Some(written),
    );
    tokio::pin!(wait);
    let mut pending: Option<String> = None;
    let mut heard = false;
    let outcome = loop {
        tokio::select! {
            outcome = &mut wait => break outcome,
            // E5: the agent withdrew its request, or is gone (the other end of `reply`
            // dropped): the wait stops as a cancelled tool call's does and the question is
            // detached (L9).
            _ = withdrawn.cancelled(), if !stop.is_cancelled() => stop.cancel(),
            _ = reply.closed(), if !stop.is_cancelled() => stop.cancel(),
            id = &mut pending_id, if pending.is_none() && !heard => {
                heard = true;
                pending = id.ok();
            }
            done = async { completed.as_mut().expect("guarded").await }, if completed.is_some() && pending.is_some() => {
                completed = None;
                if done.is_ok() {
                    answer_done(state, pending.as_deref().expect("guarded")).await;
                }
            }
        }
    };
    if let Some(id) = &link {
        state.runtime.completions.forget(&session_id, id);
    }
    let answer = match outcome {
        AskOutcome::Answered(response) => result(&elicited.fields, &response),
        // E5: detached, superseded, ended or failed: the agent goes on without an answer; a
        // detached bundle stays answerable and its answer comes as a resume (E6, L17).
        AskOutcome::Detached(_) | AskOutcome::Ended(_) | AskOutcome::Failed(_) => cancelled(),
    };
    let _ = reply.send(Ok(answer));
}

/// E7: the agent completed the link: answered "done" as the user's click would be, claimed
/// like any answer (L13); a question answered or gone meanwhile keeps its answer.
async fn answer_done(state: &AppState, pending_id: &str) {
    let body = RespondBody {
        answers: Some(vec![Answer {
            question_id: schema::LINK_QUESTION.into(),
            selected_options: vec![],
            custom_text: None,
        }]),
        rejected: None,
        reject_reason: None,
    };
    if let Err(e) = respond(state, pending_id, body).await {
        tracing::info!(pending_id, error = %e, "a completed link was not answered");
    }
}

/// E3: a request the overlay cannot show leaves a `system` row in the session's current turn,
/// after what the agent said before it (taken from its worker first, as a question's row is)
/// and before the agent hears of the refusal.
async fn say_refused(state: &AppState, session_id: &str, why: &str) {
    let earlier = worker::sync(state, session_id).await;
    worker::write_replies(state, earlier).await;
    let turn_id = match state.repo.current_turn_id(session_id).await {
        Ok(Some(turn_id)) => turn_id,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(session_id, error = %e, "cannot read the turn of a refused elicitation");
            return;
        }
    };
    let message = NewMessage {
        session_id: session_id.to_string(),
        turn_id,
        author: MessageAuthor::System,
        kind: MessageKind::Status,
        content: format!(
            "The agent asked a question that cannot be shown here ({why}); it was told so."
        ),
        pending_id: None,
    };
    let revision = state.next_pending_revision().await;
    match state.repo.insert_message(&message, state.clock.now()).await {
        Ok(m) => publish::message_written(state, publish::MessageEvent::Added, &m, revision),
        Err(e) => tracing::warn!(session_id, error = %e, "cannot record a refused elicitation"),
    }
}

/// The questions of an `elicitation/create` request, by its mode.
fn shape(request: &Value) -> Result<Elicited, String> {
    let message = request.get("message").and_then(Value::as_str).unwrap_or("");
    match request.get("mode").and_then(Value::as_str) {
        Some("form") => form_ask(
            message,
            request.get("requestedSchema").unwrap_or(&Value::Null),
        ),
        Some("url") => url_ask(
            message,
            request.get("url").and_then(Value::as_str).unwrap_or(""),
        ),
        other => Err(format!("elicitation mode {other:?} is not supported")),
    }
}
