//! The MCP tool contract with a real rmcp client (spec/api.md MCP): identical repeat calls
//! share one bundle (L8), progress while waiting (L7), cancellation detaches (L9).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ProgressNotificationParam};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use support::{Api, TestServer};
use turnstile::server::orchestrator::sessions::hash_token;

#[derive(Clone, Default)]
struct Progress(Arc<AtomicUsize>);

impl ClientHandler for Progress {
    async fn on_progress(
        &self,
        _p: ProgressNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

type Client = Arc<RunningService<RoleClient, Progress>>;

/// A session with an open turn (its agent is busy for a while) and an MCP client holding a
/// token we chose for it.
async fn session_with_client(server: &TestServer, api: &Api) -> (String, Client, Progress) {
    let (_, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "mcp", "prompt": "e2e:delay(60000)" }),
        )
        .await;
    let task_id = task["id"].as_str().unwrap().to_string();
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    api.wait_for(
        &format!("/api/v1/tasks/{task_id}/sessions"),
        "running",
        |v| v["sessions"][0]["state"] == "running",
    )
    .await;
    let token = "test-token-0123456789";
    server
        .state
        .repo
        .set_mcp_token_hash(&session, &hash_token(token))
        .await
        .unwrap();
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", server.base))
        .auth_header(token);
    let progress = Progress::default();
    let client = progress
        .clone()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("MCP client");
    (session, Arc::new(client), progress)
}

fn question(prompt: &str) -> Value {
    json!({ "questions": [{ "id": "db", "prompt": prompt, "options": [{ "id": "a", "label": "A" }, { "id": "b", "label": "B" }] }] })
}

fn call(client: &Client, args: Value) -> tokio::task::JoinHandle<CallToolResult> {
    let client = client.clone();
    tokio::spawn(async move {
        client
            .call_tool(
                CallToolRequestParams::new("ask_user_question")
                    .with_arguments(rmcp::model::object(args)),
            )
            .await
            .expect("tool call")
    })
}

async fn bundles(api: &Api, session: &str) -> Vec<String> {
    api.messages(session)
        .await
        .iter()
        .filter(|m| m["kind"] == "clarification_request")
        .map(|m| m["pending_id"].as_str().unwrap().to_string())
        .collect()
}

async fn wait_bundles(api: &Api, session: &str, n: usize) -> Vec<String> {
    api.wait_for(
        &format!("/api/v1/sessions/{session}/messages"),
        &format!("{n} bundles"),
        |v| {
            v["messages"].as_array().is_some_and(|m| {
                m.iter()
                    .filter(|m| m["kind"] == "clarification_request")
                    .count()
                    == n
            })
        },
    )
    .await;
    bundles(api, session).await
}

both_http!(
    l8_identical_repeat_call_shares_the_bundle_and_l7_progress_flows,
    l9_cancelled_call_detaches_its_bundle
);

async fn l8_identical_repeat_call_shares_the_bundle_and_l7_progress_flows(url: String) {
    let server =
        TestServer::start_with(&url, |rt| rt.ask_keepalive = Duration::from_millis(30)).await;
    let api = Api::new(&server.base);
    let (session, client, progress) = session_with_client(&server, &api).await;
    let first = call(&client, question("Which one?"));
    let ids = wait_bundles(&api, &session, 1).await;
    let second = call(&client, question("Which one?"));
    // The first call hands its wait over to the identical second one.
    let handed_over = first.await.unwrap();
    assert_eq!(handed_over.is_error, Some(true));
    assert_eq!(
        bundles(&api, &session).await,
        ids,
        "L8: no duplicate bundle"
    );
    // L7: progress notifications keep the waiting call alive.
    support::until("a progress notification", async || {
        progress.0.load(Ordering::SeqCst) > 0
    })
    .await;
    let (status, _) = api
        .respond(
            &ids[0],
            json!({ "answers": [{ "question_id": "db", "selected_options": ["b"] }] }),
        )
        .await;
    assert_eq!(status, 200);
    let answer = second.await.unwrap();
    assert_eq!(
        answer.structured_content,
        Some(json!({ "db": { "selected_option": "b" } }))
    );
    // A different question is a new bundle.
    let third = call(&client, question("Another one?"));
    wait_bundles(&api, &session, 2).await;
    third.abort();
    server.stop().await;
}

async fn l9_cancelled_call_detaches_its_bundle(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (session, client, _) = session_with_client(&server, &api).await;
    let args = rmcp::model::object(question("Cancel me?"));
    let c = client.clone();
    let timed_out = tokio::spawn(async move {
        tokio::time::timeout(
            Duration::from_millis(300),
            c.call_tool(CallToolRequestParams::new("ask_user_question").with_arguments(args)),
        )
        .await
        .is_err()
    });
    let ids = wait_bundles(&api, &session, 1).await;
    assert!(timed_out.await.unwrap(), "the client gave up");
    let b = api
        .wait_for(
            &format!("/api/v1/clarifications/{}", ids[0]),
            "detached",
            |b| b["detached"] == true,
        )
        .await;
    assert_eq!(
        (b["active"].as_bool(), b["status"].as_str()),
        (Some(true), Some("pending")),
        "detached stays answerable"
    );
    server.stop().await;
}

both_http!(p10_rolled_back_ask_publishes_nothing);

async fn p10_rolled_back_ask_publishes_nothing(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (session, client, _) = session_with_client(&server, &api).await;
    let mut rx = server.state.hub.subscribe();
    // The bundle row is written, then its questions fail: the transaction rolls back.
    support::raw_exec(
        &url,
        "ALTER TABLE clarification_questions RENAME TO clarification_questions_away",
    )
    .await;
    let result = call(&client, question("Rolled back?")).await.unwrap();
    support::raw_exec(
        &url,
        "ALTER TABLE clarification_questions_away RENAME TO clarification_questions",
    )
    .await;
    assert_eq!(result.is_error, Some(true));
    assert!(
        bundles(&api, &session).await.is_empty(),
        "no bundle, no message"
    );
    // Nothing about it was published: drain what the hub holds.
    while let Ok(e) = rx.try_recv() {
        assert!(
            !e.action.starts_with("clarification.") && e.action != "session.message.added",
            "published {e:?}"
        );
    }
    server.stop().await;
}

both_http!(an_mcp_session_answers_only_the_token_that_opened_it);

/// An rmcp session id is bound to the session token that opened it: another agent's valid
/// token cannot use it.
async fn an_mcp_session_answers_only_the_token_that_opened_it(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let mut tokens = Vec::new();
    for (n, token) in ["owner-token-0123456789", "other-token-0123456789"]
        .iter()
        .enumerate()
    {
        let (_, task) = api
            .post(
                "/api/v1/tasks",
                json!({ "title": format!("t{n}"), "prompt": "e2e:delay(60000)" }),
            )
            .await;
        let session = task["primary_session_id"].as_str().unwrap().to_string();
        api.wait_for(
            &format!("/api/v1/tasks/{}/sessions", task["id"].as_str().unwrap()),
            "running",
            |v| v["sessions"][0]["state"] == "running",
        )
        .await;
        server
            .state
            .repo
            .set_mcp_token_hash(&session, &hash_token(token))
            .await
            .unwrap();
        tokens.push(*token);
    }
    let c = reqwest::Client::new();
    let post = |token: &str, session: Option<&str>, body: Value| {
        let mut r = c
            .post(server.url("/mcp"))
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(s) = session {
            r = r.header("mcp-session-id", s);
        }
        r.send()
    };
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": { "name": "probe", "version": "0" } } });
    let r = post(tokens[0], None, init).await.unwrap();
    assert_eq!(r.status(), 200);
    let mcp_session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let ping = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let r = post(tokens[1], Some(&mcp_session), ping.clone())
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "another token cannot use this MCP session");
    let r = post(tokens[0], Some(&mcp_session), ping.clone())
        .await
        .unwrap();
    assert_ne!(r.status(), 401, "the owner can");
    // A session id nobody bound (made up, or a binding forgotten at the cap) fails closed:
    // 404, which tells an MCP client to initialize a new session — never passed through.
    let r = post(tokens[0], Some("made-up-session-id"), ping)
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "an unbound MCP session is refused");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found", "{body}");
    server.stop().await;
}

both_http!(l5_a_question_superseded_right_after_its_commit_ends_its_call);

/// L5 race: the ask's transaction commits in the current turn, and a newer turn starts before
/// the bundle is read back (forced with the `AskWritten` hook). Nobody can answer that
/// question any more, so the call must end at once with the superseded result instead of
/// waiting for an answer until its timeout; the bundle is not active and never comes back.
async fn l5_a_question_superseded_right_after_its_commit_ends_its_call(url: String) {
    use turnstile::server::hooks::Point;
    use turnstile::server::repo::NewTurn;
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (session, client, _) = session_with_client(&server, &api).await;
    let (repo, clock, s) = (
        server.state.repo.clone(),
        server.state.clock.clone(),
        session.clone(),
    );
    server.state.hooks.set(Point::AskWritten, move |_| {
        let (repo, clock, s) = (repo.clone(), clock.clone(), s.clone());
        async move {
            let at = clock.now() + 1;
            repo.insert_turn(&NewTurn {
                id: None,
                session_id: s,
                started_at: at,
                created_at: at,
                fence: None,
            })
            .await
            .expect("a newer turn");
        }
    });
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        call(&client, question("Superseded at once?")),
    )
    .await
    .expect("L5: the call of a superseded question ends; it does not wait for an answer")
    .unwrap();
    server.state.hooks.clear(Point::AskWritten);
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(
        format!("{result:?}").contains("superseded"),
        "the agent is told why: {result:?}"
    );
    let ids = bundles(&api, &session).await;
    assert_eq!(ids.len(), 1, "the question was written: {ids:?}");
    let (_, b) = api.get(&format!("/api/v1/clarifications/{}", ids[0])).await;
    assert_eq!(b["active"], false, "L5: superseded, not active: {b}");
    server.stop().await;
}

both_http!(
    an_agent_token_holds_a_bounded_number_of_mcp_sessions,
    wrong_mcp_tokens_from_another_client_are_limited_before_any_read,
);

/// A session whose agent is busy, with an MCP token we chose for it.
async fn busy_session_with_token(server: &TestServer, api: &Api, token: &str) -> String {
    let (task, session) = api.start_task("e2e:delay(60000)").await;
    api.wait_for(&format!("/api/v1/tasks/{task}/sessions"), "running", |v| {
        v["sessions"][0]["state"] == "running"
    })
    .await;
    server
        .state
        .repo
        .set_mcp_token_hash(&session, &hash_token(token))
        .await
        .unwrap();
    session
}

/// `initialize` on `/mcp` for `token` from `client`: the status and the new session's id.
async fn initialize(c: &reqwest::Client, url: &str, token: &str) -> (u16, Option<String>) {
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": { "name": "probe", "version": "0" } } });
    let r = c
        .post(url)
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    let id = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    (r.status().as_u16(), id)
}

/// Bounds (spec "Server process"): one agent token holds at most a few MCP sessions at once
/// (`api/mcp.rs` `SESSIONS_PER_TOKEN`); opening another closes its oldest, which then fails
/// closed (404: initialize anew), so an agent cannot grow the server's sessions without bound.
async fn an_agent_token_holds_a_bounded_number_of_mcp_sessions(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let token = "bounded-sessions-token-0123";
    busy_session_with_token(&server, &api, token).await;
    let c = reqwest::Client::new();
    let mut opened = Vec::new();
    for _ in 0..turnstile::api::mcp_sessions_per_token() + 1 {
        let (status, id) = initialize(&c, &server.url("/mcp"), token).await;
        assert_eq!(status, 200);
        opened.push(id.expect("an MCP session id"));
    }
    let ping = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let status_of = |id: String| {
        let (c, url, ping) = (c.clone(), server.url("/mcp"), ping.clone());
        async move {
            c.post(url)
                .header("authorization", format!("Bearer {token}"))
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", "2025-06-18")
                .json(&ping)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(
        status_of(opened[0].clone()).await,
        404,
        "the oldest was closed"
    );
    assert_ne!(
        status_of(opened.last().unwrap().clone()).await,
        404,
        "the newest lives"
    );
    server.stop().await;
}

/// Wrong MCP tokens from a client other than this machine's own cost a database read each;
/// ten a minute, then 429 before any read. Agents (at 127.0.0.1) are never held up by them.
async fn wrong_mcp_tokens_from_another_client_are_limited_before_any_read(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let token = "limited-agent-token-0123";
    busy_session_with_token(&server, &api, token).await;
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 3]))
        .build()
        .unwrap();
    let mut statuses = Vec::new();
    for i in 0..12 {
        statuses.push(
            initialize(&other, &server.url("/mcp"), &format!("guess-{i}"))
                .await
                .0,
        );
    }
    assert_eq!(&statuses[..10], &[401; 10]);
    assert_eq!(&statuses[10..], &[429, 429], "{statuses:?}");
    // The agent's own address is not held up.
    assert_eq!(
        initialize(&reqwest::Client::new(), &server.url("/mcp"), token)
            .await
            .0,
        200
    );
    for i in 0..12 {
        assert_eq!(
            initialize(
                &reqwest::Client::new(),
                &server.url("/mcp"),
                &format!("x{i}")
            )
            .await
            .0,
            401
        );
    }
    server.stop().await;
}
