//! Server functions behind the task page: sessions, transcript, prompts, the active question
//! and answering it. Thin: each calls the same service the REST handler calls.

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use serde::{Deserialize, Serialize};

use crate::model::{
    Answer, AppError, Bundle, BundleStatus, MessagePage, Permission, Response, Session,
};

#[cfg(feature = "ssr")]
use super::state as app_state;

/// The task's sessions, newest first, with their pending actions (fails closed, P8).
#[server(prefix = "/api/fn", endpoint = "task_sessions")]
pub async fn task_sessions(task_id: String) -> Result<Vec<Session>, AppError> {
    crate::server::summary::sessions_view::list_sessions(&app_state()?, &task_id).await
}

/// The newest page of the transcript, or the page before message `before` (oldest first).
#[server(prefix = "/api/fn", endpoint = "session_messages")]
pub async fn session_messages(
    session_id: String,
    before: Option<String>,
) -> Result<MessagePage, AppError> {
    use crate::server::orchestrator::transcript::{UI_PAGE, page_before};
    page_before(&app_state()?, &session_id, before.as_deref(), UI_PAGE).await
}

/// Starts another session on the task (`POST /tasks/{id}/sessions`).
#[server(prefix = "/api/fn", endpoint = "create_session")]
pub async fn create_session(
    task_id: String,
    agent_profile_id: Option<String>,
    prompt: String,
) -> Result<String, AppError> {
    use crate::server::orchestrator::sessions::{NewSessionInput, Role, create_session};
    let input = NewSessionInput {
        agent_profile_id: agent_profile_id.filter(|p| !p.is_empty()),
        prompt,
        role: Role::Secondary,
    };
    Ok(create_session(&app_state()?, &task_id, input).await?.id)
}

/// Cancels the session's open turn (`POST /sessions/{id}/cancel`).
#[server(prefix = "/api/fn", endpoint = "cancel_session")]
pub async fn cancel_session(session_id: String) -> Result<(), AppError> {
    crate::server::orchestrator::sessions::cancel(&app_state()?, &session_id).await
}

/// Relaunches the session's agent: what is owed goes first, else the prompt a needed login
/// kept from it (`POST /sessions/{id}/retry`, L18, A4). True when a turn started.
#[server(prefix = "/api/fn", endpoint = "retry_session")]
pub async fn retry_session(session_id: String) -> Result<bool, AppError> {
    crate::server::orchestrator::sessions::retry(&app_state()?, &session_id).await
}

/// N6: the session's pending permission request, if any.
#[server(prefix = "/api/fn", endpoint = "pending_permission")]
pub async fn pending_permission(session_id: String) -> Result<Option<Permission>, AppError> {
    crate::server::orchestrator::permissions::pending_for_session(&app_state()?, &session_id).await
}

/// How answering a permission request went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PermissionAnswered {
    Done(Box<Permission>),
    /// 409: its agent no longer waits for it (N6).
    Gone,
}

#[server(prefix = "/api/fn", endpoint = "answer_permission")]
pub async fn answer_permission(
    permission_id: String,
    option_id: String,
) -> Result<PermissionAnswered, AppError> {
    match crate::server::orchestrator::permissions::respond(
        &app_state()?,
        &permission_id,
        Some(option_id),
    )
    .await
    {
        Ok(p) => Ok(PermissionAnswered::Done(Box::new(p))),
        Err(AppError::Conflict(_)) => Ok(PermissionAnswered::Gone),
        Err(e) => Err(e),
    }
}

#[server(prefix = "/api/fn", endpoint = "send_prompt")]
pub async fn send_prompt(session_id: String, content: String) -> Result<(), AppError> {
    crate::server::orchestrator::sessions::send_prompt(&app_state()?, &session_id, content)
        .await
        .map(|_| ())
}

/// N4: the overlay shows only the active bundle of the session (L2), the newest one.
#[server(prefix = "/api/fn", endpoint = "active_question")]
pub async fn active_question(session_id: String) -> Result<Option<Bundle>, AppError> {
    crate::server::clarification::read::active_question(&app_state()?, &session_id).await
}

/// What the overlay does after answering (N5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Answered {
    /// This answer won.
    Claimed,
    /// Someone else answered first: show their answer.
    Lost {
        status: BundleStatus,
        response: Option<Response>,
    },
    /// The question is gone (409): close the overlay.
    Gone,
}

// JSON body: answers are nested lists, which form encoding cannot carry (empty lists vanish).
#[server(prefix = "/api/fn", endpoint = "answer_question", input = Json)]
pub async fn answer_question(
    pending_id: String,
    answers: Vec<Answer>,
    rejected: bool,
) -> Result<Answered, AppError> {
    use crate::server::clarification::respond::{RespondBody, respond};
    let body = RespondBody {
        answers: (!rejected).then_some(answers),
        rejected: Some(rejected),
        reject_reason: None,
    };
    match respond(&app_state()?, &pending_id, body).await {
        Ok(r) if r.claimed => Ok(Answered::Claimed),
        Ok(r) => Ok(Answered::Lost {
            status: r.status,
            response: r.response,
        }),
        Err(AppError::Conflict(_)) => Ok(Answered::Gone),
        Err(e) => Err(e),
    }
}
