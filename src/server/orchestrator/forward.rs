//! Several servers: a command for a session whose agent runs on another live server goes to
//! that server — prompts, cancel, retry, owed resumes and permission answers — so a session
//! has one agent. The
//! owner runs it as if it had arrived there and replies with the result. A server owns a
//! session from the moment its worker launches the session's agent (`session_owners`), while
//! its heartbeat is fresh.

use serde::{Deserialize, Serialize};
use serde_json::Value;
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

/// A command one server sends the server that runs a session's agent (over the event
/// bridge's requests; the wire form is this enum as JSON, `{"cmd": "prompt", …}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum PeerCommand {
    Prompt {
        session_id: String,
        content: String,
    },
    Cancel {
        session_id: String,
    },
    Retry {
        session_id: String,
    },
    /// N6: a permission answer.
    Permission {
        session_id: String,
        id: String,
        option_id: Option<String>,
    },
    /// L17: wake the worker that delivers the session's owed resume.
    DeliverOwed {
        session_id: String,
        task_id: String,
    },
}

/// What the owner replies to a [`PeerCommand`] that it ran (inside `Result<_, AppError>`:
/// a refusal travels as the error the owner would have answered itself).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", content = "value", rename_all = "snake_case")]
pub enum PeerReply {
    Prompt(PromptAccepted),
    /// `true` when a retry started the agent.
    Retried(bool),
    Permission(Permission),
    Done,
}

/// Sends `command` to `owner` and waits (as long as a local worker may take) for its reply.
async fn call(state: &AppState, owner: &str, command: &PeerCommand) -> Result<PeerReply, AppError> {
    let unavailable = || {
        AppError::Unavailable(format!(
            "the server running this session ({owner}) did not answer"
        ))
    };
    let body = serde_json::to_value(command)
        .map_err(|e| AppError::Internal(format!("cannot encode a peer command: {e}")))?;
    let reply = state.hub.request(owner, body).ok_or_else(unavailable)?;
    let bound = state.runtime.config.agent_start_timeout + std::time::Duration::from_secs(10);
    let reply = tokio::time::timeout(bound, reply)
        .await
        .map_err(|_| unavailable())?
        .map_err(|_| unavailable())?;
    match serde_json::from_value::<Result<PeerReply, AppError>>(reply) {
        Ok(result) => result,
        Err(e) => Err(AppError::Internal(format!(
            "unreadable reply from {owner}: {e}"
        ))),
    }
}

/// A reply that does not answer the command it was sent for.
fn mismatched(reply: PeerReply) -> AppError {
    AppError::Internal(format!("a peer replied {reply:?} to another command"))
}

/// `Some` when the session's agent runs elsewhere: the prompt went there.
pub async fn prompt(
    state: &AppState,
    session_id: &str,
    content: &str,
) -> Option<Result<PromptAccepted, AppError>> {
    let owner = owner_elsewhere(state, session_id).await?;
    let command = PeerCommand::Prompt {
        session_id: session_id.into(),
        content: content.into(),
    };
    Some(match call(state, &owner, &command).await {
        Ok(PeerReply::Prompt(accepted)) => Ok(accepted),
        Ok(other) => Err(mismatched(other)),
        Err(e) => Err(e),
    })
}

/// `Some` when the session's agent runs elsewhere: the cancel went there.
pub async fn cancel(state: &AppState, session_id: &str) -> Option<Result<(), AppError>> {
    let owner = owner_elsewhere(state, session_id).await?;
    let command = PeerCommand::Cancel {
        session_id: session_id.into(),
    };
    Some(match call(state, &owner, &command).await {
        Ok(PeerReply::Done) => Ok(()),
        Ok(other) => Err(mismatched(other)),
        Err(e) => Err(e),
    })
}

/// `Some` when the session's agent runs elsewhere: the retry went there.
pub async fn retry(state: &AppState, session_id: &str) -> Option<Result<bool, AppError>> {
    let owner = owner_elsewhere(state, session_id).await?;
    let command = PeerCommand::Retry {
        session_id: session_id.into(),
    };
    Some(match call(state, &owner, &command).await {
        Ok(PeerReply::Retried(started)) => Ok(started),
        Ok(other) => Err(mismatched(other)),
        Err(e) => Err(e),
    })
}

/// `Some` when the session's agent runs elsewhere: the permission answer went there (N6).
pub async fn permission(
    state: &AppState,
    session_id: &str,
    id: &str,
    option_id: Option<&str>,
) -> Option<Result<Permission, AppError>> {
    let owner = owner_elsewhere(state, session_id).await?;
    let command = PeerCommand::Permission {
        session_id: session_id.into(),
        id: id.into(),
        option_id: option_id.map(str::to_string),
    };
    Some(match call(state, &owner, &command).await {
        Ok(PeerReply::Permission(answered)) => Ok(answered),
        Ok(other) => Err(mismatched(other)),
        Err(e) => Err(e),
    })
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
    let command = PeerCommand::DeliverOwed {
        session_id: session_id.into(),
        task_id: task_id.into(),
    };
    if let Err(e) = call(state, &owner, &command).await {
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

/// Runs a forwarded command here, as if it had arrived here. A body that is no
/// [`PeerCommand`] gets 400 naming what it lacks.
async fn run(state: &AppState, body: &Value) -> Result<PeerReply, AppError> {
    let command = PeerCommand::deserialize(body)
        .map_err(|e| AppError::BadRequest(format!("unreadable forwarded command: {e}")))?;
    Ok(match command {
        PeerCommand::Prompt {
            session_id,
            content,
        } => PeerReply::Prompt(sessions::send_prompt_here(state, &session_id, content).await?),
        PeerCommand::Cancel { session_id } => {
            sessions::cancel_here(state, &session_id).await?;
            PeerReply::Done
        }
        PeerCommand::Retry { session_id } => {
            PeerReply::Retried(sessions::retry_here(state, &session_id).await?)
        }
        PeerCommand::Permission { id, option_id, .. } => {
            PeerReply::Permission(permissions::respond_here(state, &id, option_id).await?)
        }
        PeerCommand::DeliverOwed {
            session_id,
            task_id,
        } => {
            owed_here(state, &session_id, &task_id).await;
            PeerReply::Done
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire form other servers of the same version read: tagged by `cmd`.
    #[test]
    fn peer_commands_travel_tagged_by_cmd() {
        let c = PeerCommand::DeliverOwed {
            session_id: "s".into(),
            task_id: "t".into(),
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({ "cmd": "deliver_owed", "session_id": "s", "task_id": "t" })
        );
        assert_eq!(PeerCommand::deserialize(&v).unwrap(), c);
    }

    /// Bad input from a peer is refused with what is wrong, never guessed at.
    #[test]
    fn an_unknown_or_incomplete_peer_command_is_refused() {
        for body in [
            serde_json::json!({ "cmd": "format_disk", "session_id": "s" }),
            serde_json::json!({ "cmd": "prompt", "session_id": "s" }),
            serde_json::json!({ "session_id": "s" }),
        ] {
            assert!(PeerCommand::deserialize(&body).is_err(), "{body}");
        }
    }

    #[test]
    fn replies_round_trip_inside_a_result() {
        let r: Result<PeerReply, AppError> = Ok(PeerReply::Retried(true));
        let v = serde_json::to_value(&r).unwrap();
        let back: Result<PeerReply, AppError> = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
        let e: Result<PeerReply, AppError> = Err(AppError::Conflict("taken".into()));
        let v = serde_json::to_value(&e).unwrap();
        let back: Result<PeerReply, AppError> = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }
}
