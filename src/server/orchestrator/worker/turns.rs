//! Turns: prompts (queued behind the open turn), owed resumes (L17/L18) and the end of a turn
//! (N3 workflow step, P3 summary fields).

use super::{MAX_QUEUED_PROMPTS, PromptAccepted, Worker, WorkerError};
use crate::model::{AppError, MessageAuthor, MessageKind, SessionState};
use crate::server::agents;
use crate::server::orchestrator::{publish, sessions, workflow};
use crate::server::repo::{NewMessage, NewTurn, RepoError};
use crate::server::runtime::WaiterMsg;
use crate::server::summary::projector;

impl Worker {
    pub(super) async fn accept_prompt(
        &mut self,
        content: String,
    ) -> Result<PromptAccepted, AppError> {
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
            // L18: what is owed goes first; the prompt then waits behind the resume. An answer
            // owed after the look and before the prompt's turn is refused by that turn's insert:
            // then it goes first too (one more look; a second owe in that window is the user's
            // own second answer, and the prompt then waits behind both).
            let mut first = true;
            loop {
                match self.deliver_owed().await {
                    Ok(false) => match self.start_turn(content.clone()).await {
                        Ok(Some(turn_id)) => {
                            return Ok(PromptAccepted {
                                queued: false,
                                turn_id: Some(turn_id),
                                queue_position: None,
                            });
                        }
                        Ok(None) if first => {
                            first = false;
                            continue;
                        }
                        Ok(None) => {
                            return Err(AppError::Unavailable(
                                "an answer is being delivered to the agent first; send again"
                                    .into(),
                            ));
                        }
                        Err(e) => {
                            if self.agent.is_none() {
                                self.state.runtime.agents.leave(&self.session_id);
                            }
                            return Err(e);
                        }
                    },
                    Ok(true) => break,
                    Err(e) => return Err(e.into()),
                }
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

    /// P3: the task's summary shows how many prompts wait (the count is the session's, stored,
    /// so a refresh on any server reads it).
    pub(super) async fn queue_changed(&self) {
        match self.queue.len() {
            0 => self.state.runtime.queued.take(&self.session_id),
            n => self.state.runtime.queued.put(&self.session_id, n),
        };
        let r = self
            .state
            .repo
            .set_queued_prompts(&self.session_id, self.queue.len() as i64)
            .await;
        self.log("cannot record the queued-prompt count", r);
        let r = projector::refresh_task(&self.state, &self.task_id, projector::Scope::Full).await;
        self.log("refreshing the queued-prompt count failed", r);
    }

    /// A new turn with the user's message, then the prompt to the agent. A new turn
    /// supersedes a detached question of the previous one (L20, L5). `Ok(None)`: nothing
    /// written, because an answer is owed to the agent and goes first (L18).
    pub(super) async fn start_turn(&mut self, content: String) -> Result<Option<String>, AppError> {
        self.state
            .hooks
            .run(crate::server::hooks::Point::TurnInsert, &self.session_id)
            .await;
        // The turn starts agent work: only on the server that owns the session.
        self.claim().await?;
        let now = self.state.clock.now();
        let turn = match self
            .state
            .repo
            .insert_turn(&NewTurn {
                id: None,
                session_id: self.session_id.clone(),
                started_at: now,
                created_at: now,
                fence: self.claim.clone(),
            })
            .await
        {
            Ok(turn) => turn,
            Err(RepoError::ResumeOwed(_)) => return Ok(None),
            Err(e @ RepoError::Fenced(_)) => {
                self.fenced_out();
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        let revision = self.state.next_pending_revision().await;
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
        publish::message_written(
            &self.state,
            publish::MessageEvent::Added,
            &message,
            revision,
        );
        self.open_turn = Some(turn.id.clone());
        self.stream.break_here();
        if let Err(e) = self.ensure_agent().await {
            match e {
                WorkerError::Agent(agents::AgentError {
                    needs_login: true,
                    reason,
                }) => self.await_login(content, &reason).await,
                e => self.fail(&e.to_string()).await,
            }
            return Ok(Some(turn.id));
        }
        sessions::set_state(&self.state, &self.session_id, SessionState::Running).await?;
        // I8: the agent acts on the prompt only once its turn is on disk (decision 0024).
        let r = self.state.durable().await;
        self.log("cannot sync the prompt's turn to disk", r);
        if let Some(agent) = &self.agent {
            agent.connection.prompt(content);
        }
        self.clear_error().await;
        Ok(Some(turn.id))
    }

    /// L18: delivers the oldest owed resume, relaunching the agent if needed. `Ok(true)` when
    /// a resume turn began; `Ok(false)` when nothing is owed (or another worker took it).
    /// A failed launch leaves it owed: the session shows why and waits for a retry.
    /// `POST /sessions/{id}/retry` while idle: what is owed goes first (L18); otherwise the
    /// prompt a needed login kept from the agent (A4) starts again. True when a turn started.
    pub(super) async fn retry(&mut self) -> Result<bool, AppError> {
        if self.deliver_owed().await? {
            return Ok(true);
        }
        let Some(prompt) = self.unsent.take() else {
            return Ok(false);
        };
        let started = self.start_turn(prompt.clone()).await?.is_some();
        if !started {
            // An answer became owed meanwhile (L18): it goes first; the prompt waits again.
            self.unsent = Some(prompt);
        }
        Ok(started)
    }

    /// The worker was told to stop, or its server is shutting down.
    fn stopping(&self) -> bool {
        self.stop.is_cancelled() || self.state.shutdown.is_cancelled()
    }

    pub(super) async fn deliver_owed(&mut self) -> Result<bool, WorkerError> {
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
        if session.is_none_or(|s| s.state.is_terminal()) || self.stopping() {
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
        // Another live server owns the session: it delivers what is owed.
        if let Err(WorkerError::Repo(RepoError::Fenced(_))) = ready {
            return Ok(false);
        }
        if let Err(e) = ready {
            self.failed = true;
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
        self.state
            .hooks
            .run(
                crate::server::hooks::Point::BeforeDispatch,
                &self.session_id,
            )
            .await;
        // L18/I4: a stopping worker (its server shutting down, its session moved away) hands
        // nothing to an agent that is being stopped: the answer stays owed, for the next
        // start-up or the server that takes the session over.
        if self.stopping() {
            return Ok(false);
        }
        let now = self.state.clock.now();
        match self
            .state
            .repo
            .dispatch_resume(&owed.id, now, self.claim.as_ref())
            .await
        {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            // Another server claimed the session since this one did: it delivers the answer.
            Err(RepoError::Fenced(_)) => {
                self.fenced_out();
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        }
        // I8: the resume is marked delivered on disk before the agent has it (decision 0024).
        // It is delivered either way: the mark is committed, only its power-loss safety is
        // in doubt after a failed sync.
        let r = self.state.durable().await;
        self.log("cannot sync the delivered resume to disk", r);
        self.state
            .hooks
            .run(crate::server::hooks::Point::HandingOver, &self.session_id)
            .await;
        // L18/I4: the server began shutting down during the dispatch, so its agent is being
        // killed: the dispatch is taken back and the answer stays owed, as above. Nothing
        // awaits between this check and the prompt below (the remaining window is a crash's,
        // docs/lifecycle.md).
        if self.stopping() {
            match self.state.repo.undo_dispatch(&owed.id).await {
                Ok(true) => return Ok(false),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, turn = %owed.id, "cannot take a dispatch back")
                }
            }
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

    /// P3: the task's summary shows the last failure (`None` clears it).
    pub(super) async fn record_error(&self, message: &str) {
        let r = projector::record_last_error(&self.state, &self.task_id, Some(message)).await;
        self.log("cannot record the last error", r);
    }

    /// P3: a turn started well, so an earlier failure is no longer the task's news.
    pub(super) async fn clear_error(&self) {
        let shown = matches!(
            self.state.repo.get_summary(&self.task_id).await,
            Ok(Some(s)) if s.body.last_error.is_some()
        );
        if shown {
            let r = projector::record_last_error(&self.state, &self.task_id, None).await;
            self.log("cannot clear the last error", r);
        }
    }

    pub(super) async fn finish_turn(&mut self, result: Result<String, agents::PromptFailure>) {
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
            match self.start_turn(next.clone()).await {
                Ok(Some(_)) => {}
                // An answer became owed meanwhile (L18): it goes first, the prompt after it.
                Ok(None) => {
                    self.queue.push_front(next);
                    self.queue_changed().await;
                    if let Err(e) = self.deliver_owed().await {
                        tracing::warn!(session_id = %self.session_id, error = %e, "owed resume not delivered");
                    }
                }
                Err(e) => tracing::error!(error = %e, "cannot start the queued prompt"),
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
    pub(super) async fn complete_turn(&self, turn_id: &str) {
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
                // A call still registered for a question of a turn the agent ended was given up
                // by the agent (it may not have said so yet): it ends now, so an answer takes the
                // detached way (owed, L17) instead of going to a call nobody reads.
                for pending_id in &detached {
                    if let Some(call) = self.state.runtime.waiters.take(pending_id) {
                        super::reply_to(call, WaiterMsg::Ended("the agent ended its turn"));
                    }
                }
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
}
