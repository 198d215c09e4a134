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

use crate::server::auth::FailureLimiter;
use crate::server::clarification::ask::{parse_ask, tool_output};
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
                    "invalid ask_user_question input: {}",
                    rule.message()
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
        let outcome = ask_and_wait(&self.state, &session, ask, cx.ct.clone(), progress, None).await;
        Ok(match outcome {
            AskOutcome::Answered(response) => {
                let value = tool_output(&response);
                let mut r = CallToolResult::structured(value.clone());
                r.content = vec![ContentBlock::text(value.to_string())];
                r.into()
            }
            AskOutcome::Detached(reason) => tool_error(format!(
                "no answer yet ({reason}); the question stays open for the user"
            )),
            AskOutcome::Ended(reason) => tool_error(format!("no answer: {reason}")),
            AskOutcome::Failed(e) => {
                tool_error(format!("the question could not be asked: {}", e.message()))
            }
        })
    }
}

fn tool_error(message: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(message)]).into()
}

/// Which agent token opened each MCP session (`mcp-session-id`): a session answers only the
/// token that created it, so a leaked session id is useless with another session's token. One
/// token holds at most [`SESSIONS_PER_TOKEN`] MCP sessions: opening another closes its oldest.
#[derive(Clone)]
struct Bindings {
    map: Arc<std::sync::Mutex<BindingMap>>,
    sessions: Arc<LocalSessionManager>,
    /// Wrong tokens from clients other than this machine's own (each costs a database read);
    /// agents are at 127.0.0.1 and never wait behind someone else's failures.
    failures: Arc<FailureLimiter>,
}

#[derive(Default)]
struct BindingMap {
    by_session: std::collections::HashMap<String, String>,
    order: std::collections::VecDeque<String>,
}

/// MCP sessions remembered at once; the oldest binding goes first (its session then fails
/// closed with 404, `require_session`, and the agent initializes a new one).
const MAX_BINDINGS: usize = 8192;
/// MCP sessions one agent token holds open at once.
pub const SESSIONS_PER_TOKEN: usize = 8;

impl Bindings {
    /// `None`: unknown session id; `Some(true)`: opened by this token.
    fn check(&self, mcp_session: &str, token_hash: &str) -> Option<bool> {
        let map = self.map.lock().expect("bindings lock");
        map.by_session.get(mcp_session).map(|h| h == token_hash)
    }

    /// Binds a new MCP session to its token; returns the sessions to close (beyond the caps).
    fn bind(&self, mcp_session: &str, token_hash: &str) -> Vec<String> {
        let mut map = self.map.lock().expect("bindings lock");
        let mut closed = Vec::new();
        let mine: Vec<String> = map
            .order
            .iter()
            .filter(|id| map.by_session.get(*id).is_some_and(|h| h == token_hash))
            .cloned()
            .collect();
        if mine.len() >= SESSIONS_PER_TOKEN {
            closed.extend(mine.into_iter().take(1));
        }
        if map.by_session.len() >= MAX_BINDINGS
            && let Some(old) = map.order.front().cloned()
        {
            closed.push(old);
        }
        for old in &closed {
            map.by_session.remove(old);
            map.order.retain(|id| id != old);
        }
        if map
            .by_session
            .insert(mcp_session.to_string(), token_hash.to_string())
            .is_none()
        {
            map.order.push_back(mcp_session.to_string());
        }
        closed
    }
}

fn unauthorized(message: &str) -> Response {
    let body = json!({ "error": { "code": "unauthorized", "message": message } });
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        axum::Json(body),
    )
        .into_response()
}

/// 401 unless `Authorization: Bearer <token>` names a live session (tokens are revoked when
/// the agent process or the session ends), and the MCP session, if named, was opened with it.
async fn require_session(
    State((state, bindings)): State<(AppState, Bindings)>,
    mut req: Request,
    next: Next,
) -> Response {
    let ip = super::front_door::client_ip(&req);
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let Some(hash) = token.map(hash_token) else {
        return unauthorized("missing bearer token");
    };
    let attempt = if crate::server::auth::is_local(ip) {
        None
    } else {
        match bindings.failures.begin(ip, std::time::Instant::now()) {
            Ok(attempt) => Some(attempt),
            Err(_) => return super::front_door::too_many_failures(),
        }
    };
    let session = crate::server::orchestrator::sessions::by_token_hash(&state, &hash).await;
    let Some(session) = session else {
        return unauthorized("unknown or revoked bearer token");
    };
    if let Some(attempt) = attempt {
        attempt.succeeded();
    }
    let named = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // Every session rmcp opens is bound below, so a named session without a binding is
    // unknown or forgotten: refused like rmcp refuses unknown ids (an MCP client then
    // initializes a new session), never passed through unchecked.
    match named.as_deref().map(|id| bindings.check(id, &hash)) {
        Some(Some(false)) => return unauthorized("this MCP session belongs to another token"),
        Some(None) => {
            let body = json!({ "error": { "code": "not_found", "message":
                "unknown MCP session: initialize a new one" } });
            return (StatusCode::NOT_FOUND, axum::Json(body)).into_response();
        }
        Some(Some(true)) | None => {}
    }
    req.extensions_mut().insert(McpSession(session));
    let response = next.run(req).await;
    if named.is_none()
        && let Some(opened) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        for old in bindings.bind(opened, &hash) {
            let sessions = bindings.sessions.clone();
            tokio::spawn(async move {
                use rmcp::transport::streamable_http_server::session::SessionManager;
                if let Err(e) = sessions.close_session(&old.into()).await {
                    tracing::debug!(error = %e, "closing an MCP session beyond its cap");
                }
            });
        }
    }
    response
}

/// The `/mcp` routes.
pub fn routes(state: &AppState) -> axum::Router<AppState> {
    let mut sessions = LocalSessionManager::default();
    // A human may take hours to answer; progress notifications keep the session alive too.
    sessions.session_config.keep_alive =
        Some(state.runtime.config.ask_timeout + Duration::from_secs(60));
    let mut config =
        StreamableHttpServerConfig::default().with_sse_keep_alive(Some(Duration::from_secs(15)));
    // A shutdown ends every open stream, so a waiting agent cannot hold the process open.
    config.cancellation_token = state.shutdown.child_token();
    let handler_state = state.clone();
    let sessions = Arc::new(sessions);
    let bindings = Bindings {
        map: Arc::default(),
        sessions: sessions.clone(),
        failures: Arc::new(FailureLimiter::standard()),
    };
    let service = StreamableHttpService::new(
        move || {
            Ok(AskServer {
                state: handler_state.clone(),
            })
        },
        sessions,
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            (state.clone(), bindings),
            require_session,
        ))
}
