//! Restart (L9, I8): the real server binary is killed while a question
//! waits; after a restart the question is detached and still answerable, and an answer or a
//! prompt relaunches the agent.

use crate::support;

use serde_json::{Value, json};
use support::BinaryServer;

async fn spawn_server(database_url: &str, data_dir: &std::path::Path) -> BinaryServer {
    BinaryServer::spawn(database_url, data_dir, &[], &[]).await
}

both_http!(killed_server_keeps_the_question_answerable_and_relaunches_the_agent);

async fn killed_server_keeps_the_question_answerable_and_relaunches_the_agent(url: String) {
    let data = support::temp_dir("restart");
    let mut first = spawn_server(&url, &data).await;
    let (_, task) = first
        .api
        .post(
            "/api/v1/tasks",
            json!({ "title": "restart", "prompt": "/e2e:clarification" }),
        )
        .await;
    let task_id = task["id"].as_str().unwrap().to_string();
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    let pending_id = first
        .api
        .pending_id_of_kind(&session, "clarification_request")
        .await;
    assert_eq!(
        first
            .api
            .get(&format!("/api/v1/clarifications/{pending_id}"))
            .await
            .1["detached"],
        false
    );
    first.child.kill().await.expect("kill the server");

    let second = spawn_server(&url, &data).await;
    let api = &second.api;
    let b = api
        .get(&format!("/api/v1/clarifications/{pending_id}"))
        .await
        .1;
    assert_eq!(
        (
            b["detached"].as_bool(),
            b["active"].as_bool(),
            b["status"].as_str()
        ),
        (Some(true), Some(true), Some("pending"))
    );
    assert_eq!(b["source"], "mcp", "E2: asked through the MCP tool");
    let row = api
        .messages(&session)
        .await
        .into_iter()
        .find(|m| m["kind"] == "clarification_request")
        .expect("the question's row");
    assert_eq!(row["source"], "mcp", "E2: the row says so too: {row}");
    let sessions = api
        .get(&format!("/api/v1/tasks/{task_id}/sessions"))
        .await
        .1;
    assert_eq!(sessions["sessions"][0]["state"], "waiting_for_input");
    assert_eq!(sessions["sessions"][0]["pending_action"], "clarification");
    assert_eq!(
        api.get(&format!("/api/v1/tasks/{task_id}")).await.1["status_summary"]["pending_action"],
        "clarification",
        "I2 after restart"
    );
    let turns = api
        .get(&format!("/api/v1/sessions/{session}/turns"))
        .await
        .1;
    assert!(turns["turns"][0]["completed_at"].is_string());

    // The detached answer relaunches the agent and resumes it once (L17).
    let (status, r) = api
        .respond(
            &pending_id,
            json!({ "answers": [{ "question_id": "db", "selected_options": ["postgresql"] }] }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let done = |n: usize| {
        move |v: &Value| {
            v["turns"]
                .as_array()
                .is_some_and(|t| t.len() == n && t.iter().all(|t| t["completed_at"].is_string()))
        }
    };
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "the resume turn",
        done(2),
    )
    .await;
    // A prompt works on the relaunched agent.
    api.post(
        &format!("/api/v1/sessions/{session}/prompt"),
        json!({ "content": "hello again" }),
    )
    .await;
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "the prompt turn",
        done(3),
    )
    .await;
    let agent = api.agent_lines(&session).await;
    assert!(agent.iter().any(|t| t.contains("postgresql")), "{agent:?}");
    assert_eq!(agent.last().map(String::as_str), Some("Echo: hello again"));
    api.wait_for(
        &format!("/api/v1/tasks/{task_id}"),
        "the question to clear",
        |t| t["task_pending_action"].is_null(),
    )
    .await;
}
