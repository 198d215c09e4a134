/// Rust's allocations go to mimalloc: with the agents' work on the same threads, glibc's
/// arena locks cost the server a third of its round-trip rate (B3 980 → 1,360/s;
/// docs/decisions/0031-mimalloc.md). SQLite's own allocations stay with glibc.
#[cfg(feature = "ssr")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "ssr")]
fn main() -> std::process::ExitCode {
    limit_malloc_arenas();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts")
        .block_on(serve())
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
async fn serve() -> std::process::ExitCode {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use clap::Parser;
    use leptos::prelude::LeptosOptions;
    use turnstile::server::auth::{FrontDoor, generate_token};
    use turnstile::server::{config::Config, repo, startup, time::Clock};

    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .init();

    let fail = |what: String| {
        eprintln!("error: {what}");
        std::process::ExitCode::FAILURE
    };
    let config = Config::parse();
    // Beyond loopback every client needs the access token; make one if none was given and
    // show it once, on the terminal only (never in the log).
    let token = match (&config.access_token, config.addr.ip().is_loopback()) {
        (Some(t), _) if t.trim().len() < 16 => {
            return fail("--access-token must be at least 16 characters".into());
        }
        (Some(t), _) => Some(t.trim().to_string()),
        (None, true) => None,
        (None, false) => {
            let t = generate_token();
            eprintln!(
                "Turnstile listens on {} beyond this machine. Access token (log in with it, or \
                 send `Authorization: Bearer <token>`):\n\n    {t}\n",
                config.addr
            );
            Some(t)
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
    let options = LeptosOptions::builder()
        .output_name("turnstile")
        .site_root(config.site_root.as_str())
        .site_pkg_dir("pkg")
        .site_addr(config.addr)
        .build();
    let runtime = match config.runtime() {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot prepare the agent runtime: {e}")),
    };
    let state = match startup::build_state(repo, options, Clock::System, runtime).await {
        Ok(state) => state,
        Err(e) => return fail(format!("start-up failed: {e}")),
    };
    let listener = match tokio::net::TcpListener::bind(config.addr).await {
        Ok(l) => l,
        Err(e) => return fail(format!("cannot bind {}: {e}", config.addr)),
    };
    tracing::info!(addr = %config.addr, backend = ?state.repo.backend(), epoch = state.epoch, token = token.is_some(), "turnstile listening");
    let door = Arc::new(FrontDoor::new(config.addr, &config.allowed_hosts, token));
    let app = turnstile::api::router(state.clone(), door);
    let stopping = state.shutdown.clone();
    let serve = axum::serve(
        turnstile::api::listener(listener),
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown({
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
    let result = tokio::select! {
        r = serve => r,
        _ = async { stopping.cancelled().await; tokio::time::sleep(deadline).await } => {
            tracing::warn!("open requests did not finish within {deadline:?}; exiting");
            Ok(())
        }
    };
    startup::finish(&state).await;
    // What the last moments wrote without acknowledging it (summaries, streamed output) goes
    // to disk before the process exits (decision 0024).
    if let Err(e) = state.durable().await {
        tracing::warn!(error = %e, "cannot sync the database before exiting");
    }
    if let Err(e) = result {
        return fail(format!("server failed: {e}"));
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
