//! Convergence (I2, I5, P9, L18) across the agent scenarios and restarts.

use crate::support;

use serde_json::{Value, json};
use support::{Api, SHORT_TIMEOUT, TestServer, turns_done};
use turnstile::model::PendingActionRevision;

/// I2: each task's stored summary equals the aggregate of its sessions' pending actions.
async fn assert_converged(api: &Api) {
    let tasks = api.get("/api/v1/tasks").await.1;
    for t in tasks["tasks"].as_array().unwrap() {
        let sessions = api
            .get(&format!(
                "/api/v1/tasks/{}/sessions",
                t["id"].as_str().unwrap()
            ))
            .await
            .1;
        let actions: Vec<&str> = sessions["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["pending_action"].as_str())
            .collect();
        let aggregate = if actions.contains(&"permission") {
            json!("permission")
        } else if actions.contains(&"clarification") {
            json!("clarification")
        } else {
            Value::Null
        };
        assert_eq!(t["task_pending_action"], aggregate, "{t:#}");
        assert_eq!(
            t["status_summary"]["pending_action"], aggregate,
            "I2: {t:#}"
        );
        assert_eq!(t["status_summary_invalidated"], false);
    }
}

/// I2 on what is stored (not what a read repairs): once the projector is quiet, every
/// persisted summary equals the aggregate. Polls with a deadline while events drain.
async fn assert_persisted_converged(server: &TestServer) {
    let repo = &server.state.repo;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let tasks = repo.list_tasks().await.unwrap();
        let ids: Vec<String> = tasks.iter().map(|t| t.id.clone()).collect();
        let projections = turnstile::server::summary::loader::load_many(repo.as_ref(), &ids)
            .await
            .unwrap();
        let stored = repo.get_summaries(&ids).await.unwrap();
        let diverged: Vec<&String> = ids
            .iter()
            .filter(|id| {
                stored.get(*id).map(|s| s.body.pending_action)
                    != Some(projections[*id].pending_action)
            })
            .collect();
        if diverged.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "I2: stored summaries of {diverged:?} never converged"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

both_http!(
    i2_summaries_converge_after_scenarios_and_a_restart,
    l18_failure_after_acceptance_keeps_the_answer,
    i5_conflict_publishes_nothing
);

async fn i2_summaries_converge_after_scenarios_and_a_restart(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (_, simple) = api.start_task("/e2e:simple-message").await;
    let (_, answered) = api.start_task("/e2e:clarification").await;
    let (_, waiting) = api.start_task("/e2e:clarification-multi").await;
    let (_, detached) = api.start_task(SHORT_TIMEOUT).await;
    let (_, permission) = api.start_task("/e2e:permission").await;
    let (_, superseded) = api.start_task(SHORT_TIMEOUT).await;
    api.wait_for(
        &format!("/api/v1/sessions/{simple}/turns"),
        "simple",
        turns_done(1),
    )
    .await;
    let p = api.pending_id(&answered).await;
    api.respond(
        &p,
        json!({ "answers": [{ "question_id": "db", "selected_options": ["sqlite"] }] }),
    )
    .await;
    api.wait_for(
        &format!("/api/v1/sessions/{answered}/turns"),
        "answered",
        turns_done(1),
    )
    .await;
    api.pending_id(&waiting).await;
    api.wait_for(
        &format!("/api/v1/sessions/{detached}/turns"),
        "detached",
        turns_done(1),
    )
    .await;
    api.pending_id(&permission).await;
    api.wait_for(
        &format!("/api/v1/sessions/{superseded}/turns"),
        "superseded 1",
        turns_done(1),
    )
    .await;
    api.post(
        &format!("/api/v1/sessions/{superseded}/prompt"),
        json!({ "content": "moving on" }),
    )
    .await;
    api.wait_for(
        &format!("/api/v1/sessions/{superseded}/turns"),
        "superseded 2",
        turns_done(2),
    )
    .await;
    let any_task = api.get("/api/v1/tasks").await.1["tasks"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let sessions = api
        .get(&format!("/api/v1/tasks/{any_task}/sessions"))
        .await
        .1;
    let snapshot_before: PendingActionRevision =
        serde_json::from_value(sessions["sessions"][0]["pending_action_revision"].clone()).unwrap();
    assert_persisted_converged(&server).await;
    assert_converged(&api).await;
    server.stop().await;

    let restarted = TestServer::start(&url).await;
    let api = Api::new(&restarted.base);
    assert_persisted_converged(&restarted).await;
    assert_converged(&api).await;
    // P9: any snapshot from before the restart compares older than one taken after it.
    let tasks = api.get("/api/v1/tasks").await.1;
    let sessions = api
        .get(&format!(
            "/api/v1/tasks/{}/sessions",
            tasks["tasks"][0]["id"].as_str().unwrap()
        ))
        .await
        .1;
    let after: PendingActionRevision =
        serde_json::from_value(sessions["sessions"][0]["pending_action_revision"].clone()).unwrap();
    assert!(
        after.is_newer_than(&snapshot_before),
        "{after:?} vs {snapshot_before:?}"
    );
    restarted.stop().await;
}

async fn l18_failure_after_acceptance_keeps_the_answer(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    // This agent accepts the resume prompt, then crashes.
    let (_, profile) = api
        .post("/api/v1/agent-profiles", json!({ "name": "crashy", "command": env!("CARGO_BIN_EXE_mock_agent"), "env": { "MOCK_AGENT_EXIT_ON_RESUME": "1" } }))
        .await;
    let (_, t) = api.post("/api/v1/tasks", json!({ "title": "crashy", "prompt": SHORT_TIMEOUT, "agent_profile_id": profile["id"] })).await;
    let (task, session) = (
        t["id"].as_str().unwrap().to_string(),
        t["primary_session_id"].as_str().unwrap().to_string(),
    );
    let pending_id = api.pending_id(&session).await;
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "turn 1",
        turns_done(1),
    )
    .await;
    let (status, r) = api
        .respond(
            &pending_id,
            json!({ "answers": [{ "question_id": "db", "selected_options": ["sqlite"] }] }),
        )
        .await;
    assert_eq!(
        (status.as_u16(), r["claimed"].as_bool()),
        (200, Some(true)),
        "{r}"
    );
    api.wait_for(
        &format!("/api/v1/tasks/{task}/sessions"),
        "the crash",
        |v| v["sessions"][0]["state"] == "failed",
    )
    .await;
    let b = api
        .get(&format!("/api/v1/clarifications/{pending_id}"))
        .await
        .1;
    assert_eq!(
        b["status"], "answered",
        "after acceptance the answer is final"
    );
    assert!(
        server
            .state
            .repo
            .bundles_pending_delivery()
            .await
            .unwrap()
            .is_empty()
    );
    server.stop().await;
}

async fn i5_conflict_publishes_nothing(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (task, session) = api.start_task(SHORT_TIMEOUT).await;
    let pending_id = api.pending_id(&session).await;
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "turn 1",
        turns_done(1),
    )
    .await;
    api.post(
        &format!("/api/v1/sessions/{session}/prompt"),
        json!({ "content": "new turn" }),
    )
    .await;
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "turn 2",
        turns_done(2),
    )
    .await;
    // The worker's last act for a turn is the idle state: after it, the session is quiet.
    api.wait_for(&format!("/api/v1/tasks/{task}/sessions"), "idle", |v| {
        v["sessions"][0]["state"] == "waiting_for_input"
    })
    .await;
    let before = server.state.repo.get_bundle(&pending_id).await.unwrap();
    let mut rx = server.state.hub.subscribe();
    let (status, _) = api.respond(&pending_id, json!({ "rejected": true })).await;
    assert_eq!(status, 409);
    let (status, _) = api.respond(&pending_id, json!({ "answers": [] })).await;
    assert_eq!(status, 400);
    assert_eq!(
        server.state.repo.get_bundle(&pending_id).await.unwrap(),
        before,
        "nothing written"
    );
    // Nothing about this bundle or its task was published (other tasks' projector traffic
    // may still flow).
    let task_id = before.as_ref().unwrap().record.task_id.clone();
    while let Ok(e) = rx.try_recv() {
        let about_it = e.action.starts_with("clarification.")
            || e.task_id.as_deref() == Some(task_id.as_str())
                && (e.action.starts_with("session.message.")
                    || e.action.starts_with("session.turn."));
        assert!(!about_it, "published after a 409/400: {e:?}");
    }
    server.stop().await;
}
