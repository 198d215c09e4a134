//! The MCP endpoint agents call (`/mcp`, streamable HTTP, rmcp): one tool,
//! `ask_user_question`. The bearer token identifies the session (only its hash is stored); a
//! missing or wrong token is 401 before any MCP handling.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::json;

use crate::server::clarification::ask::parse_ask;
use crate::server::clarification::asking::{AskOutcome, ask_and_wait};
use crate::server::orchestrator::sessions::hash_token;
use crate::server::repo::SessionRecord;
use crate::server::state::AppState;

pub const TOOL: &str = "ask_user_question";

fn ask_tool() -> Tool {
    let schema = rmcp::model::object(json!({
        "type": "object",
        "required": ["questions"],
        "properties": {
            "questions": {
                "type": "array", "minItems": 1, "maxItems": 4,
                "items": {
                    "type": "object",
                    "required": ["prompt", "options"],
                    "properties": {
                        "id": { "type": "string" },
                        "title": { "type": "string" },
                        "prompt": { "type": "string" },
                        "options": {
                            "type": "array", "minItems": 2, "maxItems": 6,
                            "items": {
                                "type": "object",
                                "required": ["label"],
                                "properties": {
                                    "id": { "type": "string" },
                                    "label": { "type": "string" },
                                    "description": { "type": "string" }
                                }
                            }
                        }
                    }
                }
            },
            "context": { "type": "string" }
        }
    }));
    Tool::new(
        TOOL,
        "Ask the human user 1–4 multiple-choice questions and wait for the answer.",
        schema,
    )
}

/// The session a request's bearer token belongs to, put in the request extensions by
/// [`require_session`].
#[derive(Clone)]
struct McpSession(SessionRecord);

#[derive(Clone)]
struct AskServer {
    state: AppState,
}

impl ServerHandler for AskServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("turnstile", env!("CARGO_PKG_VERSION")))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == TOOL).then(ask_tool)
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![ask_tool()]))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if req.name != TOOL {
            return Err(McpError::invalid_params(
                format!("unknown tool {}", req.name),
                None,
            ));
        }
        // The session comes from the token, never from the arguments.
        let Some(McpSession(session)) = cx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<McpSession>())
            .cloned()
        else {
            return Err(McpError::invalid_request("no session for this token", None));
        };
        let args = serde_json::Value::Object(req.arguments.unwrap_or_default());
        let ask = match parse_ask(&args) {
            Ok(ask) => ask,
            Err(rule) => {
                return Ok(tool_error(format!(
                    "invalid ask_user_question input: {rule}"
                )));
            }
        };
        let token = cx.meta.get_progress_token();
        let peer = cx.peer.clone();
        let progress = move |tick: u32| {
            let token = token.clone();
            let peer = peer.clone();
            async move {
                if let Some(token) = token {
                    let p = ProgressNotificationParam::new(token, f64::from(tick))
                        .with_message("waiting for the user");
                    let _ = peer.notify_progress(p).await;
                }
            }
        };
        let outcome = ask_and_wait(&self.state, &session, ask, cx.ct.clone(), progress).await;
        Ok(match outcome {
            AskOutcome::Answered(value) => {
                let mut r = CallToolResult::structured(value.clone());
                r.content = vec![ContentBlock::text(value.to_string())];
                r.into()
            }
            AskOutcome::Detached(reason) => tool_error(format!(
                "no answer yet ({reason}); the question stays open for the user"
            )),
            AskOutcome::Failed(e) => tool_error(format!("the question could not be asked: {e}")),
        })
    }
}

fn tool_error(message: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(message)]).into()
}

/// 401 unless `Authorization: Bearer <token>` names a session.
async fn require_session(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let session = match token {
        Some(t) => state
            .repo
            .get_session_by_token_hash(&hash_token(t))
            .await
            .ok()
            .flatten(),
        None => None,
    };
    let Some(session) = session else {
        let body = json!({ "error": { "code": "unauthorized", "message": "missing or unknown bearer token" } });
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            axum::Json(body),
        )
            .into_response();
    };
    req.extensions_mut().insert(McpSession(session));
    next.run(req).await
}

/// The `/mcp` routes.
pub fn routes(state: &AppState) -> axum::Router<AppState> {
    let mut sessions = LocalSessionManager::default();
    // A human may take hours to answer; progress notifications keep the session alive too.
    sessions.session_config.keep_alive =
        Some(state.runtime.config.ask_timeout + Duration::from_secs(60));
    let config =
        StreamableHttpServerConfig::default().with_sse_keep_alive(Some(Duration::from_secs(15)));
    let handler_state = state.clone();
    let service = StreamableHttpService::new(
        move || {
            Ok(AskServer {
                state: handler_state.clone(),
            })
        },
        Arc::new(sessions),
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_session,
        ))
}
