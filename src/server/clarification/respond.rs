//! Responding (L12–L18): validation before any write, the one-winner claim, live delivery to
//! the waiting tool call, and the detached paths (rejection releases the barrier; an answer
//! resumes the agent exactly once).

use serde::Deserialize;
use serde_json::Value;

use super::handoff::{self, Handoff};
use crate::model::form;
use crate::model::{Answer, AppError, BundleStatus, Question, Response};
use crate::server::hooks::Point;
use crate::server::orchestrator::{forward, publish, workflow};
use crate::server::repo::{BundleRecord, BundleView, Claim, ClaimOutcome, LiveDelivery, RepoError};
use crate::server::runtime::WaiterMsg;
use crate::server::state::AppState;
use crate::server::summary::projector::{Scope, refresh_task};
use crate::server::time::format_micros;

pub const MAX_CUSTOM_TEXT: usize = 2000;
use crate::model::RESUME_MARKER;

#[derive(Debug, Deserialize)]
pub struct RespondBody {
    #[serde(default)]
    pub answers: Option<Vec<Answer>>,
    #[serde(default)]
    pub rejected: Option<bool>,
    #[serde(default)]
    pub reject_reason: Option<String>,
}

#[derive(Debug, PartialEq)]
pub struct Responded {
    pub claimed: bool,
    pub status: BundleStatus,
    pub response: Option<Response>,
}

/// L12: the response fits the bundle's questions. Nothing is written before this passes.
/// L12/E4: the body checked against the bundle's questions. A malformed body is 400; a
/// well-formed one whose value breaks a question's form (too many picks, a number out of
/// range, text too long, a required question left out) is 422. Either way nothing is written.
pub fn validate(
    questions: &[Question],
    body: &RespondBody,
) -> Result<(bool, Vec<Answer>), AppError> {
    check_shape(questions, body).map_err(AppError::BadRequest)?;
    let rejected = body.rejected.unwrap_or(false);
    let answers = body.answers.clone().unwrap_or_default();
    if !rejected {
        for q in questions {
            match answers.iter().find(|a| a.question_id == q.id) {
                Some(a) => form::check_answer(q, a).map_err(AppError::Unprocessable)?,
                None if q.form.required => {
                    return Err(AppError::Unprocessable(format!(
                        "question {:?} is required",
                        q.id
                    )));
                }
                None => {}
            }
        }
    }
    Ok((rejected, answers))
}

/// The checks every question has (400): one answer at most per question, known ids and
/// options, bounded text, something picked or written.
fn check_shape(questions: &[Question], body: &RespondBody) -> Result<(), String> {
    let rejected = body.rejected.unwrap_or(false);
    if rejected {
        if body.answers.as_ref().is_some_and(|a| !a.is_empty()) {
            return Err("a rejection carries no answers".into());
        }
        if body
            .reject_reason
            .as_ref()
            .is_some_and(|r| r.chars().count() > MAX_CUSTOM_TEXT)
        {
            return Err(format!(
                "reject_reason exceeds {MAX_CUSTOM_TEXT} characters"
            ));
        }
        return Ok(());
    }
    let answers = body
        .answers
        .clone()
        .ok_or("give `answers` (one per question) or `rejected: true`")?;
    for q in questions {
        let n = answers.iter().filter(|a| a.question_id == q.id).count();
        // A question left out is the form's business (E4: 422 when it is required).
        if n > 1 || (n == 0 && q.form.is_plain()) {
            return Err(format!(
                "question {:?} needs exactly one answer, got {n}",
                q.id
            ));
        }
    }
    for a in &answers {
        let Some(q) = questions.iter().find(|q| q.id == a.question_id) else {
            return Err(format!("unknown question id {:?}", a.question_id));
        };
        for (i, o) in a.selected_options.iter().enumerate() {
            if !q.options.iter().any(|x| &x.id == o) {
                return Err(format!("unknown option id {o:?} for question {:?}", q.id));
            }
            if a.selected_options[..i].contains(o) {
                return Err(format!(
                    "option {o:?} selected twice for question {:?}",
                    q.id
                ));
            }
        }
        let text = a.custom_text.as_deref().unwrap_or("");
        if text.chars().count() > MAX_CUSTOM_TEXT {
            return Err(format!(
                "custom_text for question {:?} exceeds {MAX_CUSTOM_TEXT} characters",
                q.id
            ));
        }
        // A typed value's emptiness is its form's to judge (a link is answered with none).
        if q.form.input.is_none() && a.selected_options.is_empty() && text.trim().is_empty() {
            return Err(format!(
                "question {:?} needs a selected option or custom text",
                q.id
            ));
        }
    }
    Ok(())
}

/// The questions of `pending_id`: remembered from its ask on this server, or read.
async fn questions_of(
    state: &AppState,
    pending_id: &str,
) -> Result<std::sync::Arc<Vec<Question>>, AppError> {
    if let Some(questions) = state.runtime.questions.get(pending_id) {
        return Ok(questions);
    }
    let bundle = state
        .repo
        .get_bundle(pending_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("clarification {pending_id}")))?;
    Ok(std::sync::Arc::new(bundle.questions))
}

pub(super) fn stored_response(r: &BundleRecord) -> Option<Response> {
    r.response
        .as_deref()
        .and_then(|j| serde_json::from_str(j).ok())
}

pub async fn respond(
    state: &AppState,
    pending_id: &str,
    body: RespondBody,
) -> Result<Responded, AppError> {
    let questions = questions_of(state, pending_id).await?;
    let (rejected, answers) = validate(&questions, &body)?;
    let now = state.clock.now();
    let response = Response {
        pending_id: pending_id.to_string(),
        answers,
        rejected,
        reject_reason: if rejected {
            body.reject_reason.clone()
        } else {
            None
        },
        responded_at: format_micros(now),
    };
    let claim = Claim {
        status: if rejected {
            BundleStatus::Rejected
        } else {
            BundleStatus::Answered
        },
        response: serde_json::to_string(&response).expect("plain data"),
        reject_reason: response.reject_reason.clone(),
        by: state.runtime.config.server_id.clone(),
    };
    let record = match claim_or_lose(state, pending_id, &claim, now).await? {
        Ok(record) => record,
        Err(lost) => return Ok(lost),
    };
    // Resolved (until an undo makes it pending again; an answer then reads its questions).
    state.runtime.questions.forget(pending_id);
    state
        .metrics
        .record_answer(std::time::Duration::from_micros(
            u64::try_from(now - record.created_at).unwrap_or(0),
        ));
    let won = Responded {
        claimed: true,
        status: claim.status,
        response: Some(response.clone()),
    };
    let action = if rejected {
        publish::BundleEvent::Rejected
    } else {
        publish::BundleEvent::Answered
    };
    state.hooks.run(Point::AfterClaim, pending_id).await;
    // L15: a live waiter gets the answer and the agent continues in the same turn. The
    // delivery is recorded before the hand-over, so nothing can fail after the agent has it.
    let mut finalized = false;
    if let Some(waiter) = state.runtime.waiters.take(pending_id) {
        'live: {
            // P9: reserved before the write whose session row the state event carries.
            let revision = state.next_pending_revision().await;
            // I8: the agent acts on the answer only once the claim is on disk (decision 0024).
            let delivered = match state.durable().await {
                Ok(()) => record_live_delivery(state, &record).await,
                Err(e) => Err(e),
            };
            let running = match delivered {
                Ok(LiveDelivery::Recorded(running)) => running,
                // The agent ended the question's turn (its call was given up, whatever this
                // server still holds): nothing was recorded, the answer goes the detached way.
                Ok(LiveDelivery::TurnEnded) => {
                    if waiter
                        .send(WaiterMsg::Ended("the agent ended its turn"))
                        .is_err()
                    {
                        tracing::debug!(pending_id, "the given-up call was gone already");
                    }
                    break 'live;
                }
                Err(e) => {
                    drop(waiter); // the call waits on; the question is pending again
                    return Err(undo(state, &record, e.to_string(), Undo::Announce).await);
                }
            };
            finalized = true;
            // The session runs again with the delivery (what the waiting call did itself before:
            // one write less per answer, B3).
            if let Some(session) = &running {
                publish::session_state_written(state, session, revision);
            }
            let answer = WaiterMsg::Answer { response };
            let handed = match state.hooks.check(Point::Handover) {
                Ok(()) => waiter.send(answer).map_err(drop),
                // Injected: the call ends without the answer, as one whose future was dropped.
                Err(_) => {
                    let gone = WaiterMsg::Ended("the call ended before its answer reached it");
                    let _ended = waiter.send(gone);
                    Err(())
                }
            };
            match handed {
                Ok(()) => {
                    // The committed state, without reading it back: the claim returned the row,
                    // the questions were read above, and an answered bundle is not active (L2)
                    // and can no longer change (delivered, L15).
                    let answered = BundleView {
                        record: BundleRecord {
                            delivery_pending: false,
                            ..record.clone()
                        },
                        questions: questions.to_vec(),
                        active: false,
                    };
                    // Committed before the session's `running`, which asked for the refresh (P4).
                    match running {
                        Some(_) => publish::bundle_announced(state, action, &answered),
                        None => publish::bundle(state, action, &answered),
                    }
                    return Ok(won);
                }
                // The call ended after we took it and after the delivery was recorded: nobody has
                // the answer. Marked undelivered again, it goes the detached way below (owed, or
                // its claim undone), never left answered and lost.
                Err(()) => {
                    tracing::debug!(pending_id, "the waiter left; delivering as detached");
                    if let Err(e) = state.repo.reopen_delivery(pending_id).await {
                        return Err(crate::server::telemetry::internal(&e.to_string()));
                    }
                }
            }
        }
    }
    // Several servers: the call may wait on the server that runs the session's agent (the bundle is
    // still attached there).
    if !finalized
        && !record.detached
        && forward::owner_elsewhere(state, &record.session_id)
            .await
            .is_some()
    {
        match handoff::offer(state, pending_id).await {
            Ok(Handoff::Delivered) => return Ok(won),
            Ok(Handoff::NotTaken) => {}
            Err(e) => return Err(undo(state, &record, e.to_string(), Undo::Announce).await),
        }
    }
    if rejected {
        // L16: persisted, barrier released, the agent is not woken.
        if !finalized && let Err(e) = finalize(state, pending_id).await {
            return Err(undo(state, &record, e.to_string(), Undo::Announce).await);
        }
        publish::bundles_by_id(state, action, &[pending_id.to_string()]).await;
        publish::bundles_by_id(
            state,
            publish::BundleEvent::StaleDismissed,
            &[pending_id.to_string()],
        )
        .await;
        workflow::barrier_released(state, &record.session_id, &record.task_id, &record.turn_id)
            .await;
        return Ok(won);
    }
    let answered = match &won.response {
        Some(r) => r,
        None => unreachable!("a won claim carries its response"),
    };
    // L17/L18: accepted once the resume is owed in the database; then the worker delivers it.
    let owed = match state.hooks.check(Point::Owe) {
        Ok(()) => {
            state
                .repo
                .owe_resume(
                    pending_id,
                    &resume_prompt(&questions, answered),
                    state.clock.now(),
                )
                .await
        }
        Err(e) => Err(e),
    };
    match owed {
        Ok(Some(_)) => {}
        Ok(None) => {
            // The session ended between the claim and now: nothing can be delivered. Put the
            // bundle back as it was (I5: a 409 leaves nothing changed and publishes nothing).
            let _ = undo(state, &record, "the session ended".into(), Undo::Quietly).await;
            return Err(AppError::Conflict(format!(
                "clarification {pending_id} can no longer be answered: its session ended"
            )));
        }
        Err(e) => return Err(undo(state, &record, e.to_string(), Undo::Announce).await),
    }
    publish::bundles_by_id(state, action, &[pending_id.to_string()]).await;
    state.hooks.run(Point::Owed, pending_id).await;
    forward::deliver_owed(state, &record.session_id, &record.task_id).await;
    Ok(won)
}

/// L13/L14: the claim, with the loser classified. A loser that finds the bundle pending and
/// active again (the winner's claim was undone, L18) tries again instead of answering 409.
/// `Ok(Err(responded))` is a lost claim (200 `claimed: false`).
async fn claim_or_lose(
    state: &AppState,
    pending_id: &str,
    claim: &Claim,
    now: i64,
) -> Result<Result<BundleRecord, Responded>, AppError> {
    const ATTEMPTS: usize = 5;
    for _ in 0..ATTEMPTS {
        match state.repo.claim_bundle(pending_id, claim, now).await? {
            ClaimOutcome::Claimed(r) => return Ok(Ok(r)),
            ClaimOutcome::NotFound => {
                return Err(AppError::NotFound(format!("clarification {pending_id}")));
            }
            ClaimOutcome::AlreadyResolved(_) | ClaimOutcome::NotActive(_) => {}
        }
        // Lost: classify on a fresh read (status and L2 activity together). The winner's
        // claim may have been undone meanwhile: then the question is open again.
        state.hooks.run(Point::ClaimLost, pending_id).await;
        let Some(now_stored) = state.repo.get_bundle(pending_id).await? else {
            return Err(AppError::NotFound(format!("clarification {pending_id}")));
        };
        let r = &now_stored.record;
        match r.status {
            BundleStatus::Answered | BundleStatus::Rejected => {
                return Ok(Err(Responded {
                    claimed: false,
                    status: r.status,
                    response: stored_response(r),
                }));
            }
            BundleStatus::Pending if now_stored.active => continue,
            status => {
                return Err(AppError::Conflict(format!(
                    "clarification {pending_id} is no longer active ({status})"
                )));
            }
        }
    }
    Err(AppError::Retryable(format!(
        "clarification {pending_id} changed hands {ATTEMPTS} times; try again"
    )))
}

/// Records that the claimed outcome was handed over (or, for a rejection, is final).
async fn finalize(state: &AppState, pending_id: &str) -> Result<(), RepoError> {
    state.hooks.check(Point::Finalize)?;
    state.repo.finalize_delivery(pending_id).await.map(|_| ())
}

/// [`finalize`] for an answer handed to the waiting call, with its session running again in
/// the same transaction; the session as moved, if it moved.
async fn record_live_delivery(
    state: &AppState,
    claimed: &BundleRecord,
) -> Result<LiveDelivery, RepoError> {
    state.hooks.check(Point::Finalize)?;
    state
        .repo
        .record_live_delivery(&claimed.pending_id, &claimed.session_id, state.clock.now())
        .await
}

/// Whether an undone claim is announced (restored event and summary refresh), or quietly put
/// back because nothing was ever visible (I5: a 409 publishes nothing).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Undo {
    Announce,
    Quietly,
}

/// L18: a failure before acceptance undoes the claim (the question is pending and current
/// again), refreshes the summary and is reported as retryable. If even the undo fails, start-up
/// recovery restores it (L19); the answer is then not retryable now.
async fn undo(state: &AppState, record: &BundleRecord, cause: String, how: Undo) -> AppError {
    tracing::warn!(pending_id = %record.pending_id, error = %cause, "answer not accepted; undoing the claim");
    let restored = state
        .repo
        .restore_bundle(&record.pending_id)
        .await
        .unwrap_or(false);
    if restored && how == Undo::Announce {
        publish::bundles_by_id(
            state,
            publish::BundleEvent::Restored,
            std::slice::from_ref(&record.pending_id),
        )
        .await;
        if let Err(e) = refresh_task(state, &record.task_id, Scope::Full).await {
            tracing::warn!(error = %e, "summary refresh after an undone claim failed");
        }
    }
    if restored {
        AppError::Retryable("the answer could not be recorded; nothing changed, try again".into())
    } else {
        crate::server::telemetry::internal(&cause)
    }
}

/// The resume prompt (L17): the question and the answer, as one prompt.
pub fn resume_prompt(questions: &[Question], response: &Response) -> String {
    let mut lines = vec![RESUME_MARKER.to_string()];
    for a in &response.answers {
        let question = questions
            .iter()
            .find(|q| q.id == a.question_id)
            .map(|q| q.prompt.as_str())
            .unwrap_or("");
        let mut answer = a.selected_options.join(", ");
        if let Some(t) = a.custom_text.as_deref().filter(|t| !t.is_empty()) {
            if !answer.is_empty() {
                answer.push_str("; ");
            }
            answer.push_str(t);
        }
        lines.push(format!("Q: {question}\nA: {answer}"));
    }
    lines.join("\n")
}

/// `{claimed, status, response}` as the REST body.
pub fn to_json(r: &Responded) -> Value {
    serde_json::json!({ "claimed": r.claimed, "status": r.status, "response": r.response })
}
