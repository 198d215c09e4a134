use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio as ProcStdio;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::{
    self,
    schema::{
        CancelNotification, ClientCapabilities, ContentBlock, HttpHeader, Implementation,
        InitializeRequest, LoadSessionRequest, McpServer, McpServerHttp, NewSessionRequest,
        PromptRequest, RequestPermissionOutcome, RequestPermissionRequest,
        RequestPermissionResponse, SelectedPermissionOutcome, SessionId, SessionNotification,
        SessionUpdate,
    },
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// How to start an agent for one session.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    pub command: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// Our MCP endpoint and this session's bearer token (passed in `mcpServers`).
    pub mcp_url: String,
    pub mcp_token: String,
    /// Resume this ACP session with `session/load` when the agent supports it.
    pub load_session: Option<String>,
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
    /// A `session/prompt` finished with its stop reason, or failed.
    PromptDone(Result<String, PromptFailure>),
    /// The agent process or its connection ended.
    Exited(String),
}

pub struct AgentConnection {
    cx: v1::ConnectionTo<Agent>,
    session_id: SessionId,
    stop: Option<oneshot::Sender<()>>,
    events: mpsc::UnboundedSender<AgentEvent>,
}

impl AgentConnection {
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
            let _ = events.send(AgentEvent::PromptDone(result));
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

/// Spawns the agent, runs `initialize` and `session/new` (or `session/load`), and returns the
/// connection. Everything the agent sends afterwards goes to `events`.
pub async fn launch(
    spec: LaunchSpec,
    events: mpsc::UnboundedSender<AgentEvent>,
) -> Result<AgentConnection, String> {
    let mut child = tokio::process::Command::new(&spec.command)
        .args(&spec.args)
        .envs(&spec.env)
        .current_dir(&spec.cwd)
        .stdin(ProcStdio::piped())
        .stdout(ProcStdio::piped())
        .stderr(ProcStdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start agent {}: {e}", spec.command.display()))?;
    let stdin = child.stdin.take().ok_or("agent stdin unavailable")?;
    let stdout = child.stdout.take().ok_or("agent stdout unavailable")?;
    let transport = ByteStreams::new(stdin.compat_write(), stdout.compat());

    let (conn_tx, conn_rx) = oneshot::channel::<v1::ConnectionTo<Agent>>();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let updates = events.clone();
    let permissions = events.clone();
    let exited = events.clone();
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
                    let _ = updates.send(event);
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
                let _ = permissions.send(AgentEvent::Permission(PermissionAsk {
                    tool_call,
                    options: json!(options),
                    reply,
                }));
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
        .connect_with(transport, async move |cx: v1::ConnectionTo<Agent>| {
            let _ = conn_tx.send(cx.clone());
            tokio::select! {
                _ = cx.incoming_closed() => {}
                _ = stop_rx => {}
            }
            Ok(())
        });
    tokio::spawn(async move {
        let result = driver.await;
        // Reap the process; report how it ended unless we asked it to stop.
        let status = tokio::time::timeout(std::time::Duration::from_secs(5), child.wait()).await;
        let reason = match (result, status) {
            (Err(e), _) => format!("agent connection failed: {e}"),
            (Ok(()), Ok(Ok(status))) => format!("agent exited ({status})"),
            (Ok(()), _) => {
                let _ = child.kill().await;
                "agent connection closed".to_string()
            }
        };
        let _ = exited.send(AgentEvent::Exited(reason));
    });

    let cx = conn_rx
        .await
        .map_err(|_| "agent connection ended during start-up".to_string())?;
    let init = cx
        .send_request(
            InitializeRequest::new(ProtocolVersion::V1)
                .client_capabilities(ClientCapabilities::new())
                .client_info(Implementation::new("turnstile", env!("CARGO_PKG_VERSION"))),
        )
        .block_task()
        .await
        .map_err(|e| format!("initialize failed: {e}"))?;
    let mcp = McpServer::Http(
        McpServerHttp::new("turnstile", spec.mcp_url.clone()).headers(vec![HttpHeader::new(
            "Authorization",
            format!("Bearer {}", spec.mcp_token),
        )]),
    );
    let session_id = match spec
        .load_session
        .filter(|_| init.agent_capabilities.load_session)
    {
        Some(existing) => {
            let id = SessionId::new(existing);
            cx.send_request(
                LoadSessionRequest::new(id.clone(), spec.cwd.clone()).mcp_servers(vec![mcp]),
            )
            .block_task()
            .await
            .map_err(|e| format!("session/load failed: {e}"))?;
            id
        }
        None => {
            cx.send_request(NewSessionRequest::new(spec.cwd.clone()).mcp_servers(vec![mcp]))
                .block_task()
                .await
                .map_err(|e| format!("session/new failed: {e}"))?
                .session_id
        }
    };
    Ok(AgentConnection {
        cx,
        session_id,
        stop: Some(stop_tx),
        events,
    })
}
