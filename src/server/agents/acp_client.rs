//! The ACP client of one session's agent: `launch` (process or in-process mock, then the
//! handshake), the events it sends the session worker in protocol order, and the requests it
//! answers (permissions, elicitations) without blocking its dispatch loop.

use std::collections::BTreeMap;
use std::path::PathBuf;

use agent_client_protocol::v1::{
    self,
    schema::{
        CancelNotification, CompleteElicitationNotification, ContentBlock, PromptRequest,
        RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
        SelectedPermissionOutcome, SessionId, SessionNotification, SessionUpdate,
    },
};
use agent_client_protocol::{Agent, Client};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::AgentError;
use super::elicitation_request::ElicitationCreate;
use super::handshake::handshake;
use super::process::{self};
use super::relay::{Mark, Relay};
use super::runner::spawn_process;
#[cfg(feature = "test-hooks")]
use super::runner::start_in_process;
use crate::server::hooks::{Hooks, Point};

/// Agent events the worker may fall behind by before the agent waits (backpressure).
const EVENT_BUFFER: usize = 256;

/// How to start an agent for one session.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    pub command: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// Our MCP endpoint and this session's bearer token (passed in `mcpServers`).
    pub mcp_url: String,
    /// This server's binary, offered as `<server_exe> mcp-stdio` to an agent without HTTP
    /// MCP (A3).
    pub server_exe: PathBuf,
    pub mcp_token: String,
    /// Resume this ACP session with `session/load` when the agent supports it.
    pub load_session: Option<String>,
    /// E1: advertise ACP elicitation (the profile's switch).
    pub elicitation: bool,
    /// A4: `authenticate` with this method after `initialize`.
    pub auth_method: Option<String>,
    /// Run the bundled mock agent inside this process instead of `command` (`test-hooks`
    /// builds, decision 0042).
    #[cfg(feature = "test-hooks")]
    pub in_process: Option<crate::mock_agent::InProcess>,
    /// The session this agent works for (the key of its hook points).
    pub session_id: String,
    pub hooks: std::sync::Arc<Hooks>,
    /// The server's running agent groups (a stopping server kills whatever is left).
    pub groups: std::sync::Arc<process::AgentGroups>,
}

/// A permission request waiting for the human; answer with `Some(option_id)` or `None`
/// (cancelled).
#[derive(Debug)]
pub struct PermissionAsk {
    /// `{tool_call_id, title}` as JSON.
    pub tool_call: serde_json::Value,
    /// `[{id, name, kind}]` as JSON.
    pub options: serde_json::Value,
    pub reply: oneshot::Sender<Option<String>>,
}

/// An `elicitation/create` of the agent (spec/elicitation.md E2) as JSON, and where its
/// outcome goes: the `CreateElicitationResponse` as JSON, or why the request cannot be shown
/// (the agent gets `-32602` with it). A dropped `reply` answers `cancel`.
#[derive(Debug)]
pub struct ElicitationAsk {
    pub request: serde_json::Value,
    pub reply: oneshot::Sender<Result<serde_json::Value, String>>,
    /// The agent withdrew the request (E5); `reply` is still awaited, and the agent is told
    /// the request was cancelled once it comes (or is dropped).
    pub withdrawn: tokio_util::sync::CancellationToken,
}

#[derive(Debug)]
pub struct PromptFailure {
    pub message: String,
    /// The connection ended (the agent exited): `AgentEvent::Exited` follows with the reason.
    pub connection_lost: bool,
}

/// What the agent did, in protocol order.
#[derive(Debug)]
pub enum AgentEvent {
    Text(String),
    Thought(String),
    ToolCall {
        id: String,
        title: String,
    },
    Permission(PermissionAsk),
    /// The agent asks through ACP elicitation (E2).
    Elicitation(ElicitationAsk),
    /// E7: the agent says the user completed the link of this elicitation id.
    ElicitationComplete(String),
    /// A `session/prompt` finished with its stop reason, or failed.
    PromptDone(Result<String, PromptFailure>),
    /// The agent process or its connection ended.
    Exited(String),
    /// Everything the agent sent before [`AgentConnection::mark`] returned this number has
    /// been delivered (`relay.rs`).
    Marked(u64),
}

pub struct AgentConnection {
    cx: v1::ConnectionTo<Agent>,
    session_id: SessionId,
    stop: Option<oneshot::Sender<()>>,
    events: mpsc::Sender<AgentEvent>,
    relay: std::sync::Arc<Relay>,
}

impl AgentConnection {
    /// Asks for an [`AgentEvent::Marked`] after everything the agent has sent so far; returns
    /// its number, or `None` when the agent's output has ended.
    pub fn mark(&self) -> Option<u64> {
        self.relay.mark()
    }

    pub fn acp_session_id(&self) -> &str {
        &self.session_id.0
    }

    /// Sends `session/prompt` in its own task (so nothing cancels it midway); the outcome
    /// arrives as `AgentEvent::PromptDone` after the turn's updates.
    pub fn prompt(&self, text: String) {
        let cx = self.cx.clone();
        let session_id = self.session_id.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = cx
                .send_request(PromptRequest::new(
                    session_id,
                    vec![ContentBlock::from(text)],
                ))
                .block_task()
                .await
                .map(|r| format!("{:?}", r.stop_reason))
                .map_err(|e| PromptFailure {
                    connection_lost: agent_client_protocol::is_incoming_transport_closed(&e)
                        || agent_client_protocol::is_connection_terminated(&e),
                    message: e.to_string(),
                });
            let _ = events.send(AgentEvent::PromptDone(result)).await;
        });
    }

    pub fn cancel(&self) {
        let _ = self
            .cx
            .send_notification(CancelNotification::new(self.session_id.clone()));
    }
}

impl Drop for AgentConnection {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Spawns the agent (see `process`), runs `initialize` and `session/new` (or `session/load`)
/// within `start_timeout`, and returns the connection with the channel of everything the
/// agent does. An agent that does not finish the handshake in time is killed with its group.
pub async fn launch(
    spec: LaunchSpec,
    start_timeout: std::time::Duration,
) -> Result<(AgentConnection, mpsc::Receiver<AgentEvent>), AgentError> {
    let (events, events_rx) = mpsc::channel(EVENT_BUFFER);
    #[cfg(feature = "test-hooks")]
    let started = match &spec.in_process {
        Some(mock) => start_in_process(mock.clone()),
        None => spawn_process(&spec)?,
    };
    #[cfg(not(feature = "test-hooks"))]
    let started = spawn_process(&spec)?;
    let (runner, tail, transport, relay) = started;
    let stopped_by_us = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = stopped_by_us.clone();

    let (conn_tx, conn_rx) = oneshot::channel::<v1::ConnectionTo<Agent>>();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let updates = events.clone();
    let permissions = events.clone();
    let elicitations = events.clone();
    let completions = events.clone();
    let exited = events.clone();
    let marked = events.clone();
    let ours = relay.clone();
    let (hooks, session_key) = (spec.hooks.clone(), spec.session_id.clone());
    let (elicit_hooks, elicit_key) = (hooks.clone(), session_key.clone());
    let driver = Client
        .v1()
        .name("turnstile")
        .on_receive_notification(
            async move |n: SessionNotification, _cx: v1::ConnectionTo<Agent>| {
                let event = match n.update {
                    SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
                        ContentBlock::Text(t) => Some(AgentEvent::Text(t.text)),
                        _ => None,
                    },
                    SessionUpdate::AgentThoughtChunk(chunk) => match chunk.content {
                        ContentBlock::Text(t) => Some(AgentEvent::Thought(t.text)),
                        _ => None,
                    },
                    SessionUpdate::ToolCall(tc) => {
                        Some(AgentEvent::ToolCall { id: tc.tool_call_id.0.to_string(), title: tc.title })
                    }
                    _ => None,
                };
                if let Some(event) = event {
                    hooks.run(Point::AgentUpdate, &session_key).await;
                    // Bounded: a chatty agent waits for the worker instead of growing memory.
                    let _ = updates.send(event).await;
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_notification(
            async move |n: CompleteElicitationNotification, _cx: v1::ConnectionTo<Agent>| {
                let _ = completions
                    .send(AgentEvent::ElicitationComplete(n.elicitation_id.0.to_string()))
                    .await;
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_notification(
            async move |m: Mark, _cx: v1::ConnectionTo<Agent>| {
                // Dispatched in order: every update before the mark is in the channel already.
                if ours.owns(&m) {
                    let _ = marked.send(AgentEvent::Marked(m.mark)).await;
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: RequestPermissionRequest,
                        responder: v1::Responder<RequestPermissionResponse>,
                        cx: v1::ConnectionTo<Agent>| {
                let (reply, answer) = oneshot::channel();
                let options: Vec<_> = req
                    .options
                    .iter()
                    .map(|o| json!({ "id": o.option_id.0.to_string(), "name": o.name, "kind": format!("{:?}", o.kind) }))
                    .collect();
                let tool_call = json!({
                    "tool_call_id": req.tool_call.tool_call_id.0.to_string(),
                    "title": req.tool_call.fields.title,
                });
                let _ = permissions
                    .send(AgentEvent::Permission(PermissionAsk {
                        tool_call,
                        options: json!(options),
                        reply,
                    }))
                    .await;
                // Waiting happens outside the dispatch loop, which must keep running.
                cx.spawn(async move {
                    let outcome = match answer.await {
                        Ok(Some(id)) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
                        _ => RequestPermissionOutcome::Cancelled,
                    };
                    if let Err(e) = responder.respond(RequestPermissionResponse::new(outcome)) {
                        tracing::warn!(error = ?e, "permission reply failed");
                    }
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ElicitationCreate,
                        responder: v1::Responder<serde_json::Value>,
                        cx: v1::ConnectionTo<Agent>| {
                let (reply, answer) = oneshot::channel();
                let request = req.0;
                let withdrawn = tokio_util::sync::CancellationToken::new();
                let _ = elicitations
                    .send(AgentEvent::Elicitation(ElicitationAsk { request, reply, withdrawn: withdrawn.clone() }))
                    .await;
                let cancel_request = responder.cancellation();
                let (hooks, session_key) = (elicit_hooks.clone(), elicit_key.clone());
                // Waiting happens outside the dispatch loop, which must keep running.
                cx.spawn(async move {
                    tokio::pin!(answer);
                    let answer = tokio::select! {
                        answer = &mut answer => answer,
                        _ = cancel_request.cancelled() => {
                            // E5: the agent withdrew its request (`$/cancel_request`). The
                            // asking side detaches the question (L9), and only then is the
                            // agent told "request cancelled": whatever it says next follows
                            // the question in the transcript.
                            withdrawn.cancel();
                            hooks.run(Point::WithdrawnWaits, &session_key).await;
                            let _ = answer.await;
                            if let Err(e) = responder.respond_with_error(agent_client_protocol::Error::request_cancelled()) {
                                tracing::warn!(error = ?e, "elicitation reply failed");
                            }
                            return Ok(());
                        }
                    };
                    let sent = match answer {
                        Ok(Ok(outcome)) => responder.respond(outcome),
                        Ok(Err(why)) => responder.respond_with_error(
                            agent_client_protocol::Error::invalid_params().data(json!(why)),
                        ),
                        // E5: the wait ended without an answer.
                        Err(_) => responder.respond(json!({ "action": "cancel" })),
                    };
                    if let Err(e) = sent {
                        tracing::warn!(error = ?e, "elicitation reply failed");
                    }
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async move |cx: v1::ConnectionTo<Agent>| {
            let _ = conn_tx.send(cx.clone());
            tokio::select! {
                _ = cx.incoming_closed() => {}
                _ = stop_rx => stopping.store(true, std::sync::atomic::Ordering::SeqCst),
            }
            Ok(())
        });
    let exit_tail = tail.clone();
    let pid = runner.pid();
    let cut_off = relay.clone();
    tokio::spawn(async move {
        let result = driver.await;
        let asked = stopped_by_us.load(std::sync::atomic::Ordering::SeqCst);
        let ended = runner.end(asked).await;
        let reason = match (result, ended) {
            // T8: the agent's output broke a bound; that is why it ended.
            _ if cut_off.broken().is_some() => cut_off.broken().unwrap_or_default(),
            (Err(e), _) => format!("agent connection failed: {e}"),
            (Ok(()), _) if asked => "agent stopped".to_string(),
            (Ok(()), Some(status)) => format!("agent exited ({status})"),
            (Ok(()), None) => "agent connection closed".to_string(),
        };
        let _ = exited
            .send(AgentEvent::Exited(exit_tail.explain(&reason)))
            .await;
    });

    let handshake = handshake(conn_rx, &spec);
    match tokio::time::timeout(start_timeout, handshake).await {
        Ok(Ok((cx, session_id))) => Ok((
            AgentConnection {
                cx,
                session_id,
                stop: Some(stop_tx),
                events,
                relay,
            },
            events_rx,
        )),
        Ok(Err(reason)) => {
            let _ = stop_tx.send(());
            let needs_login = reason.needs_login;
            let reason = relay.broken().unwrap_or(reason.reason);
            Err(AgentError {
                reason: tail.explain(&reason),
                needs_login,
            })
        }
        Err(_) => {
            let _ = stop_tx.send(());
            if let Some(pid) = pid {
                // Now, not when the connection notices: the agent may ignore its closed pipes.
                spec.groups.kill(pid);
            }
            Err(tail
                .explain(&format!(
                    "the agent did not complete the ACP handshake within {} s; it was stopped",
                    start_timeout.as_secs()
                ))
                .into())
        }
    }
}
