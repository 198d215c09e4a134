//! Agents we did not write (spec/elicitation.md, spec/agents.md A3): an agent written only on
//! the official ACP Python SDK (`tests/agents/claude_shaped_agent.py`, run from the test-only
//! virtualenv `scripts/acp-venv.sh` makes) asks the way Claude Code's adapter does and gets
//! the picked label back; advertising no HTTP MCP, it reaches `ask_user_question` over
//! `turnstile mcp-stdio`. On SQLite and PostgreSQL.

use crate::support;

use serde_json::{Value, json};
use support::{Api, TestServer};

both_http!(
    e2_an_agent_on_the_official_sdk_gets_the_picked_label_back,
    a3_an_agent_on_the_official_sdk_reaches_the_tool_over_mcp_stdio,
);

/// A profile running the SDK agent.
async fn sdk_agent(api: &Api) -> String {
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/target/acp-venv/bin/python");
    assert!(
        std::path::Path::new(python).exists(),
        "the official ACP SDK's virtualenv is missing: run scripts/acp-venv.sh (scripts/test.sh does)"
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/agents/claude_shaped_agent.py"
    );
    let (status, p) = api
        .post(
            "/api/v1/agent-profiles",
            json!({ "name": "sdk agent", "command": python, "args": [script] }),
        )
        .await;
    assert_eq!(status, 200, "{p}");
    p["id"].as_str().unwrap().to_string()
}

async fn started(api: &Api, profile: &str, prompt: &str) -> String {
    let (status, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "sdk", "prompt": prompt, "agent_profile_id": profile }),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    task["primary_session_id"].as_str().unwrap().to_string()
}

async fn e2_an_agent_on_the_official_sdk_gets_the_picked_label_back(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let profile = sdk_agent(&api).await;
    let session = started(&api, &profile, "elicit").await;
    let pending_id = api
        .pending_id_of_kind(&session, "clarification_request")
        .await;
    let (_, b) = api
        .get(&format!("/api/v1/clarifications/{pending_id}"))
        .await;
    let q: &Value = &b["questions"][0];
    assert_eq!(b["questions"].as_array().map(Vec::len), Some(1), "{b}");
    assert_eq!(
        (q["id"].as_str(), q["prompt"].as_str(), q["other"].as_bool()),
        (
            Some("question_0"),
            Some("Which database should we use?"),
            None
        ),
        "the companion is the question's Other box: {b}"
    );
    let (status, r) = api
        .respond(
            &pending_id,
            json!({ "answers": [{ "question_id": "question_0", "selected_options": ["SQLite"] }] }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        api.agent_said(&session, "Elicitation result:").await,
        r#"Elicitation result: {"action": "accept", "content": {"question_0": "SQLite"}}"#
    );
    server.stop().await;
}

async fn a3_an_agent_on_the_official_sdk_reaches_the_tool_over_mcp_stdio(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let profile = sdk_agent(&api).await;
    let session = started(&api, &profile, "mcp").await;
    let pending_id = api
        .pending_id_of_kind(&session, "clarification_request")
        .await;
    let (_, b) = api
        .get(&format!("/api/v1/clarifications/{pending_id}"))
        .await;
    assert_eq!(
        b["questions"][0]["prompt"], "Which database over stdio?",
        "{b}"
    );
    let (status, r) = api
        .respond(
            &pending_id,
            json!({ "answers": [{ "question_id": "db", "selected_options": ["lite"] }] }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let result = api.agent_said(&session, "Tool result:").await;
    assert!(result.contains(r#""selected_option":"lite""#), "{result}");
    server.stop().await;
}
