//! B2 and B5 (docs/performance.md): the task list and start-up at scale, on SQLite and (with
//! TEST_POSTGRES_URL) PostgreSQL, each beside its same-run baseline.
//!
//! - B2: `GET /api/v1/tasks` (first page, reconciled) with N tasks × 3 sessions, over real HTTP
//!   to the real router, against a bare `SELECT` of the same page on its own connection.
//! - B5: start-up (`build_state`: epoch, recovery, reconciliation) with N tasks whose summaries
//!   are all stale (invalidated), against the same start-up with fresh summaries.
//!
//! Run:
//!
//!     cargo bench --bench scale                 # N = 10,000
//!     cargo bench --bench scale -- --quick      # N = 2,000
//!     … -- --json target/bench/scale.json

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use leptos::prelude::LeptosOptions;
use turnstile::server::auth::FrontDoor;
use turnstile::server::repo;
use turnstile::server::runtime::RuntimeConfig;
use turnstile::server::state::AppState;
use turnstile::server::{startup, time::Clock};

async fn raw(url: &str, sql: &str) -> Duration {
    use sqlx::Connection;
    let start;
    if url.starts_with("sqlite") {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        start = Instant::now();
        sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_all(&mut c)
            .await
            .unwrap();
    } else {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        start = Instant::now();
        sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_all(&mut c)
            .await
            .unwrap();
    }
    start.elapsed()
}

fn runtime_config(addr: std::net::SocketAddr) -> RuntimeConfig {
    RuntimeConfig {
        server_id: "bench".into(),
        server_ttl: std::time::Duration::from_secs(30),
        self_url: format!("http://{addr}"),
        mock_agent: env!("CARGO_BIN_EXE_mock_agent").into(),
        server_exe: env!("CARGO_BIN_EXE_turnstile").into(),
        default_agent: "mock".into(),
        workdir: std::env::temp_dir(),
        worktrees: std::env::temp_dir(),
        workspace_roots: vec![],
        ask_keepalive: Duration::from_secs(20),
        ask_timeout: Duration::from_secs(7200),
        agent_start_timeout: Duration::from_secs(30),
        max_agents: 16,
        max_websocket_clients: turnstile::server::runtime::MAX_WEBSOCKET_CLIENTS,
        sync_wait: turnstile::server::runtime::SYNC_WAIT,
        summary_gather: turnstile::server::runtime::SUMMARY_GATHER,
        in_process_mock: None,
    }
}

/// Boots the server state on `url`; returns it and how long the boot took.
async fn boot(url: &str, addr: std::net::SocketAddr) -> (AppState, Duration) {
    let options = LeptosOptions::builder()
        .output_name("turnstile")
        .site_root("target/site")
        .site_pkg_dir("pkg")
        .site_addr(addr)
        .build();
    let start = Instant::now();
    let repo = repo::connect(url).await.unwrap();
    let state = startup::build_state(repo, options, Clock::System, runtime_config(addr))
        .await
        .unwrap();
    (state, start.elapsed())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() {
    let Some(args) = common::args() else {
        return;
    };
    let tasks = if args.quick { 2_000 } else { 10_000 };
    let samples = if args.quick { 21 } else { 51 };
    let mut b2 = serde_json::Map::new();
    let mut b5 = serde_json::Map::new();
    let mut lines = Vec::new();
    for (name, base) in common::backends() {
        let url = common::fresh_database(&base, "scale").await;
        common::populate_tasks(&repo::connect(&url).await.unwrap(), tasks).await;

        // B5: boot with fresh summaries (the populate's), then with every one invalidated.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (state, _) = boot(&url, addr).await; // builds any missing summaries
        startup::shutdown(&state);
        let (state, fresh_boot) = boot(&url, addr).await;
        startup::shutdown(&state);
        raw(&url, "UPDATE task_status_summaries SET invalidated = TRUE").await;
        let (state, stale_boot) = boot(&url, addr).await;
        let stale_left: i64 = state
            .repo
            .get_summaries(
                &state
                    .repo
                    .list_tasks()
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|t| t.id)
                    .collect::<Vec<_>>(),
            )
            .await
            .unwrap()
            .values()
            .filter(|s| s.invalidated)
            .count() as i64;

        // B2: the first page over HTTP, against a bare SELECT of the same page.
        let door = Arc::new(FrontDoor::open_loopback(addr));
        let app = turnstile::api::router(state.clone(), door);
        let server = tokio::spawn(turnstile::api::serve(
            listener,
            app,
            turnstile::api::Limits::default(),
            std::future::pending(),
        ));
        let client = reqwest::Client::new();
        let list = format!("http://{addr}/api/v1/tasks");
        let bare_sql = "SELECT * FROM tasks WHERE archived_at IS NULL \
                        ORDER BY updated_at DESC, id DESC LIMIT 100";
        let (mut http, mut bare, mut bytes) = (Vec::new(), Vec::new(), 0);
        for i in 0..=samples {
            let start = Instant::now();
            let r = client.get(&list).send().await.unwrap();
            assert_eq!(r.status(), 200);
            bytes = r.bytes().await.unwrap().len();
            let t = start.elapsed();
            let b = raw(&url, bare_sql).await;
            if i > 0 {
                http.push(t);
                bare.push(b);
            }
        }
        let (http, bare) = (median(http), median(bare));
        server.abort();
        startup::shutdown(&state);

        lines.push(format!(
            "| B2 | {name} | GET /api/v1/tasks, {tasks} tasks × 3 sessions | {:.2} ms ({} KB) | bare SELECT {:.2} ms | ×{:.1} | p50 ≤ 3× bare and < 50 ms |",
            ms(http),
            bytes / 1024,
            ms(bare),
            ms(http) / ms(bare)
        ));
        lines.push(format!(
            "| B5 | {name} | boot, {tasks} stale summaries | {:.0} ms ({stale_left} left stale) | fresh {:.0} ms | ×{:.1} | < 2 s, all repaired |",
            ms(stale_boot),
            ms(fresh_boot),
            ms(stale_boot) / ms(fresh_boot)
        ));
        b2.insert(
            name.clone(),
            serde_json::json!({
                "tasks": tasks, "p50_ms": ms(http), "bare_ms": ms(bare), "body_bytes": bytes,
                "pass": ms(http) < 50.0 && ms(http) <= 3.0 * ms(bare),
            }),
        );
        b5.insert(
            name,
            serde_json::json!({
                "tasks": tasks, "stale_boot_ms": ms(stale_boot), "fresh_boot_ms": ms(fresh_boot),
                "left_stale": stale_left, "pass": stale_boot < Duration::from_secs(2) && stale_left == 0,
            }),
        );
    }
    println!("| id | database | what | measured | baseline | ratio | target |");
    println!("|---|---|---|---|---|---|---|");
    for l in lines {
        println!("{l}");
    }
    args.write_json(&serde_json::json!({ "B2": b2, "B5": b5 }));
    common::clean_up().await;
}
