//! The ACP handshake of a session's agent: `initialize`, `authenticate` when the profile names
//! a method (A4), then `session/load` (when resuming and supported) or `session/new`, with our
//! MCP server offered over HTTP or stdio (A3).

use agent_client_protocol::Agent;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::{
    self,
    schema::{
        AuthenticateRequest, ClientCapabilities, ElicitationCapabilities,
        ElicitationFormCapabilities, ElicitationUrlCapabilities, EnvVariable, HttpHeader,
        Implementation, InitializeRequest, LoadSessionRequest, McpServer, McpServerHttp,
        McpServerStdio, NewSessionRequest, SessionId,
    },
};
use tokio::sync::oneshot;

use super::AgentError;
use super::acp_client::LaunchSpec;
use crate::server::mcp_stdio;

/// `initialize`, then `session/load` (when resuming and supported) or `session/new`.
pub(super) async fn handshake(
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
