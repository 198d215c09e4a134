//! Checking an agent profile (spec/agents.md A2, A7): `POST /agent-profiles/{id}/check` starts
//! the real agent process, asks `initialize`, stops it and reports what the agent said — on
//! SQLite and PostgreSQL. The mock agent's switches play the agents that lack a capability or
//! never answer.

use crate::support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::{Api, TestServer, processes_with};
use tokio::sync::Semaphore;
use turnstile::server::hooks::Point;

both_http!(
    a2_the_bundled_profile_reports_what_its_agent_can_do,
    a2_an_agent_without_a_capability_says_so,
    a2_a_missing_command_or_a_stuck_agent_fails_with_its_reason_and_leaves_no_process,
    a2_one_check_at_a_time_per_profile,
    a1_presets_list_the_known_agents_and_the_bundled_mock,
    a4_an_agent_that_needs_a_login_says_which_and_the_check_lists_it,
    a4_a_profiles_auth_method_logs_its_agent_in,
    a4_after_the_login_retry_sends_the_prompt_that_could_not_start,
    a3_an_agent_without_http_mcp_asks_through_mcp_stdio,
    a5_a_task_without_a_profile_runs_the_default_agent,
);

async fn profile(api: &Api, name: &str, command: &str, env: Value) -> String {
    let (status, p) = api
        .post(
            "/api/v1/agent-profiles",
            json!({ "name": name, "command": command, "env": env }),
        )
        .await;
    assert_eq!(status, 200, "{p}");
    p["id"].as_str().unwrap().to_string()
}

async fn check(api: &Api, id: &str) -> (u16, Value) {
    let (status, r) = api
        .post(&format!("/api/v1/agent-profiles/{id}/check"), json!({}))
        .await;
    (status.as_u16(), r)
}

async fn mock_profile_id(api: &Api) -> String {
    let (_, list) = api.get("/api/v1/agent-profiles").await;
    list["agent_profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "mock")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn a2_the_bundled_profile_reports_what_its_agent_can_do(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (status, r) = check(&api, &mock_profile_id(&api).await).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["agent_info"]["name"], "turnstile-mock-agent");
    assert_eq!(r["protocol_version"], 1);
    assert_eq!(
        (
            &r["capabilities"]["load_session"],
            &r["capabilities"]["mcp"]["http"]
        ),
        (&json!(true), &json!(true)),
        "{r}"
    );
    assert!(r.get("error").is_none(), "{r}");
    server.stop().await;
}

async fn a2_an_agent_without_a_capability_says_so(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let id = profile(
        &api,
        "bare",
        env!("CARGO_BIN_EXE_mock_agent"),
        json!({ "MOCK_AGENT_NO_LOAD_SESSION": "1", "MOCK_AGENT_NO_HTTP_MCP": "1" }),
    )
    .await;
    let (status, r) = check(&api, &id).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        (
            &r["capabilities"]["load_session"],
            &r["capabilities"]["mcp"]["http"]
        ),
        (&json!(false), &json!(false)),
        "{r}"
    );
    server.stop().await;
}

async fn a2_a_missing_command_or_a_stuck_agent_fails_with_its_reason_and_leaves_no_process(
    url: String,
) {
    let server = TestServer::start_with(&url, |c| {
        c.agent_start_timeout = std::time::Duration::from_secs(1);
    })
    .await;
    let api = Api::new(&server.base);
    let missing = profile(&api, "missing", "/nonexistent/agent", json!({})).await;
    let (status, r) = check(&api, &missing).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot start agent")),
        "{r}"
    );
    let marker = format!("CHECK_MARKER={}", uuid::Uuid::new_v4().simple());
    let (name, value) = marker.split_once('=').unwrap();
    let stuck = profile(
        &api,
        "stuck",
        env!("CARGO_BIN_EXE_mock_agent"),
        json!({ "MOCK_AGENT_SLOW_HANDSHAKE": "1", name: value }),
    )
    .await;
    let (status, r) = check(&api, &stuck).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["ok"], false, "{r}");
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("did not answer `initialize` within 1 s")),
        "{r}"
    );
    // Stopped with its group before the answer was sent, and reaped.
    assert_eq!(processes_with(&marker), Vec::<u32>::new());
    assert!(server.state.runtime.agent_groups.is_empty());
    server.stop().await;
}

async fn a2_one_check_at_a_time_per_profile(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (status, _) = check(&api, "no-such-profile").await;
    assert_eq!(status, 404);
    let id = mock_profile_id(&api).await;
    // The first check pauses before it starts its agent.
    let (arrived, go) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let (a, g) = (arrived.clone(), go.clone());
    server.state.hooks.set(Point::ProfileCheck, move |_| {
        let (a, g) = (a.clone(), g.clone());
        async move {
            a.add_permits(1);
            g.acquire().await.expect("gate").forget();
        }
    });
    let first = {
        let (base, id) = (server.base.clone(), id.clone());
        tokio::spawn(async move { check(&Api::new(&base), &id).await })
    };
    arrived.acquire().await.expect("the first check").forget();
    let (status, r) = check(&api, &id).await;
    assert_eq!(status, 409, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("running"),
        "{r}"
    );
    server.state.hooks.clear(Point::ProfileCheck);
    go.add_permits(1);
    let (status, r) = first.await.unwrap();
    assert_eq!((status, &r["ok"]), (200, &json!(true)), "{r}");
    // Once it is done, the profile can be checked again.
    let (status, r) = check(&api, &id).await;
    assert_eq!((status, &r["ok"]), (200, &json!(true)), "{r}");
    server.stop().await;
}

async fn a1_presets_list_the_known_agents_and_the_bundled_mock(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (status, r) = api.get("/api/v1/agent-presets").await;
    assert_eq!(status, 200, "{r}");
    let presets = r["agent_presets"].as_array().unwrap();
    let ids: Vec<&str> = presets.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "claude-code",
            "codex",
            "gemini",
            "goose",
            "opencode",
            "mock"
        ]
    );
    let mock = &presets[5];
    assert_eq!(
        (mock["found"].as_bool(), mock["command"].as_str()),
        (Some(true), Some(env!("CARGO_BIN_EXE_mock_agent")))
    );
    for p in presets {
        // Found: an absolute command; not found: what to install (never run by the server).
        match p["found"].as_bool().unwrap() {
            true => assert!(p["command"].as_str().unwrap().starts_with('/'), "{p}"),
            false => assert!(p["install"].as_str().is_some_and(|i| !i.is_empty()), "{p}"),
        }
    }
    server.stop().await;
}

async fn a4_an_agent_that_needs_a_login_says_which_and_the_check_lists_it(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let id = profile(
        &api,
        "needs-login",
        env!("CARGO_BIN_EXE_mock_agent"),
        json!({ "MOCK_AGENT_AUTH_REQUIRED": "1" }),
    )
    .await;
    let (status, r) = check(&api, &id).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (
            r["auth_methods"][0]["id"].as_str(),
            r["auth_methods"][0]["name"].as_str()
        ),
        (Some("mock-login"), Some("Mock login")),
        "{r}"
    );
    let (status, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "login", "prompt": "hello", "agent_profile_id": id }),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    let t = api
        .wait_for(
            &format!("/api/v1/tasks/{}", task["id"].as_str().unwrap()),
            "the login the agent needs",
            |t| t["status_summary"]["last_error"]["message"].is_string(),
        )
        .await;
    let reason = t["status_summary"]["last_error"]["message"]
        .as_str()
        .unwrap();
    assert!(
        reason.contains("log in")
            && reason.contains("Mock login: Run `mock_agent login` in a terminal")
            && reason.contains("retry"),
        "{reason}"
    );
    server.stop().await;
}

/// A4: a profile's `auth_method` is passed to `authenticate` after `initialize`: the agent
/// that needed a login works; a method it does not offer fails the session with a message
/// naming both; a bad method is refused with nothing written; `""` clears it.
async fn a4_a_profiles_auth_method_logs_its_agent_in(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (status, p) = api
        .post(
            "/api/v1/agent-profiles",
            json!({
                "name": "logs-in",
                "command": env!("CARGO_BIN_EXE_mock_agent"),
                "env": { "MOCK_AGENT_AUTH_REQUIRED": "1" },
                "auth_method": "mock-login"
            }),
        )
        .await;
    assert_eq!(
        (status.as_u16(), &p["auth_method"]),
        (200, &json!("mock-login")),
        "{p}"
    );
    let id = p["id"].as_str().unwrap().to_string();
    let start = async |title: &str| {
        let (status, task) = api
            .post(
                "/api/v1/tasks",
                json!({ "title": title, "prompt": "e2e:message(\"logged in\")", "agent_profile_id": id }),
            )
            .await;
        assert_eq!(status, 200, "{task}");
        (
            task["id"].as_str().unwrap().to_string(),
            task["primary_session_id"].as_str().unwrap().to_string(),
        )
    };
    let (_, session) = start("in").await;
    assert_eq!(api.agent_said(&session, "logged in").await, "logged in");

    let path = format!("/api/v1/agent-profiles/{id}");
    let (status, p) = api
        .patch(&path, json!({ "auth_method": "other-login" }))
        .await;
    assert_eq!(status, 200, "{p}");
    let (task, _) = start("refused").await;
    let t = api
        .wait_for(&format!("/api/v1/tasks/{task}"), "the refused login", |t| {
            t["status_summary"]["last_error"]["message"].is_string()
        })
        .await;
    let reason = t["status_summary"]["last_error"]["message"]
        .as_str()
        .unwrap();
    assert!(
        reason.contains("\"other-login\"") && reason.contains("\"mock-login\""),
        "names the method tried and the ones offered: {reason}"
    );

    for bad in [json!("a\u{1}b"), json!(" "), json!("x".repeat(1000))] {
        let (status, r) = api.patch(&path, json!({ "auth_method": bad })).await;
        assert_eq!(status, 400, "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("auth_method")),
            "{r}"
        );
    }
    let listed = |list: Value| {
        list["agent_profiles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id.as_str())
            .unwrap()
            .clone()
    };
    let p = listed(api.get("/api/v1/agent-profiles").await.1);
    assert_eq!(p["auth_method"], "other-login", "nothing written: {p}");
    let (status, p) = api.patch(&path, json!({ "auth_method": "" })).await;
    assert_eq!(
        (status.as_u16(), p.get("auth_method")),
        (200, None),
        "cleared: {p}"
    );
    server.stop().await;
}

/// A4: an agent that needs a login does not fail its session: it waits with the reason shown,
/// and once the user has logged in, Retry starts the prompt that never reached the agent.
/// Retrying before the login says so again and changes nothing else.
async fn a4_after_the_login_retry_sends_the_prompt_that_could_not_start(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let credentials = support::temp_dir("mock-login").join("credentials");
    let id = profile(
        &api,
        "login-later",
        env!("CARGO_BIN_EXE_mock_agent"),
        json!({ "MOCK_AGENT_AUTH_REQUIRED": credentials.to_str().unwrap() }),
    )
    .await;
    let (status, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "login", "prompt": "e2e:message(\"after the login\")", "agent_profile_id": id }),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    let (task, session) = (
        task["id"].as_str().unwrap().to_string(),
        task["primary_session_id"].as_str().unwrap().to_string(),
    );
    let needs_login = async || {
        api.wait_for(
            &format!("/api/v1/tasks/{task}"),
            "the login the agent needs",
            |t| {
                t["status_summary"]["last_error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("log in"))
            },
        )
        .await
    };
    needs_login().await;
    let state = |s: Value| {
        s["sessions"][0]["state"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let retry = format!("/api/v1/sessions/{session}/retry");
    assert_eq!(
        state(api.get(&format!("/api/v1/tasks/{task}/sessions")).await.1),
        "waiting_for_input",
        "not failed: it can be retried"
    );
    // Before the login: the same reason, the session still waiting.
    let (status, r) = api.post(&retry, json!({})).await;
    assert_eq!(status, 200, "{r}");
    needs_login().await;
    assert_eq!(
        state(api.get(&format!("/api/v1/tasks/{task}/sessions")).await.1),
        "waiting_for_input"
    );
    std::fs::write(&credentials, "logged in").unwrap();
    let (status, r) = api.post(&retry, json!({})).await;
    assert_eq!((status.as_u16(), &r["resumed"]), (200, &json!(true)), "{r}");
    assert_eq!(
        api.agent_said(&session, "after the login").await,
        "after the login"
    );
    let (_, t) = api.get(&format!("/api/v1/tasks/{task}")).await;
    assert!(
        t["status_summary"]["last_error"].is_null(),
        "the login is no longer news: {t}"
    );
    server.stop().await;
}

/// The command lines of this user's processes that run `<binary> mcp-stdio` for `url`.
fn relays_for(url: &str) -> Vec<Vec<String>> {
    processes_with(&format!("TURNSTILE_MCP_URL={url}"))
        .into_iter()
        .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
        .map(|c| {
            c.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .collect()
}

async fn a3_an_agent_without_http_mcp_asks_through_mcp_stdio(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let id = profile(
        &api,
        "stdio-only",
        env!("CARGO_BIN_EXE_mock_agent"),
        json!({ "MOCK_AGENT_NO_HTTP_MCP": "1" }),
    )
    .await;
    let (status, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "stdio", "prompt": "/e2e:clarification", "agent_profile_id": id }),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    // The agent reached ask_user_question through `turnstile mcp-stdio`: the question is a
    // bundle like any other.
    let pending_id = api
        .pending_id_of_kind(&session, "clarification_request")
        .await;
    // The relay's command line holds no token (it is in its environment only).
    let relays = relays_for(&format!("{}/mcp", server.base));
    assert_eq!(relays.len(), 1, "{relays:?}");
    assert_eq!(
        relays[0],
        [env!("CARGO_BIN_EXE_turnstile"), "mcp-stdio"],
        "{relays:?}"
    );
    let (status, r) = api
        .respond(
            &pending_id,
            json!({ "answers": [{ "question_id": "db", "selected_options": ["sqlite"] }] }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["claimed"], true, "{r}");
    api.wait_turns_done(&session, 1).await;
    let agent = api.agent_lines(&session).await;
    assert!(agent.iter().any(|l| l.contains("sqlite")), "{agent:?}");
    server.stop().await;
}

#[test]
fn a3_mcp_stdio_without_its_environment_says_what_is_missing() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .arg("mcp-stdio")
        .env_remove("TURNSTILE_MCP_URL")
        .env_remove("TURNSTILE_MCP_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("TURNSTILE_MCP_URL and TURNSTILE_MCP_TOKEN must be set"),
        "{err}"
    );
}

async fn a5_a_task_without_a_profile_runs_the_default_agent(url: String) {
    let server = TestServer::start_with(&url, |c| c.default_agent = "house agent".into()).await;
    let api = Api::new(&server.base);
    // Before the profile exists: refused, saying what is missing, and nothing is written.
    let (status, r) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "default", "prompt": "hello" }),
        )
        .await;
    assert_eq!(status, 409, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the default agent profile \"house agent\" does not exist"),
        "{r}"
    );
    let (_, tasks) = api.get("/api/v1/tasks").await;
    assert_eq!(tasks["tasks"].as_array().map(Vec::len), Some(0), "{tasks}");
    // With it, a task created without a profile runs it.
    let id = profile(&api, "house agent", "/nonexistent/house-agent", json!({})).await;
    let (status, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "default", "prompt": "hello" }),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    let (_, sessions) = api
        .get(&format!(
            "/api/v1/tasks/{}/sessions",
            task["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        sessions["sessions"][0]["agent_profile_id"],
        id.as_str(),
        "{sessions}"
    );
    server.stop().await;
}
