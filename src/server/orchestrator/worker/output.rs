//! What the agent does, written into the transcript: streamed text (buffered, stream.rs),
//! tool calls, permission requests (N6) and error rows.

use super::Worker;
use crate::model::{AppError, MessageAuthor, MessageKind};
use crate::server::agents::{self, AgentEvent};
use crate::server::orchestrator::publish;
use crate::server::repo::{NewMessage, NewPermissionRequest, ReplyWrite};
use crate::server::state::AppState;
use tokio::time::Instant;

/// Writes and publishes agent output a question did not write after all (it wrote nothing, or
/// stopped waiting for it): each reply as the worker writes it.
pub async fn write_replies(state: &AppState, replies: Vec<ReplyWrite>) {
    for reply in replies {
        // P9: reserved before the write whose statement reads the P1 the event carries.
        let revision = state.next_pending_revision().await;
        let now = state.clock.now();
        let written = match &reply {
            ReplyWrite::Create(m) => state.repo.insert_message(m, now).await.map(Some),
            ReplyWrite::Content { id, content } => {
                state.repo.update_message_content(id, content, now).await
            }
        };
        match written {
            Ok(Some(m)) => publish::message_written(state, reply_event(&reply), &m, revision),
            Ok(None) => {} // the message was deleted meanwhile
            Err(e) => tracing::error!(error = %e, "cannot record agent output"),
        }
    }
}

/// The event a written reply publishes.
pub fn reply_event(reply: &ReplyWrite) -> publish::MessageEvent {
    match reply {
        ReplyWrite::Create(_) => publish::MessageEvent::Added,
        ReplyWrite::Content { .. } => publish::MessageEvent::Updated,
    }
}

impl Worker {
    /// Ends the open replies here and hands over what they have unwritten, for a question
    /// about to be written (`Command::Sync`). Output outside a turn is dropped, as `append`
    /// drops it.
    pub(super) fn owed_replies(&mut self) -> Vec<ReplyWrite> {
        self.stream.break_here();
        let flushes = self.stream.take();
        let mut owed = Vec::with_capacity(flushes.len());
        for flush in flushes {
            match (flush.id, &self.open_turn) {
                (Some(id), _) => owed.push(ReplyWrite::Content {
                    id,
                    content: flush.content,
                }),
                (None, Some(turn_id)) => owed.push(ReplyWrite::Create(NewMessage {
                    session_id: self.session_id.clone(),
                    turn_id: turn_id.clone(),
                    author: MessageAuthor::Agent,
                    kind: flush.kind,
                    content: flush.content,
                    pending_id: None,
                })),
                (None, None) => {
                    tracing::warn!(session_id = %self.session_id, "agent output outside a turn dropped")
                }
            }
        }
        owed
    }

    /// Writes and publishes what streamed replies have in memory: a reply's first write
    /// creates its message, later ones update it.
    pub(super) async fn flush_stream(&mut self) {
        for flush in self.stream.take() {
            let Some(id) = flush.id.clone() else {
                match self
                    .append(
                        MessageAuthor::Agent,
                        flush.kind,
                        flush.content.clone(),
                        None,
                    )
                    .await
                {
                    Ok(Some(id)) => self.stream.created(&flush, id),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!(session_id = %self.session_id, error = %e, "cannot record agent output")
                    }
                }
                continue;
            };
            // P9: reserved before the write whose statement reads the P1 the event carries.
            let revision = self.state.next_pending_revision().await;
            match self
                .state
                .repo
                .update_message_content(&id, &flush.content, self.state.clock.now())
                .await
            {
                Ok(Some(m)) => publish::message_written(
                    &self.state,
                    publish::MessageEvent::Updated,
                    &m,
                    revision,
                ),
                Ok(None) => {} // the message was deleted meanwhile
                Err(e) => {
                    tracing::error!(session_id = %self.session_id, error = %e, "cannot record agent output")
                }
            }
        }
        self.count_owed_flush();
    }

    pub(super) async fn on_event(&mut self, event: AgentEvent) {
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
            AgentEvent::Elicitation(ask) => {
                // What the agent said before is its own message; the question is asked by the
                // elicitation service (which waits for this worker's earlier output, so not here).
                self.stream.break_here();
                let elicitation = crate::server::runtime::Elicitation {
                    session_id: self.session_id.clone(),
                    ask,
                };
                if let Err(e) = self.state.runtime.elicitations.try_send(elicitation) {
                    tracing::warn!(session_id = %self.session_id, "elicitation queue full; the agent is told cancel");
                    drop(e);
                }
                Ok(())
            }
            AgentEvent::ElicitationComplete(id) => {
                self.state
                    .runtime
                    .completions
                    .complete(&self.session_id, &id);
                Ok(())
            }
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
            // A mark nobody waits for any more (`take_until_mark` gave up on it).
            AgentEvent::Marked(_) => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(session_id = %self.session_id, error = %e, "cannot record agent output");
        }
    }

    pub(super) async fn append(
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
        let revision = self.state.next_pending_revision().await;
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
        publish::message_written(&self.state, publish::MessageEvent::Added, &m, revision);
        Ok(Some(m.message.id))
    }

    /// Coalesces streamed chunks into one message per reply, written when due
    /// (`stream.rs`).
    pub(super) async fn stream(
        &mut self,
        kind: MessageKind,
        chunk: String,
    ) -> Result<(), AppError> {
        self.state
            .hooks
            .run(crate::server::hooks::Point::StreamChunk, &self.session_id)
            .await;
        let mark = self.state.runtime.counters.foreign_rows(&self.session_id);
        self.stream.push(kind, &chunk, mark, Instant::now());
        Ok(())
    }

    pub(super) async fn permission(&mut self, ask: agents::PermissionAsk) -> Result<(), AppError> {
        let Some(turn_id) = self.open_turn.clone() else {
            // No open turn: nobody can answer (N6).
            super::reply_to(ask.reply, None);
            return Ok(());
        };
        let title = ask.tool_call["title"]
            .as_str()
            .unwrap_or("a tool call")
            .to_string();
        self.stream.break_here();
        // The agent's reply slot exists before the request can be seen: whoever cancels the
        // request (a newer turn superseded it, N6) finds the slot and answers the agent.
        let id = crate::server::repo::new_id();
        self.state.runtime.permissions.put(&id, ask.reply);
        self.state
            .hooks
            .run(
                crate::server::hooks::Point::PermissionAsked,
                &self.session_id,
            )
            .await;
        let written = self
            .state
            .repo
            .permission_in_current_turn(
                &NewPermissionRequest {
                    id: Some(id.clone()),
                    session_id: self.session_id.clone(),
                    turn_id,
                    tool_call: ask.tool_call.to_string(),
                    options: ask.options.to_string(),
                    message_content: format!("Permission requested: {title}"),
                },
                self.state.clock.now(),
            )
            .await;
        let (request, message) = match written {
            Ok(Some(w)) => w,
            // Not written (the turn is no longer current: an owed resume superseded it, N6; or
            // the database failed): the agent hears "cancelled" and goes on.
            not_written => {
                if let Some(reply) = self.state.runtime.permissions.take(&id) {
                    super::reply_to(reply, None);
                }
                return not_written.map(drop).map_err(AppError::from);
            }
        };
        self.permissions.push(request.id.clone());
        publish::message(&self.state, publish::MessageEvent::Added, &message).await;
        publish::permission_requested(&self.state, &request);
        Ok(())
    }

    /// A system error row in `turn_id`, shown in the transcript.
    pub(super) async fn system_error(&self, turn_id: &str, content: String) {
        let message = NewMessage {
            session_id: self.session_id.clone(),
            turn_id: turn_id.to_string(),
            author: MessageAuthor::System,
            kind: MessageKind::Error,
            content,
            pending_id: None,
        };
        let revision = self.state.next_pending_revision().await;
        match self
            .state
            .repo
            .insert_message(&message, self.state.clock.now())
            .await
        {
            Ok(m) => {
                publish::message_written(&self.state, publish::MessageEvent::Added, &m, revision)
            }
            Err(e) => tracing::error!(error = %e, "cannot record an agent error"),
        }
    }

    /// Answers every still-waiting permission request of the open turn with Cancelled.
    pub(super) async fn cancel_permissions(&mut self) {
        for id in std::mem::take(&mut self.permissions) {
            if let Some(reply) = self.state.runtime.permissions.take(&id) {
                super::reply_to(reply, None);
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
}
