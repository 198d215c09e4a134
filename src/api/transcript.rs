//! Server functions behind the task page: sessions, transcript, prompts, the active question
//! and answering it. Thin: each calls the same service the REST handler calls.

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use serde::{Deserialize, Serialize};

use crate::model::{Answer, AppError, Bundle, BundleStatus, Message, Response, Session};

#[cfg(feature = "ssr")]
fn app_state() -> Result<crate::server::state::AppState, AppError> {
    use_context::<crate::server::state::AppState>()
        .ok_or_else(|| AppError::Internal("the server state is missing from this request".into()))
}

/// The task's sessions, newest first, with their pending actions (fails closed, P8).
#[server(prefix = "/api/fn", endpoint = "task_sessions")]
pub async fn task_sessions(task_id: String) -> Result<Vec<Session>, AppError> {
    crate::server::summary::sessions_view::list_sessions(&app_state()?, &task_id).await
}

#[server(prefix = "/api/fn", endpoint = "session_messages")]
pub async fn session_messages(session_id: String) -> Result<Vec<Message>, AppError> {
    let state = app_state()?;
    let rows = state.repo.list_messages(&session_id, None, 1000).await?;
    Ok(rows.iter().map(|m| m.to_dto()).collect())
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
    let state = app_state()?;
    let active = state.repo.active_bundles(&session_id).await?;
    Ok(active.last().map(|b| b.to_dto()))
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
