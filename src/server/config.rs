//! Command-line flags and environment (spec/api.md "Server process").

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(clap::Parser, Clone, Debug)]
#[command(
    name = "turnstile",
    about = "A workspace for people who run AI coding agents"
)]
pub struct Config {
    /// `sqlite:<path>` or `postgres://…`. Default: an embedded SQLite file in the data directory.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Where the embedded database lives (created if missing).
    #[arg(long, env = "TURNSTILE_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Address to serve on.
    #[arg(long, env = "LEPTOS_SITE_ADDR", default_value = "127.0.0.1:3000")]
    pub addr: SocketAddr,
    /// Directory with the built front end (`pkg/` with wasm, JS and CSS).
    #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
    pub site_root: String,
    /// Seconds between progress notifications while a question waits (L7).
    #[arg(long, env = "TURNSTILE_ASK_KEEPALIVE", default_value_t = 20)]
    pub ask_keepalive: u64,
    /// Seconds an `ask_user_question` call waits before it detaches (L9).
    #[arg(long, env = "TURNSTILE_ASK_TIMEOUT", default_value_t = 7200)]
    pub ask_timeout: u64,
    /// The mock agent binary (default: `mock_agent` next to this binary).
    #[arg(long, env = "TURNSTILE_MOCK_AGENT")]
    pub mock_agent: Option<PathBuf>,
}

impl Config {
    /// The database URL to use: the flag/env value, or the embedded SQLite default (after
    /// creating the data directory).
    pub fn runtime(&self) -> std::io::Result<crate::server::runtime::RuntimeConfig> {
        let mock_agent = match &self.mock_agent {
            Some(p) => p.clone(),
            None => std::env::current_exe()?.with_file_name("mock_agent"),
        };
        std::fs::create_dir_all(&self.data_dir)?;
        Ok(crate::server::runtime::RuntimeConfig {
            self_url: format!("http://{}", self.addr),
            mock_agent,
            workdir: std::path::absolute(self.data_dir.join("workspace"))?,
            ask_keepalive: std::time::Duration::from_secs(self.ask_keepalive.max(1)),
            ask_timeout: std::time::Duration::from_secs(self.ask_timeout.max(1)),
        })
    }

    pub fn resolved_database_url(&self) -> std::io::Result<String> {
        if let Some(url) = &self.database_url {
            return Ok(url.clone());
        }
        std::fs::create_dir_all(&self.data_dir)?;
        Ok(format!(
            "sqlite:{}",
            self.data_dir.join("turnstile.db").display()
        ))
    }
}
