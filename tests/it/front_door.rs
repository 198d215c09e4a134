//! The front door over real HTTP (spec "Server process"): any web page the user opens can
//! reach the server, loopback included. A foreign `Host` (DNS rebinding) and a foreign
//! `Origin` (CSRF, cross-site WebSocket) are refused and write nothing; server functions take
//! only JSON or form bodies; pages carry a CSP that forbids framing; errors are JSON and never
//! carry database text.

use crate::support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{TEST_BEARER, TestServer, table_counts, ws_handshake};

both_http!(
    request_ids_are_the_servers_own_and_answers_are_same_origin_resources,
    dns_rebinding_a_foreign_host_is_refused_on_every_route,
    csrf_a_foreign_origin_changes_nothing,
    server_functions_take_only_json_or_form_bodies,
    pages_forbid_framing_and_run_only_their_own_scripts,
    agent_profiles_show_env_names_never_values,
    api_errors_are_json_and_never_database_text,
);

const EVIL: &str = "http://evil.example";

async fn send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    headers: &[(&str, &str)],
    body: Option<(&str, String)>,
) -> (StatusCode, String) {
    let mut r = client.request(method, url);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some((ct, b)) = body {
        r = r.header("content-type", ct).body(b);
    }
    let resp = r.send().await.unwrap();
    (resp.status(), resp.text().await.unwrap_or_default())
}

async fn dns_rebinding_a_foreign_host_is_refused_on_every_route(url: String) {
    let server = TestServer::start(&url).await;
    let c = support::client();
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let evil_host = format!("evil.example:{port}");
    let before = table_counts(&url).await;
    let h = [("host", evil_host.as_str())];
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    for (method, path, body) in [
        (get.clone(), "/api/v1/tasks", None),
        (get.clone(), "/api/v1/agent-profiles", None),
        (get.clone(), "/", None),
        (get.clone(), "/t/some-task", None),
        (get.clone(), "/healthz", None),
        (get.clone(), "/pkg/turnstile.css", None),
        (
            post.clone(),
            "/api/v1/tasks",
            Some((
                "application/json",
                json!({ "title": "rebound" }).to_string(),
            )),
        ),
        (
            post.clone(),
            "/api/v1/agent-profiles",
            Some((
                "application/json",
                json!({ "name": "shell", "command": "/bin/sh" }).to_string(),
            )),
        ),
        (
            post.clone(),
            "/api/fn/create_task",
            Some((
                "application/x-www-form-urlencoded",
                "title=rebound&prompt=hi".into(),
            )),
        ),
        (
            post.clone(),
            "/mcp",
            Some(("application/json", "{}".into())),
        ),
    ] {
        let (status, text) = send(&c, method.clone(), server.url(path), &h, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {text}");
    }
    assert_eq!(
        ws_handshake(
            &server.base,
            &[("host", evil_host.as_str()), ("authorization", TEST_BEARER)]
        )
        .await,
        Err(403),
        "the socket too"
    );
    assert_eq!(table_counts(&url).await, before, "nothing was written");
    // Our own names pass.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let (status, _) = send(
            &c,
            get.clone(),
            server.url("/healthz"),
            &[("host", &host)],
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{host}");
    }
    server.stop().await;
}

async fn csrf_a_foreign_origin_changes_nothing(url: String) {
    let server = TestServer::start(&url).await;
    let api = support::Api::new(&server.base);
    let c = support::client();
    let (_, task) = api.post("/api/v1/tasks", json!({ "title": "mine" })).await;
    let task_id = task["id"].as_str().unwrap().to_string();
    let before = table_counts(&url).await;
    let json_body = |v: Value| Some(("application/json", v.to_string()));
    let foreign: [&[(&str, &str)]; 3] = [
        &[("origin", EVIL)],
        &[("sec-fetch-site", "cross-site")],
        &[("origin", "null")],
    ];
    for headers in foreign {
        let requests = [
            (
                reqwest::Method::POST,
                "/api/v1/tasks".to_string(),
                json_body(json!({ "title": "forged" })),
            ),
            (
                reqwest::Method::PATCH,
                format!("/api/v1/tasks/{task_id}"),
                json_body(json!({ "title": "forged" })),
            ),
            (
                reqwest::Method::DELETE,
                format!("/api/v1/tasks/{task_id}"),
                None,
            ),
            (
                reqwest::Method::POST,
                "/api/v1/agent-profiles".to_string(),
                json_body(json!({ "name": "x", "command": "/bin/sh" })),
            ),
            (
                reqwest::Method::POST,
                "/api/fn/create_task".to_string(),
                Some((
                    "application/x-www-form-urlencoded",
                    "title=forged&prompt=hi".into(),
                )),
            ),
            // Even a read through a server function: it runs with the user's rights.
            (
                reqwest::Method::POST,
                "/api/fn/list_tasks".to_string(),
                Some(("application/x-www-form-urlencoded", String::new())),
            ),
        ];
        for (method, path, body) in requests {
            let (status, text) = send(&c, method.clone(), server.url(&path), headers, body).await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{headers:?} {method} {path}: {text}"
            );
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            assert_eq!(v["error"]["code"], "forbidden", "{text}");
        }
        assert_eq!(
            ws_handshake(&server.base, headers).await,
            Err(403),
            "cross-site WebSocket {headers:?}"
        );
    }
    assert_eq!(table_counts(&url).await, before, "nothing was written");
    assert_eq!(
        api.get(&format!("/api/v1/tasks/{task_id}")).await.1["title"],
        "mine"
    );
    // The same requests from this origin work (the UI, curl).
    let own = server.base.clone();
    let (status, text) = send(
        &c,
        reqwest::Method::PATCH,
        server.url(&format!("/api/v1/tasks/{task_id}")),
        &[("origin", &own), ("sec-fetch-site", "same-origin")],
        json_body(json!({ "title": "renamed" })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        ws_handshake(
            &server.base,
            &[("origin", &own), ("authorization", TEST_BEARER)]
        )
        .await,
        Ok(())
    );
    assert_eq!(
        ws_handshake(&server.base, &[("authorization", TEST_BEARER)]).await,
        Ok(()),
        "not a browser"
    );
    server.stop().await;
}

async fn server_functions_take_only_json_or_form_bodies(url: String) {
    let server = TestServer::start(&url).await;
    let c = support::client();
    let before = table_counts(&url).await;
    // A foreign page can send text/plain without a CORS preflight; it is refused even from
    // a request that names no origin.
    for (ct, body) in [
        ("text/plain", "title=forged&prompt=hi"),
        (
            "text/plain;charset=UTF-8",
            r#"{"title":"forged","prompt":"hi"}"#,
        ),
        ("multipart/form-data; boundary=x", "--x--"),
    ] {
        let (status, text) = send(
            &c,
            reqwest::Method::POST,
            server.url("/api/fn/create_task"),
            &[],
            Some((ct, body.to_string())),
        )
        .await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct}: {text}");
    }
    let (status, _) = send(
        &c,
        reqwest::Method::GET,
        server.url("/api/fn/list_tasks"),
        &[],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(table_counts(&url).await, before, "nothing was written");
    let (status, text) = send(
        &c,
        reqwest::Method::POST,
        server.url("/api/fn/create_task"),
        &[("origin", &server.base)],
        Some((
            "application/x-www-form-urlencoded",
            "title=from+the+form&prompt=".into(),
        )),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    server.stop().await;
}

async fn pages_forbid_framing_and_run_only_their_own_scripts(url: String) {
    let server = TestServer::start(&url).await;
    let c = support::client();
    let r = c.get(server.url("/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    // Pages and files revalidate: a browser never mixes two builds' wasm modules (B7).
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let html = r.text().await.unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("unsafe-inline'; script") && !csp.contains("script-src 'unsafe-inline'"));
    let nonce = csp
        .split("'nonce-")
        .nth(1)
        .and_then(|r| r.split('\'').next())
        .expect("a script nonce");
    assert!(
        html.contains(&format!("nonce=\"{nonce}\"")),
        "the hydration script carries this response's nonce"
    );
    // Every other answer forbids framing too.
    let r = c.get(server.url("/api/v1/tasks")).send().await.unwrap();
    let csp = r.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(r.headers().contains_key("x-request-id"));
    assert_eq!(r.headers()["cache-control"], "no-cache");
    server.stop().await;
}

async fn agent_profiles_show_env_names_never_values(url: String) {
    let server = TestServer::start(&url).await;
    let api = support::Api::new(&server.base);
    let (status, created) = api
        .post(
            "/api/v1/agent-profiles",
            json!({ "name": "claude", "command": "/usr/bin/true", "env": { "ANTHROPIC_API_KEY": "sk-secret-value" } }),
        )
        .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["env"], json!(["ANTHROPIC_API_KEY"]));
    let (_, list) = api.get("/api/v1/agent-profiles").await;
    assert!(!list.to_string().contains("sk-secret-value"), "{list}");
    let p = list["agent_profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "claude")
        .unwrap();
    assert_eq!(p["env"], json!(["ANTHROPIC_API_KEY"]));
    server.stop().await;
}

async fn api_errors_are_json_and_never_database_text(url: String) {
    let server = TestServer::start(&url).await;
    let c = support::client();
    let api = support::Api::new(&server.base);
    let (_, task) = api
        .post("/api/v1/tasks", json!({ "title": "t", "prompt": "hello" }))
        .await;
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    for (method, path, status, code) in [
        (
            reqwest::Method::GET,
            format!("/api/v1/sessions/{session}/messages?limit=abc"),
            400,
            "bad_request",
        ),
        (
            reqwest::Method::DELETE,
            "/api/v1/workflows".to_string(),
            405,
            "method_not_allowed",
        ),
        (
            reqwest::Method::PUT,
            "/api/v1/tasks".to_string(),
            405,
            "method_not_allowed",
        ),
        (
            reqwest::Method::GET,
            "/api/v1/nothing/here".to_string(),
            404,
            "not_found",
        ),
    ] {
        let r = c
            .request(method.clone(), server.url(&path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{method} {path}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{method} {path}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // A database failure: logged in full, answered with a reference only.
    support::raw_exec(
        &url,
        "ALTER TABLE workflow_steps RENAME TO workflow_steps_away",
    )
    .await;
    let r = c.get(server.url("/api/v1/workflows")).send().await.unwrap();
    assert_eq!(r.status(), 500);
    let request_id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&request_id), "{body}");
    for leak in [
        "workflow_steps",
        "no such table",
        "relation",
        "SELECT",
        "sqlx",
    ] {
        assert!(
            !message.contains(leak),
            "database text on the wire: {message}"
        );
    }
    assert_eq!(body["retryable"], false);
    support::raw_exec(
        &url,
        "ALTER TABLE workflow_steps_away RENAME TO workflow_steps",
    )
    .await;
    server.stop().await;
}

/// A client's `x-request-id` is dropped (it would let a caller choose the id an error points the
/// log at); every answer carries an id the server made, and `Cross-Origin-Resource-Policy:
/// same-origin`, so no other site may embed what this server answers.
async fn request_ids_are_the_servers_own_and_answers_are_same_origin_resources(url: String) {
    let server = TestServer::start(&url).await;
    let c = support::client();
    for path in [
        "/api/v1/tasks",
        "/",
        "/healthz",
        "/pkg/turnstile.css",
        "/api/v1/nope",
    ] {
        let r = c
            .get(server.url(path))
            .header("x-request-id", "chosen-by-the-client")
            .send()
            .await
            .unwrap();
        let id = r.headers()["x-request-id"].to_str().unwrap();
        assert_ne!(id, "chosen-by-the-client", "{path}");
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{path}: {id}");
        assert_eq!(
            r.headers()["cross-origin-resource-policy"],
            "same-origin",
            "{path}"
        );
    }
    server.stop().await;
}
