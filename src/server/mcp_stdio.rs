//! `turnstile mcp-stdio` (spec/agents.md A3): our MCP tool for an agent that speaks MCP only
//! over stdio (ACP requires only stdio of its agents). The agent starts this subcommand of the
//! server binary as its MCP server; it relays `tools/list` and `tools/call` to the server's
//! `/mcp` with the session's token, so the tool and every rule behind it are the ones the HTTP
//! agents get. The URL and the token come in the environment (never in argv, which any local
//! user can read); while a call waits for the user, the agent gets progress notifications as
//! over HTTP (L7). A call the agent cancels is cancelled upstream (the HTTP request dropped).

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData as McpError, RoleClient, RoleServer, ServerHandler, ServiceExt};

/// The server's MCP endpoint (`{self_url}/mcp`).
pub const URL_ENV: &str = "TURNSTILE_MCP_URL";
/// The session's MCP bearer token.
pub const TOKEN_ENV: &str = "TURNSTILE_MCP_TOKEN";
/// The argument that selects the relay.
pub const SUBCOMMAND: &str = "mcp-stdio";

/// How often a waiting call tells the agent it is still waiting.
const KEEPALIVE: Duration = Duration::from_secs(15);

struct Relay {
    upstream: RunningService<RoleClient, ()>,
}

fn upstream_error(e: ServiceError) -> McpError {
    match e {
        ServiceError::McpError(e) => e,
        other => McpError::internal_error(format!("the Turnstile server: {other}"), None),
    }
}

impl ServerHandler for Relay {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("turnstile", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        req: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.upstream.list_tools(req).await.map_err(upstream_error)
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Dropped when the agent cancels: the upstream request is cancelled with it.
        let call = self.upstream.call_tool_once(req);
        tokio::pin!(call);
        let token = cx.meta.get_progress_token();
        let mut ticks =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
        let mut n = 0u32;
        loop {
            tokio::select! {
                done = &mut call => return done.map_err(upstream_error),
                _ = ticks.tick() => {
                    n += 1;
                    if let Some(token) = token.clone() {
                        let p = ProgressNotificationParam::new(token, f64::from(n))
                            .with_message("waiting for the user");
                        let _ = cx.peer.notify_progress(p).await;
                    }
                }
                _ = cx.ct.cancelled() => {
                    return Err(McpError::invalid_request("the call was cancelled", None));
                }
            }
        }
    }
}

/// Serves MCP on stdin/stdout until the agent closes them. `url` and `token` are the
/// session's endpoint and bearer token.
pub async fn run(url: String, token: String) -> Result<(), String> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let upstream = ()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .map_err(|e| format!("cannot reach the Turnstile server: {e}"))?;
    let served = Relay { upstream }
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("MCP over stdio failed to start: {e}"))?;
    served
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| format!("MCP over stdio ended: {e}"))
}
