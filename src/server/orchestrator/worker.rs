//! One worker task per live session: it owns the agent connection, the prompt queue and the
//! open turn, turns agent events into transcript rows, and delivers owed resumes (L17/L18).
//! Commands and agent events are handled one at a time, so a turn's updates are written
//! before its completion. Every channel is bounded; a full one is a clear error, not memory.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::stream::{Chunk, StreamMerge};
use super::{publish, sessions, workflow};
use crate::model::{AppError, MessageAuthor, MessageKind, SessionState};
use crate::server::agents::{self, AgentConnection, AgentEvent};
use crate::server::repo::{NewMessage, NewPermissionRequest, NewTurn, RepoError};
use crate::server::state::AppState;
use crate::server::summary::projector;

/// Prompts a session may queue behind its open turn.
pub const MAX_QUEUED_PROMPTS: usize = 32;
/// Commands a worker may have waiting.
const COMMAND_BUFFER: usize = 64;

/// What `POST /sessions/{id}/prompt` reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PromptAccepted {
    pub queued: bool,
    /// The new turn when it started at once.
    pub turn_id: Option<String>,
    pub queue_position: Option<usize>,
}

pub enum Command {
    Prompt {
        content: String,
        reply: oneshot::Sender<Result<PromptAccepted, AppError>>,
    },
    /// An owed resume may be waiting (after an answer, at start-up): deliver it when idle.
    DeliverOwed,
    /// Relaunch the agent if needed and deliver what is owed; replies whether a resume began.
    Retry {
        reply: oneshot::Sender<Result<bool, AppError>>,
    },
    Cancel,
    /// Stop the agent if it is idle: another session needs its slot (`--max-agents`).
    Release,
}

/// Why the worker could not do something.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Repo(#[from] RepoError),
    /// The agent could not be started or reached; the text is shown to the user.
    #[error("{0}")]
    Agent(String),
}

impl From<WorkerError> for AppError {
    fn from(e: WorkerError) -> Self {
        match e {
            WorkerError::Repo(e) => e.into(),
            WorkerError::Agent(reason) => AppError::Unavailable(reason),
        }
    }
}

#[derive(Clone)]
pub struct SessionHandle {
    tx: mpsc::Sender<Command>,
    stop: CancellationToken,
    /// Commands sent and not yet handled, plus one while the worker handles anything.
    busy: Arc<AtomicUsize>,
    /// How many commands and agent events the worker has started to handle.
    handled: Arc<AtomicU64>,
}

impl SessionHandle {
    pub fn send(&self, command: Command) -> Result<(), AppError> {
        self.busy.fetch_add(1, Ordering::SeqCst);
        self.tx.try_send(command).map_err(|e| {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            match e {
                mpsc::error::TrySendError::Full(_) => {
                    AppError::Unavailable("the session is busy; try again in a moment".into())
                }
                mpsc::error::TrySendError::Closed(_) => {
                    AppError::Unavailable("the session worker has stopped".into())
                }
            }
        })
    }

    fn is_alive(&self) -> bool {
        !self.tx.is_closed() && !self.stop.is_cancelled()
    }
}

/// A mark of an idle worker: equal marks taken before and after reading the database prove
/// that the worker handled nothing in between (tests use it to find quiescent points; the
/// agent itself only acts within an open turn, which the database shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleMark {
    worker: usize,
    handled: u64,
}

/// `Some` when the session's worker has nothing to do right now: no command waiting or being
/// handled, no agent event being handled.
pub fn idle_mark(state: &AppState, session_id: &str) -> Option<IdleMark> {
    let workers = state.runtime.workers.lock().expect("workers lock");
    let Some(h) = workers.get(session_id).filter(|h| h.is_alive()) else {
        return Some(IdleMark {
            worker: 0,
            handled: 0,
        });
    };
    (h.busy.load(Ordering::SeqCst) == 0).then(|| IdleMark {
        worker: Arc::as_ptr(&h.handled) as usize,
        handled: h.handled.load(Ordering::SeqCst),
    })
}

/// Stops the worker of `session_id` (and with it the agent process), if one runs.
pub fn stop(state: &AppState, session_id: &str) {
    let handle = state
        .runtime
        .workers
        .lock()
        .expect("workers lock")
        .remove(session_id);
    if let Some(h) = handle {
        h.stop.cancel();
    }
}

/// Stops every worker and its agent (server shutdown).
pub fn stop_all(state: &AppState) {
    let handles: Vec<SessionHandle> = state
        .runtime
        .workers
        .lock()
        .expect("workers lock")
        .drain()
        .map(|(_, h)| h)
        .collect();
    for h in handles {
        h.stop.cancel();
    }
}

/// Asks the worker of `session_id`, if it runs, to stop its idle agent.
fn release(state: &AppState, session_id: &str) {
    let handle = state
        .runtime
        .workers
        .lock()
        .expect("workers lock")
        .get(session_id)
        .cloned();
    if let Some(h) = handle {
        let _ = h.send(Command::Release);
    }
}

/// Asks the session's worker (started if needed) to deliver what it owes.
pub fn deliver_owed(state: &AppState, session_id: &str, task_id: &str) {
    if let Err(e) = handle(state, session_id, task_id).send(Command::DeliverOwed) {
        tracing::warn!(session_id, error = %e, "cannot wake the worker for an owed resume; the next prompt delivers it");
    }
}

/// The worker of `session_id`, started if needed.
pub fn handle(state: &AppState, session_id: &str, task_id: &str) -> SessionHandle {
    let mut workers = state.runtime.workers.lock().expect("workers lock");
    if let Some(h) = workers.get(session_id).filter(|h| h.is_alive()) {
        return h.clone();
    }
    let (tx, rx) = mpsc::channel(COMMAND_BUFFER);
    let stop = state.shutdown.child_token();
    let busy = Arc::new(AtomicUsize::new(0));
    let handled = Arc::new(AtomicU64::new(0));
    let worker = Worker {
        busy: busy.clone(),
        handled: handled.clone(),
        state: state.clone(),
        session_id: session_id.to_string(),
        task_id: task_id.to_string(),
        agent: None,
        events: None,
        stop: stop.clone(),
        queue: VecDeque::new(),
        permissions: Vec::new(),
        open_turn: None,
        stream: StreamMerge::default(),
        flush_owed: false,
    };
    tokio::spawn(worker.run(rx));
    let h = SessionHandle {
        tx,
        stop,
        busy,
        handled,
    };
    workers.insert(session_id.to_string(), h.clone());
    h
}

/// The running agent and the MCP token hash it was given.
struct Agent {
    connection: AgentConnection,
    token_hash: String,
}

struct Worker {
    busy: Arc<AtomicUsize>,
    handled: Arc<AtomicU64>,
    state: AppState,
    session_id: String,
    task_id: String,
    agent: Option<Agent>,
    events: Option<mpsc::Receiver<AgentEvent>>,
    stop: CancellationToken,
    queue: VecDeque<String>,
    /// Permission requests of the open turn that may still wait for the human.
    permissions: Vec<String>,
    open_turn: Option<String>,
    stream: StreamMerge,
    /// Whether `busy` counts an owed stream write.
    flush_owed: bool,
}

async fn sleep_until_due(due: Option<Instant>) {
    if let Some(due) = due {
        tokio::time::sleep_until(due).await;
    }
}

async fn next_event(events: &mut Option<mpsc::Receiver<AgentEvent>>) -> Option<AgentEvent> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Worker {
    async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        loop {
            // Biased: a command sent before something the agent then does is handled first
            // (an owed answer is signalled before the superseded ask is released, so the
            // agent's reaction — even an exit — is seen after it).
            let due = self.stream.due();
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                _ = sleep_until_due(due), if due.is_some() => {
                    self.handled.fetch_add(1, Ordering::SeqCst);
                    self.flush_stream().await;
                }
                command = commands.recv() => match command {
                    None => break,
                    Some(c) => {
                        self.handled.fetch_add(1, Ordering::SeqCst);
                        self.flush_stream().await;
                        self.on_command(c).await;
                        self.count_owed_flush();
                        self.busy.fetch_sub(1, Ordering::SeqCst);
                    }
                },
                event = next_event(&mut self.events) => {
                    self.busy.fetch_add(1, Ordering::SeqCst);
                    self.handled.fetch_add(1, Ordering::SeqCst);
                    // Streamed chunks wait in memory; anything else sees them written first.
                    if !matches!(event, Some(AgentEvent::Text(_) | AgentEvent::Thought(_))) {
                        self.flush_stream().await;
                    }
                    match event {
                        Some(e) => self.on_event(e).await,
                        // The agent's channel closed without `Exited`: treat it as an exit.
                        None => self.on_event(AgentEvent::Exited("agent connection closed".into())).await,
                    }
                    self.count_owed_flush();
                    self.busy.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
        self.flush_stream().await;
        self.stop_agent().await;
        // Answer what is still queued so no caller waits forever.
        commands.close();
        while let Ok(command) = commands.try_recv() {
            reply_stopped(command);
        }
    }

    /// A streamed chunk waiting in memory is work: the worker counts as busy until it is
    /// written (`idle_mark` must not see a quiescent point with a write still to come).
    fn count_owed_flush(&mut self) {
        let owes = self.stream.owes();
        if owes != self.flush_owed {
            if owes {
                self.busy.fetch_add(1, Ordering::SeqCst);
            } else {
                self.busy.fetch_sub(1, Ordering::SeqCst);
            }
            self.flush_owed = owes;
        }
    }

    /// Writes and publishes what streamed replies have in memory.
    async fn flush_stream(&mut self) {
        for flush in self.stream.take() {
            match self
                .state
                .repo
                .update_message_content(&flush.id, &flush.content, self.state.clock.now())
                .await
            {
                Ok(Some(m)) => {
                    publish::message(&self.state, publish::MessageEvent::Updated, &m).await
                }
                Ok(None) => {} // the message was deleted meanwhile
                Err(e) => {
                    tracing::error!(session_id = %self.session_id, error = %e, "cannot record agent output")
                }
            }
        }
        self.count_owed_flush();
    }

    fn log(&self, what: &str, result: Result<impl Sized, impl std::fmt::Display>) {
        if let Err(e) = result {
            tracing::warn!(session_id = %self.session_id, error = %e, "{what}");
        }
    }

    async fn on_command(&mut self, command: Command) {
        match command {
            Command::Prompt { content, reply } => {
                let result = self.accept_prompt(content).await;
                let _ = reply.send(result);
            }
            Command::DeliverOwed => {
                if self.open_turn.is_none() {
                    let r = self.deliver_owed().await;
                    self.log("delivering an owed resume failed", r);
                }
            }
            Command::Retry { reply } => {
                let result = if self.open_turn.is_some() {
                    Ok(false)
                } else {
                    self.deliver_owed().await.map_err(AppError::from)
                };
                let _ = reply.send(result);
            }
            Command::Cancel => {
                if let (Some(agent), Some(_)) = (&self.agent, &self.open_turn) {
                    agent.connection.cancel();
                    // ACP: after session/cancel, pending permission requests answer Cancelled.
                    self.cancel_permissions().await;
                }
            }
            Command::Release => {
                if self.open_turn.is_none() && self.agent.is_some() {
                    tracing::info!(session_id = %self.session_id, "stopping an idle agent to make room");
                    self.stop_agent().await;
                } else if self.agent.is_some() {
                    // Busy again since it was picked: it keeps its slot.
                    self.state.runtime.agents.busy(&self.session_id);
                }
            }
        }
    }

    async fn accept_prompt(&mut self, content: String) -> Result<PromptAccepted, AppError> {
        let session = self
            .state
            .repo
            .get_session(&self.session_id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("session {}", self.session_id)))?;
        if session.state.is_terminal() {
            return Err(AppError::Conflict(format!(
                "session {} is {}",
                self.session_id, session.state
            )));
        }
        if self.open_turn.is_none() {
            // At the cap with every agent busy: refuse before anything is written.
            self.admit()
                .map_err(|e| AppError::Unavailable(e.to_string()))?;
            // L18: what is owed goes first; the prompt then waits behind the resume.
            match self.deliver_owed().await {
                Ok(false) => {
                    let turn_id = self.start_turn(content).await.inspect_err(|_| {
                        if self.agent.is_none() {
                            self.state.runtime.agents.leave(&self.session_id);
                        }
                    })?;
                    return Ok(PromptAccepted {
                        queued: false,
                        turn_id: Some(turn_id),
                        queue_position: None,
                    });
                }
                Ok(true) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if self.queue.len() >= MAX_QUEUED_PROMPTS {
            return Err(AppError::TooManyRequests(format!(
                "{MAX_QUEUED_PROMPTS} prompts are already queued for this session"
            )));
        }
        self.queue.push_back(content);
        self.queue_changed().await;
        Ok(PromptAccepted {
            queued: true,
            turn_id: None,
            queue_position: Some(self.queue.len()),
        })
    }

    /// P3: the task's summary shows how many prompts wait.
    async fn queue_changed(&self) {
        self.state
            .runtime
            .counters
            .set_queued(&self.session_id, &self.task_id, self.queue.len());
        let r =
            projector::refresh_task(&self.state, &self.task_id, projector::Scope::Full, None).await;
        self.log("refreshing the queued-prompt count failed", r);
    }

    /// A new turn with the user's message, then the prompt to the agent. A new turn
    /// supersedes a detached question of the previous one (L20, L5).
    async fn start_turn(&mut self, content: String) -> Result<String, AppError> {
        let now = self.state.clock.now();
        let turn = self
            .state
            .repo
            .insert_turn(&NewTurn {
                id: None,
                session_id: self.session_id.clone(),
                started_at: now,
                created_at: now,
            })
            .await?;
        let message = self
            .state
            .repo
            .insert_message(
                &NewMessage {
                    session_id: self.session_id.clone(),
                    turn_id: turn.id.clone(),
                    author: MessageAuthor::User,
                    kind: MessageKind::Text,
                    content: content.clone(),
                    pending_id: None,
                },
                now,
            )
            .await?;
        publish::turn_started(&self.state, &turn);
        publish::message(&self.state, publish::MessageEvent::Added, &message).await;
        self.open_turn = Some(turn.id.clone());
        self.stream.break_here();
        if let Err(e) = self.ensure_agent().await {
            self.fail(&e.to_string()).await;
            return Ok(turn.id);
        }
        sessions::set_state(&self.state, &self.session_id, SessionState::Running).await?;
        if let Some(agent) = &self.agent {
            agent.connection.prompt(content);
        }
        self.clear_error().await;
        Ok(turn.id)
    }

    /// L18: delivers the oldest owed resume, relaunching the agent if needed. `Ok(true)` when
    /// a resume turn began; `Ok(false)` when nothing is owed (or another worker took it).
    /// A failed launch leaves it owed: the session shows why and waits for a retry.
    async fn deliver_owed(&mut self) -> Result<bool, WorkerError> {
        let Some(owed) = self
            .state
            .repo
            .owed_resumes(&self.session_id)
            .await?
            .into_iter()
            .next()
        else {
            return Ok(false);
        };
        let session = self.state.repo.get_session(&self.session_id).await?;
        if session.is_none_or(|s| s.state.is_terminal()) {
            return Ok(false);
        }
        let ready = match self
            .state
            .hooks
            .check(crate::server::hooks::Point::Dispatch)
        {
            Ok(()) => self.ensure_agent().await,
            Err(e) => Err(WorkerError::Repo(e)),
        };
        if let Err(e) = ready {
            let reason = format!(
                "{e}\nYour answer is kept and will be sent when the agent starts: send a message \
                 or retry."
            );
            self.system_error(&owed.id, reason.clone()).await;
            // The state first: whoever sees the reason sees the session's final state.
            let r =
                sessions::set_state(&self.state, &self.session_id, SessionState::WaitingForInput)
                    .await;
            self.log("cannot change the session state", r);
            self.record_error(&reason).await;
            return Err(e);
        }
        let now = self.state.clock.now();
        if !self.state.repo.dispatch_resume(&owed.id, now).await? {
            return Ok(false);
        }
        // Delivered: from here the answer is the agent's (exactly once).
        self.open_turn = Some(owed.id.clone());
        self.stream.break_here();
        if let Some(agent) = &self.agent {
            agent
                .connection
                .prompt(owed.resume_prompt.clone().unwrap_or_default());
        }
        self.state.runtime.agents.busy(&self.session_id);
        if let Ok(Some(turn)) = self.state.repo.get_turn(&owed.id).await {
            publish::turn_started(&self.state, &turn);
        }
        let r = sessions::set_state(&self.state, &self.session_id, SessionState::Running).await;
        self.log("cannot change the session state", r);
        self.clear_error().await;
        Ok(true)
    }

    async fn ensure_agent(&mut self) -> Result<(), WorkerError> {
        if self.agent.is_some() {
            self.state.runtime.agents.busy(&self.session_id);
            return Ok(());
        }
        let session = self
            .state
            .repo
            .get_session(&self.session_id)
            .await?
            .ok_or_else(|| WorkerError::Agent("the session is gone".into()))?;
        self.admit()?;
        let r = sessions::set_state(&self.state, &self.session_id, SessionState::Starting).await;
        self.log("cannot change the session state", r);
        let launched = match sessions::launch_spec(&self.state, &session).await {
            Ok((spec, token_hash)) => {
                self.state
                    .repo
                    .set_mcp_token_hash(&self.session_id, &token_hash)
                    .await?;
                let timeout = self.state.runtime.config.agent_start_timeout;
                tokio::select! {
                    r = agents::launch(spec, timeout) => r.map(|(c, rx)| (c, rx, token_hash)),
                    _ = self.stop.cancelled() => Err("the session is stopping".to_string()),
                }
            }
            Err(e) => Err(e),
        };
        match launched {
            Ok((connection, events, token_hash)) => {
                let r = self
                    .state
                    .repo
                    .set_acp_session_id(&self.session_id, connection.acp_session_id())
                    .await;
                self.log("cannot store the ACP session id", r);
                self.agent = Some(Agent {
                    connection,
                    token_hash,
                });
                self.events = Some(events);
                Ok(())
            }
            Err(reason) => {
                self.state.runtime.agents.leave(&self.session_id);
                if let Ok(Some(s)) = self.state.repo.get_session(&self.session_id).await
                    && let Some(hash) = s.mcp_token_hash
                {
                    let r = self
                        .state
                        .repo
                        .revoke_mcp_token(&self.session_id, &hash)
                        .await;
                    self.log("cannot revoke the MCP token", r);
                }
                Err(WorkerError::Agent(reason))
            }
        }
    }

    /// Takes (or keeps) a slot among the running agents; an idle agent elsewhere may be asked
    /// to stop to make room (`--max-agents`).
    fn admit(&self) -> Result<(), WorkerError> {
        if self.agent.is_some() {
            return Ok(());
        }
        let victim = self
            .state
            .runtime
            .agents
            .admit(&self.session_id)
            .map_err(WorkerError::Agent)?;
        if let Some(victim) = victim {
            release(&self.state, &victim);
        }
        Ok(())
    }

    /// Drops the agent: its process group is killed, its MCP token revoked, its slot freed and
    /// its waiting permission requests cancelled (N6).
    async fn stop_agent(&mut self) {
        self.events = None;
        if let Some(agent) = self.agent.take() {
            drop(agent.connection);
            let r = self
                .state
                .repo
                .revoke_mcp_token(&self.session_id, &agent.token_hash)
                .await;
            self.log("cannot revoke the MCP token", r);
        }
        self.state.runtime.agents.leave(&self.session_id);
        self.cancel_permissions().await;
        let r = self
            .state
            .repo
            .cancel_permissions(Some(&self.session_id), self.state.clock.now())
            .await;
        match r {
            Ok(cancelled) => {
                for p in cancelled {
                    publish::permission_resolved(&self.state, &p);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot cancel permission requests"),
        }
    }

    async fn on_event(&mut self, event: AgentEvent) {
        let result = match event {
            AgentEvent::Text(chunk) => self.stream(MessageKind::Text, chunk).await,
            AgentEvent::Thought(chunk) => self.stream(MessageKind::Thinking, chunk).await,
            AgentEvent::ToolCall { title, .. } => {
                self.stream.break_here();
                self.append(MessageAuthor::Agent, MessageKind::ToolCall, title, None)
                    .await
                    .map(|_| ())
            }
            AgentEvent::Permission(ask) => self.permission(ask).await,
            AgentEvent::PromptDone(result) => {
                self.finish_turn(result).await;
                Ok(())
            }
            AgentEvent::Exited(reason) => {
                if self.agent.is_some() {
                    self.fail(&reason).await;
                }
                Ok(())
            }
        };
        if let Err(e) = result {
            tracing::error!(session_id = %self.session_id, error = %e, "cannot record agent output");
        }
    }

    async fn append(
        &self,
        author: MessageAuthor,
        kind: MessageKind,
        content: String,
        pending_id: Option<String>,
    ) -> Result<Option<String>, AppError> {
        let Some(turn_id) = self.open_turn.clone() else {
            tracing::warn!(session_id = %self.session_id, "agent output outside a turn dropped");
            return Ok(None);
        };
        let m = self
            .state
            .repo
            .insert_message(
                &NewMessage {
                    session_id: self.session_id.clone(),
                    turn_id,
                    author,
                    kind,
                    content,
                    pending_id,
                },
                self.state.clock.now(),
            )
            .await?;
        publish::message(&self.state, publish::MessageEvent::Added, &m).await;
        Ok(Some(m.id))
    }

    /// Coalesces streamed chunks into one message per reply; the first chunk is written at
    /// once, the rest when due (`stream.rs`).
    async fn stream(&mut self, kind: MessageKind, chunk: String) -> Result<(), AppError> {
        let mark = self.state.runtime.counters.foreign_rows(&self.session_id);
        if let Chunk::New(content) = self.stream.push(kind, &chunk, mark, Instant::now()) {
            // Replies that just ended are written before the new one begins.
            self.flush_stream().await;
            if let Some(id) = self
                .append(MessageAuthor::Agent, kind, content.clone(), None)
                .await?
            {
                self.stream.opened(kind, id, content, mark);
            }
        }
        Ok(())
    }

    async fn permission(&mut self, ask: agents::PermissionAsk) -> Result<(), AppError> {
        let current = self.state.repo.current_turn_id(&self.session_id).await?;
        let Some(turn_id) = self
            .open_turn
            .clone()
            .filter(|t| Some(t) == current.as_ref())
        else {
            // No open turn, or a newer (owed) turn superseded it: nobody can answer (N6).
            let _ = ask.reply.send(None);
            return Ok(());
        };
        let title = ask.tool_call["title"]
            .as_str()
            .unwrap_or("a tool call")
            .to_string();
        let request = self
            .state
            .repo
            .insert_permission_request(
                &NewPermissionRequest {
                    session_id: self.session_id.clone(),
                    turn_id,
                    tool_call: ask.tool_call.to_string(),
                    options: ask.options.to_string(),
                },
                self.state.clock.now(),
            )
            .await?;
        self.state.runtime.permissions.put(&request.id, ask.reply);
        self.permissions.push(request.id.clone());
        self.stream.break_here();
        self.append(
            MessageAuthor::Agent,
            MessageKind::PermissionRequest,
            format!("Permission requested: {title}"),
            Some(request.id.clone()),
        )
        .await?;
        publish::permission_requested(&self.state, &request);
        Ok(())
    }

    /// A system error row in `turn_id`, shown in the transcript.
    async fn system_error(&self, turn_id: &str, content: String) {
        let message = NewMessage {
            session_id: self.session_id.clone(),
            turn_id: turn_id.to_string(),
            author: MessageAuthor::System,
            kind: MessageKind::Error,
            content,
            pending_id: None,
        };
        match self
            .state
            .repo
            .insert_message(&message, self.state.clock.now())
            .await
        {
            Ok(m) => publish::message(&self.state, publish::MessageEvent::Added, &m).await,
            Err(e) => tracing::error!(error = %e, "cannot record an agent error"),
        }
    }

    /// P3: the task's summary shows the last failure (`None` clears it).
    async fn record_error(&self, message: &str) {
        let r = projector::record_last_error(&self.state, &self.task_id, Some(message)).await;
        self.log("cannot record the last error", r);
    }

    /// P3: a turn started well, so an earlier failure is no longer the task's news.
    async fn clear_error(&self) {
        let shown = matches!(
            self.state.repo.get_summary(&self.task_id).await,
            Ok(Some(s)) if s.body.last_error.is_some()
        );
        if shown {
            let r = projector::record_last_error(&self.state, &self.task_id, None).await;
            self.log("cannot clear the last error", r);
        }
    }

    /// Answers every still-waiting permission request of the open turn with Cancelled.
    async fn cancel_permissions(&mut self) {
        for id in std::mem::take(&mut self.permissions) {
            if let Some(reply) = self.state.runtime.permissions.take(&id) {
                let _ = reply.send(None);
                match self
                    .state
                    .repo
                    .resolve_permission_request(&id, "cancelled", None, self.state.clock.now())
                    .await
                {
                    Ok(true) => {
                        if let Ok(Some(p)) = self.state.repo.get_permission_request(&id).await {
                            publish::permission_resolved(&self.state, &p);
                        }
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, "cannot cancel a permission request"),
                }
            }
        }
    }

    async fn finish_turn(&mut self, result: Result<String, agents::PromptFailure>) {
        let Some(turn_id) = self.open_turn.take() else {
            return;
        };
        // The agent answered its prompt: it is idle from here (another session may take its
        // slot even before this turn's bookkeeping is written).
        self.state.runtime.agents.idle(&self.session_id);
        // A finished turn leaves no permission request waiting (N6).
        self.cancel_permissions().await;
        if let Err(failure) = &result {
            if failure.connection_lost {
                // The agent is gone: `Exited` follows and fails the session with the reason.
                self.open_turn = Some(turn_id);
                return;
            }
            self.system_error(
                &turn_id,
                format!("The agent could not finish this turn: {}", failure.message),
            )
            .await;
        }
        self.complete_turn(&turn_id).await;
        match self.deliver_owed().await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(session_id = %self.session_id, error = %e, "owed resume not delivered");
                return;
            }
        }
        if let Some(next) = self.queue.pop_front() {
            self.queue_changed().await;
            if let Err(e) = self.start_turn(next).await {
                tracing::error!(error = %e, "cannot start the queued prompt");
            }
        } else {
            let r =
                sessions::set_state(&self.state, &self.session_id, SessionState::WaitingForInput)
                    .await;
            self.log("cannot change the session state", r);
        }
    }

    /// Completes the turn (L9/L10: detaching only its own waiting bundles) and runs or
    /// defers its step action (N3) — only if this call completed it.
    async fn complete_turn(&self, turn_id: &str) {
        let now = self.state.clock.now();
        let completed = match self.state.repo.complete_turn(turn_id, now).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "cannot complete turn");
                false
            }
        };
        match self.state.repo.detach_turn(turn_id).await {
            Ok(detached) => {
                publish::bundles_by_id(&self.state, publish::BundleEvent::Detached, &detached).await
            }
            Err(e) => tracing::error!(error = %e, "cannot detach the turn's bundles"),
        }
        if let Ok(Some(turn)) = self.state.repo.get_turn(turn_id).await {
            publish::turn_completed(&self.state, &turn);
        }
        if completed {
            workflow::turn_completed(&self.state, &self.session_id, &self.task_id, turn_id).await;
        }
    }

    /// The agent crashed or could not start: the reason is shown and the session fails (L11
    /// expires its questions) — unless an answer is owed to it (L18): then the session waits
    /// and the next launch delivers the answer.
    async fn fail(&mut self, reason: &str) {
        tracing::warn!(session_id = %self.session_id, reason, "agent failed");
        self.stop_agent().await;
        let owed = self
            .state
            .repo
            .owed_resumes(&self.session_id)
            .await
            .map(|o| !o.is_empty())
            .unwrap_or(true);
        let shown = if owed {
            format!(
                "{reason}\nYour answer is kept and will be sent when the agent starts again: send \
                 a message or retry."
            )
        } else {
            reason.to_string()
        };
        match self.open_turn.take() {
            Some(turn_id) => {
                self.system_error(&turn_id, shown.clone()).await;
                self.complete_turn(&turn_id).await;
            }
            // Idle: the reason goes into the current turn, which stays as it is.
            None => {
                if let Ok(Some(turn_id)) = self.state.repo.current_turn_id(&self.session_id).await {
                    self.system_error(&turn_id, shown.clone()).await;
                }
            }
        }
        self.queue.clear();
        self.queue_changed().await;
        let to = if owed {
            SessionState::WaitingForInput
        } else {
            SessionState::Failed
        };
        // The state first: whoever sees the reason sees the session's final state.
        let r = sessions::set_state(&self.state, &self.session_id, to).await;
        self.log("cannot change the session state", r);
        self.record_error(&shown).await;
    }
}

/// Answers a command that arrived after the worker stopped.
fn reply_stopped(command: Command) {
    let stopped = || AppError::Unavailable("the session worker has stopped".into());
    match command {
        Command::Prompt { reply, .. } => {
            let _ = reply.send(Err(stopped()));
        }
        Command::Retry { reply } => {
            let _ = reply.send(Err(stopped()));
        }
        Command::DeliverOwed | Command::Cancel | Command::Release => {}
    }
}
