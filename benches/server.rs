//! B3, B4 and B6 (docs/performance.md) against the real release server process on SQLite (the
//! embedded default), each beside its same-run baseline; B3 also on PostgreSQL when
//! `TEST_POSTGRES_URL` is set (several write connections instead of SQLite's one).
//!
//! - B6: resident memory (VmRSS) of the server after start-up, one task list and one page,
//!   with N tasks × 3 sessions, against the same with an empty database; while B4's clients
//!   are connected; and after 10,000 more round trips (1,000 with `--quick`) against after B3's.
//! - B3: 50 agents (the mock, as processes) ask over MCP; a WebSocket listener answers each
//!   question over REST; a round trip ends when the agent has the answer and ends its turn.
//!   Against one agent doing the same.
//! - B4: K WebSocket clients; a task is created whose agent asks at once (the mock's
//!   `/e2e:clarification`); the time from the request to each client's
//!   `task.status_summary.updated` with `clarification`, against one client.
//!
//! Run:
//!
//!     cargo bench --bench server                # N = 10,000 tasks, K = 500 clients
//!     cargo bench --bench server -- --quick     # N = 2,000
//!     … -- --json target/bench/server.json
//!     … -- --b3-only                        # B3 with the agents in process, nothing else
//!     … -- --b3-processes                   # B3 with the agents as processes (their CPU too)

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;
use turnstile::server::repo;

const CLIENTS: usize = 500;

/// B3's capacity target: round trips per second with every agent always asking.
const CAPACITY: f64 = 500.0;
/// B3's latency target holds with answers paced to this many round trips per second.
const PACED: f64 = 250.0;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// CPU time (user + system) process `pid` has used so far (`"self"` for this one).
fn cpu_time(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is the 3rd field, utime
    // and stime the 14th and 15th, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// CPU time (user + system) of the living children of process `parent`: the agents of a
/// server that runs them as processes.
fn children_cpu(parent: &str) -> Duration {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    let mut total = Duration::ZERO;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        // After the command name: state, then the parent's pid.
        if rest.split_whitespace().nth(1) == Some(parent) {
            total += cpu_time(pid);
        }
    }
    total
}

/// VmRSS of process `pid` in KB (`None` once it is gone).
fn rss_kb(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

struct Server {
    child: Child,
    base: String,
}

/// The access token of the servers under test (what users run: a token on loopback too).
const TOKEN: &str = "bench-token-0123456789abcdef";

/// An HTTP client that sends [`TOKEN`].
fn client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {TOKEN}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// A socket to `ws` (`ws://…/ws`) with [`TOKEN`]: (socket, handshake response) as
/// `connect_async` gives them.
async fn ws_connect(
    ws: &str,
) -> (
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    tokio_tungstenite::tungstenite::handshake::client::Response,
) {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = ws.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    tokio_tungstenite::connect_async(request).await.unwrap()
}

impl Server {
    /// The server with the mock agent as processes (one per session, as a real agent runs).
    async fn start(database_url: &str) -> Server {
        Server::start_with(database_url, &[]).await
    }

    async fn start_with(database_url: &str, args: &[&str]) -> Server {
        let port = free_port();
        let dir = common::scratch_dir().join(format!("srv-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
            .arg("--database-url")
            .arg(database_url)
            .arg("--data-dir")
            .arg(&dir)
            .arg("--addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--mock-agent")
            .arg(env!("CARGO_BIN_EXE_mock_agent"))
            .arg("--max-agents")
            .arg("64")
            .args(args)
            .env("RUST_LOG", "warn")
            .env("ACCESS_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let client = client();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = client.get(format!("{}/healthz", server.base)).send().await
                && r.status() == 200
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not become healthy"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server
    }

    fn rss_kb(&self) -> u64 {
        rss_kb(self.child.id().unwrap()).unwrap()
    }

    /// One task list and one page, as a user opening the app would.
    async fn touch(&self) {
        let client = client();
        for path in ["/api/v1/tasks", "/"] {
            let r = client
                .get(format!("{}{path}", self.base))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{path}");
            r.bytes().await.unwrap();
        }
    }
}

/// Connects `k` clients, creates a task whose agent asks, and returns each client's delays to
/// its `clarification` summary, sorted: from the server's publication (the frame's `ts`, same
/// machine and clock) and from the request that created the task.
async fn fan_out(server: &Server, k: usize) -> (Vec<Duration>, Vec<Duration>) {
    let ws = server.base.replacen("http://", "ws://", 1) + "/ws";
    let mut sockets = Vec::with_capacity(k);
    for _ in 0..k {
        let (mut socket, _) = ws_connect(&ws).await;
        // The hello `resync` first: from here the client receives every notification.
        loop {
            if let Some(Ok(Message::Text(t))) = socket.next().await
                && t.contains("\"resync\"")
            {
                break;
            }
        }
        sockets.push(socket);
    }
    let title = format!("fan-out {}", uuid::Uuid::now_v7());
    let (task_tx, task_rx) = tokio::sync::watch::channel(String::new());
    let start = Instant::now();
    let waiters: Vec<_> = sockets
        .into_iter()
        .map(|mut socket| {
            let mut task_rx = task_rx.clone();
            tokio::spawn(async move {
                let mut seen: Vec<(Value, Duration)> = Vec::new();
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                loop {
                    tokio::select! {
                        frame = tokio::time::timeout_at(deadline, socket.next()) => {
                            let frame = frame.expect("a client waited 60 s for the question");
                            // Parse only candidate frames: the 500 clients share the
                            // server's 2 cores, and their own work must not be measured.
                            if let Some(Ok(Message::Text(t))) = frame
                                && t.contains("task.status_summary.updated")
                                && t.contains("clarification")
                            {
                                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                                if v["action"] == "task.status_summary.updated"
                                    && v["payload"]["status_summary"]["pending_action"] == "clarification"
                                {
                                    let sent = chrono::DateTime::parse_from_rfc3339(v["ts"].as_str().unwrap()).unwrap();
                                    let since = (chrono::Utc::now() - sent.with_timezone(&chrono::Utc)).to_std().unwrap_or_default();
                                    seen.push((v["payload"]["task_id"].clone(), since));
                                }
                            }
                        }
                        _ = task_rx.changed() => {}
                    }
                    let task = task_rx.borrow().clone();
                    if !task.is_empty()
                        && let Some((_, since)) = seen.iter().find(|(id, _)| *id == task.as_str())
                    {
                        let elapsed = start.elapsed();
                        let _ = socket.close(None).await;
                        return (*since, elapsed);
                    }
                }
            })
        })
        .collect();
    let client = client();
    let created: Value = client
        .post(format!("{}/api/v1/tasks", server.base))
        .json(&json!({ "title": title, "prompt": "/e2e:clarification" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    task_tx
        .send(created["id"].as_str().unwrap().to_string())
        .unwrap();
    let (mut published, mut requested) = (Vec::with_capacity(k), Vec::with_capacity(k));
    for w in waiters {
        let (p, r) = w.await.unwrap();
        published.push(p);
        requested.push(r);
    }
    published.sort();
    requested.sort();
    (published, requested)
}

/// The question of B3's round trips: one question, two options.
const ASK: &str = r#"e2e:ask({"questions": [{"id": "q", "prompt": "Go on?", "options": [{"id": "y", "label": "Yes"}, {"id": "n", "label": "No"}]}]})"#;

/// Which sessions a run of round trips uses.
enum Sessions {
    /// This many new tasks whose first prompt asks.
    New(usize),
    /// These sessions again (their turns are done): each is sent the asking prompt.
    Again(Vec<String>),
}

/// The next `clarification.requested` or `session.turn.completed` notification, parsed.
async fn next_round_trip_event<S, E>(socket: &mut S, deadline: tokio::time::Instant) -> Value
where
    S: futures::Stream<Item = Result<Message, E>> + Unpin,
{
    loop {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("B3 did not finish in 300 s");
        let Some(Ok(Message::Text(t))) = frame else {
            continue;
        };
        if t.contains("clarification.requested") || t.contains("session.turn.completed") {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

/// Answers the question `pending_id` ("y") over REST.
async fn answer(client: &reqwest::Client, base: &str, pending_id: &str) {
    let r = client
        .post(format!("{base}/api/v1/clarifications/{pending_id}/respond"))
        .json(&json!({ "answers": [{ "question_id": "q", "selected_options": ["y"] }] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// Answers the question `pending_id` over REST, in the background.
fn answer_in_background(client: &reqwest::Client, base: &str, pending_id: &str) {
    let (client, base, pending_id) = (client.clone(), base.to_string(), pending_id.to_string());
    tokio::spawn(async move { answer(&client, &base, &pending_id).await });
}

/// B3: agents each ask, are answered over REST and finish their turn, `rounds` times. Returns
/// round trips per second (first question to last completion), each round trip's time from
/// the question's notification to its turn's completion, sorted, and the sessions used.
async fn round_trips(
    server: &Server,
    start: Sessions,
    rounds: usize,
) -> (f64, Vec<Duration>, Vec<String>) {
    use std::collections::HashMap;
    let ws = server.base.replacen("http://", "ws://", 1) + "/ws";
    let (mut socket, _) = ws_connect(&ws).await;
    let client = client();
    let mut mine: HashMap<String, usize> = HashMap::new(); // session → rounds done
    match start {
        Sessions::New(count) => {
            for n in 0..count {
                let created: Value = client
                    .post(format!("{}/api/v1/tasks", server.base))
                    .json(&json!({ "title": format!("round trips {n}"), "prompt": ASK }))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                mine.insert(
                    created["primary_session_id"].as_str().unwrap().to_string(),
                    0,
                );
            }
        }
        Sessions::Again(sessions) => {
            for session in sessions {
                let r = client
                    .post(format!("{}/api/v1/sessions/{session}/prompt", server.base))
                    .json(&json!({ "content": ASK }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                mine.insert(session, 0);
            }
        }
    }
    let sessions = mine.len();
    let mut asked: HashMap<String, Instant> = HashMap::new();
    let mut times = Vec::with_capacity(sessions * rounds);
    let mut first: Option<Instant> = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while times.len() < sessions * rounds {
        let v = next_round_trip_event(&mut socket, deadline).await;
        match v["action"].as_str() {
            Some("clarification.requested") => {
                let session = v["payload"]["bundle"]["session_id"]
                    .as_str()
                    .unwrap()
                    .to_string();
                if !mine.contains_key(&session) {
                    continue;
                }
                asked.insert(session, Instant::now());
                first.get_or_insert_with(Instant::now);
                answer_in_background(
                    &client,
                    &server.base,
                    v["payload"]["bundle"]["pending_id"].as_str().unwrap(),
                );
            }
            Some("session.turn.completed") => {
                let session = v["payload"]["turn"]["session_id"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let Some(at) = asked.remove(&session) else {
                    continue;
                };
                times.push(at.elapsed());
                let done = mine.get_mut(&session).unwrap();
                *done += 1;
                if *done < rounds {
                    let url = format!("{}/api/v1/sessions/{session}/prompt", server.base);
                    let client = client.clone();
                    tokio::spawn(async move {
                        let r = client
                            .post(url)
                            .json(&json!({ "content": ASK }))
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(r.status(), 200);
                    });
                }
            }
            _ => {}
        }
    }
    let rate = times.len() as f64 / first.unwrap().elapsed().as_secs_f64();
    times.sort();
    (rate, times, mine.into_keys().collect())
}

/// How B3's listener answers each question: at once (every agent always has a question in
/// flight: the capacity) or paced to this many answers per second across all sessions (the
/// round trip's latency at that load; the wait for a slot is the user's, not the server's).
#[derive(Clone, Copy)]
enum Answers {
    AtOnce,
    Paced(f64),
}

/// B3 as docs/performance.md defines it: ask (MCP) → answer (REST) → the agent has the answer.
/// Each session's one prompt is a script of `asks` questions in one turn (script lines run in
/// order, spec/api.md), so the agent's next question is the sign that it received the answer:
/// a round trip is the time from sending an answer to the next question of the same session
/// (the answer reaching the agent, the agent asking, the question reaching the listener).
/// Returns round trips per second (first question to last), the sorted times and the CPU
/// each round trip cost the server and this listener.
async fn asks_in_one_turn(
    server: &Server,
    sessions: usize,
    asks: usize,
    answers: Answers,
) -> AskRun {
    use std::collections::HashMap;
    let ws = server.base.replacen("http://", "ws://", 1) + "/ws";
    let (mut socket, _) = ws_connect(&ws).await;
    let client = client();
    let script: Vec<String> = (0..asks)
        .map(|i| {
            format!(
                r#"e2e:ask({{"questions": [{{"id": "q", "prompt": "Step {i}?", "options": [{{"id": "y", "label": "Yes"}}, {{"id": "n", "label": "No"}}]}}]}})"#
            )
        })
        .collect();
    // Session → when its last answer was sent.
    let mut answered: HashMap<String, Option<Instant>> = HashMap::new();
    for n in 0..sessions {
        let created: Value = client
            .post(format!("{}/api/v1/tasks", server.base))
            .json(&json!({ "title": format!("asks {n}"), "prompt": script.join("\n") }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answered.insert(created["primary_session_id"].as_str().unwrap().into(), None);
    }
    let mut times = Vec::with_capacity(sessions * asks);
    let server_pid = server.child.id().unwrap().to_string();
    let cpu_before = (
        cpu_time(&server_pid),
        cpu_time("self"),
        children_cpu(&server_pid),
    );
    let counters_before = (server_counters(&client, &server.base).await, Instant::now());
    let (mut first, mut end) = (None::<Instant>, Instant::now());
    let mut next_slot = Instant::now();
    let mut done = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while done < sessions {
        let v = next_round_trip_event(&mut socket, deadline).await;
        if v["action"] == "session.turn.completed" {
            if answered.contains_key(v["payload"]["turn"]["session_id"].as_str().unwrap_or("")) {
                done += 1;
            }
            continue;
        }
        let bundle = &v["payload"]["bundle"];
        let Some(previous) = answered.get_mut(bundle["session_id"].as_str().unwrap()) else {
            continue;
        };
        let now = Instant::now();
        let at = match answers {
            Answers::AtOnce => now,
            Answers::Paced(per_second) => {
                let at = next_slot.max(now);
                next_slot = at + Duration::from_secs_f64(1.0 / per_second);
                at
            }
        };
        if let Some(sent) = previous.replace(at) {
            times.push(now - sent);
            end = now;
        }
        first.get_or_insert(now);
        let (client, base) = (client.clone(), server.base.clone());
        let pending_id = bundle["pending_id"].as_str().unwrap().to_string();
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            answer(&client, &base, &pending_id).await;
        });
    }
    assert_eq!(
        times.len(),
        sessions * (asks - 1),
        "every answer reached its agent"
    );
    let round_trips = times.len() as u32;
    let server_cpu = (cpu_time(&server_pid) - cpu_before.0) / round_trips;
    let client_cpu = (cpu_time("self") - cpu_before.1) / round_trips;
    let agents_cpu = children_cpu(&server_pid).saturating_sub(cpu_before.2) / round_trips;
    let counters = server_counters(&client, &server.base).await;
    let writer = match (
        counters_before.0.and_then(|c| c.writer),
        counters.and_then(|c| c.writer),
    ) {
        (Some((uses0, busy0)), Some((uses1, busy1))) => Some(WriterUse {
            uses_per_round_trip: (uses1 - uses0) / f64::from(round_trips),
            busy: (busy1 - busy0) / counters_before.1.elapsed().as_secs_f64(),
        }),
        _ => None,
    };
    let per_round_trip = |counter: fn(&Counters) -> f64| match (counters_before.0, counters) {
        (Some(c0), Some(c1)) => (counter(&c1) - counter(&c0)) / f64::from(round_trips),
        _ => f64::NAN,
    };
    let refreshes = per_round_trip(|c| c.refreshes);
    let summary_writes = per_round_trip(|c| c.writes);
    let rate = times.len() as f64 / (end - first.unwrap()).as_secs_f64();
    times.sort();
    AskRun {
        rate,
        times,
        server_cpu,
        client_cpu,
        agents_cpu,
        writer,
        refreshes,
        summary_writes,
    }
}

/// SQLite's write connection over a run (from `GET /metrics`).
#[derive(Clone, Copy)]
struct WriterUse {
    /// Times it was taken per round trip.
    uses_per_round_trip: f64,
    /// The share of the run's time it was taken (writes queue as this nears 1).
    busy: f64,
}

/// The server's counters a B3 run reports, from `GET /metrics`.
#[derive(Clone, Copy)]
struct Counters {
    /// `(uses, busy seconds)` of SQLite's write connection so far; `None` on PostgreSQL.
    writer: Option<(f64, f64)>,
    /// Summary refresh attempts so far (each one read of the pending state, P4).
    refreshes: f64,
    /// Summaries written so far (a refresh that found a change).
    writes: f64,
}

async fn server_counters(client: &reqwest::Client, base: &str) -> Option<Counters> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
    };
    Some(Counters {
        writer: value("turnstile_sqlite_writer_uses_total")
            .zip(value("turnstile_sqlite_writer_busy_seconds_total")),
        // NaN from a server built before the counter (an A/B run against an older binary).
        refreshes: value("turnstile_summary_refreshes_total").unwrap_or(f64::NAN),
        writes: value("turnstile_summary_writes_total").unwrap_or(f64::NAN),
    })
}

/// One run of [`asks_in_one_turn`].
struct AskRun {
    /// Round trips per second, first question to last.
    rate: f64,
    /// Each round trip's time, sorted.
    times: Vec<Duration>,
    /// CPU time of the server process per round trip (the sessions' creation included).
    server_cpu: Duration,
    /// CPU time of this listener per round trip: it shares the machine's cores with the server.
    client_cpu: Duration,
    /// CPU time of the agents per round trip when they are the server's child processes.
    agents_cpu: Duration,
    /// SQLite's write connection over the run.
    writer: Option<WriterUse>,
    /// Summary refreshes per round trip (NaN when the counters could not be read).
    refreshes: f64,
    /// Summaries written per round trip (NaN likewise).
    summary_writes: f64,
}

impl AskRun {
    /// What a paced row reports beside its times: the server's work per round trip.
    fn costs(&self) -> String {
        let writer = self
            .writer
            .map(|w| format!(", the write connection taken {:.1}×", w.uses_per_round_trip))
            .unwrap_or_default();
        format!(
            "server CPU {:.0} µs, {:.2} summary refreshes ({:.2} written){writer} per round trip",
            self.server_cpu.as_secs_f64() * 1e6,
            self.refreshes,
            self.summary_writes,
        )
    }
}

/// B3 on one backend: one agent, 50 at once (capacity), 50 paced to the target rate, and 50
/// paced to half of it (the latency when the server is not saturated).
struct B3Run {
    name: String,
    one: AskRun,
    at_once: AskRun,
    paced: AskRun,
    half: AskRun,
}

/// B3 proper, on SQLite and PostgreSQL: the agents in the server process (the issue's
/// "in-process ACP agents": ACP over an in-memory pipe, MCP over HTTP), each on a fresh
/// database. Capacity with every agent always asking; latency with answers paced to the
/// target rate, and to half of it.
async fn b3_in_process(asks: usize) -> Vec<B3Run> {
    let mut b3 = Vec::new();
    for (name, base) in common::backends() {
        let server = Server::start_with(
            &common::fresh_database(&base, "b3").await,
            &["--mock-in-process"],
        )
        .await;
        server.touch().await;
        b3.push(B3Run {
            name,
            one: asks_in_one_turn(&server, 1, asks, Answers::AtOnce).await,
            at_once: asks_in_one_turn(&server, 50, asks, Answers::AtOnce).await,
            paced: asks_in_one_turn(&server, 50, asks, Answers::Paced(PACED)).await,
            half: asks_in_one_turn(&server, 50, asks, Answers::Paced(PACED / 2.0)).await,
        });
    }
    b3
}

fn print_b3(b3: &[B3Run], asks: usize) {
    for B3Run {
        name,
        one,
        at_once,
        paced,
        half,
    } in b3
    {
        let (rt, cpu) = (&at_once.times, at_once.server_cpu.as_secs_f64() * 1e6);
        let writer = at_once
            .writer
            .map(|w| {
                format!(
                    "; the write connection taken {:.1}× per round trip, busy {:.0}% of the time",
                    w.uses_per_round_trip,
                    w.busy * 100.0
                )
            })
            .unwrap_or_default();
        println!(
            "| B3 | {name}: 50 agents in process, answered at once: ask (MCP) → answer (REST) → the agent has it and asks again, {} times in one turn | {:.0}/s, p50 {:.1} ms, p99 {:.1} ms; server CPU {cpu:.0} µs, listener {:.0} µs, {:.2} summary refreshes per round trip{writer} | 1 agent {:.0}/s, p50 {:.1} ms | ≥ {CAPACITY:.0}/s |",
            asks - 1,
            at_once.rate,
            pct(rt, 0.5),
            pct(rt, 0.99),
            at_once.client_cpu.as_secs_f64() * 1e6,
            at_once.refreshes,
            one.rate,
            pct(&one.times, 0.5)
        );
        println!(
            "| B3 | {name}: the same, answers paced to {PACED:.0}/s across the 50 | {:.0}/s, p50 {:.1} ms, p99 {:.1} ms; {} | at once p99 {:.1} ms | p99 < 20 ms at {PACED:.0}/s |",
            paced.rate,
            pct(&paced.times, 0.5),
            pct(&paced.times, 0.99),
            paced.costs(),
            pct(rt, 0.99)
        );
        println!(
            "| B3 | {name}: paced to {:.0}/s (not saturated: the latency alone) | {:.0}/s, p50 {:.1} ms, p99 {:.1} ms; {} | — | (report) |",
            PACED / 2.0,
            half.rate,
            pct(&half.times, 0.5),
            pct(&half.times, 0.99),
            half.costs(),
        );
    }
}

fn b3_results(results: &mut Value, b3: &[B3Run], asks: usize) {
    results["B3"] = json!({});
    for B3Run {
        name,
        one,
        at_once,
        paced,
        half,
    } in b3
    {
        let (rate, rt) = (at_once.rate, &at_once.times);
        let paced_json = |run: &AskRun, offered: f64| {
            json!({
                "offered_per_second": offered, "per_second": run.rate,
                "p50_ms": pct(&run.times, 0.5), "p99_ms": pct(&run.times, 0.99),
                "server_cpu_us_per_round_trip": run.server_cpu.as_secs_f64() * 1e6,
                "summary_refreshes_per_round_trip": finite(run.refreshes),
                "summary_writes_per_round_trip": finite(run.summary_writes),
                "writer_uses_per_round_trip": run.writer.map(|w| w.uses_per_round_trip),
            })
        };
        results["B3"][name.as_str()] = json!({
            "agents": 50, "agents_run": "in process", "asks_per_agent": asks,
            "per_second": rate, "p50_ms": pct(rt, 0.5), "p99_ms": pct(rt, 0.99),
            "server_cpu_us_per_round_trip": at_once.server_cpu.as_secs_f64() * 1e6,
            "listener_cpu_us_per_round_trip": at_once.client_cpu.as_secs_f64() * 1e6,
            "summary_refreshes_per_round_trip": finite(at_once.refreshes),
            "writer": at_once.writer.map(|w| json!({
                "uses_per_round_trip": w.uses_per_round_trip, "busy_share": w.busy,
            })),
            "one_agent_per_second": one.rate, "one_agent_p50_ms": pct(&one.times, 0.5),
            "paced": paced_json(paced, PACED),
            "paced_half": paced_json(half, PACED / 2.0),
            // Capacity, and the latency at the target rate (which the paced run must sustain).
            "pass": rate >= CAPACITY && paced.rate >= 0.95 * PACED && pct(&paced.times, 0.99) < 20.0,
        });
    }
}

/// A figure for the JSON (`null` when it could not be measured).
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn pct(d: &[Duration], p: f64) -> f64 {
    d[((d.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() {
    let Some(args) = common::args() else {
        return;
    };
    // As many asks in quick mode as in a full run: ten asks per agent measured about one
    // second of round trips, too short to tell one binary from another on a shared machine.
    let asks = 41;
    // `--b3-only`: B3 in process alone, to compare two server binaries quickly.
    if std::env::args().any(|a| a == "--b3-only") {
        let b3 = b3_in_process(asks).await;
        print_b3(&b3, asks);
        let mut results = json!({});
        b3_results(&mut results, &b3, asks);
        args.write_json(&results);
        common::clean_up().await;
        return;
    }
    // `--b3-processes`: B3 with the agents as processes alone (the mock agent's own cost).
    if std::env::args().any(|a| a == "--b3-processes") {
        let server = Server::start(&common::fresh_database("sqlite", "processes").await).await;
        let run = asks_in_one_turn(&server, 50, asks, Answers::AtOnce).await;
        println!(
            "| B3 | sqlite: 50 agents as processes, answered at once, {} asks in one turn | {:.0}/s, p50 {:.1} ms, p99 {:.1} ms; CPU per round trip: server {:.0} µs, agents {:.0} µs, listener {:.0} µs | — | — |",
            asks - 1,
            run.rate,
            pct(&run.times, 0.5),
            pct(&run.times, 0.99),
            run.server_cpu.as_secs_f64() * 1e6,
            run.agents_cpu.as_secs_f64() * 1e6,
            run.client_cpu.as_secs_f64() * 1e6,
        );
        drop(server);
        common::clean_up().await;
        return;
    }
    let tasks = if args.quick { 2_000 } else { 10_000 };

    // B6 baseline: an empty database.
    let empty = Server::start(&common::fresh_database("sqlite", "empty").await).await;
    empty.touch().await;
    let empty_rss = empty.rss_kb();
    drop(empty);

    // B6 idle with N tasks, then B4 on the same server.
    let url = common::fresh_database("sqlite", "server").await;
    common::populate_tasks(&repo::connect(&url).await.unwrap(), tasks).await;
    let server = Server::start(&url).await;
    server.touch().await;
    let idle_rss = server.rss_kb();
    let one = fan_out(&server, 1).await;
    let many_task = {
        // Measure RSS while the clients are connected: sample it from a side task.
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let pid = server.child.id().unwrap();
        let p = peak.clone();
        let sampler = tokio::spawn(async move {
            loop {
                if let Some(kb) = rss_kb(pid) {
                    p.fetch_max(kb, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let delays = fan_out(&server, CLIENTS).await;
        sampler.abort();
        (delays, peak.load(std::sync::atomic::Ordering::Relaxed))
    };
    let ((many, many_req), b4_rss) = many_task;
    let (one, one_req) = one;
    let rounds = if args.quick { 10 } else { 40 };
    let (one_rate, one_rt, _) = round_trips(&server, Sessions::New(1), rounds).await;
    let (rate, rt, sessions) = round_trips(&server, Sessions::New(50), rounds).await;
    // B6 "flat": memory after B3's round trips, after many more of the same sessions, and
    // after as many again. The first batch still warms up (the allocator's pages, caches, each
    // session's statements: +4% to +13% in quick runs, within +8% over the full run's 10,000);
    // a leak grows in the second batch as in the first, so the second decides. It is measured
    // against the highest RSS before it: the allocator gives pages back now and then (107.0 →
    // 85.8 → 111.2 MB in one full run), and a leak grows past every
    // earlier sample, a dip or not.
    let warm_rss = server.rss_kb();
    let more_rounds = if args.quick { 20 } else { 200 };
    let _ = round_trips(&server, Sessions::Again(sessions.clone()), more_rounds).await;
    let after_rss = server.rss_kb();
    let _ = round_trips(&server, Sessions::Again(sessions), more_rounds).await;
    let again_rss = server.rss_kb();
    let processes = asks_in_one_turn(&server, 50, asks, Answers::AtOnce).await;
    let (proc_rate, proc_rt) = (processes.rate, &processes.times);
    drop(server);
    let b3 = b3_in_process(asks).await;

    let mb = |kb: u64| kb as f64 / 1024.0;
    println!("| id | what | measured | baseline | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| B4 | {CLIENTS} WebSocket clients: publication → every client has the question | p50 {:.1} ms, p99 {:.1} ms, all {} | 1 client {:.1} ms | p99 < 50 ms, none missed |",
        pct(&many, 0.5),
        pct(&many, 0.99),
        many.len(),
        pct(&one, 0.5)
    );
    println!(
        "| B4 | the same from the request creating the task (agent launch included) | p50 {:.1} ms, p99 {:.1} ms | 1 client {:.1} ms | — |",
        pct(&many_req, 0.5),
        pct(&many_req, 0.99),
        pct(&one_req, 0.5)
    );
    print_b3(&b3, asks);
    println!(
        "| B3 | sqlite: 50 agents as processes, answered at once, {} asks in one turn | {proc_rate:.0}/s, p50 {:.1} ms, p99 {:.1} ms | — | — |",
        asks - 1,
        pct(proc_rt, 0.5),
        pct(proc_rt, 0.99)
    );
    println!(
        "| B3 | sqlite: 50 agents as processes, ask → answer → agent finishes its turn, {rounds} rounds each | {rate:.0}/s, p50 {:.1} ms, p99 {:.1} ms | 1 agent {one_rate:.0}/s, p50 {:.1} ms | — |",
        pct(&rt, 0.5),
        pct(&rt, 0.99),
        pct(&one_rt, 0.5)
    );
    println!(
        "| B6 | RSS idle, {tasks} tasks × 3 sessions (after one list and one page) | {:.1} MB | empty database {:.1} MB | < 60 MB |",
        mb(idle_rss),
        mb(empty_rss)
    );
    println!(
        "| B6 | RSS peak under B4 ({CLIENTS} clients) | {:.1} MB | idle {:.1} MB | < 150 MB |",
        mb(b4_rss),
        mb(idle_rss)
    );
    println!(
        "| B6 | RSS after {} more round trips of B3's 50 sessions | {:.1} MB | after B3's {} {:.1} MB | (report: warm-up) |",
        50 * more_rounds,
        mb(after_rss),
        50 * rounds + rounds,
        mb(warm_rss)
    );
    let before_rss = warm_rss.max(after_rss);
    println!(
        "| B6 | RSS after {} more of them | {:.1} MB | the highest before: {:.1} MB | flat (≤ +10%) |",
        50 * more_rounds,
        mb(again_rss),
        mb(before_rss)
    );
    let mut results = json!({
        "B4": { "sqlite": {
            "clients": CLIENTS, "received": many.len(),
            "p50_ms": pct(&many, 0.5), "p99_ms": pct(&many, 0.99), "one_client_ms": pct(&one, 0.5),
            "from_request_p50_ms": pct(&many_req, 0.5), "from_request_p99_ms": pct(&many_req, 0.99),
            "pass": many.len() == CLIENTS && pct(&many, 0.99) < 50.0,
        }},
        "B6": { "sqlite": {
            "tasks": tasks, "idle_mb": mb(idle_rss), "empty_mb": mb(empty_rss), "under_b4_mb": mb(b4_rss),
            "after_b3_mb": mb(warm_rss), "round_trips_after_b3": 50 * more_rounds,
            "after_more_round_trips_mb": mb(after_rss),
            "after_twice_as_many_mb": mb(again_rss),
            "pass": mb(idle_rss) < 60.0 && mb(b4_rss) < 150.0
                && mb(again_rss) <= mb(before_rss) * 1.1,
        }},
    });
    b3_results(&mut results, &b3, asks);
    results["B3"]["sqlite"]["agents_as_processes"] = json!({
        "per_second": proc_rate, "p50_ms": pct(proc_rt, 0.5), "p99_ms": pct(proc_rt, 0.99),
        "whole_turns": {
            "rounds": rounds, "per_second": rate, "p50_ms": pct(&rt, 0.5), "p99_ms": pct(&rt, 0.99),
            "one_agent_per_second": one_rate, "one_agent_p50_ms": pct(&one_rt, 0.5),
        },
    });
    args.write_json(&results);
    common::clean_up().await;
}
