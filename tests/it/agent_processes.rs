//! Agent processes with least privilege (spec "Server process"): a handshake deadline, a
//! minimal environment, a process group killed as a whole, MCP tokens that die with their
//! agent or session, a cap on running agents, and a shutdown that does not wait forever.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Api, BinaryServer, TestServer, process_alive, until};

both_http!(
    an_agent_that_never_speaks_acp_fails_within_the_deadline,
    an_agent_that_exits_on_its_own_leaves_nothing_behind,
    a_stale_mcp_token_is_refused_once_its_session_ended,
    idle_agents_make_room_at_the_cap_and_lose_their_token,
    agents_get_a_minimal_environment_and_shutdown_has_a_deadline,
    a_request_waits_for_a_stuck_worker_only_so_long,
    t8_an_agent_message_over_the_limit_ends_the_agent_with_the_reason,
);

/// Bounds (spec "Server process"): every wait an HTTP handler does on a session's worker is
/// bounded (the handshake deadline plus 10 s). A worker held inside a write (the `StreamChunk`
/// hook, as a stuck disk would) cannot hold the request: it gets 503, "try again"; once the
/// worker is free again the session works.
async fn a_request_waits_for_a_stuck_worker_only_so_long(url: String) {
    let server = TestServer::start_with(&url, |r| {
        r.agent_start_timeout = Duration::from_secs(1);
    })
    .await;
    let api = Api::new(&server.base);
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let reached = std::sync::Arc::new(tokio::sync::Notify::new());
    {
        let (gate, reached) = (gate.clone(), reached.clone());
        server
            .state
            .hooks
            .set(turnstile::server::hooks::Point::StreamChunk, move |_| {
                let (gate, reached) = (gate.clone(), reached.clone());
                async move {
                    reached.notify_one();
                    gate.acquire().await.expect("gate").forget();
                }
            });
    }
    let (task, session) = api.start_task("e2e:message(\"stuck here\")").await;
    reached.notified().await;
    let asked = Instant::now();
    let (status, body) = api
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "e2e:message(\"next\")" }),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not answer in time"),
        "{body}"
    );
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(20),
        "bounded by the handshake deadline + 10 s: {waited:?}"
    );
    // Its command queue is bounded too: commands that need no answer (cancels) fill it, and
    // the first one over gets 503 at once.
    let mut accepted = 0;
    loop {
        let (status, body) = api
            .post(&format!("/api/v1/sessions/{session}/cancel"), json!({}))
            .await;
        if status == 503 {
            assert!(
                body["error"]["message"].as_str().unwrap().contains("busy"),
                "{body}"
            );
            break;
        }
        assert!(status.is_success(), "{status} {body}");
        accepted += 1;
        assert!(accepted <= 64, "the command queue is bounded");
    }
    assert!(accepted > 0);
    server
        .state
        .hooks
        .clear(turnstile::server::hooks::Point::StreamChunk);
    gate.add_permits(1);
    api.wait_turns_done(&session, 1).await;
    let (status, body) = api
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "e2e:message(\"free again\")" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    api.wait_turns_done(&session, 2).await;
    let lines = api.agent_lines(&session).await;
    assert!(lines.contains(&"free again".to_string()), "{lines:?}");
    assert!(
        !lines.contains(&"next".to_string()),
        "the prompt answered 503 never ran: {lines:?}"
    );
    let (_, task) = api.get(&format!("/api/v1/tasks/{task}")).await;
    assert_eq!(task["status_summary"]["queued_prompt_count"], 0, "{task}");
    server.stop().await;
}

async fn profile(api: &Api, name: &str, command: &str, args: &[&str], env: Value) -> String {
    let (status, p) = api
        .post(
            "/api/v1/agent-profiles",
            json!({ "name": name, "command": command, "args": args, "env": env }),
        )
        .await;
    assert_eq!(status, 200, "{p}");
    p["id"].as_str().unwrap().to_string()
}

async fn task_with(api: &Api, profile: &str, prompt: &str) -> (String, String) {
    let (status, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "t", "prompt": prompt, "agent_profile_id": profile }),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    (
        task["id"].as_str().unwrap().to_string(),
        task["primary_session_id"].as_str().unwrap().to_string(),
    )
}

/// A shell "agent" that never answers ACP: it writes its pid and a grandchild's pid, says
/// something on stderr, and waits.
const SILENT: &str = r#"echo "$$" > "$PIDS"; sleep 300 & echo "$!" >> "$PIDS"; echo "warming up the model" >&2; wait"#;

fn pids(path: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

async fn an_agent_that_never_speaks_acp_fails_within_the_deadline(url: String) {
    let server = TestServer::start_with(&url, |r| {
        r.agent_start_timeout = Duration::from_secs(1);
    })
    .await;
    let api = Api::new(&server.base);
    let pid_file = support::temp_dir("silent").join("pids");
    let silent = profile(
        &api,
        "silent",
        "/bin/sh",
        &["-c", SILENT],
        json!({ "PIDS": pid_file.to_str().unwrap() }),
    )
    .await;
    let started = Instant::now();
    let (task, session) = task_with(&api, &silent, "hello").await;
    let sessions = api
        .wait_for(&format!("/api/v1/tasks/{task}/sessions"), "failed", |v| {
            v["sessions"][0]["state"] == "failed"
        })
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed after {:?}",
        started.elapsed()
    );
    assert_eq!(sessions["sessions"][0]["id"], session.as_str());
    let errors: Vec<String> = api
        .messages(&session)
        .await
        .into_iter()
        .filter(|m| m["kind"] == "error")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("ACP handshake within 1 s"), "{errors:?}");
    assert!(
        errors[0].contains("warming up the model"),
        "the agent's stderr explains it: {errors:?}"
    );
    let summary = api.get(&format!("/api/v1/tasks/{task}")).await.1;
    assert!(
        summary["status_summary"]["last_error"]["message"]
            .as_str()
            .unwrap()
            .contains("handshake")
    );
    // The agent and the child it started are gone (killed as a group).
    let both = pids(&pid_file);
    assert_eq!(both.len(), 2, "{both:?}");
    until("the agent's process group to end", async || {
        both.iter().all(|p| !process_alive(*p))
    })
    .await;
    assert_eq!(api.delete(&format!("/api/v1/tasks/{task}")).await, 204);
    server.stop().await;
}

/// A wrapper "agent" (like `npx`): it starts a grandchild that lets go of the agent's pipes
/// (so the connection can end without it), writes both pids, then runs the mock agent.
const WRAPPER: &str =
    r#"echo "$$" > "$PIDS"; sleep 300 </dev/null >/dev/null 2>&1 & echo "$!" >> "$PIDS"; "$MOCK""#;

async fn wrapper_profile(api: &Api, pid_file: &std::path::Path) -> String {
    profile(
        api,
        "wrapper",
        "/bin/sh",
        &["-c", WRAPPER],
        json!({ "PIDS": pid_file.to_str().unwrap(), "MOCK": env!("CARGO_BIN_EXE_mock_agent") }),
    )
    .await
}

/// An agent that ends on its own (here it crashes: `e2e:exit(3)`) was reaped before its
/// group was killed, so what it had started lived on. Now the group goes with it.
async fn an_agent_that_exits_on_its_own_leaves_nothing_behind(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let pid_file = support::temp_dir("wrapper").join("pids");
    let wrapper = wrapper_profile(&api, &pid_file).await;
    let (task, session) = task_with(&api, &wrapper, "e2e:message(\"hi\")").await;
    api.wait_turns_done(&session, 1).await;
    let both = pids(&pid_file);
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(
        both.iter().all(|p| process_alive(*p)),
        "both run with the agent"
    );
    let (status, _) = api
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "e2e:exit(3)" }),
        )
        .await;
    assert_eq!(status, 200);
    api.wait_for(&format!("/api/v1/tasks/{task}/sessions"), "failed", |v| {
        v["sessions"][0]["state"] == "failed"
    })
    .await;
    until("the wrapper's process group to end", async || {
        both.iter().all(|p| !process_alive(*p))
    })
    .await;
    server.stop().await;
}

/// The Authorization header our server gave the agent in `session/new` (read from a copy of
/// its stdin).
fn token_in(log: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let at = text.find("Bearer ")? + "Bearer ".len();
    Some(
        text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect(),
    )
}

/// The mock agent reading through `tee`, so the test sees what the server sent it. The shell
/// becomes the agent (`exec`), so the agent's exit closes the connection.
fn teed_mock() -> [&'static str; 2] {
    ["-c", r#"exec "$MOCK" < <(tee "$LOG")"#]
}

async fn mcp_status(server: &TestServer, token: &str) -> u16 {
    support::client()
        .post(server.url("/mcp"))
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "probe", "version": "0" } } }),
        )
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn a_stale_mcp_token_is_refused_once_its_session_ended(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let log = support::temp_dir("tee").join("stdin");
    let teed = profile(
        &api,
        "teed",
        "/bin/bash",
        &teed_mock(),
        json!({ "LOG": log.to_str().unwrap(), "MOCK": env!("CARGO_BIN_EXE_mock_agent") }),
    )
    .await;
    let (task, session) = task_with(&api, &teed, "e2e:message(\"hi\")").await;
    api.wait_turns_done(&session, 1).await;
    let token = token_in(&log).expect("the agent got a token");
    assert_ne!(
        mcp_status(&server, &token).await,
        401,
        "valid while the agent runs"
    );
    // The agent crashes: the session fails and its token dies with it.
    let (status, _) = api
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "e2e:exit(3)" }),
        )
        .await;
    assert_eq!(status, 200);
    api.wait_for(&format!("/api/v1/tasks/{task}/sessions"), "failed", |v| {
        v["sessions"][0]["state"] == "failed"
    })
    .await;
    assert_eq!(mcp_status(&server, &token).await, 401);
    server.stop().await;
}

async fn idle_agents_make_room_at_the_cap_and_lose_their_token(url: String) {
    let server = TestServer::start_with(&url, |r| r.max_agents = 1).await;
    let api = Api::new(&server.base);
    let log = support::temp_dir("tee").join("stdin");
    let teed = profile(
        &api,
        "teed",
        "/bin/bash",
        &teed_mock(),
        json!({ "LOG": log.to_str().unwrap(), "MOCK": env!("CARGO_BIN_EXE_mock_agent") }),
    )
    .await;
    let (_, first) = task_with(&api, &teed, "e2e:message(\"one\")").await;
    api.wait_turns_done(&first, 1).await;
    let first_token = token_in(&log).expect("a token");
    assert_eq!(server.state.runtime.agents.count(), 1);
    // A second session needs the only slot: the idle agent makes room.
    let (second_task, second) = api.start_task("e2e:message(\"two\")").await;
    api.wait_turns_done(&second, 1).await;
    assert_eq!(server.state.runtime.agents.count(), 1);
    assert_eq!(
        mcp_status(&server, &first_token).await,
        401,
        "the stopped agent's token is revoked"
    );
    // While that one is busy, nobody else may start: a clear refusal, nothing queued.
    let (status, body) = api
        .post(
            &format!("/api/v1/sessions/{second}/prompt"),
            json!({ "content": "e2e:delay(60000)" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = api
        .post(
            &format!("/api/v1/sessions/{first}/prompt"),
            json!({ "content": "e2e:message(\"again\")" }),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("busy"),
        "{body}"
    );
    // A new task or session that would need an agent is refused before anything is written.
    let before = support::table_counts(&url).await;
    let (status, body) = api
        .post("/api/v1/tasks", json!({ "title": "later", "prompt": "hi" }))
        .await;
    assert_eq!(status, 503, "{body}");
    let (status, body) = api
        .post(
            &format!("/api/v1/tasks/{second_task}/sessions"),
            json!({ "prompt": "hi" }),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        support::table_counts(&url).await,
        before,
        "nothing was written"
    );
    // Cancelling the busy one frees the slot; the first session relaunches on demand.
    api.post(&format!("/api/v1/sessions/{second}/cancel"), json!({}))
        .await;
    api.wait_turns_done(&second, 2).await;
    let (status, body) = api
        .post(
            &format!("/api/v1/sessions/{first}/prompt"),
            json!({ "content": "e2e:message(\"again\")" }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    api.wait_turns_done(&first, 2).await;
    assert!(api.agent_lines(&first).await.contains(&"again".to_string()));
    server.stop().await;
}

/// The real binary: agents get a minimal environment (none of the server's secrets), and a
/// shutdown ends within its deadline although an agent holds an MCP call open — and takes
/// every agent's process group with it (a wrapper's grandchild included).
async fn agents_get_a_minimal_environment_and_shutdown_has_a_deadline(url: String) {
    let dir = support::temp_dir("env");
    let server = BinaryServer::spawn(
        &url,
        &dir,
        &["--agent-start-timeout", "2", "--shutdown-timeout", "2"],
        &[
            ("DATABASE_URL", "postgres://user:secret@db.example/prod"),
            ("ACCESS_TOKEN", "server-secret-0123456789"),
            ("LEPTOS_SITE_ROOT", "target/site"),
        ],
    )
    .await;
    let mut api = server.api;
    api.client = reqwest::Client::builder()
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                "Bearer server-secret-0123456789".parse().unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .unwrap();
    let out = dir.join("agent-env");
    let dump = profile(
        &api,
        "dump",
        "/bin/sh",
        &[
            "-c",
            r#"cat /proc/$PPID/environ > "$OUT.server-env" 2>&1
               tr '\0' ' ' < /proc/$PPID/cmdline > "$OUT.server-cmdline" 2>&1
               env > "$OUT.tmp"; mv "$OUT.tmp" "$OUT"; sleep 300"#,
        ],
        json!({ "OUT": out.to_str().unwrap() }),
    )
    .await;
    task_with(&api, &dump, "hello").await;
    until("the agent's environment", async || out.exists()).await;
    let env = std::fs::read_to_string(&out).unwrap();
    assert!(!env.contains("DATABASE_URL"), "{env}");
    assert!(!env.contains("ACCESS_TOKEN"), "{env}");
    assert!(!env.contains("secret"), "{env}");
    assert!(!env.contains("LEPTOS_SITE_ROOT"), "{env}");
    assert!(!env.contains("RUST_LOG"), "{env}");
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
    assert!(
        env.lines().any(|l| l.starts_with("OUT=")),
        "the profile's own env"
    );
    // Nor can it read them from its server: the server is not dumpable, the agent has no
    // CAP_SYS_PTRACE (root included), the secrets are wiped from the server's environment
    // block (for kernels that let the read through anyway), and the token was never on its
    // command line.
    let server_env = std::fs::read_to_string(dir.join("agent-env.server-env")).unwrap();
    assert!(!server_env.contains("server-secret"), "{server_env}");
    assert!(!server_env.contains("db.example"), "{server_env}");
    assert!(
        server_env.contains("Permission denied") || server_env.contains("CARGO"),
        "the agent read the server's environment or was refused: {server_env}"
    );
    let cmdline = std::fs::read_to_string(dir.join("agent-env.server-cmdline")).unwrap();
    assert!(
        cmdline.contains("--data-dir"),
        "the server's command line: {cmdline}"
    );
    assert!(!cmdline.contains("server-secret"), "{cmdline}");

    // An agent (behind a wrapper) holds an MCP call open; a shutdown still ends within its
    // deadline, and the agent, its wrapper and the wrapper's other child are gone after it.
    let pid_file = dir.join("wrapper-pids");
    let wrapper = wrapper_profile(&api, &pid_file).await;
    let (_, waiting) = task_with(&api, &wrapper, "/e2e:clarification").await;
    api.pending_id(&waiting).await;
    let mut group = pids(&pid_file);
    assert_eq!(group.len(), 2, "{group:?}");
    let server = BinaryServer {
        child: server.child,
        api,
    };
    let mock: Vec<u32> = children(group[0])
        .into_iter()
        .filter(|p| !group.contains(p))
        .collect();
    assert_eq!(mock.len(), 1, "the wrapper runs the mock agent: {mock:?}");
    group.extend(mock);
    let asked = Instant::now();
    server.signal(libc::SIGTERM);
    let mut child = server.child;
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("the server exits within its shutdown deadline")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    until("every agent process to end with the server", async || {
        group.iter().all(|p| !process_alive(*p))
    })
    .await;
}

/// The server's child processes (every thread's `children`).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flat_map(|t| {
            std::fs::read_to_string(t.unwrap().path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Runs `/e2e:clarification` on the real binary with `env`: the agent asks over MCP, is
/// answered over REST and replies with the answer. Returns the server's child processes
/// while the agent waits on its question.
async fn children_while_the_mock_asks(prefix: &str, env: &[(&str, &str)]) -> Vec<u32> {
    let dir = support::temp_dir(prefix);
    let url = format!("sqlite:{}", dir.join("t.db").display());
    let server = BinaryServer::spawn(&url, &dir, &[], env).await;
    let api = &server.api;
    let (_, session) = api.start_task("/e2e:clarification").await;
    let pending_id = api.pending_id(&session).await;
    let children = children(server.child.id().unwrap());
    let (status, r) = api
        .respond(
            &pending_id,
            json!({ "answers": [{ "question_id": "db", "selected_options": ["sqlite"] }] }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    api.wait_turns_done(&session, 1).await;
    let lines = api.agent_lines(&session).await;
    assert!(
        lines
            .iter()
            .any(|l| l == r#"You answered: {"db":{"selected_option":"sqlite"}}"#),
        "the agent replied with the answer: {lines:?}"
    );
    children
}

/// `--mock-in-process` / `TURNSTILE_MOCK_IN_PROCESS` (benchmarks, demos): profile `mock` runs
/// inside the server over an in-memory pipe, still asking over MCP and hearing the answer, and
/// no agent process is started. Without it the same session has its agent as a child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_runs_inside_the_server_with_mock_in_process() {
    assert_eq!(
        children_while_the_mock_asks("mock-process", &[])
            .await
            .len(),
        1,
        "without the flag the mock is the server's child"
    );
    assert_eq!(
        children_while_the_mock_asks("mock-in-process", &[("TURNSTILE_MOCK_IN_PROCESS", "1")])
            .await,
        Vec::<u32>::new()
    );
}

/// T8: one message (one line) from an agent is at most 1 MiB; a longer one ends the agent
/// before the server buffers it whole, and its session shows why. A well-behaved agent in
/// another session is unaffected.
async fn t8_an_agent_message_over_the_limit_ends_the_agent_with_the_reason(url: String) {
    let server = TestServer::start_with(&url, |r| {
        r.agent_start_timeout = Duration::from_secs(20);
    })
    .await;
    let api = Api::new(&server.base);
    let flood = profile(
        &api,
        "flood",
        "/bin/sh",
        &[
            "-c",
            "head -c 3000000 /dev/zero | tr '\\0' a; echo; sleep 300",
        ],
        json!({}),
    )
    .await;
    let (task, _) = task_with(&api, &flood, "hello").await;
    let t = api
        .wait_for(
            &format!("/api/v1/tasks/{task}"),
            "the agent's end shown",
            |t| t["status_summary"]["last_error"]["message"].is_string(),
        )
        .await;
    let reason = t["status_summary"]["last_error"]["message"]
        .as_str()
        .unwrap();
    assert!(reason.contains("more than 1048576 bytes"), "{reason}");
    let (_, other) = api.start_task("/e2e:simple-message").await;
    api.wait_turns_done(&other, 1).await;
    server.stop().await;
}
