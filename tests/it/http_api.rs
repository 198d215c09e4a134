//! The REST contract over real HTTP (spec/api.md): health, tasks, the error body, bad input.

use crate::support;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{TestServer, metric};

both_http!(
    healthz_reports_ok_after_start_up,
    tasks_are_created_listed_and_read,
    bad_task_input_gets_a_clear_error_and_writes_nothing,
    p9_epoch_grows_across_restarts,
    metrics_show_how_busy_sqlites_write_connection_is,
);

/// I8 with group commit (decision 0024): on SQLite a commit does not wait for the disk; a
/// request that wrote is answered only after a sync that covers its commits. Nothing else
/// syncs here (no agent runs), so without that the counts would show the task's insert as
/// not yet on disk when its 201 arrives.
#[tokio::test]
async fn i8_a_write_is_acknowledged_only_once_it_is_on_disk() {
    let server = TestServer::start(&support::sqlite_url()).await;
    let (before, _) = server
        .state
        .repo
        .commit_counts()
        .expect("SQLite counts commits");
    let r = support::client()
        .post(server.url("/api/v1/tasks"))
        .json(&json!({ "title": "durable" }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let (committed, synced) = server.state.repo.commit_counts().unwrap();
    assert!(committed > before, "the insert was counted");
    assert!(
        synced > before,
        "answered before the insert was on disk: {before} then {committed}/{synced}"
    );
    server.stop().await;
}

/// `GET /metrics` on SQLite counts the uses of the one write connection and the time it was
/// taken (how close writing is to queueing, B3); a write request moves both. PostgreSQL has a
/// pool of writers: no such lines.
async fn metrics_show_how_busy_sqlites_write_connection_is(url: String) {
    let server = TestServer::start(&url).await;
    let client = support::client();
    let before = server.metrics().await;
    let r = client
        .post(server.url("/api/v1/tasks"))
        .json(&json!({ "title": "counted" }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let after = server.metrics().await;
    let names = [
        "turnstile_sqlite_writer_uses_total",
        "turnstile_sqlite_writer_wait_seconds_total",
        "turnstile_sqlite_writer_busy_seconds_total",
    ];
    if !url.starts_with("sqlite:") {
        for name in names {
            assert!(
                !after.contains(name),
                "PostgreSQL has no one writer: {after}"
            );
        }
        server.stop().await;
        return;
    }
    let [uses, waited, busy] = names.map(|n| {
        (
            metric(&before, n).unwrap_or_else(|| panic!("{n} missing: {before}")),
            metric(&after, n).unwrap_or_else(|| panic!("{n} missing: {after}")),
        )
    });
    assert!(
        uses.1 > uses.0,
        "the task's insert took the writer: {uses:?}"
    );
    assert!(busy.1 > busy.0, "and held it for some time: {busy:?}");
    assert!(
        waited.1 >= waited.0,
        "a counter never goes back: {waited:?}"
    );
    server.stop().await;
}

async fn get_json(client: &reqwest::Client, url: &str) -> (StatusCode, Value) {
    let r = client.get(url).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

fn assert_error(body: &Value, code: &str) {
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

async fn healthz_reports_ok_after_start_up(url: String) {
    let server = TestServer::start(&url).await;
    let (status, body) = get_json(&support::client(), &server.url("/healthz")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({ "status": "ok" }));
    server.stop().await;
}

async fn tasks_are_created_listed_and_read(url: String) {
    let server = TestServer::start(&url).await;
    let client = support::client();
    let r = client
        .post(server.url("/api/v1/tasks"))
        .json(&json!({ "title": "Write the README", "description": "two commands", "unknown": 1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let task: Value = r.json().await.unwrap();
    assert_eq!(task["title"], "Write the README");
    assert_eq!(task["description"], "two commands");
    assert_eq!(task["session_count"], 0);
    assert_eq!(task["task_pending_action"], Value::Null);
    // Reads reconcile (P7): a new task gets its summary built.
    assert_eq!(task["status_summary"]["pending_action"], Value::Null);
    assert_eq!(task["status_summary"]["revision"], 1);
    assert_eq!(task["status_summary_invalidated"], false);
    let (_, workflows) = get_json(&client, &server.url("/api/v1/workflows")).await;
    let default = &workflows["workflows"][0];
    assert_eq!(task["workflow_id"], default["id"]);
    assert_eq!(
        task["step_id"], default["steps"][0]["id"],
        "a new task starts on the first step"
    );
    assert!(task["created_at"].as_str().unwrap().ends_with('Z'));

    let (status, list) = get_json(&client, &server.url("/api/v1/tasks")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(list["tasks"][0]["id"], task["id"]);
    assert_eq!(list["epoch"], server.state.epoch.to_string());

    let (status, one) = get_json(
        &client,
        &server.url(&format!("/api/v1/tasks/{}", task["id"].as_str().unwrap())),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one, task);

    let (_, profiles) = get_json(&client, &server.url("/api/v1/agent-profiles")).await;
    assert!(
        profiles["agent_profiles"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "mock")
    );
    server.stop().await;
}

async fn bad_task_input_gets_a_clear_error_and_writes_nothing(url: String) {
    let server = TestServer::start(&url).await;
    let client = support::client();
    let post = |body: reqwest::Body| {
        client
            .post(server.url("/api/v1/tasks"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let cases: Vec<(&str, String, StatusCode, &str)> = vec![
        (
            "empty title",
            json!({ "title": "  " }).to_string(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "wrong type",
            json!({ "title": 5 }).to_string(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "missing title",
            json!({}).to_string(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "not json",
            "{title".to_string(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "unknown step",
            json!({ "title": "x", "step_id": "nope" }).to_string(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "unknown workflow",
            json!({ "title": "x", "workflow_id": "nope" }).to_string(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "over 1 MiB",
            json!({ "title": "x", "description": "d".repeat(1 << 20) }).to_string(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
    ];
    for (name, body, status, code) in cases {
        let r = post(body.into()).await.unwrap();
        assert_eq!(r.status(), status, "{name}");
        assert_error(&r.json().await.unwrap(), code);
    }
    let (_, list) = get_json(&client, &server.url("/api/v1/tasks")).await;
    assert_eq!(list["tasks"], json!([]), "nothing was written");

    let (status, body) = get_json(&client, &server.url("/api/v1/tasks/no-such-task")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error(&body, "not_found");
    let (status, body) = get_json(&client, &server.url("/api/v1/no-such-endpoint")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error(&body, "not_found");
    server.stop().await;
}

async fn p9_epoch_grows_across_restarts(url: String) {
    let first = TestServer::start(&url).await;
    let e1 = first.state.epoch;
    first.stop().await;
    let second = TestServer::start(&url).await;
    let (_, list) = get_json(&support::client(), &second.url("/api/v1/tasks")).await;
    let e2: i64 = list["epoch"].as_str().unwrap().parse().unwrap();
    assert!(e2 > e1, "epoch {e2} after restart must exceed {e1}");
    second.stop().await;
}

both_http!(tasks_are_patched_and_deleted);

async fn tasks_are_patched_and_deleted(url: String) {
    let server = TestServer::start(&url).await;
    let api = support::Api::new(&server.base);
    let (_, task) = api
        .post("/api/v1/tasks", json!({ "title": "before" }))
        .await;
    let id = task["id"].as_str().unwrap().to_string();
    let (_, wf) = api.get("/api/v1/workflows").await;
    let second = wf["workflows"][0]["steps"][1]["id"].clone();
    let r = api
        .client
        .patch(server.url(&format!("/api/v1/tasks/{id}")))
        .json(&json!({ "title": "after", "step_id": second, "archived": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let t: Value = r.json().await.unwrap();
    assert_eq!(
        (t["title"].as_str(), t["archived"].as_bool()),
        (Some("after"), Some(true))
    );
    assert_eq!(t["step_id"], second);
    for bad in [
        json!({ "title": " " }),
        json!({ "step_id": "nope" }),
        json!({ "archived": "yes" }),
    ] {
        let r = api
            .client
            .patch(server.url(&format!("/api/v1/tasks/{id}")))
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    assert_eq!(
        api.get(&format!("/api/v1/tasks/{id}")).await.1["title"],
        "after",
        "nothing written"
    );
    // Deleting a task stops its agents and removes everything it owns.
    let (_, busy) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "busy", "prompt": "e2e:delay(60000)" }),
        )
        .await;
    let busy_id = busy["id"].as_str().unwrap().to_string();
    let session = busy["primary_session_id"].as_str().unwrap().to_string();
    for task in [&id, &busy_id] {
        assert_eq!(
            api.delete(&format!("/api/v1/tasks/{task}")).await,
            StatusCode::NO_CONTENT
        );
        assert_eq!(
            api.get(&format!("/api/v1/tasks/{task}")).await.0,
            StatusCode::NOT_FOUND
        );
    }
    assert_eq!(
        api.get(&format!("/api/v1/sessions/{session}/messages"))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.delete("/api/v1/tasks/nope").await,
        StatusCode::NOT_FOUND
    );
    server.stop().await;
}

both_http!(
    unknown_pages_render_without_panicking,
    pages_render_while_other_servers_start
);

/// Starting a server must not stall another one's pages: the route list is generated once per
/// process, because generating it suppresses resource loads process-wide and a page whose
/// resource first polled in that window never finished (leptos-rs/leptos#4773; it hung this
/// file about one run in 25 while other tests started their servers).
async fn pages_render_while_other_servers_start(url: String) {
    let first = turnstile::api::route_list();
    let server = TestServer::start(&url).await;
    let page = |n: usize| {
        let u = server.url(if n.is_multiple_of(2) {
            "/"
        } else {
            "/no/such/page"
        });
        async move {
            tokio::time::timeout(std::time::Duration::from_secs(20), async {
                support::get(u).await.text().await.unwrap()
            })
            .await
            .expect("a page stalled while another server started")
        }
    };
    let starts = (0..4).map(|_| {
        let url = url.clone();
        tokio::spawn(async move { TestServer::start(&url).await.stop().await })
    });
    let pages = futures::future::join_all((0..8).map(page));
    let (_, pages) = tokio::join!(futures::future::join_all(starts), pages);
    assert!(pages.iter().all(|p| p.contains("</html>")));
    assert!(std::ptr::eq(first, turnstile::api::route_list()));
    server.stop().await;
}

async fn unknown_pages_render_without_panicking(url: String) {
    let server = TestServer::start(&url).await;
    let r = support::get(server.url("/no/such/page")).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = support::get(server.url("/")).await;
    assert_eq!(r.status(), StatusCode::OK);
    server.stop().await;
}

both_http!(a_full_prompt_queue_refuses_one_more_with_429_and_keeps_what_it_has);

/// Bounds (spec "Server process"): a session queues at most `MAX_QUEUED_PROMPTS` prompts
/// behind its open turn; one more gets 429 with the JSON error body, and the queue keeps
/// exactly what it had (the summary's `queued_prompt_count`, P3).
async fn a_full_prompt_queue_refuses_one_more_with_429_and_keeps_what_it_has(url: String) {
    use turnstile::server::orchestrator::worker::MAX_QUEUED_PROMPTS;
    let server = TestServer::start(&url).await;
    let api = support::Api::new(&server.base);
    let (task, session) = api.start_task("e2e:delay(60000)").await;
    api.wait_for(&format!("/api/v1/tasks/{task}/sessions"), "running", |v| {
        v["sessions"][0]["state"] == "running"
    })
    .await;
    let prompt = format!("/api/v1/sessions/{session}/prompt");
    for n in 1..=MAX_QUEUED_PROMPTS {
        let (status, body) = api
            .post(&prompt, json!({ "content": format!("p{n}") }))
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["queued"], true, "{body}");
    }
    let (status, body) = api
        .post(&prompt, json!({ "content": "one too many" }))
        .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "too_many_requests", "{body}");
    api.wait_for(&format!("/api/v1/tasks/{task}"), "the full queue", |t| {
        t["status_summary"]["queued_prompt_count"] == MAX_QUEUED_PROMPTS
    })
    .await;
    server.stop().await;
}

both_http!(a_chunked_body_over_the_limit_gets_413_with_the_json_error_and_writes_nothing);

/// Bounds: a body that declares no length (chunked) is cut at the 1 MiB limit as it streams
/// in: 413 with the JSON error body, and nothing is written.
async fn a_chunked_body_over_the_limit_gets_413_with_the_json_error_and_writes_nothing(
    url: String,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start(&url).await;
    let before = support::table_counts(&url).await;
    let addr = server.base.trim_start_matches("http://").to_string();
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut read, mut write) = tcp.into_split();
    let head = format!(
        "POST /api/v1/tasks HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Authorization: {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        support::TEST_BEARER
    );
    // 2 MiB in 64 KiB chunks, sent while the answer is read (the server answers and closes
    // before all of it is sent).
    let sender = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        let title = format!("{{\"title\": \"{}", "x".repeat(64 * 1024));
        let chunk = format!("{:x}\r\n{title}\r\n", title.len());
        for _ in 0..32 {
            write.write_all(chunk.as_bytes()).await?;
        }
        write.write_all(b"0\r\n\r\n").await
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("}}") {
        match read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    sender.abort();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"payload_too_large\""), "{answer}");
    assert_eq!(support::table_counts(&url).await, before, "nothing written");
    server.stop().await;
}
