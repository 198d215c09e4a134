//! Slow and greedy clients (spec "Server process"): a request head must arrive within the
//! header timeout and an idle keep-alive connection is closed after it; a body must arrive
//! whole within its deadline; thousands of idle sockets from other addresses leave room for
//! this machine's own clients — `/healthz` and an agent's `/mcp` — at 127.0.0.1.
//!
//! Connection handling does not touch the database: these run on SQLite only.

use crate::support;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Access, Api, TEST_TOKEN, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

fn addr_of(server: &TestServer) -> SocketAddr {
    server.base.trim_start_matches("http://").parse().unwrap()
}

/// Waits until the server closes `stream` (EOF or reset); how long that took.
async fn closed_after(stream: &mut TcpStream, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(limit.saturating_sub(start.elapsed()), stream.read(&mut buf))
            .await
        {
            Ok(Ok(0)) | Ok(Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => {} // an answer (the 408 or the first response): read on
            Err(_) => panic!("the server kept the connection open for {limit:?}"),
        }
    }
}

/// Whether the server still holds `stream` open (nothing to read, no EOF).
fn still_open(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 1];
    matches!(stream.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_request_line_and_an_idle_keep_alive_are_closed_at_the_header_timeout() {
    let limits = turnstile::api::Limits {
        header_read: Duration::from_secs(1),
        ..Default::default()
    };
    let server = TestServer::start_limited(
        &support::sqlite_url(),
        "127.0.0.1:0",
        Access::Token(TEST_TOKEN),
        limits,
        |_| {},
    )
    .await;
    let addr = addr_of(&server);
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /heal").await.unwrap();
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let took = closed_after(&mut half, Duration::from_secs(10)).await;
    assert!(
        took >= Duration::from_millis(900),
        "{took:?}: not before the timeout"
    );
    closed_after(&mut idle, Duration::from_secs(10)).await;
    closed_after(&mut silent, Duration::from_secs(10)).await;
    // The defaults: 10 s for a head, 30 s for a body.
    let d = turnstile::api::Limits::default();
    assert_eq!(
        (d.header_read, d.body_read),
        (Duration::from_secs(10), Duration::from_secs(30))
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_is_cut_at_its_deadline_and_writes_nothing() {
    let url = support::sqlite_url();
    let limits = turnstile::api::Limits {
        body_read: Duration::from_secs(1),
        ..Default::default()
    };
    let server = TestServer::start_limited(
        &url,
        "127.0.0.1:0",
        Access::Token(TEST_TOKEN),
        limits,
        |_| {},
    )
    .await;
    let before = support::table_counts(&url).await;
    let mut s = TcpStream::connect(addr_of(&server)).await.unwrap();
    let body = json!({ "title": "trickled" }).to_string();
    s.write_all(
        format!(
            "POST /api/v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TEST_TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let start = Instant::now();
    let mut answer = Vec::new();
    for byte in body.as_bytes()[..body.len() - 1].iter() {
        if s.write_all(&[*byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        if start.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        !answer.starts_with("HTTP/1.1 200"),
        "a body that never finished was accepted: {answer}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "cut at its deadline"
    );
    assert_eq!(
        support::table_counts(&url).await,
        before,
        "nothing was written"
    );
    server.stop().await;
}

/// A socket from `source` to `addr`, connected and silent.
async fn silent_from(source: IpAddr, addr: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(source, 0)).ok()?;
    socket.connect(addr).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_idle_sockets_leave_room_for_health_and_agents() {
    // Long header timeout: the sockets stay held for the whole test.
    let limits = turnstile::api::Limits {
        header_read: Duration::from_secs(120),
        ..Default::default()
    };
    let server = TestServer::start_limited(
        &support::sqlite_url(),
        "0.0.0.0:0",
        Access::Token(TEST_TOKEN),
        limits.clone(),
        |_| {},
    )
    .await;
    let addr = addr_of(&server);
    // 4,096 silent sockets: 2,048 from one address, the rest from 16 others.
    let mut sockets = Vec::new();
    for i in 0..4096u32 {
        let source = if i < 2048 {
            IpAddr::from([127, 0, 0, 2])
        } else {
            IpAddr::from([127, 0, 1, 1 + (i % 16) as u8])
        };
        if let Some(s) = silent_from(source, addr).await {
            sockets.push((source, s));
        }
    }
    assert_eq!(sockets.len(), 4096, "the kernel accepted every connection");
    // The server closes what is over a cap at once: wait for its verdicts.
    let one = IpAddr::from([127, 0, 0, 2]);
    support::until(
        "the server closed what one address has over its cap",
        async || {
            sockets
                .iter()
                .filter(|(ip, s)| *ip == one && !still_open(s))
                .count()
                >= 2048 - limits.per_client
        },
    )
    .await;
    let held_from_one = sockets
        .iter()
        .filter(|(ip, s)| *ip == one && still_open(s))
        .count();
    assert_eq!(
        held_from_one, limits.per_client,
        "one address holds its share"
    );
    let held: usize = sockets.iter().filter(|(_, s)| still_open(s)).count();
    assert!(held <= limits.total - limits.loopback_reserve, "{held}");

    // This machine's own clients still get in: health, the API, and an agent's question
    // over /mcp answered through the API.
    let api = Api::new(&server.base);
    let (status, _) = api.get("/healthz").await;
    assert_eq!(status, 200);
    let (_, session) = api.start_task("/e2e:clarification").await;
    let pending_id = api.pending_id(&session).await;
    let (status, body) = api
        .respond(
            &pending_id,
            json!({ "answers": [{ "question_id": "db", "selected_options": ["sqlite"] }] }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    api.wait_turns_done(&session, 1).await;
    assert!(
        api.agent_lines(&session)
            .await
            .iter()
            .any(|l| l.contains("You answered")),
        "the agent got its answer"
    );
    assert!(
        sockets.iter().filter(|(_, s)| still_open(s)).count() >= held - 1,
        "the idle sockets were still held while the agent worked"
    );
    drop(sockets);
    server.stop().await;
}

/// A server whose serving task ends (a test server stopped, the process's serve loop dropped)
/// closes its idle keep-alive connections: none keeps the router, and the database pool behind
/// it, alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_closes_its_idle_connections() {
    let server = TestServer::start(&support::sqlite_url()).await;
    let mut idle = TcpStream::connect(addr_of(&server)).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    idle.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    server.stop().await;
    // Well before the 10 s header timeout.
    closed_after(&mut idle, Duration::from_secs(5)).await;
}
