//! Responding (L12–L18): validation before any write, the one-winner claim, live delivery to
//! the waiting tool call, and the detached paths (rejection releases the barrier; an answer
//! resumes the agent exactly once).

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::model::{Answer, AppError, BundleStatus, Response};
use crate::server::hooks::Point;
use crate::server::orchestrator::worker::{self, Command, Resume};
use crate::server::orchestrator::{publish, workflow};
use crate::server::repo::{BundleRecord, Claim, ClaimOutcome, StoredBundle};
use crate::server::state::AppState;
use crate::server::summary::projector::{Scope, refresh_task};
use crate::server::time::format_micros;

pub const MAX_CUSTOM_TEXT: usize = 2000;
/// The first line of a resume prompt (L17); the mock agent recognises it.
pub const RESUME_MARKER: &str = "[turnstile:clarification-answer]";

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

#[derive(Debug)]
pub enum RespondError {
    App(AppError),
    /// L18: 500 with `retryable`.
    Failed {
        message: String,
        retryable: bool,
    },
}

impl From<AppError> for RespondError {
    fn from(e: AppError) -> Self {
        RespondError::App(e)
    }
}

impl From<crate::server::repo::RepoError> for RespondError {
    fn from(e: crate::server::repo::RepoError) -> Self {
        RespondError::Failed {
            message: e.to_string(),
            retryable: true,
        }
    }
}

/// L12: the response fits the bundle's questions. Nothing is written before this passes.
pub fn validate(bundle: &StoredBundle, body: &RespondBody) -> Result<(bool, Vec<Answer>), String> {
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
        return Ok((true, vec![]));
    }
    let answers = body
        .answers
        .clone()
        .ok_or("give `answers` (one per question) or `rejected: true`")?;
    for q in &bundle.questions {
        let n = answers.iter().filter(|a| a.question_id == q.id).count();
        if n != 1 {
            return Err(format!(
                "question {:?} needs exactly one answer, got {n}",
                q.id
            ));
        }
    }
    for a in &answers {
        let Some(q) = bundle.questions.iter().find(|q| q.id == a.question_id) else {
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
        if a.selected_options.is_empty() && text.trim().is_empty() {
            return Err(format!(
                "question {:?} needs a selected option or custom text",
                q.id
            ));
        }
    }
    Ok((false, answers))
}

fn stored_response(r: &BundleRecord) -> Option<Response> {
    r.response
        .as_deref()
        .and_then(|j| serde_json::from_str(j).ok())
}

pub async fn respond(
    state: &AppState,
    pending_id: &str,
    body: RespondBody,
) -> Result<Responded, RespondError> {
    let bundle = state
        .repo
        .get_bundle(pending_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("clarification {pending_id}")))?;
    let (rejected, answers) = validate(&bundle, &body).map_err(AppError::BadRequest)?;
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
    };
    let record = match state.repo.claim_bundle(pending_id, &claim, now).await? {
        ClaimOutcome::Claimed(r) => r,
        ClaimOutcome::AlreadyResolved(r) => {
            return Ok(Responded {
                claimed: false,
                status: r.status,
                response: stored_response(&r),
            });
        }
        ClaimOutcome::NotActive(r) => {
            return Err(AppError::Conflict(format!(
                "clarification {pending_id} is no longer active ({})",
                r.status
            ))
            .into());
        }
        ClaimOutcome::NotFound => {
            return Err(AppError::NotFound(format!("clarification {pending_id}")).into());
        }
    };
    let action = if rejected {
        "clarification.rejected"
    } else {
        "clarification.answered"
    };
    state.hooks.run(Point::AfterClaim, pending_id).await;
    // L15: a live waiter gets the answer and the agent continues in the same turn.
    if let Some(waiter) = state.runtime.waiters.take(pending_id) {
        match waiter.send(response.clone()) {
            Ok(()) => {
                state.repo.finalize_delivery(pending_id).await?;
                publish::bundles_by_id(state, action, &[pending_id.to_string()]).await;
                return Ok(Responded {
                    claimed: true,
                    status: claim.status,
                    response: Some(response),
                });
            }
            Err(_) => tracing::debug!(pending_id, "the waiter left; delivering as detached"),
        }
    }
    if rejected {
        // L16: persisted, barrier released, the agent is not woken.
        state.repo.finalize_delivery(pending_id).await?;
        publish::bundles_by_id(state, action, &[pending_id.to_string()]).await;
        publish::bundles_by_id(
            state,
            "clarification.stale_dismissed",
            &[pending_id.to_string()],
        )
        .await;
        workflow::on_turn_complete(state, &record.session_id, &record.task_id).await;
        return Ok(Responded {
            claimed: true,
            status: claim.status,
            response: Some(response),
        });
    }
    resume(state, &bundle, &record, &response).await?;
    publish::bundles_by_id(state, action, &[pending_id.to_string()]).await;
    Ok(Responded {
        claimed: true,
        status: claim.status,
        response: Some(response),
    })
}

/// The resume prompt (L17): the question and the answer, as one prompt.
pub fn resume_prompt(bundle: &StoredBundle, response: &Response) -> String {
    let mut lines = vec![RESUME_MARKER.to_string()];
    for a in &response.answers {
        let question = bundle
            .questions
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

/// L17/L18/L19: reserve, then hand the resume to the session worker, which marks it attempted
/// right before dispatch and publishes it after. A failure before acceptance undoes the claim
/// and is retryable.
async fn resume(
    state: &AppState,
    bundle: &StoredBundle,
    record: &BundleRecord,
    response: &Response,
) -> Result<(), RespondError> {
    let reservation = state
        .repo
        .reserve_turn(&record.session_id, &record.pending_id, state.clock.now())
        .await?;
    let (reply, accepted) = oneshot::channel();
    let resume = Resume {
        turn_id: reservation.id.clone(),
        pending_id: record.pending_id.clone(),
        prompt: resume_prompt(bundle, response),
    };
    let dispatched = worker::handle(state, &record.session_id, &record.task_id)
        .send(Command::Resume { resume, reply });
    let outcome = match dispatched {
        Ok(()) => accepted
            .await
            .unwrap_or_else(|_| Err("the session worker stopped".into())),
        Err(e) => Err(e.to_string()),
    };
    match outcome {
        // Accepted (dispatched, or queued behind the open turn): the answer is final (L18).
        Ok(()) => Ok(()),
        Err(reason) => {
            let _ = state.repo.delete_reservation(&reservation.id).await;
            let restored = state
                .repo
                .restore_bundle(&record.pending_id)
                .await
                .unwrap_or(false);
            if let Err(e) = refresh_task(state, &record.task_id, Scope::Full, None).await {
                tracing::warn!(error = %e, "summary refresh after a failed resume failed");
            }
            Err(RespondError::Failed {
                message: format!("the agent could not be resumed: {reason}"),
                retryable: restored,
            })
        }
    }
}

/// `{claimed, status, response}` as the REST body.
pub fn to_json(r: &Responded) -> Value {
    serde_json::json!({ "claimed": r.claimed, "status": r.status, "response": r.response })
}
