//! One worker task per live session: it owns the agent connection, the prompt queue and the
//! open turn, and turns agent events into transcript rows. Commands and agent events are
//! handled one at a time, so a turn's updates are written before its completion.

use std::collections::VecDeque;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::{publish, sessions, workflow};
use crate::model::{AppError, MessageAuthor, MessageKind, SessionState};
use crate::server::agents::{self, AgentConnection, AgentEvent};
use crate::server::repo::{NewMessage, NewPermissionRequest, NewTurn};
use crate::server::state::AppState;

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
    /// L17: a resume prompt in the reserved turn; replies once it is accepted: dispatched to
    /// the agent, or queued behind the open turn (dispatched when it ends). `Err` means it was
    /// not accepted and nothing changed in the worker.
    Resume {
        resume: Resume,
        reply: oneshot::Sender<Result<(), String>>,
    },
    Cancel,
    /// Stop the agent and the worker (the session is being deleted).
    Shutdown,
}

/// A detached answer on its way to the agent (L17/L19).
#[derive(Clone, Debug)]
pub struct Resume {
    /// The reserved turn.
    pub turn_id: String,
    pub pending_id: String,
    pub prompt: String,
}

#[derive(Clone)]
pub struct SessionHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl SessionHandle {
    pub fn send(&self, command: Command) -> Result<(), AppError> {
        self.tx
            .send(command)
            .map_err(|_| AppError::Internal("the session worker has stopped".into()))
    }
}

/// Stops the worker of `session_id` (and with it the agent process), if one runs.
pub fn stop(state: &AppState, session_id: &str) {
    if let Some(h) = state
        .runtime
        .workers
        .lock()
        .expect("workers lock")
        .remove(session_id)
    {
        let _ = h.tx.send(Command::Shutdown);
    }
}

/// The worker of `session_id`, started if needed.
pub fn handle(state: &AppState, session_id: &str, task_id: &str) -> SessionHandle {
    let mut workers = state.runtime.workers.lock().expect("workers lock");
    if let Some(h) = workers.get(session_id).filter(|h| !h.tx.is_closed()) {
        return h.clone();
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let worker = Worker {
        state: state.clone(),
        session_id: session_id.to_string(),
        task_id: task_id.to_string(),
        agent: None,
        events_tx,
        queue: VecDeque::new(),
        resumes: VecDeque::new(),
        permissions: Vec::new(),
        open_turn: None,
        text: None,
        thought: None,
    };
    tokio::spawn(worker.run(rx, events_rx));
    let h = SessionHandle { tx };
    workers.insert(session_id.to_string(), h.clone());
    h
}

struct Worker {
    state: AppState,
    session_id: String,
    task_id: String,
    agent: Option<AgentConnection>,
    events_tx: mpsc::UnboundedSender<AgentEvent>,
    queue: VecDeque<String>,
    /// Accepted resumes waiting for the open turn to end; they go before queued prompts.
    resumes: VecDeque<Resume>,
    /// Permission requests of the open turn that may still wait for the human.
    permissions: Vec<String>,
    open_turn: Option<String>,
    /// The agent reply being streamed: (message id, content so far).
    text: Option<(String, String)>,
    thought: Option<(String, String)>,
}

impl Worker {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut events: mpsc::UnboundedReceiver<AgentEvent>,
    ) {
        loop {
            tokio::select! {
                command = commands.recv() => match command {
                    Some(Command::Shutdown) | None => return,
                    Some(c) => self.on_command(c).await,
                },
                Some(event) = events.recv() => self.on_event(event).await,
            }
        }
    }

    async fn on_command(&mut self, command: Command) {
        match command {
            Command::Prompt { content, reply } => {
                let result = self.accept_prompt(content).await;
                let _ = reply.send(result);
            }
            Command::Resume { resume, reply } => {
                if self.open_turn.is_some() {
                    self.resumes.push_back(resume);
                    let _ = reply.send(Ok(()));
                } else {
                    let _ = reply.send(self.dispatch_resume(resume).await);
                }
            }
            Command::Shutdown => {}
            Command::Cancel => {
                if let (Some(agent), Some(_)) = (&self.agent, &self.open_turn) {
                    agent.cancel();
                    // ACP: after session/cancel, pending permission requests answer Cancelled.
                    self.cancel_permissions().await;
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
        if self.open_turn.is_some() {
            self.queue.push_back(content);
            return Ok(PromptAccepted {
                queued: true,
                turn_id: None,
                queue_position: Some(self.queue.len()),
            });
        }
        let turn_id = self.start_turn(content).await?;
        Ok(PromptAccepted {
            queued: false,
            turn_id: Some(turn_id),
            queue_position: None,
        })
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
        publish::turn(&self.state, "session.turn.started", &turn);
        publish::message(&self.state, "session.message.added", &message).await;
        self.open_turn = Some(turn.id.clone());
        self.text = None;
        self.thought = None;
        if let Err(reason) = self.ensure_agent().await {
            self.fail(&reason).await;
            return Ok(turn.id);
        }
        sessions::set_state(&self.state, &self.session_id, SessionState::Running).await?;
        if let Some(agent) = &self.agent {
            agent.prompt(content);
        }
        Ok(turn.id)
    }

    /// L19: attempted immediately before dispatch, published after; the answer is then final.
    async fn dispatch_resume(&mut self, resume: Resume) -> Result<(), String> {
        if let Err(reason) = self.ensure_agent().await {
            let _ =
                sessions::set_state(&self.state, &self.session_id, SessionState::WaitingForInput)
                    .await;
            return Err(reason);
        }
        if !self
            .state
            .repo
            .mark_attempted(&resume.turn_id)
            .await
            .map_err(|e| e.to_string())?
        {
            return Err("the resume turn is no longer reserved".into());
        }
        self.open_turn = Some(resume.turn_id.clone());
        self.text = None;
        self.thought = None;
        if let Some(agent) = &self.agent {
            agent.prompt(resume.prompt);
        }
        // Accepted: from here on nothing undoes the answer (L18).
        if let Err(e) = self.state.repo.publish_turn(&resume.turn_id).await {
            tracing::warn!(error = %e, "publishing the resume turn failed; start-up recovery keeps it");
        }
        if let Err(e) = self.state.repo.finalize_delivery(&resume.pending_id).await {
            tracing::warn!(error = %e, "finalizing the delivery failed; start-up recovery clears it");
        }
        if let Ok(Some(turn)) = self.state.repo.get_turn(&resume.turn_id).await {
            publish::turn(&self.state, "session.turn.started", &turn);
        }
        let _ = sessions::set_state(&self.state, &self.session_id, SessionState::Running).await;
        Ok(())
    }

    /// L18 for a queued resume whose dispatch failed: the claim is undone and the question is
    /// pending (and answerable) again.
    async fn undo_resume(&self, resume: &Resume, reason: &str) {
        tracing::warn!(session_id = %self.session_id, pending_id = %resume.pending_id, reason, "queued resume failed; restoring the question");
        let _ = self.state.repo.delete_reservation(&resume.turn_id).await;
        match self.state.repo.restore_bundle(&resume.pending_id).await {
            Ok(true) => {
                publish::bundles_by_id(
                    &self.state,
                    "clarification.restored",
                    std::slice::from_ref(&resume.pending_id),
                )
                .await
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, "restoring the question failed; start-up recovery restores it")
            }
        }
    }

    async fn ensure_agent(&mut self) -> Result<(), String> {
        if self.agent.is_some() {
            return Ok(());
        }
        let session = self
            .state
            .repo
            .get_session(&self.session_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the session is gone")?;
        let _ = sessions::set_state(&self.state, &self.session_id, SessionState::Starting).await;
        let (spec, token_hash) = sessions::launch_spec(&self.state, &session).await?;
        self.state
            .repo
            .set_mcp_token_hash(&self.session_id, &token_hash)
            .await
            .map_err(|e| e.to_string())?;
        let agent = agents::launch(spec, self.events_tx.clone()).await?;
        let _ = self
            .state
            .repo
            .set_acp_session_id(&self.session_id, agent.acp_session_id())
            .await;
        self.agent = Some(agent);
        Ok(())
    }

    async fn on_event(&mut self, event: AgentEvent) {
        let result = match event {
            AgentEvent::Text(chunk) => self.stream(MessageKind::Text, chunk).await,
            AgentEvent::Thought(chunk) => self.stream(MessageKind::Thinking, chunk).await,
            AgentEvent::ToolCall { title, .. } => {
                self.text = None;
                self.thought = None;
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
                if self.agent.take().is_some() {
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
        publish::message(&self.state, "session.message.added", &m).await;
        Ok(Some(m.id))
    }

    /// Coalesces streamed chunks into one message per reply.
    async fn stream(&mut self, kind: MessageKind, chunk: String) -> Result<(), AppError> {
        // A reply ends where another row entered the transcript (a question, a permission).
        let open = if kind == MessageKind::Thinking {
            &self.thought
        } else {
            &self.text
        };
        if let Some((id, _)) = open
            && !self
                .state
                .repo
                .list_messages(&self.session_id, Some(id), 1)
                .await?
                .is_empty()
        {
            self.text = None;
            self.thought = None;
        }
        let slot = if kind == MessageKind::Thinking {
            &mut self.thought
        } else {
            &mut self.text
        };
        if let Some((id, content)) = slot.as_mut() {
            content.push_str(&chunk);
            if let Some(m) = self
                .state
                .repo
                .update_message_content(id, content, self.state.clock.now())
                .await?
            {
                publish::message(&self.state, "session.message.updated", &m).await;
            }
            return Ok(());
        }
        if let Some(id) = self
            .append(MessageAuthor::Agent, kind, chunk.clone(), None)
            .await?
        {
            let slot = if kind == MessageKind::Thinking {
                &mut self.thought
            } else {
                &mut self.text
            };
            *slot = Some((id, chunk));
        }
        Ok(())
    }

    async fn permission(&mut self, ask: agents::PermissionAsk) -> Result<(), AppError> {
        let Some(turn_id) = self.open_turn.clone() else {
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
        self.text = None;
        self.append(
            MessageAuthor::Agent,
            MessageKind::PermissionRequest,
            format!("Permission requested: {title}"),
            Some(request.id.clone()),
        )
        .await?;
        self.state.hub.publish(
            crate::server::events::Event::new(
                "permission.requested",
                serde_json::json!({ "permission_id": request.id, "session_id": self.session_id }),
            )
            .for_task(self.task_id.clone())
            .for_session(self.session_id.clone()),
        );
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
            Ok(m) => publish::message(&self.state, "session.message.added", &m).await,
            Err(e) => tracing::error!(error = %e, "cannot record an agent error"),
        }
    }

    /// Answers every still-waiting permission request of the open turn with Cancelled.
    async fn cancel_permissions(&mut self) {
        for id in std::mem::take(&mut self.permissions) {
            if let Some(reply) = self.state.runtime.permissions.take(&id) {
                let _ = reply.send(None);
                let _ = self
                    .state
                    .repo
                    .resolve_permission_request(&id, "cancelled", None, self.state.clock.now())
                    .await;
                self.state.hub.publish(
                    crate::server::events::Event::new(
                        "permission.resolved",
                        serde_json::json!({ "permission_id": id, "status": "cancelled" }),
                    )
                    .for_task(self.task_id.clone())
                    .for_session(self.session_id.clone()),
                );
            }
        }
    }

    async fn finish_turn(&mut self, result: Result<String, agents::PromptFailure>) {
        let Some(turn_id) = self.open_turn.take() else {
            return;
        };
        // A finished turn leaves no permission request waiting.
        self.cancel_permissions().await;
        let now = self.state.clock.now();
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
        // L9/L10: completing this turn detaches only its own waiting bundles.
        match self.state.repo.complete_turn(&turn_id, now).await {
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot complete turn"),
        }
        match self.state.repo.detach_turn(&turn_id).await {
            Ok(detached) => {
                publish::bundles_by_id(&self.state, "clarification.detached", &detached).await
            }
            Err(e) => tracing::error!(error = %e, "cannot detach the turn's bundles"),
        }
        if let Ok(Some(turn)) = self.state.repo.get_turn(&turn_id).await {
            publish::turn(&self.state, "session.turn.completed", &turn);
        }
        workflow::on_turn_complete(&self.state, &self.session_id, &self.task_id).await;
        while let Some(resume) = self.resumes.pop_front() {
            match self.dispatch_resume(resume.clone()).await {
                Ok(()) => return,
                Err(reason) => self.undo_resume(&resume, &reason).await,
            }
        }
        if let Some(next) = self.queue.pop_front() {
            if let Err(e) = self.start_turn(next).await {
                tracing::error!(error = %e, "cannot start the queued prompt");
            }
        } else {
            let _ =
                sessions::set_state(&self.state, &self.session_id, SessionState::WaitingForInput)
                    .await;
        }
    }

    /// The agent crashed or could not start: the session fails with the reason shown (L11
    /// expires its questions).
    async fn fail(&mut self, reason: &str) {
        tracing::warn!(session_id = %self.session_id, reason, "agent failed");
        self.agent = None;
        let turn = match self.open_turn.take() {
            Some(t) => Some(t),
            None => self
                .state
                .repo
                .current_turn_id(&self.session_id)
                .await
                .ok()
                .flatten(),
        };
        if let Some(turn_id) = turn {
            self.system_error(&turn_id, reason.to_string()).await;
            let _ = self
                .state
                .repo
                .complete_turn(&turn_id, self.state.clock.now())
                .await;
        }
        self.queue.clear();
        let _ = sessions::set_state(&self.state, &self.session_id, SessionState::Failed).await;
    }
}
