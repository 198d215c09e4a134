/// Rust's allocations go to mimalloc: with the agents' work on the same threads, glibc's
/// arena locks cost the server a third of its round-trip rate (B3 980 → 1,360/s;
/// docs/decisions/0031-mimalloc.md). SQLite's own allocations stay with glibc.
#[cfg(feature = "ssr")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `turnstile --version`: the package version and the git revision it was built from
/// (`scripts/build.sh` sets `TURNSTILE_GIT_REVISION`; a build without it says `unknown`).
#[cfg(feature = "ssr")]
fn version() -> &'static str {
    let revision = option_env!("TURNSTILE_GIT_REVISION").unwrap_or("unknown");
    Box::leak(format!("{} ({revision})", env!("CARGO_PKG_VERSION")).into_boxed_str())
}

#[cfg(feature = "ssr")]
fn main() -> std::process::ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    limit_malloc_arenas();
    not_dumpable();
    if std::env::args().nth(1).as_deref() == Some(turnstile::server::mcp_stdio::SUBCOMMAND) {
        return mcp_stdio();
    }
    let config = match turnstile::server::config::Config::command()
        .version(version())
        .try_get_matches()
        .and_then(|m| turnstile::server::config::Config::from_arg_matches(&m))
    {
        Ok(config) => config,
        Err(e) => e.exit(),
    };
    // The secrets in the environment are read once, then wiped from it (before any other
    // thread exists).
    let env_token = take_secret_env("ACCESS_TOKEN");
    take_secret_env("DATABASE_URL");
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
        .block_on(serve(config, env_token))
}

/// `turnstile mcp-stdio` (A3): our MCP tool over stdio for an agent that cannot speak MCP
/// over HTTP, relayed to the server named in the environment.
#[cfg(feature = "ssr")]
fn mcp_stdio() -> std::process::ExitCode {
    use turnstile::server::mcp_stdio::{TOKEN_ENV, URL_ENV, run};
    let (Ok(url), Some(token)) = (std::env::var(URL_ENV), take_secret_env(TOKEN_ENV)) else {
        eprintln!(
            "turnstile mcp-stdio: {URL_ENV} and {TOKEN_ENV} must be set (the server sets them for its agents)"
        );
        return std::process::ExitCode::from(2);
    };
    let ran = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
        .block_on(run(url, token));
    match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("turnstile mcp-stdio: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Spec "Server process": other processes of the same user — the agents this server starts
/// among them — cannot read this process's environment (the access token, the database URL)
/// or memory through `/proc`, nor attach a debugger. Agents also lose `CAP_SYS_PTRACE`
/// (`agents::process`), which would let a root agent read them anyway.
/// Reads `name` from the environment, then overwrites its value where the process's initial
/// environment holds it (the memory `/proc/<pid>/environ` shows) and removes it: a kernel that
/// lets a same-user process read that file despite [`not_dumpable`] finds no secret there.
/// Call it while this is the only thread.
#[cfg(feature = "ssr")]
fn take_secret_env(name: &str) -> Option<String> {
    let value = std::env::var(name).ok();
    let key = std::ffi::CString::new(name).ok()?;
    // SAFETY: the only thread runs this; getenv returns a pointer to the NUL-terminated value
    // inside this process's own environment block (or null), which we overwrite within its
    // length before unsetting the variable; nothing else holds a reference to it.
    unsafe {
        let p = libc::getenv(key.as_ptr());
        if !p.is_null() {
            std::ptr::write_bytes(p, b'*', libc::strlen(p));
        }
        std::env::remove_var(name);
    }
    value
}

#[cfg(feature = "ssr")]
fn not_dumpable() {
    // SAFETY: prctl(2) with PR_SET_DUMPABLE takes plain integers and touches no memory.
    let r = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if r != 0 {
        eprintln!(
            "warning: cannot make the server undumpable: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// For what still uses glibc's allocator (SQLite; decision 0031 moved Rust's allocations to
/// mimalloc): glibc gives threads that contend for memory their own malloc arenas (up to eight per
/// core) and seldom returns their free pages: with 50 agents at work the server's RSS rose to 220
/// MB and kept creeping (+11% over 10,000 more round trips); with two arenas it stays ~123 MB and
/// flat at the same throughput (B6; docs/decisions/0019-malloc-arenas.md). Runs before any other
/// thread exists; an explicit `MALLOC_ARENA_MAX` in the environment wins.
#[cfg(feature = "ssr")]
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: a plain call into glibc's allocator settings, made while this is the only
        // thread.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

#[cfg(feature = "ssr")]
async fn serve(
    config: turnstile::server::config::Config,
    env_token: Option<String>,
) -> std::process::ExitCode {
    use std::sync::Arc;
    use std::time::Duration;

    use leptos::prelude::LeptosOptions;
    use turnstile::server::auth::{FrontDoor, TokenSource, resolve_token};
    use turnstile::server::{repo, startup, time::Clock};

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,sqlx=warn".into());
    match config.log_format {
        turnstile::server::config::LogFormat::Text => tracing_subscriber::fmt()
            // Colours only on a terminal: a log file or pipe gets plain text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .with_env_filter(filter)
            .init(),
        turnstile::server::config::LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_env_filter(filter)
            .init(),
    }

    let fail = |what: String| {
        eprintln!("error: {what}");
        std::process::ExitCode::FAILURE
    };
    if config.access_token.is_some() {
        return fail(
            "--access-token is not accepted: every user of this machine can read a command \
             line. Put the token in ACCESS_TOKEN or in a file only you can read \
             (--access-token-file)"
                .into(),
        );
    }
    if let Err(e) = std::fs::create_dir_all(&config.data_dir) {
        return fail(format!(
            "cannot create data directory {}: {e}",
            config.data_dir.display()
        ));
    }
    let token = if config.no_token_on_loopback {
        if !config.addr.ip().is_loopback() {
            return fail(format!(
                "--no-token-on-loopback applies to a loopback address only, not {}",
                config.addr
            ));
        }
        tracing::warn!(
            "--no-token-on-loopback: every program and every user on this machine can use this \
             server without a token, including starting agents with any command"
        );
        None
    } else {
        match resolve_token(
            env_token.as_deref(),
            config.access_token_file.as_deref(),
            &config.data_dir,
        ) {
            Ok((token, source)) => {
                if source == TokenSource::Generated {
                    tracing::info!(
                        file = %config.data_dir.join("access-token").display(),
                        "generated an access token"
                    );
                }
                Some(token)
            }
            Err(e) => return fail(e),
        }
    };
    let url = match config.resolved_database_url() {
        Ok(url) => url,
        Err(e) => {
            return fail(format!(
                "cannot create data directory {}: {e}",
                config.data_dir.display()
            ));
        }
    };
    let repo = match repo::connect(&url).await {
        Ok(repo) => repo,
        Err(e) => return fail(format!("cannot open database: {e}")),
    };
    // Bound before start-up, so agents relaunched by it know the port (`--addr …:0` too).
    let listener = match tokio::net::TcpListener::bind(config.addr).await {
        Ok(l) => l,
        Err(e) => return fail(format!("cannot bind {}: {e}", config.addr)),
    };
    let bound = listener.local_addr().unwrap_or(config.addr);
    let options = LeptosOptions::builder()
        .output_name("turnstile")
        // Empty: the files built into the binary (`api::site`).
        .site_root(config.site_root.clone().unwrap_or_default())
        .site_pkg_dir("pkg")
        .site_addr(bound)
        .build();
    let files = turnstile::api::site::SiteFiles::of(&options.site_root);
    if !files.has_bundle(&options.output_name) {
        tracing::warn!(
            files = ?files,
            "no browser bundle: pages will have no script (build it with scripts/build.sh, or \
             give --site-root a built site)"
        );
    }
    let runtime = match config.runtime(bound) {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot prepare the agent runtime: {e}")),
    };
    let state = match startup::build_state(repo, options, Clock::System, runtime).await {
        Ok(state) => state,
        Err(e) => return fail(format!("start-up failed: {e}")),
    };
    let mut door = FrontDoor::new(bound, &config.allowed_hosts, token);
    door.cookie_secure = config.cookie_secure;
    // The start-up line: where the server listens and, with a token, a login link that works
    // once (the token itself is never logged).
    let mut reach = bound;
    if reach.ip().is_unspecified() {
        reach.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let login_url = match door.token() {
        Some(_) => format!(
            "http://{reach}/login?token={}",
            door.login_codes.mint(std::time::Instant::now())
        ),
        None => format!("http://{reach}/"),
    };
    tracing::info!(addr = %bound, url = %login_url, backend = ?state.repo.backend(), epoch = state.epoch, "turnstile listening");
    if door.token().is_some() && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!(
            "\n    Open {login_url} to log in (the link works once; the access token is in {} \
             unless given).\n",
            config
                .access_token_file
                .clone()
                .unwrap_or_else(|| config.data_dir.join("access-token"))
                .display()
        );
    }
    let door = Arc::new(door);
    let app = turnstile::api::router(state.clone(), door);
    let stopping = state.shutdown.clone();
    let serve = turnstile::api::serve(listener, app, turnstile::api::Limits::default(), {
        let stopping = stopping.clone();
        async move { stopping.cancelled().await }
    });
    tokio::spawn({
        let state = state.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down: stopping agents and open streams");
            startup::shutdown(&state);
        }
    });
    // Graceful, with a hard deadline: a client holding a stream open cannot keep us alive.
    let deadline = Duration::from_secs(config.shutdown_timeout);
    tokio::select! {
        () = serve => {}
        _ = async { stopping.cancelled().await; tokio::time::sleep(deadline).await } => {
            tracing::warn!("open requests did not finish within {deadline:?}; exiting");
        }
    }
    startup::finish(&state).await;
    // What the last moments wrote without acknowledging it (summaries, streamed output) goes
    // to disk before the process exits (decision 0024).
    if let Err(e) = state.durable().await {
        tracing::warn!(error = %e, "cannot sync the database before exiting");
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(feature = "ssr")]
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

#[cfg(not(feature = "ssr"))]
pub fn main() {
    // The browser entry point is `turnstile::hydrate` (lib.rs).
}
