//! Servers under test: the real router and state in this process (`TestServer`), or the real
//! binary as a child process (`BinaryServer`), both behind `TEST_TOKEN`.

use turnstile::server::repo;

use super::*;

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
        // A stand-in wasm module of the size of a page chunk, compressible like a real one.
        let mut wasm = b"\0asm\x01\0\0\0".to_vec();
        wasm.extend((0..64 * 1024).map(|i: u32| (i % 251) as u8 & 0x3f));
        std::fs::write(root.join("pkg/turnstile_bg.wasm"), wasm).unwrap();
        std::fs::write(
            root.join("favicon.svg"),
            "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n",
        )
        .unwrap();
        root.to_str().unwrap().to_string()
    })
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
            server_exe: env!("CARGO_BIN_EXE_turnstile").into(),
            default_agent: "mock".into(),
            workdir: temp_dir("workspace"),
            worktrees: temp_dir("worktrees"),
            workspace_roots: vec![std::env::temp_dir()],
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
    // `addr=host:port` in text, `"addr":"host:port"` with `--log-format json`.
    let addr = match line.split("addr=").nth(1) {
        Some(rest) => rest.split_whitespace().next()?,
        None => line.split("\"addr\":\"").nth(1)?.split('"').next()?,
    };
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

/// The processes whose environment holds `marker` (an agent inherits its profile's env).
pub fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == marker.as_bytes()))
        })
        .collect()
}
