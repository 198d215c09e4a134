//! The bundled mock agent: a deterministic ACP agent that asks questions through the server's
//! MCP tool like any real agent (docs/api.md "The bundled mock agent"). The `mock_agent`
//! binary serves it over stdio (stdout is the protocol channel: diagnostics go to stderr);
//! tests that need thousands of agents, and a server started with `--mock-in-process`, run it
//! in process over a pipe ([`InProcess`]), where "exiting" ends the connection instead of the
//! process.

mod prompt;
pub mod script;
mod written;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::{
    self,
    schema::{
        AgentCapabilities, AuthMethod, AuthMethodAgent, AuthenticateRequest, AuthenticateResponse,
        CancelNotification, ContentBlock, Implementation, InitializeRequest, InitializeResponse,
        LoadSessionRequest, LoadSessionResponse, McpCapabilities, McpServer, NewSessionRequest,
        NewSessionResponse, PromptRequest, PromptResponse, SessionId, SessionNotification,
        SessionUpdate,
    },
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use tokio_util::sync::CancellationToken;

type McpClient = Arc<RunningService<RoleClient, ()>>;

/// Where the mock reaches the client's MCP server for a session.
#[derive(Clone)]
enum Endpoint {
    Http {
        url: String,
        token: String,
    },
    /// A program to start that speaks MCP on its stdio (A3).
    Stdio {
        command: std::path::PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
}

/// A mock agent running inside the server process over an in-memory pipe (still ACP, and MCP
/// over HTTP): tests, where every prompt it receives is recorded so a test can count
/// deliveries at the agent (I4), and `--mock-in-process` (benchmarks, demos), where nothing is.
#[derive(Clone, Debug)]
pub struct InProcess {
    prompts: Option<Arc<Mutex<Vec<String>>>>,
}

impl Default for InProcess {
    /// Recording every prompt (tests).
    fn default() -> Self {
        InProcess {
            prompts: Some(Arc::default()),
        }
    }
}

impl InProcess {
    /// Recording nothing: sessions of a long-running server (`--mock-in-process`).
    pub fn unrecorded() -> Self {
        InProcess { prompts: None }
    }

    /// The prompts received so far, in order (empty when unrecorded).
    pub fn prompts(&self) -> Vec<String> {
        self.prompts
            .as_ref()
            .map(|p| p.lock().unwrap().clone())
            .unwrap_or_default()
    }
}

/// A4: the auth method the mock offers under `MOCK_AGENT_AUTH_REQUIRED`.
const MOCK_LOGIN: &str = "mock-login";

#[derive(Default)]
struct MockState {
    /// Set in process: `e2e:exit` ends the connection (not the process) and prompts are recorded.
    in_process: Option<InProcess>,
    /// Cancelled to "exit" in process.
    exit: CancellationToken,
    next: Mutex<u64>,
    endpoints: Mutex<HashMap<String, Endpoint>>,
    clients: tokio::sync::Mutex<HashMap<String, McpClient>>,
    cancelled: Mutex<HashSet<String>>,
    /// Prompts a crash in process left unanswered (as a dead process would).
    unanswered: Mutex<Vec<v1::Responder<PromptResponse>>>,
    /// Wakes a running `e2e:delay` when a cancel arrives (ACP: stop as soon as possible).
    cancel_signal: tokio::sync::Notify,
    /// What `initialize` said the client can do (`e2e:client-capabilities`).
    client_capabilities: Mutex<serde_json::Value>,
    /// Its `session/update` notifications sent and written (a tool call waits for them).
    written: Arc<written::Written>,
    /// A4: `authenticate` succeeded with the mock's method.
    logged_in: std::sync::atomic::AtomicBool,
    /// Each session's working directory (`session/new`, `session/load`): `e2e:write` and
    /// `e2e:read` work there.
    cwds: Mutex<HashMap<String, std::path::PathBuf>>,
}

impl MockState {
    /// Sends a `session/update`, counted until the writer has it on the wire.
    fn update(&self, conn: &v1::ConnectionTo<Client>, sid: &SessionId, update: SessionUpdate) {
        if conn
            .send_notification(SessionNotification::new(sid.clone(), update))
            .is_ok()
        {
            self.written.sent();
        }
    }

    /// `path` inside the session's working directory: relative, without `..` (the mock never
    /// writes outside it).
    fn file_in(&self, session: &str, path: &str) -> Result<std::path::PathBuf, String> {
        let relative = std::path::Path::new(path);
        let plain = relative
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if path.is_empty() || path.contains('\0') || !plain {
            return Err(format!("{path:?} is not a plain relative path"));
        }
        let cwds = self.cwds.lock().unwrap();
        let cwd = cwds
            .get(session)
            .ok_or("the session has no working directory")?;
        Ok(cwd.join(relative))
    }

    /// A crash: the process exits with `code`; in process, the connection ends.
    fn exit_now(&self, code: i32) {
        if self.in_process.is_some() {
            self.exit.cancel();
        } else {
            std::process::exit(code)
        }
    }

    fn remember(&self, session: &str, servers: &[McpServer]) {
        for s in servers {
            let endpoint = match s {
                McpServer::Http(h) => Endpoint::Http {
                    url: h.url.clone(),
                    token: h
                        .headers
                        .iter()
                        .find(|x| x.name.eq_ignore_ascii_case("authorization"))
                        .map(|x| x.value.trim_start_matches("Bearer ").to_string())
                        .unwrap_or_default(),
                },
                McpServer::Stdio(s) => Endpoint::Stdio {
                    command: s.command.clone(),
                    args: s.args.clone(),
                    env: s
                        .env
                        .iter()
                        .map(|v| (v.name.clone(), v.value.clone()))
                        .collect(),
                },
                _ => continue,
            };
            self.endpoints
                .lock()
                .unwrap()
                .insert(session.to_string(), endpoint);
        }
    }

    async fn client(&self, session: &str) -> Result<McpClient, String> {
        let mut clients = self.clients.lock().await;
        if let Some(c) = clients.get(session) {
            return Ok(c.clone());
        }
        let ep = self
            .endpoints
            .lock()
            .unwrap()
            .get(session)
            .cloned()
            .ok_or("no MCP server was given")?;
        let client = match ep {
            Endpoint::Http { url, token } => {
                let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
                ().serve(StreamableHttpClientTransport::with_client(
                    http_client(),
                    config,
                ))
                .await
            }
            Endpoint::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env).stderr(std::process::Stdio::null());
                let transport = rmcp::transport::TokioChildProcess::new(cmd)
                    .map_err(|e| format!("cannot start the MCP server: {e}"))?;
                ().serve(transport).await
            }
        }
        .map_err(|e| format!("MCP connect failed: {e}"))?;
        let client = Arc::new(client);
        clients.insert(session.to_string(), client.clone());
        Ok(client)
    }
}

/// One HTTP client for every MCP connection of this process, keeping idle connections
/// (rmcp's default client opens a new TCP connection for every request).
fn http_client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(reqwest::Client::new).clone()
}

/// Serves one ACP connection over `incoming`/`outgoing` until it closes (or, in process, the
/// agent "exits").
pub async fn serve<R, W>(
    incoming: R,
    outgoing: W,
    in_process: Option<InProcess>,
) -> agent_client_protocol::Result<()>
where
    R: futures::AsyncRead + Send + 'static,
    W: futures::AsyncWrite + Send + 'static,
{
    let st = Arc::new(MockState {
        in_process,
        ..MockState::default()
    });
    let exit = st.exit.clone();
    let written = st.written.clone();
    let on_new = st.clone();
    let on_load = st.clone();
    let on_prompt = st.clone();
    let on_cancel = st.clone();
    let on_initialize = st.clone();
    let on_authenticate = st.clone();
    Agent
        .v1()
        .name("mock-agent")
        .on_receive_request(
            async move |req: InitializeRequest,
                        responder: v1::Responder<InitializeResponse>,
                        _cx: v1::ConnectionTo<Client>| {
                *on_initialize.client_capabilities.lock().unwrap() =
                    serde_json::to_value(&req.client_capabilities).unwrap_or_default();
                // A7: switches that play an agent without a capability, or a stuck one.
                let off = |name: &str| std::env::var_os(name).is_some();
                if off("MOCK_AGENT_SLOW_HANDSHAKE") {
                    std::future::pending::<()>().await;
                }
                // A4: an agent that needs its user to log in first.
                let auth = if off("MOCK_AGENT_AUTH_REQUIRED") {
                    vec![AuthMethod::Agent(
                        AuthMethodAgent::new(MOCK_LOGIN, "Mock login")
                            .description("Run `mock_agent login` in a terminal"),
                    )]
                } else {
                    vec![]
                };
                responder.respond(
                    InitializeResponse::new(req.protocol_version)
                        .auth_methods(auth)
                        .agent_capabilities(
                            AgentCapabilities::new()
                                .load_session(!off("MOCK_AGENT_NO_LOAD_SESSION"))
                                .mcp_capabilities(
                                    McpCapabilities::new().http(!off("MOCK_AGENT_NO_HTTP_MCP")),
                                ),
                        )
                        .agent_info(Implementation::new(
                            "turnstile-mock-agent",
                            env!("CARGO_PKG_VERSION"),
                        )),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: AuthenticateRequest,
                        responder: v1::Responder<AuthenticateResponse>,
                        _cx: v1::ConnectionTo<Client>| {
                // A4: the one method the mock offers logs it in; any other is refused.
                if &*req.method_id.0 != MOCK_LOGIN {
                    return responder.respond_with_error(
                        agent_client_protocol::Error::invalid_params()
                            .data(format!("unknown auth method {:?}", &*req.method_id.0)),
                    );
                }
                on_authenticate
                    .logged_in
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                responder.respond(AuthenticateResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest,
                        responder: v1::Responder<NewSessionResponse>,
                        _cx: v1::ConnectionTo<Client>| {
                // A4: logged in by `authenticate`, or by the user: the switch's value names a
                // file the login writes.
                let logged_in = on_new.logged_in.load(std::sync::atomic::Ordering::SeqCst)
                    || std::env::var_os("MOCK_AGENT_AUTH_REQUIRED")
                        .is_some_and(|v| std::path::Path::new(&v).is_file());
                if std::env::var_os("MOCK_AGENT_AUTH_REQUIRED").is_some() && !logged_in {
                    return responder
                        .respond_with_error(agent_client_protocol::Error::auth_required());
                }
                let id = {
                    let mut n = on_new.next.lock().unwrap();
                    *n += 1;
                    format!("mock-{}-{}", uuid::Uuid::new_v4().simple(), *n)
                };
                on_new.remember(&id, &req.mcp_servers);
                on_new
                    .cwds
                    .lock()
                    .unwrap()
                    .insert(id.clone(), req.cwd.clone());
                responder.respond(NewSessionResponse::new(SessionId::new(id)))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest,
                        responder: v1::Responder<LoadSessionResponse>,
                        _cx: v1::ConnectionTo<Client>| {
                on_load.remember(&req.session_id.0, &req.mcp_servers);
                on_load
                    .cwds
                    .lock()
                    .unwrap()
                    .insert(req.session_id.0.to_string(), req.cwd.clone());
                responder.respond(LoadSessionResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest,
                        responder: v1::Responder<PromptResponse>,
                        cx: v1::ConnectionTo<Client>| {
                let st = on_prompt.clone();
                let conn = cx.clone();
                let text: String = req
                    .prompt
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text(t) => Some(t.text.as_str()),
                        _ => None,
                    })
                    .collect();
                st.cancelled.lock().unwrap().remove(&*req.session_id.0);
                if let Some(p) = st.in_process.as_ref().and_then(|p| p.prompts.as_ref()) {
                    p.lock().unwrap().push(text.clone());
                }
                // Steps await the client (MCP answers, permissions): never in the dispatch loop.
                cx.spawn(async move {
                    let stop =
                        prompt::run_prompt(st.clone(), conn, req.session_id.clone(), text).await;
                    if st.exit.is_cancelled() {
                        // Crashed in process: like the process, it never answers — the client
                        // sees the connection end, not an `end_turn` (nor the error a dropped
                        // responder sends). The connection is gone; the responder is parked
                        // with the state, which goes with it.
                        st.unanswered.lock().unwrap().push(responder);
                        return Ok(());
                    }
                    if let Err(e) = responder.respond(PromptResponse::new(stop)) {
                        eprintln!("mock agent: prompt reply failed: {e:?}");
                    }
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _cx: v1::ConnectionTo<Client>| {
                on_cancel
                    .cancelled
                    .lock()
                    .unwrap()
                    .insert(n.session_id.0.to_string());
                on_cancel.cancel_signal.notify_waiters();
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(
            ByteStreams::new(written::CountingWriter::new(outgoing, written), incoming),
            async move |cx: v1::ConnectionTo<Client>| {
                tokio::select! {
                    _ = cx.incoming_closed() => {}
                    _ = exit.cancelled() => {}
                }
                Ok(())
            },
        )
        .await
}
