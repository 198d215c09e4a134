//! Every input is hostile (spec "Server process", L12): a corpus of malformed, oversized,
//! duplicated, unknown, mistyped and script-laden inputs across REST, server functions, the
//! WebSocket and the MCP tool. Each one gets its own clear error (a specific status with a
//! message, a WebSocket error or close frame with a reason, a tool error), or, for markup that
//! is valid data, safe rendering; and the database is unchanged, row by row and column by
//! column (not only its row counts).

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use support::{Access, Api, TEST_TOKEN, TestServer, rows_diff, table_rows};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use turnstile::server::orchestrator::sessions::hash_token;
use turnstile::server::summary::projector::{Scope, refresh_task};

both_http!(
    rest_on_loopback,
    rest_on_the_lan,
    server_functions_on_loopback,
    server_functions_on_the_lan,
    the_websocket_on_loopback,
    the_websocket_on_the_lan,
    the_mcp_tool_on_loopback,
    the_mcp_tool_on_the_lan,
    markup_is_data_on_loopback,
    markup_is_data_on_the_lan,
);

/// How the server under test is bound, and how the corpus reaches it.
#[derive(Clone, Copy)]
enum Bind {
    /// `127.0.0.1`, reached there.
    Loopback,
    /// Every interface, reached at the machine's own LAN address (at 127.0.0.1 when it has
    /// none): what a phone or another host on the network sends.
    Lan,
}

async fn rest_on_loopback(url: String) {
    Corpus::run(&url, Bind::Loopback, "rest", rest).await;
}
async fn rest_on_the_lan(url: String) {
    Corpus::run(&url, Bind::Lan, "rest", rest).await;
}
async fn server_functions_on_loopback(url: String) {
    Corpus::run(&url, Bind::Loopback, "server functions", server_functions).await;
}
async fn server_functions_on_the_lan(url: String) {
    Corpus::run(&url, Bind::Lan, "server functions", server_functions).await;
}
async fn the_websocket_on_loopback(url: String) {
    Corpus::run(&url, Bind::Loopback, "websocket", websocket).await;
}
async fn the_websocket_on_the_lan(url: String) {
    Corpus::run(&url, Bind::Lan, "websocket", websocket).await;
}
async fn the_mcp_tool_on_loopback(url: String) {
    Corpus::run(&url, Bind::Loopback, "mcp", mcp_tool).await;
}
async fn the_mcp_tool_on_the_lan(url: String) {
    Corpus::run(&url, Bind::Lan, "mcp", mcp_tool).await;
}
async fn markup_is_data_on_loopback(url: String) {
    markup_is_data(&url, Bind::Loopback).await;
}
async fn markup_is_data_on_the_lan(url: String) {
    markup_is_data(&url, Bind::Lan).await;
}

fn long(n: usize) -> String {
    "x".repeat(n)
}

fn answer(q: &str, o: &str) -> Value {
    json!({ "question_id": q, "selected_options": [o] })
}

/// One REST case: method, path, raw body (JSON unless it says otherwise), expected status.
struct Case {
    name: &'static str,
    method: reqwest::Method,
    path: String,
    body: Option<Vec<u8>>,
    content_type: &'static str,
    status: u16,
}

fn case(name: &'static str, method: &str, path: &str, body: Value, status: u16) -> Case {
    Case {
        name,
        method: method.parse().unwrap(),
        path: path.to_string(),
        body: (!body.is_null()).then(|| body.to_string().into_bytes()),
        content_type: "application/json",
        status,
    }
}

fn raw(
    name: &'static str,
    path: &str,
    body: Vec<u8>,
    content_type: &'static str,
    status: u16,
) -> Case {
    Case {
        name,
        method: reqwest::Method::POST,
        path: path.to_string(),
        body: Some(body),
        content_type,
        status,
    }
}

/// A task whose title is `levels` nested arrays. serde stops at the first array (a title is a
/// string); JSON's depth limit (serde_json's 128 levels) is met where a field takes any JSON
/// value: the WebSocket's `payload` and the MCP tool's `arguments` below.
fn deep_json(levels: usize) -> Vec<u8> {
    format!("{{\"title\": {}}}", nested(levels)).into_bytes()
}

/// Whether `v` is a non-empty string (an error's message).
fn has_text(v: &Value) -> bool {
    v.as_str().is_some_and(|m| !m.is_empty())
}

/// `head` followed by `tail`: a body that is valid JSON text up to bytes that are not UTF-8.
fn with_tail(head: &[u8], tail: &[u8]) -> Vec<u8> {
    [head, tail].concat()
}

/// `levels` nested arrays around 1: `[[[1]]]`.
fn nested(levels: usize) -> String {
    format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
}

/// One server-function case: what the UI's edge must answer, with the `AppError` code of
/// its JSON body (`{"code", "message"}`, or the front door's `{"error": {…}}`).
struct FnCase {
    name: &'static str,
    method: reqwest::Method,
    path: &'static str,
    content_type: &'static str,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
}

fn fn_case(
    name: &'static str,
    path: &'static str,
    content_type: &'static str,
    body: impl Into<Vec<u8>>,
    status: u16,
    code: &'static str,
) -> FnCase {
    FnCase {
        name,
        method: reqwest::Method::POST,
        path,
        content_type,
        body: body.into(),
        status,
        code,
    }
}

const FORM: &str = "application/x-www-form-urlencoded";
const JSON: &str = "application/json";
/// Not a JSON error: a path under `/api/fn/` that names no function gets the app's "Not
/// found." page, as every unknown path does (docs/api.md).
const NOT_FOUND_PAGE: &str = "the app's not-found page";

/// Database text that must never reach a client (log it, answer a generic message).
fn database_text(body: &str) -> Option<&'static str> {
    [
        "sqlx",
        "SQLITE_",
        "constraint failed",
        "violates",
        "duplicate key",
        "no such table",
        "no such column",
        "SQLSTATE",
        "error returned from database",
        "syntax error at",
    ]
    .into_iter()
    .find(|needle| body.contains(needle))
}

/// Columns that change while the corpus runs without any request writing them; every other
/// column of every table (all of them, found in the catalog) is compared. Nothing else is
/// exempt. Task summaries are repaired by task-list reads (P7), but the corpus reads no task
/// list, and the projector's own late writes are settled before the first snapshot (see
/// below), so a summary rewritten by a hostile input (a `last_error`, a bumped revision) is
/// caught like any other row.
const VOLATILE: &[(&str, &str)] = &[
    // The PostgreSQL heartbeat (every `server_ttl / 3` = 10 s in tests) rewrites this server's
    // `seen_at` on its own clock; SQLite never writes it.
    ("servers", "seen_at"),
];

/// The fixtures every surface's corpus runs against: a task whose agent waits on a question,
/// and a session an MCP client speaks for (its agent busy for far longer than the corpus
/// takes, so it writes nothing meanwhile); and what the corpus found wrong.
struct Corpus {
    server: TestServer,
    base: String,
    c: reqwest::Client,
    task: String,
    session: String,
    pending: String,
    mcp: Arc<rmcp::service::RunningService<RoleClient, ()>>,
    mcp_session: String,
    token: &'static str,
    /// Inputs per surface, and every wrong answer (all are reported at once).
    checked: BTreeMap<&'static str, usize>,
    wrong: Vec<String>,
}

fn lan_ip() -> Option<std::net::IpAddr> {
    if_addrs::get_if_addrs()
        .ok()?
        .into_iter()
        .find(|i| !i.is_loopback() && i.ip().is_ipv4())
        .map(|i| i.ip())
}

impl Corpus {
    async fn new(url: &str, bind: Bind) -> Corpus {
        let server = TestServer::start_configured(
            url,
            match bind {
                Bind::Loopback => "127.0.0.1:0",
                Bind::Lan => "0.0.0.0:0",
            },
            Access::Token(TEST_TOKEN),
            |_| {},
        )
        .await;
        let base = match (bind, lan_ip()) {
            (Bind::Lan, Some(ip)) => {
                format!("http://{ip}:{}", server.base.rsplit(':').next().unwrap())
            }
            _ => server.base.clone(),
        };
        let c = support::client();
        let api = Api {
            client: c.clone(),
            base: base.clone(),
        };
        // Fixtures: a task whose agent waits on a question, and a session an MCP client speaks for
        // (its agent busy for far longer than the corpus takes, so it writes nothing meanwhile).
        let (task, session) = api.start_task("/e2e:clarification").await;
        let pending = api.pending_id(&session).await;
        let (_, busy_task) = api
            .post(
                "/api/v1/tasks",
                json!({ "title": "busy", "prompt": "e2e:delay(600000)" }),
            )
            .await;
        let busy_task_id = busy_task["id"].as_str().unwrap().to_string();
        let busy = busy_task["primary_session_id"]
            .as_str()
            .unwrap()
            .to_string();
        api.wait_for(
            &format!("/api/v1/tasks/{busy_task_id}/sessions"),
            "running",
            |v| v["sessions"][0]["state"] == "running",
        )
        .await;
        let token = "hostile-corpus-token-0123";
        server
            .state
            .repo
            .set_mcp_token_hash(&busy, &hash_token(token))
            .await
            .unwrap();
        let mcp = ()
            .serve(StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", server.base))
                    .auth_header(token),
            ))
            .await
            .expect("MCP client");
        // Agents reach /mcp at 127.0.0.1 whatever the server is bound to (and rmcp refuses any
        // other `Host` there): the MCP corpus goes the agents' way.
        let mcp: Arc<rmcp::service::RunningService<RoleClient, ()>> = Arc::new(mcp);
        let mcp_session = raw_mcp_session(&c, &server.url("/mcp"), token).await;
        // The projector writes task summaries after the fixtures' events, on its own time. Bring
        // both summaries in line with the repository now: the projector's late refreshes then find
        // nothing to change (an equal summary is never rewritten, P6), and the snapshot below can
        // hold summaries to the same rule as every other table.
        for id in [&task, &busy_task_id] {
            refresh_task(&server.state, id, Scope::Full)
                .await
                .expect("summary refresh");
        }
        Corpus {
            server,
            base,
            c,
            task,
            session,
            pending,
            mcp,
            mcp_session,
            token,
            checked: BTreeMap::new(),
            wrong: Vec::new(),
        }
    }

    /// Runs one surface's corpus; then every column of every row (but [`VOLATILE`]'s) must be
    /// as it was, and every input must have had its clear error.
    async fn run(
        url: &str,
        bind: Bind,
        surface: &'static str,
        corpus: impl AsyncFnOnce(&mut Corpus),
    ) {
        let mut k = Corpus::new(url, bind).await;
        let before = table_rows(url, VOLATILE).await;
        corpus(&mut k).await;
        let total = k.checked.get(surface).copied().unwrap_or(0);
        println!("hostile inputs: {total} on {surface}");
        let writes = rows_diff(&before, &table_rows(url, VOLATILE).await);
        if !writes.is_empty() {
            k.wrong
                .push(format!("the database changed (- before, + after):{writes}"));
        }
        assert!(
            k.wrong.is_empty(),
            "{} problems with {total} hostile inputs on {surface}:\n{}",
            k.wrong.len(),
            k.wrong.join("\n")
        );
        assert!(total >= 5, "the {surface} corpus holds only {total} inputs");
        k.server.stop().await;
    }
}

async fn rest(k: &mut Corpus) {
    let base = k.base.clone();
    let at = |p: &str| format!("{base}{p}");
    let (c, api) = (
        k.c.clone(),
        Api {
            client: k.c.clone(),
            base: base.clone(),
        },
    );
    let (task, session, pending) = (k.task.clone(), k.session.clone(), k.pending.clone());
    let _ = (&api, &task, &session, &pending, &at, &c);
    let t = format!("/api/v1/tasks/{task}");
    let respond = format!("/api/v1/clarifications/{pending}/respond");
    let cases = vec![
        case("tasks: an array", "POST", "/api/v1/tasks", json!([]), 400),
        case(
            "tasks: title a number",
            "POST",
            "/api/v1/tasks",
            json!({ "title": 5 }),
            400,
        ),
        case(
            "tasks: title null",
            "POST",
            "/api/v1/tasks",
            json!({ "title": null }),
            400,
        ),
        case("tasks: no title", "POST", "/api/v1/tasks", json!({}), 400),
        case(
            "tasks: empty title",
            "POST",
            "/api/v1/tasks",
            json!({ "title": "" }),
            400,
        ),
        case(
            "tasks: blank title",
            "POST",
            "/api/v1/tasks",
            json!({ "title": "  \n " }),
            400,
        ),
        case(
            "tasks: title too long",
            "POST",
            "/api/v1/tasks",
            json!({ "title": long(301) }),
            400,
        ),
        case(
            "tasks: description too long",
            "POST",
            "/api/v1/tasks",
            json!({ "title": "x", "description": long(20_001) }),
            400,
        ),
        case(
            "tasks: prompt too long",
            "POST",
            "/api/v1/tasks",
            json!({ "title": "x", "prompt": long(100_001) }),
            400,
        ),
        case(
            "tasks: empty prompt",
            "POST",
            "/api/v1/tasks",
            json!({ "title": "x", "prompt": "" }),
            400,
        ),
        case(
            "tasks: unknown workflow",
            "POST",
            "/api/v1/tasks",
            json!({ "title": "x", "workflow_id": "nope" }),
            400,
        ),
        case(
            "tasks: unknown step",
            "POST",
            "/api/v1/tasks",
            json!({ "title": "x", "step_id": "nope" }),
            400,
        ),
        case(
            "tasks: unknown profile",
            "POST",
            "/api/v1/tasks",
            json!({ "title": "x", "prompt": "hi", "agent_profile_id": "nope" }),
            400,
        ),
        case(
            "tasks: profile without prompt",
            "POST",
            "/api/v1/tasks",
            json!({ "title": "x", "agent_profile_id": "nope" }),
            400,
        ),
        raw(
            "tasks: invalid UTF-8",
            "/api/v1/tasks",
            b"{\"title\": \"\xff\xfe\"}".to_vec(),
            "application/json",
            400,
        ),
        raw(
            "tasks: not JSON",
            "/api/v1/tasks",
            b"{title".to_vec(),
            "application/json",
            400,
        ),
        raw(
            "tasks: 10,000 levels deep",
            "/api/v1/tasks",
            deep_json(10_000),
            "application/json",
            400,
        ),
        // A field the server does not read must not make a body that is not UTF-8 (so not
        // JSON text, RFC 8259 §8.1) acceptable: this one would create a task.
        raw(
            "tasks: invalid UTF-8 in an unknown field",
            "/api/v1/tasks",
            with_tail(br#"{"title": "x", "junk": "#, b"\"\xff\xfe\"}"),
            "application/json",
            400,
        ),
        raw(
            "tasks: lone surrogate escape",
            "/api/v1/tasks",
            br#"{"title": "\udcff"}"#.to_vec(),
            "application/json",
            400,
        ),
        raw(
            "tasks: over 1 MiB",
            "/api/v1/tasks",
            json!({ "title": "x", "description": long(1 << 20) })
                .to_string()
                .into_bytes(),
            "application/json",
            413,
        ),
        raw(
            "tasks: text/plain",
            "/api/v1/tasks",
            br#"{"title":"x"}"#.to_vec(),
            "text/plain",
            400,
        ),
        case(
            "patch: empty title",
            "PATCH",
            &t,
            json!({ "title": "" }),
            400,
        ),
        case(
            "patch: title too long",
            "PATCH",
            &t,
            json!({ "title": long(301) }),
            400,
        ),
        case(
            "patch: unknown step",
            "PATCH",
            &t,
            json!({ "step_id": "nope" }),
            400,
        ),
        case(
            "patch: archived a string",
            "PATCH",
            &t,
            json!({ "archived": "yes" }),
            400,
        ),
        case(
            "patch: unknown task",
            "PATCH",
            "/api/v1/tasks/nope",
            json!({ "title": "x" }),
            404,
        ),
        case(
            "delete: unknown task",
            "DELETE",
            "/api/v1/tasks/nope",
            Value::Null,
            404,
        ),
        case(
            "workflow: no steps",
            "POST",
            "/api/v1/workflows",
            json!({ "name": "w", "steps": [] }),
            400,
        ),
        case(
            "workflow: 21 steps",
            "POST",
            "/api/v1/workflows",
            json!({ "name": "w", "steps": vec![json!({ "name": "s" }); 21] }),
            400,
        ),
        case(
            "workflow: unknown action",
            "POST",
            "/api/v1/workflows",
            json!({ "name": "w", "steps": [{ "name": "s", "on_turn_complete": "rm -rf /" }] }),
            400,
        ),
        case(
            "workflow: blank step",
            "POST",
            "/api/v1/workflows",
            json!({ "name": "w", "steps": [{ "name": " " }] }),
            400,
        ),
        case(
            "profile: empty name",
            "POST",
            "/api/v1/agent-profiles",
            json!({ "name": "", "command": "x" }),
            400,
        ),
        case(
            "profile: env name with =",
            "POST",
            "/api/v1/agent-profiles",
            json!({ "name": "p", "command": "x", "env": { "A=B": "v" } }),
            400,
        ),
        case(
            "profile: 65 args",
            "POST",
            "/api/v1/agent-profiles",
            json!({ "name": "p", "command": "x", "args": vec!["a"; 65] }),
            400,
        ),
        case(
            "profile: NUL in command",
            "POST",
            "/api/v1/agent-profiles",
            json!({ "name": "p", "command": "a\u{0}b" }),
            400,
        ),
        case(
            "profile: env value a number",
            "POST",
            "/api/v1/agent-profiles",
            json!({ "name": "p", "command": "x", "env": { "A": 1 } }),
            400,
        ),
        case(
            "profile: taken name",
            "POST",
            "/api/v1/agent-profiles",
            json!({ "name": "mock", "command": "x" }),
            409,
        ),
        case(
            "session: unknown task",
            "POST",
            "/api/v1/tasks/nope/sessions",
            json!({ "prompt": "hi" }),
            404,
        ),
        case(
            "prompt: unknown session",
            "POST",
            "/api/v1/sessions/nope/prompt",
            json!({ "content": "hi" }),
            404,
        ),
        case(
            "prompt: content a number",
            "POST",
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": 5 }),
            400,
        ),
        case(
            "prompt: empty",
            "POST",
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "" }),
            400,
        ),
        case(
            "messages: limit 0",
            "GET",
            &format!("/api/v1/sessions/{session}/messages?limit=0"),
            Value::Null,
            400,
        ),
        case(
            "messages: limit abc",
            "GET",
            &format!("/api/v1/sessions/{session}/messages?limit=abc"),
            Value::Null,
            400,
        ),
        case(
            "messages: limit huge",
            "GET",
            &format!("/api/v1/sessions/{session}/messages?limit=99999999999999999999"),
            Value::Null,
            400,
        ),
        case(
            "respond: unknown bundle",
            "POST",
            "/api/v1/clarifications/nope/respond",
            json!({ "rejected": true }),
            404,
        ),
        case(
            "respond: unknown question",
            "POST",
            &respond,
            json!({ "answers": [answer("nope", "sqlite")] }),
            400,
        ),
        case(
            "respond: duplicate answers",
            "POST",
            &respond,
            json!({ "answers": [answer("db", "sqlite"), answer("db", "mongodb")] }),
            400,
        ),
        case(
            "respond: unknown option",
            "POST",
            &respond,
            json!({ "answers": [answer("db", "oracle")] }),
            400,
        ),
        case(
            "respond: option twice",
            "POST",
            &respond,
            json!({ "answers": [{ "question_id": "db", "selected_options": ["sqlite", "sqlite"] }] }),
            400,
        ),
        case(
            "respond: custom text too long",
            "POST",
            &respond,
            json!({ "answers": [{ "question_id": "db", "selected_options": [], "custom_text": long(2001) }] }),
            400,
        ),
        case(
            "respond: nothing chosen",
            "POST",
            &respond,
            json!({ "answers": [{ "question_id": "db", "selected_options": [] }] }),
            400,
        ),
        case(
            "respond: rejection with answers",
            "POST",
            &respond,
            json!({ "rejected": true, "answers": [answer("db", "sqlite")] }),
            400,
        ),
        case(
            "respond: answers a string",
            "POST",
            &respond,
            json!({ "answers": "sqlite" }),
            400,
        ),
        case("respond: neither", "POST", &respond, json!({}), 400),
        // Not UTF-8, so not JSON: it would reject the pending question if accepted.
        raw(
            "respond: invalid UTF-8 in an unknown field",
            &respond,
            with_tail(br#"{"rejected": true, "junk": "#, b"\"\xff\xfe\"}"),
            "application/json",
            400,
        ),
        case(
            "respond: reason too long",
            "POST",
            &respond,
            json!({ "rejected": true, "reject_reason": long(2001) }),
            400,
        ),
        case(
            "permission: unknown",
            "POST",
            "/api/v1/permissions/nope/respond",
            json!({ "option_id": "allow" }),
            404,
        ),
        case(
            "permission: empty body",
            "POST",
            "/api/v1/permissions/nope/respond",
            json!({}),
            400,
        ),
        case(
            "permission: both",
            "POST",
            "/api/v1/permissions/nope/respond",
            json!({ "option_id": "allow", "cancelled": true }),
            400,
        ),
    ];
    for case in cases {
        let mut r = c.request(case.method.clone(), at(&case.path));
        if let Some(body) = case.body {
            r = r.header("content-type", case.content_type).body(body);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let name = case.name;
        if status != case.status {
            k.wrong.push(format!(
                "{name}: expected {}, got {status} {text:.300}",
                case.status
            ));
        } else if !has_text(&body["error"]["message"]) {
            k.wrong
                .push(format!("{name}: no clear JSON error: {status} {text:.300}"));
        }
        if let Some(db) = database_text(&text) {
            k.wrong
                .push(format!("{name}: database text ({db}) in the body: {text}"));
        }
        *k.checked.entry("rest").or_default() += 1;
    }
}

/// The UI's edge: the same rules, the same statuses.
async fn server_functions(k: &mut Corpus) {
    let base = k.base.clone();
    let at = |p: &str| format!("{base}{p}");
    let (c, api) = (
        k.c.clone(),
        Api {
            client: k.c.clone(),
            base: base.clone(),
        },
    );
    let (task, session, pending) = (k.task.clone(), k.session.clone(), k.pending.clone());
    let _ = (&api, &task, &session, &pending, &at, &c);
    let own = base.clone();
    let fn_cases = vec![
        fn_case("fn: empty title", "/api/fn/create_task", FORM, "title=&prompt=", 400, "bad_request"),
        fn_case(
            "fn: title too long",
            "/api/fn/create_task",
            FORM,
            format!("title={}&prompt=", long(301)),
            400,
            "bad_request",
        ),
        fn_case(
            "fn: prompt too long",
            "/api/fn/create_task",
            FORM,
            format!("title=x&prompt={}", long(100_001)),
            400,
            "bad_request",
        ),
        fn_case("fn: missing fields", "/api/fn/create_task", FORM, "", 400, "bad_request"),
        fn_case(
            "fn: invalid UTF-8 form bytes",
            "/api/fn/create_task",
            FORM,
            b"title=\xff\xfe&prompt=".to_vec(),
            400,
            "bad_request",
        ),
        fn_case(
            "fn: invalid UTF-8 percent-encoded",
            "/api/fn/create_task",
            FORM,
            "title=%FF%FE&prompt=",
            400,
            "bad_request",
        ),
        fn_case(
            "fn: 1,000 levels of form keys",
            "/api/fn/create_task",
            FORM,
            format!("title{}=x&prompt=", "[a]".repeat(1000)),
            400,
            "bad_request",
        ),
        fn_case(
            "fn: over 1 MiB",
            "/api/fn/create_task",
            FORM,
            format!("title={}&prompt=", long(1 << 20)),
            413,
            "payload_too_large",
        ),
        fn_case(
            "fn: text/plain",
            "/api/fn/create_task",
            "text/plain",
            "title=x&prompt=",
            415,
            "unsupported_media_type",
        ),
        FnCase {
            method: reqwest::Method::GET,
            ..fn_case("fn: GET", "/api/fn/create_task", FORM, "", 415, "unsupported_media_type")
        },
        fn_case(
            "fn: unknown function",
            "/api/fn/delete_everything",
            FORM,
            "all=true",
            404,
            NOT_FOUND_PAGE,
        ),
        fn_case(
            "fn: unknown session",
            "/api/fn/send_prompt",
            FORM,
            "session_id=nope&content=hi",
            404,
            "not_found",
        ),
        fn_case(
            "fn: empty prompt",
            "/api/fn/send_prompt",
            FORM,
            format!("session_id={session}&content="),
            400,
            "bad_request",
        ),
        fn_case(
            "fn: session for an unknown task",
            "/api/fn/create_session",
            FORM,
            "task_id=nope&prompt=hi",
            404,
            "not_found",
        ),
        fn_case(
            "fn: cancel an unknown session",
            "/api/fn/cancel_session",
            FORM,
            "session_id=nope",
            404,
            "not_found",
        ),
        fn_case(
            "fn: unknown permission",
            "/api/fn/answer_permission",
            FORM,
            "permission_id=nope&option_id=allow",
            404,
            "not_found",
        ),
        fn_case(
            "fn: unknown bundle",
            "/api/fn/answer_question",
            JSON,
            json!({ "pending_id": "nope", "answers": [], "rejected": true }).to_string(),
            404,
            "not_found",
        ),
        fn_case(
            "fn: unknown option",
            "/api/fn/answer_question",
            JSON,
            json!({ "pending_id": pending, "answers": [answer("db", "oracle")], "rejected": false })
                .to_string(),
            400,
            "bad_request",
        ),
        fn_case(
            "fn: answers mistyped",
            "/api/fn/answer_question",
            JSON,
            json!({ "pending_id": pending, "answers": "x", "rejected": false }).to_string(),
            400,
            "bad_request",
        ),
        fn_case("fn: invalid JSON", "/api/fn/answer_question", JSON, "{", 400, "bad_request"),
        fn_case(
            "fn: invalid UTF-8 in pending_id",
            "/api/fn/answer_question",
            JSON,
            with_tail(
                br#"{"answers": [], "rejected": true, "pending_id": "#,
                b"\"\xff\xfe\"}",
            ),
            400,
            "bad_request",
        ),
        // Not UTF-8, so not JSON: it would reject the pending question if accepted.
        fn_case(
            "fn: invalid UTF-8 in an unknown field",
            "/api/fn/answer_question",
            JSON,
            with_tail(
                format!(r#"{{"pending_id": "{pending}", "answers": [], "rejected": true, "junk": "#)
                    .as_bytes(),
                b"\"\xff\xfe\"}",
            ),
            400,
            "bad_request",
        ),
        fn_case(
            "fn: 10,000 levels deep",
            "/api/fn/answer_question",
            JSON,
            format!(
                r#"{{"pending_id": "{pending}", "answers": {}, "rejected": false}}"#,
                nested(10_000)
            ),
            400,
            "bad_request",
        ),
        fn_case(
            "fn: lone surrogate escape",
            "/api/fn/answer_question",
            JSON,
            r#"{"pending_id": "\udcff", "answers": [], "rejected": true}"#,
            400,
            "bad_request",
        ),
    ];
    for case in fn_cases {
        let name = case.name;
        let r = c
            .request(case.method, at(case.path))
            .header("origin", &own)
            .header("content-type", case.content_type)
            .body(case.body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        // Server functions answer `AppError` itself; the front door answers the REST body.
        let error = if body["error"].is_object() {
            &body["error"]
        } else {
            &body
        };
        let clear = if case.code == NOT_FOUND_PAGE {
            text.contains("Not found.")
        } else {
            error["code"] == case.code && has_text(&error["message"])
        };
        if status != case.status || !clear {
            k.wrong.push(format!(
                "{name}: expected {} {}, got {status} {text:.300}",
                case.status, case.code
            ));
        }
        if let Some(db) = database_text(&text) {
            k.wrong.push(format!(
                "{name}: database text ({db}) in the body: {text:.300}"
            ));
        }
        *k.checked.entry("server functions").or_default() += 1;
    }
}

async fn websocket(k: &mut Corpus) {
    let base = k.base.clone();
    let at = |p: &str| format!("{base}{p}");
    let (c, api) = (
        k.c.clone(),
        Api {
            client: k.c.clone(),
            base: base.clone(),
        },
    );
    let (task, session, pending) = (k.task.clone(), k.session.clone(), k.pending.clone());
    let _ = (&api, &task, &session, &pending, &at, &c);
    let mut ws = support::ws::connect_to(&base).await;
    for (name, frame) in [
        ("ws: not JSON", "hello".to_string()),
        ("ws: wrong type", json!({ "type": "response", "action": "ping" }).to_string()),
        ("ws: no session id", json!({ "type": "request", "action": "subscribe.session", "payload": {} }).to_string()),
        ("ws: session id a number", json!({ "type": "request", "action": "subscribe.session", "payload": { "session_id": 5 } }).to_string()),
        ("ws: session id too long", json!({ "type": "request", "action": "subscribe.session", "payload": { "session_id": long(65) } }).to_string()),
        ("ws: unknown action", json!({ "type": "request", "action": "delete.everything" }).to_string()),
        (
            "ws: 5,000 levels deep",
            format!(r#"{{"type": "request", "action": "ping", "payload": {}}}"#, nested(5_000)),
        ),
    ] {
        ws.send(Message::Text(frame.into())).await.unwrap();
        let reply = next_error(&mut ws).await;
        if reply["type"] != "error"
            || reply["payload"]["code"] != "bad_request"
            || !has_text(&reply["payload"]["message"])
        {
            k.wrong.push(format!("{name}: expected a bad_request error, got {reply}"));
        }
        *k.checked.entry("websocket").or_default() += 1;
    }
    for i in 0..64 {
        let sub = json!({ "type": "request", "id": i, "action": "subscribe.session", "payload": { "session_id": format!("s{i}") } });
        ws.send(Message::Text(sub.to_string().into()))
            .await
            .unwrap();
    }
    let over = json!({ "type": "request", "action": "subscribe.session", "payload": { "session_id": "one-too-many" } });
    ws.send(Message::Text(over.to_string().into()))
        .await
        .unwrap();
    let reply = next_error(&mut ws).await;
    if !reply["payload"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("at most"))
    {
        k.wrong.push(format!(
            "ws: 65th subscription: expected \"at most\", got {reply}"
        ));
    }
    *k.checked.entry("websocket").or_default() += 1;
    ws.send(Message::Text("x".repeat(20 * 1024).into()))
        .await
        .unwrap();
    let closed = close_frame(&mut ws).await;
    if closed.as_ref().map(|c| c.0) != Some(1009) {
        k.wrong.push(format!(
            "ws: oversized frame: expected close 1009, got {closed:?}"
        ));
    }
    *k.checked.entry("websocket").or_default() += 1;
    let mut ws = support::ws::connect_to(&base).await;
    ws.send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    let closed = close_frame(&mut ws).await;
    if closed.as_ref().map(|c| c.0) != Some(1003) {
        k.wrong.push(format!(
            "ws: binary frame: expected close 1003, got {closed:?}"
        ));
    }
    *k.checked.entry("websocket").or_default() += 1;
    // A text frame that is not UTF-8 (a raw frame: the client library would refuse to build
    // one): RFC 6455 §7.4.1, 1007 "inconsistent data", with a reason.
    let mut ws = support::ws::connect_to(&base).await;
    let bad_text = b"{\"type\": \"request\", \"action\": \"\xff\xfe\"}".to_vec();
    ws.send(Message::Frame(Frame::message(
        bad_text,
        OpCode::Data(Data::Text),
        true,
    )))
    .await
    .unwrap();
    let closed = close_frame(&mut ws).await;
    if !closed
        .as_ref()
        .is_some_and(|(code, reason)| *code == 1007 && !reason.is_empty())
    {
        k.wrong.push(format!(
            "ws: invalid UTF-8 text frame: expected close 1007 with a reason, got {closed:?}"
        ));
    }
    *k.checked.entry("websocket").or_default() += 1;
}

async fn mcp_tool(k: &mut Corpus) {
    let base = k.base.clone();
    let at = |p: &str| format!("{base}{p}");
    let (c, api) = (
        k.c.clone(),
        Api {
            client: k.c.clone(),
            base: base.clone(),
        },
    );
    let (task, session, pending) = (k.task.clone(), k.session.clone(), k.pending.clone());
    let _ = (&api, &task, &session, &pending, &at, &c);
    let (mcp, mcp_session, token) = (k.mcp.clone(), k.mcp_session.clone(), k.token);
    let q = |prompt: Value, options: Value| json!({ "prompt": prompt, "options": options });
    let two = json!([{ "label": "A" }, { "label": "B" }]);
    let deep_context: Value = serde_json::from_str(&nested(100)).unwrap();
    for (name, args) in [
        ("mcp: no questions", json!({})),
        ("mcp: questions a string", json!({ "questions": "which?" })),
        (
            "mcp: five questions",
            json!({ "questions": vec![q(json!("a"), two.clone()); 5] }),
        ),
        (
            "mcp: one option",
            json!({ "questions": [q(json!("a"), json!([{ "label": "A" }]))] }),
        ),
        (
            "mcp: seven options",
            json!({ "questions": [q(json!("a"), json!(vec![json!({ "label": "A" }); 7]))] }),
        ),
        (
            "mcp: prompt a number",
            json!({ "questions": [q(json!(5), two.clone())] }),
        ),
        (
            "mcp: empty label",
            json!({ "questions": [q(json!("a"), json!([{ "label": "" }, { "label": "B" }]))] }),
        ),
        (
            "mcp: duplicate question ids",
            json!({ "questions": [{ "id": "x", "prompt": "a", "options": two }, { "id": "x", "prompt": "b", "options": two }] }),
        ),
        (
            "mcp: duplicate option ids",
            json!({ "questions": [q(json!("a"), json!([{ "id": "o", "label": "A" }, { "id": "o", "label": "B" }]))] }),
        ),
        (
            "mcp: prompt too long",
            json!({ "questions": [q(json!(long(2001)), two.clone())] }),
        ),
        (
            "mcp: context too long",
            json!({ "context": long(8001), "questions": [q(json!("a"), two.clone())] }),
        ),
        (
            "mcp: label too long",
            json!({ "questions": [q(json!("a"), json!([{ "label": long(201) }, { "label": "B" }]))] }),
        ),
        (
            "mcp: context 100 levels deep",
            json!({ "context": deep_context, "questions": [q(json!("a"), two.clone())] }),
        ),
    ] {
        let result = mcp
            .call_tool(
                CallToolRequestParams::new("ask_user_question")
                    .with_arguments(rmcp::model::object(args)),
            )
            .await
            .expect("a tool result");
        let text: String = result
            .content
            .iter()
            .filter_map(|c| c.as_text())
            .map(|t| t.text.clone())
            .collect();
        if result.is_error != Some(true) || !text.contains("invalid ask_user_question input") {
            k.wrong.push(format!(
                "{name}: expected a tool error, got {:?} {text}",
                result.is_error
            ));
        }
        *k.checked.entry("mcp").or_default() += 1;
    }
    let result = mcp
        .call_tool(
            CallToolRequestParams::new("rm_rf").with_arguments(rmcp::model::object(json!({}))),
        )
        .await;
    match result {
        Err(e) if e.to_string().contains("unknown tool") => {}
        other => k.wrong.push(format!(
            "mcp: unknown tool: expected an invalid-params error, got {other:?}"
        )),
    }
    *k.checked.entry("mcp").or_default() += 1;
    // Bodies no JSON-RPC message can be read from, on the agent's live MCP session: rmcp
    // refuses them before any handler runs (415 "fail to deserialize request body …", rmcp's
    // status for an unreadable body), and the session keeps working (checked below).
    let call = |args: &str| {
        format!(
            r#"{{"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {{"name": "ask_user_question", "arguments": {args}}}}}"#
        )
        .into_bytes()
    };
    // `X` marks where the bytes go (the template holds no other capital X).
    let invalid_utf8: Vec<u8> = call(r#"{"context": "X", "questions": []}"#)
        .into_iter()
        .flat_map(|b| if b == b'X' { vec![0xff, 0xfe] } else { vec![b] })
        .collect();
    for (name, body) in [
        ("mcp: invalid UTF-8", invalid_utf8),
        (
            "mcp: 10,000 levels deep",
            call(&format!(r#"{{"context": {}}}"#, nested(10_000))),
        ),
        (
            "mcp: not JSON",
            b"{\"jsonrpc\": \"2.0\", \"id\": 99, \"method\"".to_vec(),
        ),
        // A well-formed question but for bytes in a field no one reads: accepted, it would
        // ask the question (a bundle written) and wait for the user.
        (
            "mcp: invalid UTF-8 in an unknown field",
            with_tail(
                &format!(
                    r#"{{"jsonrpc": "2.0", "id": 98, "method": "tools/call", "params": {{"name": "ask_user_question", "arguments": {}}}, "junk": "#,
                    json!({ "questions": [q(json!("hostile?"), two.clone())] })
                )
                .into_bytes(),
                b"\"\xff\xfe\"}",
            ),
        ),
    ] {
        let r = c
            .post(k.server.url("/mcp"))
            .bearer_auth(token)
            .header("mcp-session-id", &mcp_session)
            .header("mcp-protocol-version", MCP_VERSION)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .timeout(std::time::Duration::from_secs(10))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r
            .text()
            .await
            .unwrap_or_else(|e| format!("(no whole body: {e})"));
        if status != 415 || !text.contains("deserialize") {
            k.wrong.push(format!(
                "{name}: expected 415 \"fail to deserialize\", got {status} {text:.300}"
            ));
        }
        *k.checked.entry("mcp").or_default() += 1;
    }
    // The agent's MCP session survives all of the above: a well-formed call is still read
    // and judged on its merits (an empty question list: a tool error).
    let ok = mcp
        .call_tool(
            CallToolRequestParams::new("ask_user_question")
                .with_arguments(rmcp::model::object(json!({ "questions": [] }))),
        )
        .await
        .expect("the MCP session still answers");
    assert_eq!(ok.is_error, Some(true), "an empty question list is refused");
}

/// Markup is data: stored as given, returned verbatim as JSON, rendered as text.
async fn markup_is_data(url: &str, bind: Bind) {
    let mut corpus = Corpus::new(url, bind).await;
    let k = &mut corpus;
    let base = k.base.clone();
    let at = |p: &str| format!("{base}{p}");
    let (c, api) = (
        k.c.clone(),
        Api {
            client: k.c.clone(),
            base: base.clone(),
        },
    );
    let (task, session, pending) = (k.task.clone(), k.session.clone(), k.pending.clone());
    let _ = (&api, &task, &session, &pending, &at, &c);
    let xss = r#"<script>alert("t")</script><img src=x onerror=alert(1)>"#;
    let (status, created) = api.post("/api/v1/tasks", json!({ "title": xss })).await;
    assert_eq!(status, 200);
    assert_eq!(
        created["title"], xss,
        "the API returns it verbatim, as JSON"
    );
    let page = c.get(at("/")).send().await.unwrap().text().await.unwrap();
    assert!(
        !page.contains(r#"<script>alert("t")"#),
        "rendered as text, never as markup"
    );
    assert!(!page.contains("<img src=x onerror"));
    assert!(
        page.contains("&lt;script&gt;alert"),
        "the title is shown, escaped"
    );
    corpus.server.stop().await;
}

/// The MCP protocol version the raw requests below speak.
const MCP_VERSION: &str = "2025-06-18";

/// Opens an MCP session for `token` by hand (initialize, then initialized), for requests the
/// rmcp client cannot send (bodies that are not JSON); returns its `mcp-session-id`.
async fn raw_mcp_session(c: &reqwest::Client, url: &str, token: &str) -> String {
    let post = |body: Value, session: Option<&str>| {
        let mut r = c
            .post(url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(s) = session {
            r = r
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", MCP_VERSION);
        }
        r.send()
    };
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": MCP_VERSION,
            "capabilities": {},
            "clientInfo": { "name": "hostile-corpus", "version": "0" }
        }
    });
    let r = post(init, None).await.expect("initialize");
    assert_eq!(r.status(), 200, "initialize");
    let session = r
        .headers()
        .get("mcp-session-id")
        .expect("an MCP session id")
        .to_str()
        .unwrap()
        .to_string();
    let _ = r.text().await;
    let r = post(
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        Some(&session),
    )
    .await
    .expect("initialized");
    assert!(r.status().is_success(), "initialized: {}", r.status());
    session
}

async fn next_error(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Value {
    loop {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), ws.next())
            .await
            .expect("a reply")
            .expect("open")
            .expect("frame");
        if let Message::Text(t) = frame {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["type"] == "error" {
                return v;
            }
        }
    }
}

/// The code and reason of the close frame the server ends the socket with (`None`: it hung
/// up without one).
async fn close_frame(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Option<(u16, String)> {
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(10), ws.next())
            .await
            .expect("the server answers")
        {
            Some(Ok(Message::Close(frame))) => {
                return frame.map(|f| (u16::from(f.code), f.reason.to_string()));
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}
