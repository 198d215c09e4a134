use std::collections::BTreeMap;
use std::path::PathBuf;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::{
    self,
    schema::{
        AuthenticateRequest, CancelNotification, ClientCapabilities,
        CompleteElicitationNotification, ContentBlock, ElicitationCapabilities,
        ElicitationFormCapabilities, ElicitationUrlCapabilities, EnvVariable, HttpHeader,
        Implementation, InitializeRequest, LoadSessionRequest, McpServer, McpServerHttp,
        McpServerStdio, NewSessionRequest, PromptRequest, RequestPermissionOutcome,
        RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome, SessionId,
        SessionNotification, SessionUpdate,
    },
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use super::AgentError;
use super::elicitation_request::ElicitationCreate;
use super::process::{self, StderrTail};
use super::relay::{self, Mark, Relay};
use crate::server::hooks::{Hooks, Point};
use crate::server::mcp_stdio;

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

/// A4: the agent refused to work until its user logs in (`auth_required`): the message names
/// each way it offers, so the user knows what to run before they retry.
fn needs_login(
    e: &agent_client_protocol::Error,
    methods: &[agent_client_protocol::v1::schema::AuthMethod],
) -> Option<AgentError> {
    if e.code != agent_client_protocol::Error::auth_required().code {
        return None;
    }
    let ways: Vec<String> = methods
        .iter()
        .filter_map(|m| serde_json::to_value(m).ok())
        .map(|m| {
            let name = m["name"].as_str().unwrap_or("a login").to_string();
            match m["description"].as_str().filter(|d| !d.is_empty()) {
                Some(d) => format!("{name}: {d}"),
                None => name,
            }
        })
        .collect();
    let reason = if ways.is_empty() {
        "the agent needs you to log in before it can work; log in as its documentation says, then retry".into()
    } else {
        format!(
            "the agent needs you to log in before it can work ({}), then retry",
            ways.join("; ")
        )
    };
    Some(AgentError {
        reason,
        needs_login: true,
    })
}

type Out = Box<dyn futures::AsyncWrite + Send + Unpin>;
type In = Box<dyn futures::AsyncRead + Send + Unpin>;
/// A started agent: what runs it, its stderr, and the byte streams ACP speaks over.
type Started = (
    Runner,
    StderrTail,
    ByteStreams<Out, In>,
    std::sync::Arc<Relay>,
);

/// The agent as a process of its own, in its own process group (`process`).
fn spawn_process(spec: &LaunchSpec) -> Result<Started, AgentError> {
    let mut child = process::spawn(&spec.command, &spec.args, &spec.env, &spec.cwd)?;
    let group = spec
        .groups
        .register(child.id().ok_or("the agent exited at once")?);
    let stdin = child.stdin.take().ok_or("agent stdin unavailable")?;
    let stdout = child.stdout.take().ok_or("agent stdout unavailable")?;
    let tail = child
        .stderr
        .take()
        .map(StderrTail::capture)
        .unwrap_or_default();
    let unread = relay::unread_in_pipe(std::os::fd::AsRawFd::as_raw_fd(&stdout));
    let (relay, incoming) = Relay::wrap(stdout, unread);
    let transport = ByteStreams::new(
        Box::new(stdin.compat_write()) as Out,
        Box::new(incoming.compat()) as In,
    );
    Ok((Runner::Process { group, child }, tail, transport, relay))
}

/// The bundled mock agent as a task of this process over an in-memory pipe (`test-hooks`
/// builds: tests and benchmarks with thousands of sessions; decision 0042).
#[cfg(feature = "test-hooks")]
fn start_in_process(mock: crate::mock_agent::InProcess) -> Started {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (their_in, their_out) = tokio::io::split(theirs);
    let agent = tokio::spawn(async move {
        let _ =
            crate::mock_agent::serve(their_in.compat(), their_out.compat_write(), Some(mock)).await;
    });
    let (our_in, our_out) = tokio::io::split(ours);
    let (relay, incoming) = Relay::wrap(our_in, Box::new(|| 0));
    let transport = ByteStreams::new(
        Box::new(our_out.compat_write()) as Out,
        Box::new(incoming.compat()) as In,
    );
    (
        Runner::InProcess(agent),
        StderrTail::default(),
        transport,
        relay,
    )
}

/// What runs the agent: a process (its group killed when the connection ends) or, in tests,
/// the mock agent inside this process.
enum Runner {
    Process {
        /// Dropped before `child`: a group leaves the registry before its leader is reaped.
        group: process::GroupRegistration,
        child: tokio::process::Child,
    },
    #[cfg(feature = "test-hooks")]
    InProcess(tokio::task::JoinHandle<()>),
}

impl Runner {
    fn pid(&self) -> Option<u32> {
        match self {
            Runner::Process { group, .. } => Some(group.pid()),
            #[cfg(feature = "test-hooks")]
            Runner::InProcess(_) => None,
        }
    }

    /// The connection is over: nothing of the agent may outlive it. An agent that ended on its
    /// own is given a moment to exit (for its status), watched without reaping it; then its
    /// group is killed while the leader is still unreaped (so the group id cannot have been
    /// reused), and only then reaped. Returns how it exited.
    async fn end(self, asked: bool) -> Option<std::process::ExitStatus> {
        match self {
            Runner::Process { group, mut child } => {
                if !asked {
                    process::exited_unreaped(group.pid(), std::time::Duration::from_secs(2)).await;
                }
                // Killed and deregistered in one step, before the leader is reaped.
                group.kill();
                tokio::time::timeout(std::time::Duration::from_secs(5), child.wait())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            #[cfg(feature = "test-hooks")]
            Runner::InProcess(agent) => {
                agent.abort();
                None
            }
        }
    }
}

/// `initialize`, then `session/load` (when resuming and supported) or `session/new`.
async fn handshake(
    conn_rx: oneshot::Receiver<v1::ConnectionTo<Agent>>,
    spec: &LaunchSpec,
) -> Result<(v1::ConnectionTo<Agent>, SessionId), AgentError> {
    let cx = conn_rx
        .await
        .map_err(|_| "agent connection ended during start-up".to_string())?;
    // E1: questions reach the user through elicitation too (form and URL), unless the profile
    // turned it off.
    let capabilities = if spec.elicitation {
        ClientCapabilities::new().elicitation(
            ElicitationCapabilities::new()
                .form(ElicitationFormCapabilities::new())
                .url(ElicitationUrlCapabilities::new()),
        )
    } else {
        ClientCapabilities::new()
    };
    let init = cx
        .send_request(
            InitializeRequest::new(ProtocolVersion::V1)
                .client_capabilities(capabilities)
                .client_info(Implementation::new("turnstile", env!("CARGO_PKG_VERSION"))),
        )
        .block_task()
        .await
        .map_err(|e| format!("initialize failed: {e}"))?;
    // A4: the profile names how the agent logs in.
    if let Some(method) = &spec.auth_method {
        cx.send_request(AuthenticateRequest::new(method.clone()))
            .block_task()
            .await
            .map_err(|e| {
                let known: Vec<String> = init
                    .auth_methods
                    .iter()
                    .filter_map(|m| serde_json::to_value(m).ok())
                    .filter_map(|m| m["id"].as_str().map(|id| format!("{id:?}")))
                    .collect();
                format!(
                    "the agent refused to authenticate with the profile's auth method {method:?} \
                     (it offers {}): {e}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )
            })?;
    }
    // A3: HTTP only to an agent that says it speaks it; every agent speaks stdio, through
    // our relay, which gets the token in its environment (argv is readable by any local user).
    let mcp = if init.agent_capabilities.mcp_capabilities.http {
        McpServer::Http(
            McpServerHttp::new("turnstile", spec.mcp_url.clone()).headers(vec![HttpHeader::new(
                "Authorization",
                format!("Bearer {}", spec.mcp_token),
            )]),
        )
    } else {
        McpServer::Stdio(
            McpServerStdio::new("turnstile", spec.server_exe.clone())
                .args(vec![mcp_stdio::SUBCOMMAND.to_string()])
                .env(vec![
                    EnvVariable::new(mcp_stdio::URL_ENV, spec.mcp_url.clone()),
                    EnvVariable::new(mcp_stdio::TOKEN_ENV, spec.mcp_token.clone()),
                ]),
        )
    };
    let session_id = match spec
        .load_session
        .clone()
        .filter(|_| init.agent_capabilities.load_session)
    {
        Some(existing) => {
            let id = SessionId::new(existing);
            cx.send_request(
                LoadSessionRequest::new(id.clone(), spec.cwd.clone()).mcp_servers(vec![mcp]),
            )
            .block_task()
            .await
            .map_err(|e| {
                needs_login(&e, &init.auth_methods)
                    .unwrap_or_else(|| format!("session/load failed: {e}").into())
            })?;
            id
        }
        None => {
            cx.send_request(NewSessionRequest::new(spec.cwd.clone()).mcp_servers(vec![mcp]))
                .block_task()
                .await
                .map_err(|e| {
                    needs_login(&e, &init.auth_methods)
                        .unwrap_or_else(|| format!("session/new failed: {e}").into())
                })?
                .session_id
        }
    };
    Ok((cx, session_id))
}
