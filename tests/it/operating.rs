//! Running the server as a product: compressed responses, the access log (text and JSON) with
//! the request id an error body names, `--version` and `--help` (`docs/operating.md`).

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// The wasm stand-in of the test site (`support::site_root`).
const WASM: &str = "/pkg/turnstile_bg.wasm";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_and_json_are_compressed_as_the_client_asks() {
    let server = TestServer::start(&sqlite_url()).await;
    let plain = std::fs::read(Path::new(site_root()).join("pkg/turnstile_bg.wasm")).unwrap();
    let fetch = async |path: &str, encoding: Option<&str>| {
        let mut req = client().get(format!("{}{path}", server.base));
        if let Some(e) = encoding {
            req = req.header("accept-encoding", e);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let encoding = r
            .headers()
            .get("content-encoding")
            .map(|v| v.to_str().unwrap().to_string());
        (encoding, r.bytes().await.unwrap().to_vec())
    };
    let (encoding, body) = fetch(WASM, Some("br")).await;
    assert_eq!(encoding.as_deref(), Some("br"));
    assert!(body.len() < plain.len() / 2, "{} bytes", body.len());
    let (encoding, body) = fetch(WASM, Some("gzip")).await;
    assert_eq!(encoding.as_deref(), Some("gzip"));
    let mut unzipped = vec![];
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut unzipped)
        .unwrap();
    assert_eq!(unzipped, plain, "gzip gives the file back");
    let (encoding, body) = fetch(WASM, None).await;
    assert_eq!((encoding, body), (None, plain), "no encoding unless asked");

    // A JSON answer above the threshold is compressed; a tiny one and a page are not.
    let api = Api::new(&server.base);
    for i in 0..40 {
        let (status, _) = api
            .post(
                "/api/v1/tasks",
                serde_json::json!({ "title": format!("task {i}") }),
            )
            .await;
        assert_eq!(status, 200);
    }
    assert_eq!(
        fetch("/api/v1/tasks", Some("gzip")).await.0.as_deref(),
        Some("gzip")
    );
    assert_eq!(
        fetch("/healthz", Some("gzip")).await.0,
        None,
        "tiny bodies as they are"
    );
    assert_eq!(
        fetch("/", Some("gzip, br")).await.0,
        None,
        "streamed pages as they are"
    );
    server.stop().await;
}

/// Waits until the server's log holds a line with every one of `parts`; returns it.
async fn log_line(log: &Path, parts: &[&str]) -> String {
    let mut found = None;
    until("the access-log line", async || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        found = text
            .lines()
            .find(|l| parts.iter().all(|p| l.contains(p)))
            .map(str::to_string);
        found.is_some()
    })
    .await;
    found.unwrap()
}

/// The server binary started with `args`, and the file its log goes to.
async fn logging_server(args: &[&str]) -> (BinaryServer, std::path::PathBuf) {
    let dir = temp_dir("log");
    let (log, terminal) = (dir.join("out.log"), dir.join("err.log"));
    let server = BinaryServer::spawn_on(
        "127.0.0.1",
        &sqlite_url(),
        &dir,
        args,
        &[],
        Some((&log, &terminal)),
    )
    .await;
    (server, log)
}

/// An error answer and the id it names.
async fn failing_request(server: &BinaryServer) -> (reqwest::header::HeaderMap, Value) {
    let r = server
        .api
        .client
        .get(format!(
            "{}/api/v1/tasks/no-such-task?token=s3cr3t-in-query",
            server.api.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    (r.headers().clone(), r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_names_the_request_id_of_its_access_log_line() {
    let (server, log) = logging_server(&[]).await;
    let (headers, body) = failing_request(&server).await;
    let id = body["error"]["request_id"]
        .as_str()
        .expect("the id")
        .to_string();
    assert_eq!(headers["x-request-id"].to_str().unwrap(), id);
    let line = log_line(&log, &[&id, "status=404"]).await;
    assert!(line.contains("method=GET"), "{line}");
    assert!(line.contains("path=/api/v1/tasks/no-such-task"), "{line}");
    assert!(line.contains("latency_ms="), "{line}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("s3cr3t-in-query"),
        "no query string in the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_log_has_one_object_per_line_with_the_request() {
    let (server, log) = logging_server(&["--log-format", "json"]).await;
    let (_, body) = failing_request(&server).await;
    let id = body["error"]["request_id"].as_str().unwrap().to_string();
    log_line(&log, &[&id, "\"status\":404"]).await;
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let access = lines
        .iter()
        .find(|l| l["span"]["request_id"] == id.as_str())
        .expect("the request's line");
    assert_eq!(access["fields"]["status"], 404, "{access}");
    assert_eq!(
        access["span"]["path"], "/api/v1/tasks/no-such-task",
        "{access}"
    );
    assert_eq!(access["target"], "turnstile::access", "{access}");
}

/// Runs the server binary with `args` and returns what it printed on stdout.
fn run_binary(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn version_names_the_package_and_the_revision() {
    let out = run_binary(&["--version"]);
    let line = out.trim();
    let rest = line
        .strip_prefix(&format!("turnstile {} (", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{line}"));
    let revision = rest.strip_suffix(')').unwrap_or_else(|| panic!("{line}"));
    assert!(!revision.is_empty() && !revision.contains(' '), "{line}");
}

#[test]
fn help_groups_the_flags_and_names_their_environment_variables() {
    let out = run_binary(&["--help"]);
    for heading in [
        "Serving:",
        "Storage:",
        "Access:",
        "Agents:",
        "Questions:",
        "Several servers:",
        "Logging:",
    ] {
        assert!(out.contains(heading), "{heading} in {out}");
    }
    for env in ["DATABASE_URL", "TURNSTILE_DATA_DIR", "TURNSTILE_LOG_FORMAT"] {
        assert!(out.contains(&format!("[env: {env}")), "{env} in {out}");
    }
    let (text, json) = (out.find("--log-format").unwrap(), out.find("json").unwrap());
    assert!(json > text, "the formats are listed");
}

/// The value of the sample `name` with `labels` (all of them) in a parsed scrape.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            other => panic!("{name}: {other:?}"),
        })
}

both_http!(metrics_parse_and_hold_latency_histograms_after_a_round_trip);

/// After a mock agent's question is answered, `/metrics` parses as Prometheus text and has
/// histogram buckets for request latency (per route) and for ask → answer, the agent's launch
/// and handshake, and the gauges.
async fn metrics_parse_and_hold_latency_histograms_after_a_round_trip(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let ask = "e2e:ask({\"questions\": [{\"id\": \"db\", \"prompt\": \"Which?\", \"options\": [{\"id\": \"a\", \"label\": \"A\"}, {\"id\": \"b\", \"label\": \"B\"}]}]})";
    let (_, session) = api.start_task(ask).await;
    let pending = api.pending_id(&session).await;
    let (status, body) = api
        .respond(
            &pending,
            serde_json::json!({ "answers": [{ "question_id": "db", "selected_options": ["a"] }] }),
        )
        .await;
    assert_eq!(
        (status.as_u16(), &body["claimed"]),
        (200, &serde_json::json!(true))
    );
    api.wait_turns_done(&session, 1).await;

    let r = client()
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    let content_type = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = r.text().await.unwrap();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .unwrap_or_else(|e| panic!("{e}: {text}"));
    let histogram = |name: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name)
            .map(|s| match &s.value {
                prometheus_parse::Value::Histogram(buckets) => buckets.clone(),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    // Request latency per route: the respond route was timed under its template.
    let respond = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "turnstile_http_request_duration_seconds"
                && s.labels.get("route") == Some("/api/v1/clarifications/:id/respond")
                && s.labels.get("method") == Some("POST")
        })
        .unwrap_or_else(|| panic!("the respond route's histogram in {text}"));
    let prometheus_parse::Value::Histogram(buckets) = &respond.value else {
        panic!("{respond:?}")
    };
    assert!(buckets.len() > 5, "{buckets:?}");
    assert_eq!(buckets.last().unwrap().count, 1.0, "one answer timed");
    let answered = histogram("turnstile_question_answer_seconds");
    assert_eq!(answered.last().unwrap().count, 1.0, "{answered:?}");
    let handshakes = histogram("turnstile_agent_handshake_seconds");
    assert_eq!(handshakes.last().unwrap().count, 1.0, "{handshakes:?}");
    assert_eq!(
        sample(&scrape, "turnstile_agent_launches_total", &[]),
        Some(1.0)
    );
    assert_eq!(
        sample(&scrape, "turnstile_agent_launch_failures_total", &[]),
        Some(0.0)
    );
    assert_eq!(sample(&scrape, "turnstile_agents_running", &[]), Some(1.0));
    assert_eq!(
        sample(&scrape, "turnstile_open_permissions", &[]),
        Some(0.0)
    );
    assert_eq!(sample(&scrape, "turnstile_active_bundles", &[]), Some(0.0));
    assert!(sample(&scrape, "turnstile_http_requests_total", &[]).unwrap() >= 3.0);
    server.stop().await;
}

both_http!(m_p3_prompts_queued_behind_a_running_turn_are_a_gauge);

/// P3 in `/metrics`: a prompt sent while the session's turn runs waits in its queue and counts
/// in `turnstile_queued_prompts` until it starts.
async fn m_p3_prompts_queued_behind_a_running_turn_are_a_gauge(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (_, session) = api.start_task("e2e:delay(60000)").await;
    let queued = |text: String| metric(&text, "turnstile_queued_prompts");
    assert_eq!(queued(server.metrics().await), Some(0.0));
    let (status, body) = api
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            serde_json::json!({ "content": "e2e:message(\"next\")" }),
        )
        .await;
    assert_eq!(
        (status.as_u16(), &body["queued"]),
        (200, &serde_json::json!(true)),
        "{body}"
    );
    assert_eq!(queued(server.metrics().await), Some(1.0));
    // The running turn ends: the queued prompt starts and leaves the queue.
    api.post(
        &format!("/api/v1/sessions/{session}/cancel"),
        serde_json::json!({}),
    )
    .await;
    api.wait_turns_done(&session, 2).await;
    assert_eq!(queued(server.metrics().await), Some(0.0));
    server.stop().await;
}

both_http!(metrics_show_how_busy_the_database_pool_is);

/// `GET /metrics` on PostgreSQL counts the connections taken from the pool, the time callers
/// waited for one and the time they were held, with the pool's size; a write request moves
/// the counters. A SQLite database file has no pool (its writer has lines of its own).
async fn metrics_show_how_busy_the_database_pool_is(url: String) {
    let server = TestServer::start(&url).await;
    let before = server.metrics().await;
    let (status, _) = Api::new(&server.base)
        .post("/api/v1/tasks", serde_json::json!({ "title": "counted" }))
        .await;
    assert_eq!(status, 200);
    let after = server.metrics().await;
    let names = [
        "turnstile_db_pool_acquires_total",
        "turnstile_db_pool_wait_seconds_total",
        "turnstile_db_pool_busy_seconds_total",
        "turnstile_db_pool_connections",
        "turnstile_db_pool_idle_connections",
    ];
    if url.starts_with("sqlite:") {
        for name in names {
            assert!(
                !after.contains(name),
                "a database file has no pool: {after}"
            );
        }
        server.stop().await;
        return;
    }
    let [acquires, waited, busy, size, idle] = names.map(|n| {
        (
            metric(&before, n).unwrap_or_else(|| panic!("{n} missing: {before}")),
            metric(&after, n).unwrap_or_else(|| panic!("{n} missing: {after}")),
        )
    });
    assert!(
        acquires.1 > acquires.0,
        "the insert took a connection: {acquires:?}"
    );
    assert!(busy.1 > busy.0, "and held it for some time: {busy:?}");
    assert!(
        waited.1 >= waited.0,
        "a counter never goes back: {waited:?}"
    );
    assert!(size.1 >= 1.0 && size.1 <= 10.0, "the pool's size: {size:?}");
    assert!(
        idle.1 <= size.1,
        "idle connections are open ones: {idle:?} of {size:?}"
    );
    server.stop().await;
}

/// An agent's stderr is in the server's log at the default level, each line with the session
/// it belongs to (target `turnstile::agent_stderr`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_stderr_is_logged_at_info_with_its_session() {
    let (server, log) = logging_server(&[]).await;
    let api = &server.api;
    let (status, profile) = api
        .post(
            "/api/v1/agent-profiles",
            serde_json::json!({
                "name": "noisy",
                "command": "/bin/sh",
                "args": ["-c", "echo 'stderr mark quokka' >&2; exit 3"],
            }),
        )
        .await;
    assert_eq!(status, 200, "{profile}");
    let (status, task) = api
        .post(
            "/api/v1/tasks",
            serde_json::json!({ "title": "t", "prompt": "hi", "agent_profile_id": profile["id"] }),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    let session = task["primary_session_id"].as_str().unwrap();
    let line = log_line(&log, &["stderr mark quokka"]).await;
    assert!(line.contains("INFO"), "{line}");
    assert!(line.contains("turnstile::agent_stderr"), "{line}");
    assert!(line.contains(session), "{line}");
}
