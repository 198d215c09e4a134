//! Forced interleavings of a response with what else can happen to its bundle (L13–L18).
//! A hook pauses the responder right after it won the claim; the test then makes the other
//! event happen and releases it. No sleeps decide the order.

use crate::support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::{Api, SHORT_TIMEOUT, TestServer, raw_exec, turns_done};
use tokio::sync::Semaphore;
use turnstile::server::hooks::Point;

const SLOW_TIMEOUT: &str = r#"e2e:ask-timeout(1500, {"questions": [{"id": "db", "prompt": "Which database?", "options": [{"id": "postgresql", "label": "PostgreSQL"}, {"id": "sqlite", "label": "SQLite"}]}]})"#;
fn answer(option: &str) -> Value {
    json!({ "answers": [{ "question_id": "db", "selected_options": [option] }] })
}

/// Pauses every responder after its claim until the returned gate gets a permit.
fn gate_after_claim(server: &TestServer) -> Arc<Semaphore> {
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    server.state.hooks.set(Point::AfterClaim, move |_| {
        let g = g.clone();
        async move { g.acquire().await.expect("gate").forget() }
    });
    gate
}

fn respond_in_background(
    api: &Api,
    pending_id: &str,
    body: Value,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let (client, url) = (
        api.client.clone(),
        format!("{}/api/v1/clarifications/{pending_id}/respond", api.base),
    );
    tokio::spawn(async move {
        let r = client.post(url).json(&body).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    })
}

both_http!(
    claim_then_agent_gives_up_and_turn_completes_resumes_once,
    claim_then_new_prompt_queues_the_resume_behind_it,
    l18_an_answer_owed_to_an_agent_that_cannot_start_is_delivered_on_retry,
    l15_an_answer_given_before_the_ask_reads_its_bundle_back_is_delivered_live,
);

async fn claim_then_agent_gives_up_and_turn_completes_resumes_once(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (_, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "race", "prompt": SLOW_TIMEOUT }),
        )
        .await;
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    let pending_id = api.pending_id(&session).await;
    let gate = gate_after_claim(&server);
    let responder = respond_in_background(&api, &pending_id, answer("sqlite"));
    api.wait_for(
        &format!("/api/v1/clarifications/{pending_id}"),
        "the claim",
        |b| b["status"] == "answered",
    )
    .await;
    // The agent stops waiting (its call times out) and its turn completes while the
    // responder holds the claim.
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "the turn to end",
        turns_done(1),
    )
    .await;
    assert!(
        api.agent_lines(&session)
            .await
            .contains(&"Question timed out, continuing without answer.".to_string())
    );
    gate.add_permits(1);
    let (status, body) = responder.await.unwrap();
    assert_eq!(
        (status, body["claimed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    // The waiter was gone, so the answer resumes the agent: exactly once (I4).
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "the resume",
        turns_done(2),
    )
    .await;
    let resumed: Vec<String> = api
        .agent_lines(&session)
        .await
        .into_iter()
        .filter(|l| l.contains("sqlite"))
        .collect();
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    server.stop().await;
}

async fn claim_then_new_prompt_queues_the_resume_behind_it(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (_, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "race", "prompt": SHORT_TIMEOUT }),
        )
        .await;
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    let pending_id = api.pending_id(&session).await;
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "turn 1",
        turns_done(1),
    )
    .await;
    let gate = gate_after_claim(&server);
    let responder = respond_in_background(&api, &pending_id, answer("postgresql"));
    api.wait_for(
        &format!("/api/v1/clarifications/{pending_id}"),
        "the claim",
        |b| b["status"] == "answered",
    )
    .await;
    // A prompt starts a new turn while the responder holds its claim.
    let (status, accepted) = api
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "e2e:delay(100)\ne2e:message(\"busy\")" }),
        )
        .await;
    assert_eq!(
        (status.as_u16(), accepted["queued"].as_bool()),
        (200, Some(false))
    );
    gate.add_permits(1);
    let (status, body) = responder.await.unwrap();
    assert_eq!(
        (status, body["claimed"].as_bool()),
        (200, Some(true)),
        "accepted: queued behind the open turn: {body}"
    );
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "prompt and resume",
        turns_done(3),
    )
    .await;
    let lines = api.agent_lines(&session).await;
    let busy = lines
        .iter()
        .position(|l| l == "busy")
        .expect("the prompt ran");
    let resumed = lines
        .iter()
        .position(|l| l.contains("postgresql"))
        .expect("the resume ran");
    assert!(
        busy < resumed,
        "the resume waited for the open turn: {lines:?}"
    );
    assert_eq!(lines.iter().filter(|l| l.contains("postgresql")).count(), 1);
    server.stop().await;
}

/// L18 "acceptance, defined": a detached answer is accepted once its resume is owed in the
/// database, whether or not the agent can start. The session shows why it waits; a retry once
/// the agent can start delivers the answer exactly once.
async fn l18_an_answer_owed_to_an_agent_that_cannot_start_is_delivered_on_retry(url: String) {
    let first = TestServer::start(&url).await;
    let api = Api::new(&first.base);
    let (_, profile) = api
        .post(
            "/api/v1/agent-profiles",
            json!({ "name": "flaky", "command": env!("CARGO_BIN_EXE_mock_agent") }),
        )
        .await;
    let (_, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "flaky", "prompt": SHORT_TIMEOUT, "agent_profile_id": profile["id"] }),
        )
        .await;
    let (task_id, session) = (
        task["id"].as_str().unwrap().to_string(),
        task["primary_session_id"].as_str().unwrap().to_string(),
    );
    let pending_id = api.pending_id(&session).await;
    api.wait_turns_done(&session, 1).await;
    first.stop().await;
    // After a restart the agent must be relaunched, and now it cannot start.
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    raw_exec(
        &url,
        "UPDATE agent_profiles SET command = '/nonexistent/agent' WHERE name = 'flaky'",
    )
    .await;
    let (status, body) = api.respond(&pending_id, answer("sqlite")).await;
    assert_eq!(
        (status.as_u16(), body["claimed"].as_bool()),
        (200, Some(true)),
        "accepted once owed: {body}"
    );
    let b = api
        .get(&format!("/api/v1/clarifications/{pending_id}"))
        .await
        .1;
    assert_eq!(b["status"], "answered", "the answer is final");
    // The session says why it waits, and keeps the answer.
    let t = api
        .wait_for(
            &format!("/api/v1/tasks/{task_id}"),
            "the failure shown",
            |t| {
                t["status_summary"]["last_error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("/nonexistent/agent"))
            },
        )
        .await;
    assert_eq!(t["status_summary"]["pending_action"], Value::Null);
    let s = api
        .wait_for(
            &format!("/api/v1/tasks/{task_id}/sessions"),
            "waiting",
            |v| v["sessions"][0]["state"] == "waiting_for_input",
        )
        .await;
    assert_eq!(s["sessions"][0]["pending_action"], Value::Null);
    let owed = server.state.repo.owed_resumes(&session).await.unwrap();
    assert_eq!(owed.len(), 1, "one resume is owed");
    // Retrying while the agent still cannot start says why and keeps it owed.
    let (status, body) = api
        .post(&format!("/api/v1/sessions/{session}/retry"), json!({}))
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot start"),
        "{body}"
    );
    assert_eq!(
        server
            .state
            .repo
            .owed_resumes(&session)
            .await
            .unwrap()
            .len(),
        1
    );
    // Once it can start, a retry delivers the answer, exactly once.
    let mock = env!("CARGO_BIN_EXE_mock_agent").replace('\'', "''");
    raw_exec(
        &url,
        &format!("UPDATE agent_profiles SET command = '{mock}' WHERE name = 'flaky'"),
    )
    .await;
    let (status, body) = api
        .post(&format!("/api/v1/sessions/{session}/retry"), json!({}))
        .await;
    assert_eq!(
        (status.as_u16(), &body["resumed"]),
        (200, &json!(true)),
        "{body}"
    );
    api.wait_turns_done(&session, 2).await;
    let resumed: Vec<String> = api
        .agent_lines(&session)
        .await
        .into_iter()
        .filter(|l| l.starts_with("Thanks, continuing"))
        .collect();
    assert_eq!(
        resumed,
        ["Thanks, continuing with your answer: Q: Which database?\nA: sqlite"]
    );
    assert!(
        server
            .state
            .repo
            .owed_resumes(&session)
            .await
            .unwrap()
            .is_empty()
    );
    let (status, _) = api
        .post(&format!("/api/v1/sessions/{session}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "nothing more to deliver");
    assert_eq!(
        api.agent_lines(&session)
            .await
            .iter()
            .filter(|l| l.starts_with("Thanks, continuing"))
            .count(),
        1,
        "I4: delivered once"
    );
    server.stop().await;
}

/// A pause at `point`: `arrived` gets a permit when something reaches it, which then waits for
/// a permit on `go`.
fn pause_at(server: &TestServer, point: Point) -> (Arc<Semaphore>, Arc<Semaphore>) {
    let (arrived, go) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let (a, g) = (arrived.clone(), go.clone());
    server.state.hooks.set(point, move |_| {
        let (a, g) = (a.clone(), g.clone());
        async move {
            a.add_permits(1);
            g.acquire().await.expect("gate").forget();
        }
    });
    (arrived, go)
}

/// L15, L5: an answer claimed right after the question was written, before the asking call
/// read its bundle back, found the bundle answered (no longer active) and took that for
/// "superseded": the call told the agent to continue without asking and the answer became a
/// resume. Superseded means a newer turn is current, never "answered": the call waits and gets
/// its answer live. Forced: the asker is held after its commit while the responder claims, and
/// the responder is held after its claim until the asker has read its bundle back.
async fn l15_an_answer_given_before_the_ask_reads_its_bundle_back_is_delivered_live(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (written, ask_go) = pause_at(&server, Point::AskWritten);
    let (read, read_go) = pause_at(&server, Point::AskRead);
    let claimed = gate_after_claim(&server);
    let (_, session) = api.start_task("/e2e:clarification").await;
    written.acquire().await.unwrap().forget();
    let pending_id = api.pending_id(&session).await;
    let responder = respond_in_background(&api, &pending_id, answer("sqlite"));
    api.wait_for(
        &format!("/api/v1/clarifications/{pending_id}"),
        "the claim",
        |b| b["status"] == "answered",
    )
    .await;
    ask_go.add_permits(1);
    read.acquire().await.unwrap().forget();
    read_go.add_permits(1);
    claimed.add_permits(1);
    let (status, body) = responder.await.unwrap();
    assert_eq!((status, &body["claimed"]), (200, &json!(true)), "{body}");
    api.wait_turns_done(&session, 1).await;
    let lines = api.agent_lines(&session).await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains(r#"You answered: {"db":{"selected_option":"sqlite"}}"#)),
        "delivered live, in the same turn: {lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("Thanks, continuing")),
        "not as a resume: {lines:?}"
    );
    let (_, turns) = api.get(&format!("/api/v1/sessions/{session}/turns")).await;
    assert_eq!(turns["turns"].as_array().unwrap().len(), 1, "{turns}");
    server.stop().await;
}
