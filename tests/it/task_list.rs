//! `GET /tasks` pages (docs/api.md): most recently updated first, `limit` and `next_cursor`,
//! a title filter, pending-only and archived lists; only the page is reconciled (P7). Also the
//! transcript's upward paging, server-rendered Markdown, and editing agent profiles with
//! write-only environment values.

use crate::support;

use serde_json::{Value, json};
use support::{Api, TestServer};

both_http!(
    tasks_are_paged_newest_update_first,
    a_page_carries_each_task_as_reading_it_alone_does,
    the_task_list_filters_by_title_pending_and_archived,
    bad_list_parameters_get_clear_errors,
    transcripts_page_upward_and_agent_text_is_sanitized_markdown,
    a6_agent_profiles_are_edited_with_write_only_values,
);

fn ids(page: &Value) -> Vec<String> {
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["title"].as_str().unwrap().to_string())
        .collect()
}

async fn tasks_are_paged_newest_update_first(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    for n in 0..7 {
        api.post("/api/v1/tasks", json!({ "title": format!("t{n}") }))
            .await;
    }
    // Updating one moves it to the front.
    let (_, list) = api.get("/api/v1/tasks").await;
    let t2 = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["title"] == "t2")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = api
        .client
        .patch(server.url(&format!("/api/v1/tasks/{t2}")))
        .json(&json!({ "title": "t2 renamed" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/tasks?limit=3&cursor={c}"),
            None => "/api/v1/tasks?limit=3".to_string(),
        };
        let (status, page) = api.get(&path).await;
        assert_eq!(status, 200, "{page}");
        assert!(page["tasks"].as_array().unwrap().len() <= 3);
        assert!(page["epoch"].is_string());
        seen.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(
        seen,
        ["t2 renamed", "t6", "t5", "t4", "t3", "t1", "t0"],
        "every task once, most recently updated first"
    );
    server.stop().await;
}

/// The page is read as one JSON value per page (B2, decision 0021); a task on it is the task
/// `GET /tasks/{id}` reads row by row: every field, the primary session and the session count,
/// and text JSON must escape.
async fn a_page_carries_each_task_as_reading_it_alone_does(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (with_session, session) = api.start_task("/e2e:clarification").await;
    let odd = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "\"quoted\" back\\slash ünïcødé 🚀 <b>&amp;</b>\ttab" }),
        )
        .await
        .1["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Once the question is pending and its summary projected (the session waits for the
    // answer) nothing changes any more. A read repairs only the pending action (P7): the
    // projector's refresh of the rest can land a gather later (decision 0039).
    api.pending_id(&session).await;
    let page = api
        .wait_for("/api/v1/tasks", "the task with its question", |v| {
            v["tasks"].as_array().is_some_and(|t| {
                t.iter().any(|t| {
                    t["id"] == with_session.as_str()
                        && !t["task_pending_action"].is_null()
                        && t["status_summary"]["activity"] == "idle"
                })
            })
        })
        .await;
    for id in [&with_session, &odd] {
        let listed = page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} is on the page: {page}"))
            .clone();
        let (status, alone) = api.get(&format!("/api/v1/tasks/{id}")).await;
        assert_eq!(status, 200, "{alone}");
        assert_eq!(listed, alone);
    }
    let with_session = api.get(&format!("/api/v1/tasks/{with_session}")).await.1;
    assert_eq!(with_session["session_count"], 1);
    assert!(with_session["primary_session_id"].is_string());
    server.stop().await;
}

async fn the_task_list_filters_by_title_pending_and_archived(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    for title in ["Fix LOGIN bug", "50% off banner", "500 error", "Docs"] {
        api.post("/api/v1/tasks", json!({ "title": title })).await;
    }
    let (_, found) = api.get("/api/v1/tasks?q=login").await;
    assert_eq!(ids(&found), ["Fix LOGIN bug"], "case-insensitive");
    let (_, found) = api.get("/api/v1/tasks?q=50%25").await;
    assert_eq!(ids(&found), ["50% off banner"], "% matches itself");
    // A task with a question shows in the pending list.
    let (task, session) = api.start_task("/e2e:clarification").await;
    api.pending_id(&session).await;
    let pending = api
        .wait_for("/api/v1/tasks?pending=true", "the pending task", |v| {
            v["tasks"].as_array().is_some_and(|t| t.len() == 1)
        })
        .await;
    assert_eq!(pending["tasks"][0]["id"], task.as_str());
    assert_eq!(pending["tasks"][0]["task_pending_action"], "clarification");
    // Archived tasks leave the open list and appear in the archived one.
    let docs = api.get("/api/v1/tasks?q=docs").await.1["tasks"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    api.client
        .patch(server.url(&format!("/api/v1/tasks/{docs}")))
        .json(&json!({ "archived": true }))
        .send()
        .await
        .unwrap();
    let (_, open) = api.get("/api/v1/tasks").await;
    assert!(!ids(&open).contains(&"Docs".to_string()));
    let (_, archived) = api.get("/api/v1/tasks?archived=true").await;
    assert_eq!(ids(&archived), ["Docs"]);
    assert_eq!(archived["tasks"][0]["archived"], true);
    server.stop().await;
}

async fn bad_list_parameters_get_clear_errors(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    for path in [
        "/api/v1/tasks?limit=0",
        "/api/v1/tasks?limit=501",
        "/api/v1/tasks?limit=abc",
        "/api/v1/tasks?cursor=not-ours",
        "/api/v1/tasks?pending=maybe",
        &format!("/api/v1/tasks?q={}", "x".repeat(201)),
    ] {
        let (status, body) = api.get(path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["code"], "bad_request", "{path}");
    }
    server.stop().await;
}

async fn transcripts_page_upward_and_agent_text_is_sanitized_markdown(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let script = [
        "e2e:message(\"## Plan\\n\\n**one** <script>alert(1)</script> [x](javascript:alert(1))\")",
    ]
    .join("\n");
    let (_, session) = api.start_task(&script).await;
    api.wait_turns_done(&session, 1).await;
    for n in 0..4 {
        api.post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": format!("e2e:message(\"reply {n}\")") }),
        )
        .await;
        api.wait_turns_done(&session, n + 2).await;
    }
    let all = api.messages(&session).await;
    assert_eq!(all.len(), 10, "5 prompts, 5 replies");
    let agent = &all[1];
    let html = agent["html"].as_str().expect("agent text carries html");
    assert!(
        html.contains("<h2>Plan</h2>") && html.contains("<strong>one</strong>"),
        "{html}"
    );
    assert!(
        !html.contains("<script") && !html.contains("javascript:"),
        "{html}"
    );
    assert!(all[0].get("html").is_none(), "user text stays text");
    // The page before the last four messages, oldest first.
    let before = all[6]["id"].as_str().unwrap();
    let (_, page) = api
        .get(&format!(
            "/api/v1/sessions/{session}/messages?before={before}&limit=3"
        ))
        .await;
    let got: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = all[3..6]
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, want);
    server.stop().await;
}

async fn a6_agent_profiles_are_edited_with_write_only_values(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (_, p) = api
        .post(
            "/api/v1/agent-profiles",
            json!({ "name": "claude", "command": "/usr/bin/claude-acp", "env": { "KEY": "secret-1", "MODE": "fast" } }),
        )
        .await;
    let id = p["id"].as_str().unwrap().to_string();
    let patch = |body: Value| {
        let (client, url) = (
            api.client.clone(),
            server.url(&format!("/api/v1/agent-profiles/{id}")),
        );
        async move {
            let r = client.patch(url).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let stored = async || {
        server
            .state
            .repo
            .get_agent_profile(&id)
            .await
            .unwrap()
            .unwrap()
            .env_values()
    };
    // A new value for one name, one removed, the rest kept without ever being sent back (the
    // same command sent again is no change of program).
    let (status, edited) =
        patch(json!({ "command": "/usr/bin/claude-acp", "env": { "MODE": null, "REGION": "eu" } }))
            .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["env"], json!(["KEY", "REGION"]));
    assert!(!edited.to_string().contains("secret-1"));
    assert_eq!(
        stored().await.get("KEY").map(String::as_str),
        Some("secret-1"),
        "kept"
    );
    // A6: a new command drops the stored values, but for those the same request sets again:
    // whoever cannot read them cannot hand them to a program of their choice.
    let (status, edited) = patch(
        json!({ "command": "/bin/sh", "args": ["-c", "env >&2"], "env": { "REGION": "us" } }),
    )
    .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["env"], json!(["REGION"]));
    assert_eq!(
        stored().await,
        [("REGION".to_string(), "us".to_string())].into()
    );
    // New args alone do the same.
    let (status, _) = patch(json!({ "env": { "KEY": "secret-2" } })).await;
    assert_eq!(status, 200);
    let (status, edited) = patch(json!({ "args": ["-c", "cat"] })).await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["env"], json!([]));
    assert!(stored().await.is_empty());
    // Bad edits change nothing.
    let (status, _) = patch(json!({ "env": { "BAD-NAME": "x" } })).await;
    assert_eq!(status, 400);
    let (status, _) = patch(json!({ "name": "mock" })).await;
    assert_eq!(status, 409);
    let mock = api.get("/api/v1/agent-profiles").await.1["agent_profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "mock")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = api
        .client
        .patch(server.url(&format!("/api/v1/agent-profiles/{mock}")))
        .json(&json!({ "command": "/bin/sh" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409, "the bundled mock agent stays as it is");
    let (status, _) = (
        api.client
            .patch(server.url("/api/v1/agent-profiles/nope"))
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .status(),
        (),
    );
    assert_eq!(status, 404);
    server.stop().await;
}
