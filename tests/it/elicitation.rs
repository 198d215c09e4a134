//! Questions asked through ACP elicitation (spec/elicitation.md): the real mock-agent binary
//! sends `elicitation/create` over ACP (stdio), the question is a bundle like an MCP one,
//! answered over REST, and the agent reports what it received — on SQLite and PostgreSQL.

use crate::support;

use serde_json::{Value, json};
use support::{Api, BinaryServer, TestServer};
use turnstile::server::hooks::Point;

both_http!(
    e2_e5_a_claude_shaped_form_is_a_bundle_and_its_answer_reaches_the_agent_typed,
    e5_a_skipped_elicitation_is_declined,
    e4_a_value_that_breaks_the_form_is_422_and_changes_nothing,
    e3_a_schema_that_cannot_be_shown_is_refused_and_nothing_is_written,
    e7_a_link_is_answered_done_and_only_http_links_are_shown,
    e5_an_elicitation_the_agent_withdraws_is_detached_and_its_answer_resumes_it_once,
    e6_a_detached_elicitation_answered_after_a_restart_resumes_the_agent_once,
    e3_questions_keep_the_order_of_the_schema,
    e1_elicitation_is_advertised_unless_the_profile_turns_it_off,
    e7_a_link_the_agent_completes_is_answered_done,
    e8_the_mcp_tool_asks_for_several_picks_too,
    e5_an_elicitation_whose_agent_exits_is_detached_and_expires_with_its_session,
);

/// E8: `ask_user_question` may ask for several picks (`multi_select`): the bundle says so, two
/// picks reach the agent, and a `multi_select` that is not a boolean is the agent's error with
/// nothing written.
async fn e8_the_mcp_tool_asks_for_several_picks_too(url: String) {
    let ask = json!({ "questions": [{ "id": "f", "prompt": "Which features?", "multi_select": true,
        "options": [{ "id": "auth", "label": "Auth" }, { "id": "search", "label": "Search" }] }] });
    let bad = json!({ "questions": [{ "id": "g", "prompt": "Which?", "multi_select": "yes",
        "options": [{ "id": "a", "label": "A" }, { "id": "b", "label": "B" }] }] });
    let (server, api, _, session) = started(&url, &format!("e2e:ask({bad})\ne2e:ask({ask})")).await;
    let b = bundle(&api, &session).await;
    assert_eq!(
        (
            b["source"].as_str(),
            b["questions"][0]["multi_select"].as_bool()
        ),
        (Some("mcp"), Some(true)),
        "{b}"
    );
    let failed = api.agent_said(&session, "The question failed:").await;
    assert!(failed.contains("multi_select"), "{failed}");
    let (status, r) = api
        .respond(
            b["pending_id"].as_str().unwrap(),
            json!({ "answers": [{ "question_id": "f", "selected_options": ["auth", "search"] }] }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let answer = api.agent_said(&session, "You answered:").await;
    assert!(
        answer.contains("auth") && answer.contains("search"),
        "{answer}"
    );
    let bundles = api
        .messages(&session)
        .await
        .into_iter()
        .filter(|m| m["kind"] == "clarification_request")
        .count();
    assert_eq!(bundles, 1, "the refused ask wrote nothing");
    server.stop().await;
}

/// E5: the agent exits (killed) while its elicitation waits: the question is detached (L9);
/// with nothing owed, the crash fails the session and the move expires the question (L11), so
/// an answer is 409 with nothing written, and the user starts again in a new session.
async fn e5_an_elicitation_whose_agent_exits_is_detached_and_expires_with_its_session(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let tag = format!("exits{}", uuid::Uuid::new_v4().simple());
    let (status, p) = api
        .post(
            "/api/v1/agent-profiles",
            json!({ "name": format!("elicit then die {tag}"), "command": env!("CARGO_BIN_EXE_mock_agent"),
                    "env": { "TURNSTILE_TEST_AGENT": tag } }),
        )
        .await;
    assert_eq!(status, 200, "{p}");
    let (status, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "dies", "prompt": format!("e2e:elicit({})", claude_form()), "agent_profile_id": p["id"] }),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    let pending_id = bundle(&api, &session).await["pending_id"]
        .as_str()
        .unwrap()
        .to_string();
    let agents = support::processes_with(&format!("TURNSTILE_TEST_AGENT={tag}"));
    assert_eq!(agents.len(), 1, "one agent process: {agents:?}");
    let killed = std::process::Command::new("kill")
        .args(["-9", &agents[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let path = format!("/api/v1/clarifications/{pending_id}");
    let b = api
        .wait_for(&path, "the question of the dead agent to expire", |b| {
            b["status"] == "expired"
        })
        .await;
    assert_eq!(
        (b["detached"].as_bool(), b["active"].as_bool()),
        (Some(true), Some(false)),
        "detached when its agent went, then expired with the session: {b}"
    );
    let (_, sessions) = api
        .get(&format!(
            "/api/v1/tasks/{}/sessions",
            task["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(sessions["sessions"][0]["state"], "failed", "{sessions}");
    let (status, r) = api.respond(&pending_id, sqlite_and_auth()).await;
    assert_eq!(status, 409, "{r}");
    assert_eq!(api.get(&path).await.1, b, "nothing written");
    server.stop().await;
}

/// The shape Claude Code's ACP adapter sends for AskUserQuestion.
fn claude_form() -> Value {
    json!({
        "message": "Two decisions before I start",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "q0": {
                    "type": "string",
                    "title": "Database",
                    "description": "Which database should we use?",
                    "oneOf": [
                        {"const": "postgresql", "title": "PostgreSQL"},
                        {"const": "sqlite", "title": "SQLite"}
                    ]
                },
                "q0_custom": {"type": "string"},
                "q1": {
                    "type": "array",
                    "title": "Features",
                    "description": "Which features first?",
                    "minItems": 1,
                    "items": {"anyOf": [
                        {"const": "auth", "title": "Auth"},
                        {"const": "search", "title": "Search"}
                    ]}
                }
            },
            "required": ["q0", "q1"]
        }
    })
}

/// Starts a task whose agent runs `script`; returns the server, the API, the task and its
/// session.
async fn started(url: &str, script: &str) -> (TestServer, Api, String, String) {
    let server = TestServer::start(url).await;
    let api = Api::new(&server.base);
    let (task, session) = api.start_task(script).await;
    (server, api, task, session)
}

/// The session's pending bundle, once its transcript row exists.
async fn bundle(api: &Api, session: &str) -> Value {
    let messages = api
        .wait_for_message(session, "the elicitation's question", |m| {
            m["kind"] == "clarification_request"
        })
        .await;
    let row = messages
        .iter()
        .find(|m| m["kind"] == "clarification_request")
        .unwrap();
    let pending_id = row["pending_id"].as_str().unwrap();
    api.get(&format!("/api/v1/clarifications/{pending_id}"))
        .await
        .1
}

/// What the agent said it received, once it said it.
async fn agent_result(api: &Api, session: &str) -> String {
    api.agent_said(session, "Elicitation result:").await
}

async fn e2_e5_a_claude_shaped_form_is_a_bundle_and_its_answer_reaches_the_agent_typed(
    url: String,
) {
    let script = format!("e2e:elicit({})", claude_form());
    let (server, api, task, session) = started(&url, &script).await;
    let b = bundle(&api, &session).await;
    // E2/E3: one bundle, active in the current turn; fields in key order; the companion is
    // q0's "Other" box, not a question of its own.
    assert_eq!(
        (b["status"].as_str(), b["active"].as_bool()),
        (Some("pending"), Some(true))
    );
    assert_eq!(b["context"], "Two decisions before I start");
    assert_eq!(b["source"], "elicitation", "E2: {b}");
    // E2: and so does its transcript row; other rows say nothing.
    let messages = api.messages(&session).await;
    let sources: Vec<(&str, &Value)> = messages
        .iter()
        .map(|m| (m["kind"].as_str().unwrap(), &m["source"]))
        .collect();
    assert!(
        sources.iter().all(|(kind, source)| match *kind {
            "clarification_request" => *source == "elicitation",
            _ => source.is_null(),
        }) && sources
            .iter()
            .any(|(kind, _)| *kind == "clarification_request"),
        "{sources:?}"
    );
    let q = b["questions"].as_array().unwrap();
    assert_eq!(q.len(), 2, "{b}");
    assert_eq!(
        (q[0]["id"].as_str(), q[0]["prompt"].as_str()),
        (Some("q0"), Some("Which database should we use?"))
    );
    assert_eq!(q[0]["options"][1]["label"], "SQLite");
    assert_eq!(q[0]["max_items"], 1);
    assert_eq!(
        (q[1]["multi_select"].as_bool(), q[1]["min_items"].as_u64()),
        (Some(true), Some(1))
    );
    assert_eq!(q[1]["other"], false);
    // E8: it counts like any question.
    let (_, t) = api.get(&format!("/api/v1/tasks/{task}")).await;
    assert_eq!(t["task_pending_action"], "clarification", "{t}");
    let pending_id = b["pending_id"].as_str().unwrap();
    let (status, r) = api
        .respond(
            pending_id,
            json!({ "answers": [
                { "question_id": "q0", "selected_options": [], "custom_text": "DuckDB" },
                { "question_id": "q1", "selected_options": ["auth", "search"] }
            ] }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["claimed"], true);
    // E5: exactly the answered fields, typed by the schema; "Other" in q0_custom.
    assert_eq!(
        agent_result(&api, &session).await,
        r#"Elicitation result: accept {"q0_custom":"DuckDB","q1":["auth","search"]}"#
    );
    server.stop().await;
}

async fn e5_a_skipped_elicitation_is_declined(url: String) {
    let script = format!("e2e:elicit({})", claude_form());
    let (server, api, _, session) = started(&url, &script).await;
    let b = bundle(&api, &session).await;
    let (status, r) = api
        .respond(
            b["pending_id"].as_str().unwrap(),
            json!({ "rejected": true }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        agent_result(&api, &session).await,
        "Elicitation result: decline"
    );
    server.stop().await;
}

async fn e4_a_value_that_breaks_the_form_is_422_and_changes_nothing(url: String) {
    let form = json!({
        "message": "How many workers?",
        "requestedSchema": {
            "type": "object",
            "properties": { "n": { "type": "integer", "minimum": 1, "maximum": 9 } },
            "required": ["n"]
        }
    });
    let (server, api, _, session) = started(&url, &format!("e2e:elicit({form})")).await;
    let b = bundle(&api, &session).await;
    assert_eq!(b["questions"][0]["input"], "integer");
    assert_eq!(b["questions"][0]["prompt"], "How many workers?");
    let pending_id = b["pending_id"].as_str().unwrap();
    for (bad, why) in [
        ("42", "at most 9"),
        ("seven", "whole number"),
        ("2.5", "whole number"),
    ] {
        let (status, r) = api
            .respond(
                pending_id,
                json!({ "answers": [{ "question_id": "n", "selected_options": [], "custom_text": bad }] }),
            )
            .await;
        assert_eq!(status, 422, "{bad}: {r}");
        assert_eq!(r["error"]["code"], "unprocessable", "{r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("\"n\"") && message.contains(why),
            "{message}"
        );
    }
    // A required question left out: 422 too.
    let (status, _) = api.respond(pending_id, json!({ "answers": [] })).await;
    assert_eq!(status, 422);
    // L12: nothing was written; the question is as it was and takes a good answer.
    let after = api
        .get(&format!("/api/v1/clarifications/{pending_id}"))
        .await
        .1;
    assert_eq!(after, b);
    let (status, r) = api
        .respond(
            pending_id,
            json!({ "answers": [{ "question_id": "n", "selected_options": [], "custom_text": "7" }] }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        agent_result(&api, &session).await,
        r#"Elicitation result: accept {"n":7}"#
    );
    server.stop().await;
}

async fn e3_a_schema_that_cannot_be_shown_is_refused_and_nothing_is_written(url: String) {
    let form = json!({
        "message": "Where?",
        "requestedSchema": {
            "type": "object",
            "properties": { "address": { "type": "object", "properties": {} } }
        }
    });
    let (server, api, _, session) = started(&url, &format!("e2e:elicit({form})")).await;
    let result = agent_result(&api, &session).await;
    assert!(
        result.starts_with("Elicitation result: error") && result.contains("address"),
        "the agent's -32602 names the field: {result}"
    );
    api.wait_turns_done(&session, 1).await;
    let messages = api.messages(&session).await;
    assert!(
        !messages
            .iter()
            .any(|m| m["kind"] == "clarification_request"),
        "{messages:#?}"
    );
    // A `system` row says so, before the agent's reaction to the refusal.
    let said: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| {
            (
                m["author"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    let row = said
        .iter()
        .position(|(author, content)| *author == "system" && content.contains("address"));
    let reply = said
        .iter()
        .position(|(_, content)| content.starts_with("Elicitation result: error"));
    assert!(
        matches!((row, reply), (Some(r), Some(a)) if r < a),
        "a system row naming the field, then the agent's reply: {said:?}"
    );
    server.stop().await;
}

async fn e7_a_link_is_answered_done_and_only_http_links_are_shown(url: String) {
    let script = "e2e:elicit-url(\"https://example.org/login?next=%2F\")\ne2e:elicit-url(\"javascript:alert(1)\")";
    let (server, api, _, session) = started(&url, script).await;
    let b = bundle(&api, &session).await;
    let q = &b["questions"][0];
    assert_eq!(
        (q["input"].as_str(), q["link"].as_str()),
        (Some("url"), Some("https://example.org/login?next=%2F"))
    );
    let (status, r) = api
        .respond(
            b["pending_id"].as_str().unwrap(),
            json!({ "answers": [{ "question_id": "url", "selected_options": [] }] }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let messages = api
        .wait_for_message(&session, "the second link's refusal", |m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("Elicitation result: error"))
        })
        .await;
    let results: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .filter(|c| c.starts_with("Elicitation result:"))
        .collect();
    assert_eq!(results[0], "Elicitation result: accept", "{results:?}");
    assert_eq!(
        messages
            .iter()
            .filter(|m| m["kind"] == "clarification_request")
            .count(),
        1,
        "the javascript: link wrote no question"
    );
    server.stop().await;
}

/// The resume prompts (L17) the agent received, as it reported them.
async fn resumes(api: &Api, session: &str) -> Vec<String> {
    api.agent_lines(session)
        .await
        .into_iter()
        .filter(|l| l.starts_with("Thanks, continuing with your answer:"))
        .collect()
}

/// The answer both resume tests give to [`claude_form`].
fn sqlite_and_auth() -> Value {
    json!({ "answers": [
        { "question_id": "q0", "selected_options": ["sqlite"] },
        { "question_id": "q1", "selected_options": ["auth"] }
    ] })
}

async fn e5_an_elicitation_the_agent_withdraws_is_detached_and_its_answer_resumes_it_once(
    url: String,
) {
    // The agent withdraws its question and then asks a permission, which holds its turn open
    // until this test answers it: the question is written in a current turn whatever the
    // order of the two (a turn that ended first would rightly refuse the question, L6).
    let script = format!("e2e:elicit-cancelled({})\ne2e:permission()", claude_form());
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    // Forced: the question's write is held until the agent's withdrawal reached its client
    // (the window in which the agent used to be told "cancelled" before its question was
    // recorded, so its reply came first and was split around the question's row).
    support::hold_nth_until(&server, Point::AskSync, 1, Point::WithdrawnWaits);
    let (task, session) = api.start_task(&script).await;
    // The agent's `$/cancel_request` is answered with the JSON-RPC cancellation error, only
    // once its question is recorded: what the agent says next follows the question.
    let messages = api
        .wait_for_message(&session, "the agent told its request was cancelled", |m| {
            m["content"].as_str().is_some_and(|c| {
                c.starts_with("Elicitation result: error") && c.to_lowercase().contains("cancel")
            })
        })
        .await;
    let kinds: Vec<(&str, &str)> = messages
        .iter()
        .filter(|m| m["author"] == "agent")
        .map(|m| (m["kind"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .take(2)
        .collect();
    assert!(
        kinds.len() == 2
            && kinds[0].0 == "clarification_request"
            && kinds[1].1.starts_with("Elicitation result: error"),
        "the question, then the agent's whole reply: {kinds:?}"
    );
    let pending_id = bundle(&api, &session).await["pending_id"]
        .as_str()
        .unwrap()
        .to_string();
    // L9: detached, not gone: still the session's question and answerable (E6).
    let b = api
        .wait_for(
            &format!("/api/v1/clarifications/{pending_id}"),
            "the withdrawn question to be detached",
            |b| b["detached"] == true,
        )
        .await;
    assert_eq!(
        (b["status"].as_str(), b["active"].as_bool()),
        (Some("pending"), Some(true)),
        "{b}"
    );
    let permission = api.pending_id_of_kind(&session, "permission_request").await;
    let (status, r) = api
        .post(
            &format!("/api/v1/permissions/{permission}/respond"),
            json!({ "option_id": "allow" }),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    api.wait_turns_done(&session, 1).await;
    let (_, t) = api.get(&format!("/api/v1/tasks/{task}")).await;
    assert_eq!(t["task_pending_action"], "clarification", "{t}");
    let (status, r) = api.respond(&pending_id, sqlite_and_auth()).await;
    assert_eq!(status, 200, "{r}");
    api.wait_turns_done(&session, 2).await;
    let resumed = resumes(&api, &session).await;
    assert_eq!(resumed.len(), 1, "resumed exactly once: {resumed:?}");
    assert!(
        resumed[0].contains("Which database should we use?") && resumed[0].contains("sqlite"),
        "the resume carries the question and the answer: {resumed:?}"
    );
    server.stop().await;
}

async fn e6_a_detached_elicitation_answered_after_a_restart_resumes_the_agent_once(url: String) {
    let data = support::temp_dir("elicit-restart");
    let mut first = BinaryServer::spawn(&url, &data, &[], &[]).await;
    let (task, session) = first
        .api
        .start_task(&format!("e2e:elicit({})", claude_form()))
        .await;
    let b = bundle(&first.api, &session).await;
    let pending_id = b["pending_id"].as_str().unwrap().to_string();
    assert_eq!(b["detached"], false, "{b}");
    first.child.kill().await.expect("kill the server");

    let second = BinaryServer::spawn(&url, &data, &[], &[]).await;
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
        (Some(true), Some(true), Some("pending")),
        "{b}"
    );
    // The form survived the restart: the answer is still checked against it (E4).
    let (status, _) = api
        .respond(
            &pending_id,
            json!({ "answers": [{ "question_id": "q0", "selected_options": ["sqlite", "postgresql"] }] }),
        )
        .await;
    assert_eq!(status, 422);
    let (status, r) = api.respond(&pending_id, sqlite_and_auth()).await;
    assert_eq!(status, 200, "{r}");
    api.wait_turns_done(&session, 2).await;
    let resumed = resumes(api, &session).await;
    assert_eq!(resumed.len(), 1, "resumed exactly once: {resumed:?}");
    assert!(
        resumed[0].contains("Which features first?") && resumed[0].contains("auth"),
        "{resumed:?}"
    );
    api.wait_for(
        &format!("/api/v1/tasks/{task}"),
        "the question to clear",
        |t| t["task_pending_action"].is_null(),
    )
    .await;
}

async fn e3_questions_keep_the_order_of_the_schema(url: String) {
    // Not alphabetical: the agent's order is the order the user is asked in.
    let form = json!({
        "message": "Setup",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "workers": { "type": "integer", "description": "How many workers?" },
                "note": { "type": "string", "description": "Anything else?" },
                "approve": { "type": "boolean", "description": "Go ahead?" }
            }
        }
    });
    let (server, api, _, session) = started(&url, &format!("e2e:elicit({form})")).await;
    let b = bundle(&api, &session).await;
    let ids: Vec<&str> = b["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["workers", "note", "approve"], "{b}");
    server.stop().await;
}

/// What the agent said `initialize` told it the client can do.
async fn client_capabilities(api: &Api, profile: Option<&str>) -> Value {
    let (status, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "capabilities", "prompt": "e2e:client-capabilities()", "agent_profile_id": profile }),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    let session = task["primary_session_id"].as_str().unwrap();
    let said = api.agent_said(session, "Client capabilities: ").await;
    let said = said.strip_prefix("Client capabilities: ").unwrap();
    serde_json::from_str(said).unwrap()
}

async fn e1_elicitation_is_advertised_unless_the_profile_turns_it_off(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let caps = client_capabilities(&api, None).await;
    assert_eq!(
        (
            caps["elicitation"]["form"].is_object(),
            caps["elicitation"]["url"].is_object()
        ),
        (true, true),
        "the default advertises form and URL elicitation: {caps}"
    );
    let (status, profile) = api
        .post(
            "/api/v1/agent-profiles",
            json!({ "name": "no-elicitation", "command": env!("CARGO_BIN_EXE_mock_agent"), "elicitation": false }),
        )
        .await;
    assert_eq!(status, 200, "{profile}");
    assert_eq!(profile["elicitation"], false);
    let id = profile["id"].as_str().unwrap().to_string();
    let caps = client_capabilities(&api, Some(&id)).await;
    assert!(caps.get("elicitation").is_none(), "left out: {caps}");
    // A value of the wrong type is refused and changes nothing.
    let (status, _) = api
        .patch(
            &format!("/api/v1/agent-profiles/{id}"),
            json!({ "elicitation": "yes" }),
        )
        .await;
    assert!(status.is_client_error(), "{status}");
    let (_, list) = api.get("/api/v1/agent-profiles").await;
    let stored = list["agent_profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(stored["elicitation"], false, "{stored}");
    // Turned back on by an edit; the bundled profile says it has the capability.
    let (status, edited) = api
        .patch(
            &format!("/api/v1/agent-profiles/{id}"),
            json!({ "elicitation": true }),
        )
        .await;
    assert_eq!(
        (status.as_u16(), &edited["elicitation"]),
        (200, &json!(true))
    );
    let mock = list["agent_profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "mock")
        .unwrap();
    assert_eq!(mock["elicitation"], true, "{mock}");
    let caps = client_capabilities(&api, Some(&id)).await;
    assert!(caps["elicitation"]["form"].is_object(), "{caps}");
    server.stop().await;
}

async fn e7_a_link_the_agent_completes_is_answered_done(url: String) {
    let (server, api, task, session) = started(
        &url,
        "e2e:elicit-url-completed(\"https://example.org/device\")",
    )
    .await;
    // The agent's `elicitation/complete` answers the link as "done", claimed like a click.
    assert_eq!(
        agent_result(&api, &session).await,
        "Elicitation result: accept"
    );
    let b = bundle(&api, &session).await;
    assert_eq!(b["status"], "answered", "{b}");
    assert_eq!(b["response"]["answers"][0]["question_id"], "url", "{b}");
    api.wait_for(
        &format!("/api/v1/tasks/{task}"),
        "the question to clear",
        |t| t["task_pending_action"].is_null(),
    )
    .await;
    // A later skip finds it answered and changes nothing.
    let (_, r) = api
        .respond(
            b["pending_id"].as_str().unwrap(),
            json!({ "rejected": true }),
        )
        .await;
    assert_ne!(r["claimed"], true, "{r}");
    let after = api
        .get(&format!(
            "/api/v1/clarifications/{}",
            b["pending_id"].as_str().unwrap()
        ))
        .await
        .1;
    assert_eq!(after["response"], b["response"], "{after}");
    server.stop().await;
}
