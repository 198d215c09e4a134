#[cfg(feature = "ssr")]
#[tokio::main]
async fn main() -> std::process::ExitCode {
    use clap::Parser;
    use leptos::prelude::LeptosOptions;
    use turnstile::server::{config::Config, repo, startup, time::Clock};

    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .init();

    let config = Config::parse();
    if !config.addr.ip().is_loopback() {
        eprintln!(
            "error: refusing to bind {}: access tokens for non-loopback addresses are not \
             implemented yet; bind 127.0.0.1",
            config.addr
        );
        return std::process::ExitCode::FAILURE;
    }
    let url = match config.resolved_database_url() {
        Ok(url) => url,
        Err(e) => {
            eprintln!(
                "error: cannot create data directory {}: {e}",
                config.data_dir.display()
            );
            return std::process::ExitCode::FAILURE;
        }
    };
    let repo = match repo::connect(&url).await {
        Ok(repo) => repo,
        Err(e) => {
            eprintln!("error: cannot open database: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let options = LeptosOptions::builder()
        .output_name("turnstile")
        .site_root(config.site_root.as_str())
        .site_pkg_dir("pkg")
        .site_addr(config.addr)
        .build();
    let runtime = match config.runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot prepare the agent runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let state = match startup::build_state(repo, options, Clock::System, runtime).await {
        Ok(state) => state,
        Err(e) => {
            eprintln!("error: start-up failed: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(config.addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot bind {}: {e}", config.addr);
            return std::process::ExitCode::FAILURE;
        }
    };
    tracing::info!(addr = %config.addr, backend = ?state.repo.backend(), epoch = state.epoch, "turnstile listening");
    let app = startup::router(state);
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown())
        .await
    {
        eprintln!("error: server failed: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(feature = "ssr")]
async fn shutdown() {
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(not(feature = "ssr"))]
pub fn main() {
    // The browser entry point is `turnstile::hydrate` (lib.rs).
}
