//! Several servers: a command for a session whose agent runs on another live server goes to
//! that server — prompts, cancel, retry, owed resumes and permission answers — so a session
//! has one agent. The
//! owner runs it as if it had arrived there and replies with the result. A server owns a
//! session from the moment its worker launches the session's agent (`session_owners`), while
//! its heartbeat is fresh.

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::worker::{self, PromptAccepted};
use super::{permissions, sessions, superseded};
use crate::model::{AppError, Permission};
use crate::server::events::Request;
use crate::server::state::AppState;

/// The other live server that runs `session_id`'s agent, if any: the session's owner row
/// and the owner's heartbeat in the database decide, so a server that just started knows
/// as much as one that ran for days. Without the event bridge (SQLite) there is no other.
pub async fn owner_elsewhere(state: &AppState, session_id: &str) -> Option<String> {
    state.hub.listener()?;
    let ttl = i64::try_from(state.runtime.config.server_ttl.as_micros()).unwrap_or(i64::MAX);
    let since = state.clock.now() - ttl;
    match state.repo.live_owner(session_id, since).await {
        Ok(Some(owner)) if owner != state.runtime.config.server_id => Some(owner),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(session_id, error = %e, "cannot read the session's server");
            None
        }
    }
}

/// Sends `command` to `owner` and waits (as long as a local worker may take) for its reply.
async fn call(state: &AppState, owner: &str, command: Value) -> Result<Value, AppError> {
    let unavailable = || {
        AppError::Unavailable(format!(
            "the server running this session ({owner}) did not answer"
        ))
    };
    let reply = state.hub.request(owner, command).ok_or_else(unavailable)?;
    let bound = state.runtime.config.agent_start_timeout + std::time::Duration::from_secs(10);
    let reply = tokio::time::timeout(bound, reply)
        .await
        .map_err(|_| unavailable())?
        .map_err(|_| unavailable())?;
    match serde_json::from_value::<Result<Value, AppError>>(reply) {
        Ok(result) => result,
        Err(e) => Err(AppError::Internal(format!(
            "unreadable reply from {owner}: {e}"
        ))),
    }
}

/// `Some` when the session's agent runs elsewhere: the prompt went there.
pub async fn prompt(
    state: &AppState,
    session_id: &str,
    content: &str,
) -> Option<Result<PromptAccepted, AppError>> {
    let owner = owner_elsewhere(state, session_id).await?;
    let command = json!({ "cmd": "prompt", "session_id": session_id, "content": content });
    Some(call(state, &owner, command).await.and_then(|v| {
        serde_json::from_value(v).map_err(|e| AppError::Internal(format!("unreadable reply: {e}")))
    }))
}

/// `Some` when the session's agent runs elsewhere: the cancel went there.
pub async fn cancel(state: &AppState, session_id: &str) -> Option<Result<(), AppError>> {
    let owner = owner_elsewhere(state, session_id).await?;
    let command = json!({ "cmd": "cancel", "session_id": session_id });
    Some(call(state, &owner, command).await.map(|_| ()))
}

/// `Some` when the session's agent runs elsewhere: the retry went there.
pub async fn retry(state: &AppState, session_id: &str) -> Option<Result<bool, AppError>> {
    let owner = owner_elsewhere(state, session_id).await?;
    let command = json!({ "cmd": "retry", "session_id": session_id });
    Some(call(state, &owner, command).await.map(|v| v == json!(true)))
}

/// `Some` when the session's agent runs elsewhere: the permission answer went there (N6).
pub async fn permission(
    state: &AppState,
    session_id: &str,
    id: &str,
    option_id: Option<&str>,
) -> Option<Result<Permission, AppError>> {
    let owner = owner_elsewhere(state, session_id).await?;
    let command =
        json!({ "cmd": "permission", "session_id": session_id, "id": id, "option_id": option_id });
    Some(call(state, &owner, command).await.and_then(|v| {
        serde_json::from_value(v).map_err(|e| AppError::Internal(format!("unreadable reply: {e}")))
    }))
}

/// After a resume became owed (L17): wakes the worker that delivers it — the owner's, or this
/// server's when no other live server runs the session's agent — and there ends the waits of
/// the questions and permission requests it superseded (L5, N6), so the agent finishes the
/// older turn and takes the answer (with the turn still open the worker waits for its end;
/// after a crash, for a launch).
pub async fn deliver_owed(state: &AppState, session_id: &str, task_id: &str) {
    if !wake_owner(state, session_id, task_id).await {
        owed_here(state, session_id, task_id).await;
    }
}

/// [`deliver_owed`]'s first half: wakes the server running the session's agent, when another
/// live server runs it (`false` when none does). Start-up also sends it for the owed resumes
/// of those servers' sessions: the server that accepted an answer may have stopped before it
/// sent the wake-up, and the owner's agent would wait on a superseded question meanwhile.
pub async fn wake_owner(state: &AppState, session_id: &str, task_id: &str) -> bool {
    let Some(owner) = owner_elsewhere(state, session_id).await else {
        return false;
    };
    let command = json!({ "cmd": "deliver_owed", "session_id": session_id, "task_id": task_id });
    if let Err(e) = call(state, &owner, command).await {
        // Still owed in the database: the owner's next turn end or start-up delivers it.
        tracing::warn!(session_id, error = %e, "cannot wake the session's server");
    }
    true
}

/// L18 across servers, on every heartbeat: the owed resumes of the sessions whose agents run
/// here are delivered even when no wake-up came (the server that accepted the answer stopped
/// before sending it and has not started again; decision 0036). A session whose agent is not
/// running here is left to its next launch.
pub async fn deliver_owed_here(state: &AppState) -> crate::server::repo::RepoResult<()> {
    for s in state.repo.sessions_with_owed_resumes().await? {
        if worker::runs_here(state, &s.id) {
            owed_here(state, &s.id, &s.task_id).await;
        }
    }
    Ok(())
}

async fn owed_here(state: &AppState, session_id: &str, task_id: &str) {
    worker::deliver_owed(state, session_id, task_id);
    superseded::end_waits(state, session_id).await;
}

/// Serves other servers' commands until shutdown.
pub fn serve(state: AppState, mut requests: mpsc::Receiver<Request>) {
    tokio::spawn(async move {
        loop {
            let request = tokio::select! {
                _ = state.shutdown.cancelled() => return,
                next = requests.recv() => match next { Some(r) => r, None => return },
            };
            let state = state.clone();
            tokio::spawn(async move {
                let result = run(&state, &request.body).await;
                let reply = serde_json::to_value(&result).unwrap_or(Value::Null);
                state.hub.reply(&request.from, &request.rid, reply);
            });
        }
    });
}

/// Runs a forwarded command here, as if it had arrived here.
async fn run(state: &AppState, command: &Value) -> Result<Value, AppError> {
    let text = |k: &str| {
        command[k]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| AppError::BadRequest(format!("forwarded command without {k}")))
    };
    let session_id = text("session_id")?;
    match command["cmd"].as_str() {
        Some("prompt") => {
            let accepted = sessions::send_prompt_here(state, &session_id, text("content")?).await?;
            Ok(serde_json::to_value(accepted).unwrap_or(Value::Null))
        }
        Some("cancel") => sessions::cancel_here(state, &session_id)
            .await
            .map(|()| Value::Null),
        Some("retry") => sessions::retry_here(state, &session_id)
            .await
            .map(Value::Bool),
        Some("permission") => {
            let option_id = command["option_id"].as_str().map(str::to_string);
            let answered = permissions::respond_here(state, &text("id")?, option_id).await?;
            Ok(serde_json::to_value(answered).unwrap_or(Value::Null))
        }
        Some("deliver_owed") => {
            owed_here(state, &session_id, &text("task_id")?).await;
            Ok(Value::Null)
        }
        other => Err(AppError::BadRequest(format!(
            "unknown forwarded command {other:?}"
        ))),
    }
}
