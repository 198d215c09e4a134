//! Test fixtures: real databases. SQLite gets a fresh file per test; PostgreSQL gets a fresh
//! database per test in the server named by `TEST_POSTGRES_URL` (scripts/test.sh starts a
//! private cluster and sets it). Without it, PostgreSQL tests fail unless
//! `TURNSTILE_SKIP_POSTGRES=1` ([`skip_postgres`]).
#![allow(dead_code)]

pub mod ws;

use std::path::PathBuf;
use std::sync::Arc;

use turnstile::server::repo::{self, Repository};

pub fn temp_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("turnstile-{prefix}-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A URL for a fresh, empty SQLite database file, in memory-backed `/dev/shm` when the machine
/// has it (the server syncs every commit to disk, which would make tests crawl).
pub fn sqlite_url() -> String {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        let d = shm.join(format!("turnstile-sqlite-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&d).expect("create shm dir");
        d
    } else {
        temp_dir("sqlite")
    };
    format!("sqlite:{}", dir.join("test.db").display())
}

/// A URL for a fresh, empty PostgreSQL database of the server named by `TEST_POSTGRES_URL`.
/// Without one the test fails, unless `TURNSTILE_SKIP_POSTGRES=1` says to run the SQLite half
/// only: then `None`, and the skip is counted (`TURNSTILE_SKIPPED_LOG`, which scripts/test.sh
/// sums at the end).
pub async fn postgres_url() -> Option<String> {
    let admin = match std::env::var("TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            skip_postgres();
            return None;
        }
    };
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at TEST_POSTGRES_URL: {e}"));
    let name = format!("t_{}", uuid::Uuid::now_v7().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create test database");
    let base = admin
        .rsplit_once('/')
        .map(|(base, _)| base)
        .expect("TEST_POSTGRES_URL has a database path");
    let query = admin
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    let base = base.split('?').next().unwrap_or(base);
    Some(format!("{base}/{name}{query}"))
}

/// Drops a database made by [`postgres_url`] once its story passed (a failed story keeps it for
/// a look): a long-lived `TEST_POSTGRES_URL` cluster otherwise grows by every run.
pub async fn drop_postgres(url: &str) {
    use sqlx::Connection;
    let Ok(admin) = std::env::var("TEST_POSTGRES_URL") else {
        return;
    };
    let name = url
        .rsplit_once('/')
        .map(|(_, db)| db.split('?').next().unwrap_or(db))
        .filter(|db| {
            db.starts_with("t_") && db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .expect("a database made by postgres_url");
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .expect("reach PostgreSQL to drop a test database");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await
    .expect("drop the test database");
}

pub async fn sqlite_repo() -> Arc<dyn Repository> {
    repo::connect(&sqlite_url()).await.expect("open sqlite")
}

pub async fn postgres_repo() -> Option<Arc<dyn Repository>> {
    let url = postgres_url().await?;
    Some(repo::connect(&url).await.expect("open postgres"))
}

/// The PostgreSQL half of a test without a PostgreSQL server: a failure, unless
/// `TURNSTILE_SKIP_POSTGRES=1`, when the skip is written to `TURNSTILE_SKIPPED_LOG` (one line
/// per skipped test) so the run can say how many were skipped.
pub fn skip_postgres() {
    use std::io::Write;
    assert!(
        std::env::var("TURNSTILE_SKIP_POSTGRES").is_ok_and(|v| v == "1"),
        "no PostgreSQL: TEST_POSTGRES_URL is not set (scripts/test.sh starts a private \
         cluster; TURNSTILE_SKIP_POSTGRES=1 runs the SQLite half only)"
    );
    let test = std::thread::current().name().unwrap_or("?").to_string();
    match std::env::var_os("TURNSTILE_SKIPPED_LOG") {
        Some(log) => {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .expect("open TURNSTILE_SKIPPED_LOG");
            writeln!(f, "{test}").expect("write TURNSTILE_SKIPPED_LOG");
        }
        None => eprintln!("{test}: PostgreSQL half skipped (TURNSTILE_SKIP_POSTGRES=1)"),
    }
}

/// Runs one story against SQLite and PostgreSQL: `both!(story_fn)` defines `mod story_fn`
/// with a `sqlite` and a `postgres` test.
#[macro_export]
macro_rules! both {
    ($($story:ident),+ $(,)?) => {
        $(
            mod $story {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$story($crate::support::sqlite_repo().await).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    if let Some(repo) = $crate::support::postgres_repo().await {
                        super::$story(repo).await;
                    }
                }
            }
        )+
    };
}

/// The access token of every test server (spec "Server process": loopback needs one too).
/// [`client`] and [`Api`] send it; tests of the front door make clients without it.
pub const TEST_TOKEN: &str = "test-token-0123456789abcdef";
/// `Authorization` with [`TEST_TOKEN`].
pub const TEST_BEARER: &str = "Bearer test-token-0123456789abcdef";

/// How a test server guards its door.
#[derive(Clone, Copy, Debug)]
pub enum Access<'a> {
    Token(&'a str),
    /// `--no-token-on-loopback`.
    OpenLoopback,
}

/// The static files of test servers: stand-ins for the built site (`cargo test` runs before
/// the browser bundle is built), made once per test binary.
pub fn site_root() -> &'static str {
    static ROOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let root = temp_dir("site");
        std::fs::create_dir_all(root.join("pkg")).unwrap();
        std::fs::write(root.join("pkg/turnstile.css"), "body {}\n").unwrap();
        std::fs::write(
            root.join("pkg/turnstile.js"),
            "export default function() {}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("favicon.svg"),
            "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n",
        )
        .unwrap();
        root.to_str().unwrap().to_string()
    })
}

/// An HTTP client that sends [`TEST_TOKEN`] as its bearer.
pub fn client() -> reqwest::Client {
    client_with_token(TEST_TOKEN)
}

/// An HTTP client that sends `token` as its bearer.
pub fn client_with_token(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().expect("a header value"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("an HTTP client")
}

/// `GET url` with [`TEST_TOKEN`].
pub async fn get(url: impl reqwest::IntoUrl) -> reqwest::Response {
    client().get(url).send().await.expect("GET")
}

/// The real server (router, state, start-up) on a free loopback port, in this process.
pub struct TestServer {
    pub base: String,
    pub state: turnstile::server::state::AppState,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    pub async fn start(database_url: &str) -> TestServer {
        Self::start_with(database_url, |_| {}).await
    }

    /// Starts with the runtime configuration adjusted by `tune` (timeouts, keepalive).
    /// A server whose `mock` profile runs inside the test process, recording its prompts.
    pub async fn start_in_process(database_url: &str) -> TestServer {
        Self::start_with(database_url, |r| {
            r.in_process_mock = Some(turnstile::mock_agent::InProcess::default());
        })
        .await
    }

    pub async fn start_with(
        database_url: &str,
        tune: impl FnOnce(&mut turnstile::server::runtime::RuntimeConfig),
    ) -> TestServer {
        Self::start_configured(database_url, "127.0.0.1:0", Access::Token(TEST_TOKEN), tune).await
    }

    /// Binds `bind` (e.g. `0.0.0.0:0` for LAN access) with its door guarded by `access`.
    pub async fn start_configured(
        database_url: &str,
        bind: &str,
        access: Access<'_>,
        tune: impl FnOnce(&mut turnstile::server::runtime::RuntimeConfig),
    ) -> TestServer {
        Self::start_limited(database_url, bind, access, Default::default(), tune).await
    }

    /// [`TestServer::start_configured`] serving connections with `limits`.
    pub async fn start_limited(
        database_url: &str,
        bind: &str,
        access: Access<'_>,
        limits: turnstile::api::Limits,
        tune: impl FnOnce(&mut turnstile::server::runtime::RuntimeConfig),
    ) -> TestServer {
        use leptos::prelude::LeptosOptions;
        use turnstile::server::auth::FrontDoor;
        use turnstile::server::{runtime::RuntimeConfig, startup, time::Clock};

        let repo = repo::connect(database_url).await.expect("open database");
        let listener = tokio::net::TcpListener::bind(bind).await.expect("bind");
        let bound = listener.local_addr().unwrap();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], bound.port()));
        let options = LeptosOptions::builder()
            .output_name("turnstile")
            .site_root(site_root())
            .site_pkg_dir("pkg")
            .site_addr(addr)
            .build();
        let mut runtime = RuntimeConfig {
            // One server per database unless a test names others (`several_servers.rs`): a
            // restart in a test is the same server coming back, as with the same data dir.
            server_id: format!(
                        "test-{:016x}",
                        std::hash::BuildHasher::hash_one(
                            &std::hash::BuildHasherDefault::<
                                std::collections::hash_map::DefaultHasher,
                            >::default(),
                            database_url
                        )
                    ),
            server_ttl: std::time::Duration::from_secs(30),
            self_url: format!("http://{addr}"),
            mock_agent: env!("CARGO_BIN_EXE_mock_agent").into(),
            workdir: temp_dir("workspace"),
            ask_keepalive: std::time::Duration::from_secs(20),
            ask_timeout: std::time::Duration::from_secs(7200),
            agent_start_timeout: std::time::Duration::from_secs(30),
            max_agents: 16,
            max_websocket_clients: turnstile::server::runtime::MAX_WEBSOCKET_CLIENTS,
            sync_wait: turnstile::server::runtime::SYNC_WAIT,
            summary_gather: turnstile::server::runtime::SUMMARY_GATHER,
            in_process_mock: None,
        };
        tune(&mut runtime);
        let state = startup::build_state(repo, options, Clock::System, runtime)
            .await
            .expect("start-up");
        let token = match access {
            Access::Token(t) => Some(t.to_string()),
            Access::OpenLoopback => None,
        };
        let door = std::sync::Arc::new(FrontDoor::new(bound, &[], token));
        let app = turnstile::api::router(state.clone(), door);
        let task = tokio::spawn(turnstile::api::serve(
            listener,
            app,
            limits,
            std::future::pending(),
        ));
        TestServer {
            base: format!("http://{addr}"),
            state,
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET /metrics` (Prometheus text); it must answer 200.
    pub async fn metrics(&self) -> String {
        let r = get(self.url("/metrics")).await;
        assert_eq!(r.status(), reqwest::StatusCode::OK);
        r.text().await.expect("a text body")
    }

    /// Stops serving (the database stays), like a process exit: agents are stopped too.
    pub async fn stop(self) {
        turnstile::server::startup::shutdown(&self.state);
        self.task.abort();
        let _ = self.task.await;
        turnstile::server::startup::finish(&self.state).await;
    }
}

/// Runs one HTTP story against a server on SQLite and one on PostgreSQL: `both_http!(story)`
/// where `story(database_url: String)`.
#[macro_export]
macro_rules! both_http {
    ($($story:ident),+ $(,)?) => {
        $(
            mod $story {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$story($crate::support::sqlite_url()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    if let Some(url) = $crate::support::postgres_url().await {
                        super::$story(url.clone()).await;
                        $crate::support::drop_postgres(&url).await;
                    }
                }
            }
        )+
    };
}

/// Runs raw SQL against the database behind `url`, outside the repository: used to inject
/// real failures (a renamed table makes every query that touches it fail) and stale rows.
pub async fn raw_exec(url: &str, sql: &str) {
    use sqlx::Connection;
    let sql = sqlx::AssertSqlSafe(sql.to_string());
    if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url)
            .await
            .expect("raw sqlite connection");
        sqlx::query(sql).execute(&mut conn).await.expect("raw sql");
    } else {
        let mut conn = sqlx::PgConnection::connect(url)
            .await
            .expect("raw postgres connection");
        sqlx::query(sql).execute(&mut conn).await.expect("raw sql");
    }
}

/// Waits (with a deadline, no fixed sleep) for an event matching `pred` on `rx`.
pub async fn next_event(
    rx: &mut tokio::sync::broadcast::Receiver<turnstile::server::events::Event>,
    pred: impl Fn(&turnstile::server::events::Event) -> bool,
) -> turnstile::server::events::Event {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(remaining, rx.recv()).await {
            Ok(Ok(e)) if pred(&e) => return e,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("event stream failed: {e}"),
            Err(_) => panic!("timed out waiting for an event"),
        }
    }
}

/// Holds the `n`-th pass (counting from 1) through `hold` until something passes through
/// `release`: forces one interleaving of two paths. Clear both points when done.
pub fn hold_nth_until(
    server: &TestServer,
    hold: turnstile::server::hooks::Point,
    n: usize,
    release: turnstile::server::hooks::Point,
) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let passes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let g = gate.clone();
    server.state.hooks.set(hold, move |_| {
        let nth = passes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == n;
        let g = g.clone();
        async move {
            if nth {
                g.acquire().await.expect("gate").forget();
            }
        }
    });
    server.state.hooks.set(release, move |_| {
        gate.add_permits(1);
        async {}
    });
}

/// A small REST client for the server under test.
pub struct Api {
    pub client: reqwest::Client,
    pub base: String,
}

impl Api {
    /// A client of the server at `base` with [`TEST_TOKEN`].
    pub fn new(base: &str) -> Api {
        Api {
            client: client(),
            base: base.to_string(),
        }
    }

    /// `POST /api/v1/clarifications/{pending_id}/respond` with `body` (answers or a rejection).
    pub async fn respond(
        &self,
        pending_id: &str,
        body: serde_json::Value,
    ) -> (reqwest::StatusCode, serde_json::Value) {
        self.post(
            &format!("/api/v1/clarifications/{pending_id}/respond"),
            body,
        )
        .await
    }

    pub async fn get(&self, path: &str) -> (reqwest::StatusCode, serde_json::Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("GET");
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }

    pub async fn post(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> (reqwest::StatusCode, serde_json::Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("POST");
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }

    /// `DELETE path`: its status.
    pub async fn delete(&self, path: &str) -> reqwest::StatusCode {
        self.client
            .delete(format!("{}{path}", self.base))
            .send()
            .await
            .expect("DELETE")
            .status()
    }

    /// Polls `GET path` until `pred` holds (deadline 20 s, no fixed sleeps between state checks
    /// beyond a short poll interval).
    pub async fn wait_for(
        &self,
        path: &str,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let (_, v) = self.get(path).await;
            if pred(&v) {
                return v;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for {what}: last {path} = {v:#}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The mock agent asks one question with a 300 ms client-side timeout: the bundle detaches
/// and the turn completes (a detached, still-active question).
pub const SHORT_TIMEOUT: &str = r#"e2e:ask-timeout(300, {"questions": [{"id": "db", "prompt": "Which database?", "options": [{"id": "postgresql", "label": "PostgreSQL"}, {"id": "sqlite", "label": "SQLite"}]}]})"#;

/// `GET /sessions/{id}/turns` holds exactly `n` turns, all completed.
pub fn turns_done(n: usize) -> impl Fn(&serde_json::Value) -> bool {
    move |v| {
        v["turns"]
            .as_array()
            .is_some_and(|t| t.len() == n && t.iter().all(|t| t["completed_at"].is_string()))
    }
}

impl Api {
    /// A task whose primary session runs `prompt`: (task id, session id).
    pub async fn start_task(&self, prompt: &str) -> (String, String) {
        let (status, task) = self
            .post(
                "/api/v1/tasks",
                serde_json::json!({ "title": "agent task", "prompt": prompt }),
            )
            .await;
        assert_eq!(status, 200, "{task}");
        (
            task["id"].as_str().unwrap().to_string(),
            task["primary_session_id"]
                .as_str()
                .expect("a primary session")
                .to_string(),
        )
    }

    /// Polls the session's transcript until one of its messages matches `pred`; returns all
    /// of them.
    pub async fn wait_for_message(
        &self,
        session: &str,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Vec<serde_json::Value> {
        let page = self
            .wait_for(&format!("/api/v1/sessions/{session}/messages"), what, |v| {
                v["messages"]
                    .as_array()
                    .is_some_and(|ms| ms.iter().any(&pred))
            })
            .await;
        page["messages"].as_array().unwrap().clone()
    }

    pub async fn messages(&self, session: &str) -> Vec<serde_json::Value> {
        self.get(&format!("/api/v1/sessions/{session}/messages"))
            .await
            .1["messages"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The contents of the agent's messages, in order.
    pub async fn agent_lines(&self, session: &str) -> Vec<String> {
        self.messages(session)
            .await
            .into_iter()
            .filter(|m| m["author"] == "agent")
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect()
    }

    /// The `pending_id` of the session's first question or permission request, once there is one.
    pub async fn pending_id(&self, session: &str) -> String {
        self.pending_id_of(session, "a question or permission request", |_| true)
            .await
    }

    /// The `pending_id` of the session's first message of `kind` (`clarification_request`,
    /// `permission_request`), once there is one.
    pub async fn pending_id_of_kind(&self, session: &str, kind: &str) -> String {
        self.pending_id_of(session, kind, |m| m["kind"] == kind)
            .await
    }

    async fn pending_id_of(
        &self,
        session: &str,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> String {
        let carries = |m: &serde_json::Value| m["pending_id"].is_string() && pred(m);
        let messages = self.wait_for_message(session, what, carries).await;
        let found = messages.iter().find(|m| carries(m)).unwrap();
        found["pending_id"].as_str().unwrap().to_string()
    }

    pub async fn wait_turns_done(&self, session: &str, n: usize) -> Vec<serde_json::Value> {
        self.wait_for(
            &format!("/api/v1/sessions/{session}/turns"),
            &format!("{n} completed turns"),
            turns_done(n),
        )
        .await["turns"]
            .as_array()
            .unwrap()
            .clone()
    }
}

/// Row counts of the tables a request could write to (summaries excluded: reads reconcile
/// them, P7). Equal before and after means "nothing was written".
pub async fn table_counts(url: &str) -> std::collections::BTreeMap<&'static str, i64> {
    use sqlx::{Connection, Row};
    const TABLES: [&str; 9] = [
        "tasks",
        "sessions",
        "turns",
        "messages",
        "clarification_bundles",
        "clarification_questions",
        "permission_requests",
        "agent_profiles",
        "workflows",
    ];
    let sql = TABLES
        .iter()
        .map(|t| format!("(SELECT COUNT(*) FROM {t}) AS {t}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = sqlx::AssertSqlSafe(format!("SELECT {sql}"));
    let mut out = std::collections::BTreeMap::new();
    if url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(url).await.expect("sqlite");
        let row = sqlx::query(sql).fetch_one(&mut c).await.expect("counts");
        for t in TABLES {
            out.insert(t, row.get::<i64, _>(t));
        }
    } else {
        let mut c = sqlx::PgConnection::connect(url).await.expect("postgres");
        let row = sqlx::query(sql).fetch_one(&mut c).await.expect("counts");
        for t in TABLES {
            out.insert(t, row.get::<i64, _>(t));
        }
    }
    out
}

/// Every row of every table in the database behind `url` (the migrations' bookkeeping
/// included), each row one line of `column=value` pairs (SQL literals: `quote()` on SQLite,
/// `quote_nullable()` on PostgreSQL, so NULL, text and numbers stay distinct), sorted per
/// table. Equal before and after means "nothing was written", contents included: unlike
/// [`table_counts`] it sees a row whose content was changed.
///
/// `volatile` names `(table, column)` pairs that change without any request (a heartbeat's
/// timestamp, say): their values show as `<volatile>`, never silently dropped, and each must
/// be a column of the database (a typo panics). The caller justifies every one.
pub async fn table_rows(
    url: &str,
    volatile: &[(&str, &str)],
) -> std::collections::BTreeMap<String, Vec<String>> {
    use sqlx::Connection;
    let sqlite = url.starts_with("sqlite:");
    let tables_sql = if sqlite {
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name"
    } else {
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1"
    };
    let columns_sql = if sqlite {
        "SELECT name FROM pragma_table_info($1) ORDER BY cid"
    } else {
        "SELECT column_name::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position"
    };
    let quote = if sqlite { "quote" } else { "quote_nullable" };
    let ident = |name: &str| {
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "unexpected identifier {name:?}"
        );
        format!("\"{name}\"")
    };
    // One query per table: `SELECT 'a=' || quote("a") || ' b=' || quote("b") … FROM "t"`.
    let row_sql = |table: &str, columns: &[String]| {
        let parts = columns
            .iter()
            .map(|c| {
                if volatile.iter().any(|(t, col)| *t == table && col == c) {
                    format!("'{c}=<volatile>'")
                } else {
                    format!("'{c}=' || {quote}({})", ident(c))
                }
            })
            .collect::<Vec<_>>()
            .join(" || ' ' || ");
        sqlx::AssertSqlSafe(format!("SELECT {parts} AS r FROM {}", ident(table)))
    };
    let mut out = std::collections::BTreeMap::new();
    macro_rules! snapshot {
        ($conn:expr) => {{
            let mut c = $conn;
            let tables: Vec<String> = sqlx::query_scalar(tables_sql)
                .fetch_all(&mut c)
                .await
                .expect("list tables");
            for table in tables {
                let columns: Vec<String> = sqlx::query_scalar(columns_sql)
                    .bind(&table)
                    .fetch_all(&mut c)
                    .await
                    .expect("list columns");
                let mut rows: Vec<String> = sqlx::query_scalar(row_sql(&table, &columns))
                    .fetch_all(&mut c)
                    .await
                    .unwrap_or_else(|e| panic!("read {table}: {e}"));
                rows.sort();
                out.insert(table, (columns, rows));
            }
        }};
    }
    if sqlite {
        snapshot!(sqlx::SqliteConnection::connect(url).await.expect("sqlite"));
    } else {
        snapshot!(sqlx::PgConnection::connect(url).await.expect("postgres"));
    }
    for (table, column) in volatile {
        assert!(
            out.get(*table)
                .is_some_and(|(cols, _)| cols.iter().any(|c| c == column)),
            "volatile column {table}.{column} is not in the database"
        );
    }
    out.into_iter().map(|(t, (_, rows))| (t, rows)).collect()
}

/// The rows that differ between two [`table_rows`] snapshots, table by table (`-` only
/// before, `+` only after); empty when they are equal.
pub fn rows_diff(
    before: &std::collections::BTreeMap<String, Vec<String>>,
    after: &std::collections::BTreeMap<String, Vec<String>>,
) -> String {
    let mut report = String::new();
    if before == after {
        return report;
    }
    let tables: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let empty = Vec::new();
    for table in tables {
        let b = before.get(table).unwrap_or(&empty);
        let a = after.get(table).unwrap_or(&empty);
        for row in b.iter().filter(|r| !a.contains(r)) {
            report.push_str(&format!("\n  {table} - {row:.400}"));
        }
        for row in a.iter().filter(|r| !b.contains(r)) {
            report.push_str(&format!("\n  {table} + {row:.400}"));
        }
    }
    report
}

/// Panics with the rows that differ unless two [`table_rows`] snapshots are equal.
pub fn assert_same_rows(
    before: &std::collections::BTreeMap<String, Vec<String>>,
    after: &std::collections::BTreeMap<String, Vec<String>>,
    what: &str,
) {
    let diff = rows_diff(before, after);
    assert!(diff.is_empty(), "{what}: the database changed:{diff}");
}

/// A WebSocket handshake to `/ws` with extra request headers: `Ok` when it upgraded, else the
/// HTTP status it was refused with.
pub async fn ws_handshake(base: &str, headers: &[(&str, &str)]) -> Result<(), u16> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!("{}/ws", base.replacen("http://", "ws://", 1));
    let mut request = url.into_client_request().expect("ws request");
    for (k, v) in headers {
        request.headers_mut().insert(
            reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok(_) => Ok(()),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("websocket handshake failed unexpectedly: {e}"),
    }
}

/// The real `turnstile` binary on a free loopback port (for what an in-process server cannot
/// show: its environment, signals, being killed).
pub struct BinaryServer {
    pub child: tokio::process::Child,
    pub api: Api,
}

impl BinaryServer {
    pub async fn spawn(
        database_url: &str,
        data_dir: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> BinaryServer {
        Self::spawn_on("127.0.0.1", database_url, data_dir, args, env, None).await
    }

    /// [`BinaryServer::spawn`] listening on `host` (`0.0.0.0`: every interface), with
    /// [`TEST_TOKEN`] as its `ACCESS_TOKEN` unless `env` says otherwise, its output (stdout: the log; stderr: what it tells the
    /// user) written to `output.0` and `output.1` when given. Reached over loopback.
    pub async fn spawn_on(
        host: &str,
        database_url: &str,
        data_dir: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
        output: Option<(&std::path::Path, &std::path::Path)>,
    ) -> BinaryServer {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_turnstile"));
        // The log always goes to a file: its start-up line says which port the server bound
        // (port 0 here: a port picked by the test could be taken by another test's connection
        // before the server binds it).
        let log = match output {
            Some((out, _)) => out.to_path_buf(),
            None => data_dir.join(format!("server-{}.log", uuid::Uuid::now_v7())),
        };
        let stderr = match output {
            Some((_, err)) => std::process::Stdio::from(std::fs::File::create(err).unwrap()),
            None => std::process::Stdio::inherit(),
        };
        command
            .env("ACCESS_TOKEN", TEST_TOKEN)
            .args(["--addr", &format!("{host}:0")])
            .arg("--database-url")
            .arg(database_url)
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--mock-agent")
            .arg(env!("CARGO_BIN_EXE_mock_agent"))
            .args(args)
            .env(
                "RUST_LOG",
                if output.is_some() {
                    "info"
                } else {
                    "warn,turnstile=info"
                },
            )
            .stdout(std::process::Stdio::from(
                std::fs::File::create(&log).unwrap(),
            ))
            .stderr(stderr)
            .kill_on_drop(true);
        for (k, v) in env {
            // An empty value removes the variable (`ACCESS_TOKEN`: let the server make one).
            if v.is_empty() {
                command.env_remove(k);
            } else {
                command.env(k, v);
            }
        }
        let mut child = command.spawn().expect("start the server binary");
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(port) = listening_port(&text) {
                break port;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the server exited with {status} before it listened: {text}");
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the server did not start listening: {text}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        let api = Api::new(&format!("http://127.0.0.1:{port}"));
        loop {
            if let Ok(r) = api.client.get(format!("{}/healthz", api.base)).send().await
                && r.status() == 200
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the server did not become healthy"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        BinaryServer { child, api }
    }

    /// Sends a signal to the server process.
    pub fn signal(&self, signal: i32) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// The port of the `turnstile listening addr=…` start-up line in a server's log.
pub fn listening_port(log: &str) -> Option<u16> {
    let line = log.lines().find(|l| l.contains("turnstile listening"))?;
    let addr = line.split("addr=").nth(1)?.split_whitespace().next()?;
    addr.rsplit(':').next()?.parse().ok()
}

/// Whether process `pid` still runs (a zombie waiting to be reaped does not).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Polls `what` until it holds (deadline 20 s).
pub async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A session with `turns` turns, each holding a message and a (stale, but for the last)
/// pending bundle: the shape of B1. Returns the session's id and its task's.
pub async fn session_with_history(repo: &Arc<dyn Repository>, turns: usize) -> (String, String) {
    let task = repo
        .create_task(
            &repo::NewTask {
                title: "history".into(),
                ..Default::default()
            },
            0,
        )
        .await
        .unwrap()
        .id;
    let session = repo
        .create_session(
            &repo::NewSession {
                task_id: task.clone(),
                agent_profile_id: None,
                name: "s".into(),
                state: turnstile::model::SessionState::WaitingForInput,
                is_primary: true,
                mcp_token_hash: None,
            },
            0,
        )
        .await
        .unwrap()
        .id;
    for t in 0..turns {
        let at = 1_000 + t as i64;
        let turn = repo
            .insert_turn(&repo::NewTurn {
                id: None,
                session_id: session.clone(),
                started_at: at,
                created_at: at,
                fence: None,
            })
            .await
            .unwrap()
            .id;
        repo.insert_message(
            &repo::NewMessage {
                session_id: session.clone(),
                turn_id: turn.clone(),
                author: turnstile::model::MessageAuthor::Agent,
                kind: turnstile::model::MessageKind::Text,
                content: "m".into(),
                pending_id: None,
            },
            at,
        )
        .await
        .unwrap();
        repo.insert_bundle(
            &repo::NewBundle {
                pending_id: None,
                session_id: session.clone(),
                turn_id: turn,
                context: None,
                dedup_key: format!("k{t}"),
                questions: vec![],
                message_content: "?".into(),
            },
            at,
        )
        .await
        .unwrap();
    }
    (session, task)
}

/// The value of the unlabelled metric `name` in a `/metrics` text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// One HTTP/1.1 request sent byte for byte as given — `path` is not normalised (an HTTP
/// library would resolve `%2e%2e` segments before sending) — answered as (status, body; a
/// chunked body decoded).
pub async fn raw_http(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        stream.read_to_end(&mut answer),
    )
    .await
    .expect("an answer in time")
    .expect("read");
    let text = String::from_utf8_lossy(&answer).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    if !chunked {
        return (status, rest.to_string());
    }
    let mut body = String::new();
    let mut rest = rest;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        body.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    (status, body)
}
