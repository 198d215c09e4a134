//! Every input is hostile (spec "Server process", L12): a corpus of malformed, oversized,
//! duplicated, unknown, mistyped and script-laden inputs across REST, server functions, the
//! WebSocket and the MCP tool. Each one gets its clear error (or, for markup that is valid
//! data, safe rendering), and the database is unchanged.

mod support;

use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use support::{Api, TestServer, table_counts};
use tokio_tungstenite::tungstenite::Message;
use turnstile::server::orchestrator::sessions::hash_token;

both_http!(the_hostile_corpus_gets_clear_errors_and_writes_nothing);

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

fn deep_json(levels: usize) -> Vec<u8> {
    format!(
        "{{\"title\": {}1{}}}",
        "[".repeat(levels),
        "]".repeat(levels)
    )
    .into_bytes()
}

async fn the_hostile_corpus_gets_clear_errors_and_writes_nothing(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let c = reqwest::Client::new();
    // Fixtures: a task whose agent waits on a question, and a session an MCP client speaks for.
    let (task, session) = api.start_task("/e2e:clarification").await;
    let pending = api.pending_id(&session).await;
    let (_, busy_task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "busy", "prompt": "e2e:delay(60000)" }),
        )
        .await;
    let busy = busy_task["primary_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    api.wait_for(
        &format!(
            "/api/v1/tasks/{}/sessions",
            busy_task["id"].as_str().unwrap()
        ),
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
    let mcp: Arc<rmcp::service::RunningService<RoleClient, ()>> = Arc::new(mcp);
    let before = table_counts(&url).await;
    let mut checked = 0usize;

    // ---- REST ----
    let t = format!("/api/v1/tasks/{task}");
    let respond = format!("/api/v1/clarifications/{pending}/respond");
    let long = |n: usize| "x".repeat(n);
    let answer = |q: &str, o: &str| json!({ "question_id": q, "selected_options": [o] });
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
        let mut r = c.request(case.method.clone(), server.url(&case.path));
        if let Some(body) = case.body {
            r = r.header("content-type", case.content_type).body(body);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        assert_eq!(status, case.status, "{}: {body}", case.name);
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{}: a clear error: {body}",
            case.name
        );
        checked += 1;
    }

    // ---- server functions (the UI's edge): the same rules ----
    let own = server.base.clone();
    for (name, path, ct, body) in [
        (
            "fn: empty title",
            "/api/fn/create_task",
            "application/x-www-form-urlencoded",
            "title=&prompt=".to_string(),
        ),
        (
            "fn: title too long",
            "/api/fn/create_task",
            "application/x-www-form-urlencoded",
            format!("title={}&prompt=", long(301)),
        ),
        (
            "fn: prompt too long",
            "/api/fn/create_task",
            "application/x-www-form-urlencoded",
            format!("title=x&prompt={}", long(100_001)),
        ),
        (
            "fn: missing fields",
            "/api/fn/create_task",
            "application/x-www-form-urlencoded",
            String::new(),
        ),
        (
            "fn: unknown session",
            "/api/fn/send_prompt",
            "application/x-www-form-urlencoded",
            "session_id=nope&content=hi".into(),
        ),
        (
            "fn: unknown bundle",
            "/api/fn/answer_question",
            "application/json",
            json!({ "pending_id": "nope", "answers": [], "rejected": true }).to_string(),
        ),
        (
            "fn: answers mistyped",
            "/api/fn/answer_question",
            "application/json",
            json!({ "pending_id": pending, "answers": "x", "rejected": false }).to_string(),
        ),
        (
            "fn: invalid JSON",
            "/api/fn/answer_question",
            "application/json",
            "{".into(),
        ),
    ] {
        let r = c
            .post(server.url(path))
            .header("origin", &own)
            .header("content-type", ct)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        assert!(
            status.is_client_error() || status.is_server_error(),
            "{name}: {status} {text}"
        );
        assert!(!text.is_empty(), "{name}: a clear error");
        checked += 1;
    }

    // ---- the WebSocket ----
    let ws_url = server.url("/ws").replacen("http://", "ws://", 1);
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url.as_str())
        .await
        .unwrap();
    for (name, frame) in [
        ("ws: not JSON", "hello".to_string()),
        ("ws: wrong type", json!({ "type": "response", "action": "ping" }).to_string()),
        ("ws: no session id", json!({ "type": "request", "action": "subscribe.session", "payload": {} }).to_string()),
        ("ws: session id a number", json!({ "type": "request", "action": "subscribe.session", "payload": { "session_id": 5 } }).to_string()),
        ("ws: session id too long", json!({ "type": "request", "action": "subscribe.session", "payload": { "session_id": long(65) } }).to_string()),
        ("ws: unknown action", json!({ "type": "request", "action": "delete.everything" }).to_string()),
    ] {
        ws.send(Message::Text(frame.into())).await.unwrap();
        let reply = next_error(&mut ws).await;
        assert_eq!(reply["type"], "error", "{name}: {reply}");
        assert_eq!(reply["payload"]["code"], "bad_request", "{name}: {reply}");
        checked += 1;
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
    assert!(
        reply["payload"]["message"]
            .as_str()
            .unwrap()
            .contains("at most"),
        "{reply}"
    );
    checked += 1;
    ws.send(Message::Text("x".repeat(20 * 1024).into()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, Some(1009), "ws: oversized frame");
    checked += 1;
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url.as_str())
        .await
        .unwrap();
    ws.send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, Some(1003), "ws: binary frame");
    checked += 1;

    // ---- the MCP tool ----
    let q = |prompt: Value, options: Value| json!({ "prompt": prompt, "options": options });
    let two = json!([{ "label": "A" }, { "label": "B" }]);
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
    ] {
        let result = mcp
            .call_tool(
                CallToolRequestParams::new("ask_user_question")
                    .with_arguments(rmcp::model::object(args)),
            )
            .await
            .expect("a tool result");
        assert_eq!(result.is_error, Some(true), "{name}");
        let text: String = result
            .content
            .iter()
            .filter_map(|c| c.as_text())
            .map(|t| t.text.clone())
            .collect();
        assert!(
            text.contains("invalid ask_user_question input"),
            "{name}: {text}"
        );
        checked += 1;
    }
    let result = mcp
        .call_tool(
            CallToolRequestParams::new("rm_rf").with_arguments(rmcp::model::object(json!({}))),
        )
        .await;
    assert!(
        result.is_err() || result.unwrap().is_error == Some(true),
        "mcp: unknown tool"
    );
    checked += 1;

    assert!(checked >= 50, "the corpus holds {checked} inputs");
    assert_eq!(
        table_counts(&url).await,
        before,
        "no hostile input wrote anything"
    );

    // ---- markup is data: stored as given, rendered as text ----
    let xss = r#"<script>alert("t")</script><img src=x onerror=alert(1)>"#;
    let (status, created) = api.post("/api/v1/tasks", json!({ "title": xss })).await;
    assert_eq!(status, 200);
    assert_eq!(
        created["title"], xss,
        "the API returns it verbatim, as JSON"
    );
    let page = c
        .get(server.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !page.contains(r#"<script>alert("t")"#),
        "rendered as text, never as markup"
    );
    assert!(!page.contains("<img src=x onerror"));
    assert!(
        page.contains("&lt;script&gt;alert"),
        "the title is shown, escaped"
    );
    server.stop().await;
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

async fn close_code(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Option<u16> {
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(10), ws.next())
            .await
            .expect("the server answers")
        {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}
