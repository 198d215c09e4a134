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
}

impl Config {
    /// The database URL to use: the flag/env value, or the embedded SQLite default (after
    /// creating the data directory).
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
