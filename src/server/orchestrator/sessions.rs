//! Sessions: creation and launch, prompts, cancel, state changes (with L11 expiry), and how an
//! agent profile becomes a process.

use std::path::PathBuf;

use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

use super::profiles::MOCK_PROFILE;
use super::worker::{self, Command, PromptAccepted, WorkerError};
use super::{forward, publish};
use crate::model::{AppError, Session, SessionState};
use crate::server::agents::{AgentError, LaunchSpec};
use crate::server::repo::{NewSession, RepoError, SessionRecord};
use crate::server::state::AppState;
use crate::server::summary::projector::{Scope, refresh_task};

pub fn hash_token(token: &str) -> String {
    format!("{:x}", Sha256::digest(token.as_bytes()))
}

fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Moves the session and publishes the change; a terminal move expires its active bundles
/// (L11). Returns `None` when the session was already terminal.
pub async fn set_state(
    state: &AppState,
    session_id: &str,
    to: SessionState,
) -> Result<Option<SessionRecord>, RepoError> {
    // P9: reserved before the statement that reads the P1 the event carries (the write).
    let revision = state.next_pending_revision().await;
    let Some(moved) = state
        .repo
        .set_session_state(session_id, to, state.clock.now())
        .await?
    else {
        // Already in `to` (nothing to publish), or terminal.
        let current = state.repo.get_session(session_id).await?;
        return Ok(current.filter(|s| s.state == to));
    };
    if to.is_terminal() {
        let expired = state
            .repo
            .expire_session(session_id, state.clock.now())
            .await?;
        publish::bundles_by_id(state, publish::BundleEvent::Expired, &expired).await;
    }
    publish::session_state_written(state, &moved, revision);
    Ok(Some(moved))
}

/// The process for a session's agent profile, with a fresh MCP token (only its hash is
/// stored). The bundled `mock` profile runs the mock agent next to the server binary.
pub async fn launch_spec(
    state: &AppState,
    session: &SessionRecord,
) -> Result<(LaunchSpec, String), WorkerError> {
    let profile = match &session.agent_profile_id {
        Some(id) => state
            .repo
            .get_agent_profile(id)
            .await?
            .ok_or(AgentError::from(
                "the session's agent profile no longer exists",
            ))?,
        // A5: a session created without a profile runs the server's default agent.
        None => default_agent(state)
            .await
            .map_err(|e| AgentError::from(e.to_string()))?,
    };
    let is_mock = profile.name == MOCK_PROFILE;
    let command = if is_mock {
        state.runtime.config.mock_agent.clone()
    } else {
        PathBuf::from(&profile.command)
    };
    let token = new_token();
    let hash = hash_token(&token);
    // W2/W3: the task's own directory, its plain repository, or its worktree.
    let workspace = state.repo.task_workspace(&session.task_id).await?;
    let cwd = state
        .runtime
        .workspaces
        .working_directory(&session.task_id, workspace)
        .await
        .map_err(AgentError::from)?;
    let spec = LaunchSpec {
        command,
        args: profile.args_list(),
        env: profile.env_values(),
        cwd,
        mcp_url: format!("{}/mcp", state.runtime.config.self_url),
        server_exe: state.runtime.config.server_exe.clone(),
        mcp_token: token,
        load_session: session.acp_session_id.clone(),
        elicitation: profile.elicitation,
        auth_method: profile.auth_method.clone(),
        #[cfg(feature = "test-hooks")]
        in_process: state
            .runtime
            .config
            .in_process_mock
            .clone()
            .filter(|_| is_mock),
        session_id: session.id.clone(),
        hooks: state.hooks.clone(),
        groups: state.runtime.agent_groups.clone(),
    };
    Ok((spec, hash))
}

/// A5: the profile of a session created without one: the server's `--default-agent`.
pub async fn default_agent(
    state: &AppState,
) -> Result<crate::server::repo::AgentProfileRecord, AppError> {
    let name = &state.runtime.config.default_agent;
    state
        .repo
        .get_agent_profile_by_name(name)
        .await?
        .ok_or_else(|| {
            AppError::Conflict(format!(
                "the default agent profile {name:?} does not exist (--default-agent); \
                 add it or name a profile"
            ))
        })
}

/// At the cap with every agent busy, a new session is refused before anything is written.
pub fn ensure_agent_room(state: &AppState) -> Result<(), AppError> {
    if state.runtime.agents.has_room() {
        Ok(())
    } else {
        Err(AppError::Unavailable(format!(
            "{} agents are busy (the limit of --max-agents); try again when one finishes",
            state.runtime.config.max_agents
        )))
    }
}

/// A prompt is non-blank and bounded (`field` names it in the error).
pub fn validate_prompt(field: &str, prompt: &str) -> Result<(), AppError> {
    if prompt.trim().is_empty() {
        return Err(AppError::BadRequest(format!("{field} must not be empty")));
    }
    crate::model::limits::at_most(field, prompt, crate::model::limits::PROMPT_CHARS)
        .map_err(AppError::BadRequest)
}

/// Whether a new session becomes the task's primary one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Primary,
    /// Secondary, unless the task has no session yet.
    Secondary,
}

pub struct NewSessionInput {
    /// The bundled `mock` profile unless given.
    pub agent_profile_id: Option<String>,
    pub prompt: String,
    pub role: Role,
}

/// Creates a session for the task and sends its first prompt.
pub async fn create_session(
    state: &AppState,
    task_id: &str,
    input: NewSessionInput,
) -> Result<SessionRecord, AppError> {
    let NewSessionInput {
        agent_profile_id,
        prompt,
        role,
    } = input;
    validate_prompt("prompt", &prompt)?;
    ensure_agent_room(state)?;
    if state.repo.get_task(task_id).await?.is_none() {
        return Err(AppError::NotFound(format!("task {task_id}")));
    }
    let profile = match &agent_profile_id {
        Some(id) => state
            .repo
            .get_agent_profile(id)
            .await?
            .ok_or_else(|| AppError::BadRequest(format!("unknown agent_profile_id {id:?}")))?,
        None => default_agent(state).await?,
    };
    let existing = state.repo.list_sessions(task_id).await?.len();
    let session = state
        .repo
        .create_session(
            &NewSession {
                task_id: task_id.to_string(),
                agent_profile_id: Some(profile.id.clone()),
                name: format!("Session {}", existing + 1),
                state: SessionState::Created,
                is_primary: role == Role::Primary || existing == 0,
                mcp_token_hash: Some(hash_token(&new_token())),
            },
            state.clock.now(),
        )
        .await?;
    publish::session_created(state, &session).await;
    send_prompt(state, &session.id, prompt).await?;
    Ok(session)
}

pub async fn send_prompt(
    state: &AppState,
    session_id: &str,
    content: String,
) -> Result<PromptAccepted, AppError> {
    validate_prompt("content", &content)?;
    if let Some(there) = forward::prompt(state, session_id, &content).await {
        return there;
    }
    send_prompt_here(state, session_id, content).await
}

/// [`send_prompt`] to this server's worker for the session.
pub async fn send_prompt_here(
    state: &AppState,
    session_id: &str,
    content: String,
) -> Result<PromptAccepted, AppError> {
    validate_prompt("content", &content)?;
    let session = state
        .repo
        .get_session(session_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("session {session_id}")))?;
    if session.state.is_terminal() {
        return Err(AppError::Conflict(format!(
            "session {session_id} is {}",
            session.state
        )));
    }
    let (reply, answer) = oneshot::channel();
    worker::handle(state, &session.id, &session.task_id)
        .send(Command::Prompt { content, reply })?;
    wait_for_worker(state, answer).await
}

pub async fn cancel(state: &AppState, session_id: &str) -> Result<(), AppError> {
    if let Some(there) = forward::cancel(state, session_id).await {
        return there;
    }
    cancel_here(state, session_id).await
}

/// [`cancel`] on this server.
pub async fn cancel_here(state: &AppState, session_id: &str) -> Result<(), AppError> {
    let session = state
        .repo
        .get_session(session_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("session {session_id}")))?;
    worker::handle(state, &session.id, &session.task_id).send(Command::Cancel)
}

/// L18: relaunches the session's agent if needed and delivers an owed answer. Returns whether a
/// resume began (false: nothing was owed, or a turn is still running and it follows that turn).
pub async fn retry(state: &AppState, session_id: &str) -> Result<bool, AppError> {
    if let Some(there) = forward::retry(state, session_id).await {
        return there;
    }
    retry_here(state, session_id).await
}

/// [`retry`] on this server.
pub async fn retry_here(state: &AppState, session_id: &str) -> Result<bool, AppError> {
    let session = state
        .repo
        .get_session(session_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("session {session_id}")))?;
    if session.state.is_terminal() {
        return Err(AppError::Conflict(format!(
            "session {session_id} is {}",
            session.state
        )));
    }
    let (reply, answer) = oneshot::channel();
    worker::handle(state, &session.id, &session.task_id).send(Command::Retry { reply })?;
    wait_for_worker(state, answer).await
}

/// Waits for a worker's reply, bounded: a worker that is starting an agent answers within the
/// handshake deadline.
async fn wait_for_worker<T>(
    state: &AppState,
    answer: oneshot::Receiver<Result<T, AppError>>,
) -> Result<T, AppError> {
    let bound = state.runtime.config.agent_start_timeout + std::time::Duration::from_secs(10);
    match tokio::time::timeout(bound, answer).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(AppError::Unavailable("the session worker stopped".into())),
        Err(_) => Err(AppError::Unavailable(
            "the session did not answer in time; try again".into(),
        )),
    }
}

/// The session as the API shows it, with its P1 pending action.
pub async fn view(state: &AppState, id: &str) -> Result<Session, AppError> {
    let s = state
        .repo
        .get_session(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("session {id}")))?;
    let revision = state.next_pending_revision().await;
    let pending = state
        .repo
        .pending_actions_for_sessions(std::slice::from_ref(&s.id))
        .await?;
    Ok(s.to_dto(pending.get(&s.id).copied().flatten(), Some(revision)))
}

/// Makes `id` its task's primary session; the task's summary names it (P3).
pub async fn make_primary(state: &AppState, id: &str) -> Result<Session, AppError> {
    if !state.repo.set_primary_session(id).await? {
        return Err(AppError::NotFound(format!("session {id}")));
    }
    let s = view(state, id).await?;
    publish::task_updated(state, &s.task_id).await;
    refresh_task(state, &s.task_id, Scope::Full)
        .await
        .map_err(|e| crate::server::telemetry::internal(&e))?;
    Ok(s)
}

/// The live (non-terminal) session whose MCP token hashes to `hash`.
pub async fn by_token_hash(state: &AppState, hash: &str) -> Option<SessionRecord> {
    match state.repo.get_session_by_token_hash(hash).await {
        Ok(s) => s.filter(|s| !s.state.is_terminal()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot look up an MCP token");
            None
        }
    }
}
