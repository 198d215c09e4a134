//! Command-line flags and environment (spec/api.md "Server process").

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(clap::Parser, Clone, Debug)]
#[command(
    name = "turnstile",
    about = "A workspace for people who run AI coding agents",
    long_about = "A workspace for people who run AI coding agents.\n\nEvery flag with an \
                  environment variable (shown as [env: …]) can be set through it instead."
)]
pub struct Config {
    /// `sqlite:<path>` or `postgres://…`. Default: an embedded SQLite file in the data directory.
    #[arg(long, env = "DATABASE_URL", help_heading = "Storage")]
    pub database_url: Option<String>,
    /// Where the embedded database lives (created if missing).
    #[arg(
        long,
        env = "TURNSTILE_DATA_DIR",
        default_value = "./data",
        help_heading = "Storage"
    )]
    pub data_dir: PathBuf,
    /// Address to serve on.
    #[arg(
        long,
        env = "LEPTOS_SITE_ADDR",
        default_value = "127.0.0.1:3000",
        help_heading = "Serving"
    )]
    pub addr: SocketAddr,
    /// Serve the front end (`pkg/` with wasm, JS and CSS, and `favicon.svg`) from this
    /// directory instead of the files built into the binary.
    #[arg(
        long,
        env = "LEPTOS_SITE_ROOT",
        value_name = "DIR",
        help_heading = "Serving"
    )]
    pub site_root: Option<String>,
    /// Seconds between progress notifications while a question waits (L7).
    #[arg(
        long,
        env = "TURNSTILE_ASK_KEEPALIVE",
        default_value_t = 20,
        help_heading = "Questions"
    )]
    pub ask_keepalive: u64,
    /// Seconds an `ask_user_question` call waits before it detaches (L9).
    #[arg(
        long,
        env = "TURNSTILE_ASK_TIMEOUT",
        default_value_t = 7200,
        help_heading = "Questions"
    )]
    pub ask_timeout: u64,
    /// The mock agent binary (default: `mock_agent` next to this binary).
    #[arg(long, env = "TURNSTILE_MOCK_AGENT", help_heading = "Agents")]
    pub mock_agent: Option<PathBuf>,
    /// Run the mock agent (profile `mock`) inside this process over an in-memory pipe instead
    /// of as a process: still ACP, and MCP over HTTP. For benchmarks and demos with many
    /// sessions; other profiles are processes as always.
    /// Only in `test-hooks` builds (decision 0042).
    #[cfg(feature = "test-hooks")]
    #[arg(long, env = "TURNSTILE_MOCK_IN_PROCESS", value_parser = clap::builder::BoolishValueParser::new(), help_heading = "Agents")]
    pub mock_in_process: bool,
    /// Another host name this server answers to (repeatable), e.g. a name a reverse proxy
    /// forwards. Loopback names and the bound address are always allowed.
    #[arg(long = "allowed-host", value_name = "HOST", help_heading = "Access")]
    pub allowed_hosts: Vec<String>,
    /// A file holding the access token (readable by its owner only). Without it the token is
    /// `ACCESS_TOKEN` from the environment, else `<data-dir>/access-token`, generated on first
    /// start. Never on the command line, where every user of the machine can read it.
    #[arg(long, value_name = "FILE", help_heading = "Access")]
    pub access_token_file: Option<PathBuf>,
    /// Refused with an explanation: a token on the command line is visible to every local user.
    #[arg(long, hide = true, help_heading = "Access")]
    pub access_token: Option<String>,
    /// Lets loopback clients in without the token (anyone on this machine, and any local
    /// program, gets the full API). Only for a server bound to a loopback address.
    #[arg(long, help_heading = "Access")]
    pub no_token_on_loopback: bool,
    /// Marks the login cookie `Secure` (a TLS proxy in front of the server).
    #[arg(long, env = "TURNSTILE_COOKIE_SECURE", value_parser = clap::builder::BoolishValueParser::new(), help_heading = "Access")]
    pub cookie_secure: bool,
    /// Seconds an agent may take to finish the ACP handshake before it is killed.
    #[arg(
        long,
        env = "TURNSTILE_AGENT_START_TIMEOUT",
        default_value_t = 30,
        help_heading = "Agents"
    )]
    pub agent_start_timeout: u64,
    /// The agent profile (by name) of a task or session created without one (A5).
    #[arg(
        long,
        env = "TURNSTILE_DEFAULT_AGENT",
        default_value = "mock",
        help_heading = "Agents"
    )]
    pub default_agent: String,
    /// Agent processes that may run at once; idle ones are stopped to make room (their
    /// sessions relaunch on demand).
    #[arg(
        long,
        env = "TURNSTILE_MAX_AGENTS",
        default_value_t = 16,
        help_heading = "Agents"
    )]
    pub max_agents: usize,
    /// W1: a directory repositories may be registered from (repeatable; in the variable,
    /// several joined with `:`). Default: the home directory.
    #[arg(
        long = "workspace-root",
        value_name = "DIR",
        env = "TURNSTILE_WORKSPACE_ROOT",
        value_delimiter = ':',
        help_heading = "Agents"
    )]
    pub workspace_roots: Vec<PathBuf>,
    /// Seconds a shutdown waits for open requests (MCP streams, sockets) before it exits.
    #[arg(
        long,
        env = "TURNSTILE_SHUTDOWN_TIMEOUT",
        default_value_t = 5,
        help_heading = "Serving"
    )]
    pub shutdown_timeout: u64,
    /// This server's name among several on one PostgreSQL database (letters, digits, `-`,
    /// `_`; at most 64). Default: generated once and kept in `<data-dir>/server-id`.
    #[arg(long, env = "TURNSTILE_SERVER_ID", help_heading = "Several servers")]
    pub server_id: Option<String>,
    /// Seconds after its last heartbeat (every third of it) that a server counts as dead and
    /// the others take its sessions over (several servers on PostgreSQL).
    #[arg(
        long,
        env = "TURNSTILE_SERVER_TTL",
        default_value_t = 30,
        help_heading = "Several servers"
    )]
    pub server_ttl: u64,
    /// How log lines are written: `text` (for a person) or `json` (one object per line, for
    /// a log collector). Each request writes one line (target `turnstile::access`).
    #[arg(long, env = "TURNSTILE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, help_heading = "Logging")]
    pub log_format: LogFormat,
}

/// `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// A server id as `--server-id` takes it.
pub fn valid_server_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl Config {
    /// The database URL to use: the flag/env value, or the embedded SQLite default (after
    /// creating the data directory).
    /// The runtime settings of a server bound to `bound` (agents reach `/mcp` there).
    pub fn runtime(
        &self,
        bound: SocketAddr,
    ) -> std::io::Result<crate::server::runtime::RuntimeConfig> {
        let mock_agent = match &self.mock_agent {
            // Agents run in their workspace: a relative path is taken from where the server
            // was started.
            Some(p) => std::path::absolute(p)?,
            None => std::env::current_exe()?.with_file_name("mock_agent"),
        };
        std::fs::create_dir_all(&self.data_dir)?;
        // Agents reach /mcp over loopback even when the server listens on every interface.
        let mut reach = bound;
        if reach.ip().is_unspecified() {
            reach.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let server_id = match &self.server_id {
            Some(id) if valid_server_id(id) => id.clone(),
            Some(id) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("--server-id {id:?}: use 1 to 64 letters, digits, '-' or '_'"),
                ));
            }
            None => {
                let file = self.data_dir.join("server-id");
                match std::fs::read_to_string(&file) {
                    Ok(id) if valid_server_id(id.trim()) => id.trim().to_string(),
                    _ => {
                        let id = uuid::Uuid::new_v4().simple().to_string();
                        std::fs::write(&file, &id)?;
                        id
                    }
                }
            }
        };
        Ok(crate::server::runtime::RuntimeConfig {
            server_id,
            server_ttl: std::time::Duration::from_secs(self.server_ttl.max(1)),
            self_url: format!("http://{reach}"),
            mock_agent,
            server_exe: std::env::current_exe()?,
            workdir: std::path::absolute(self.data_dir.join("workspace"))?,
            worktrees: std::path::absolute(self.data_dir.join("worktrees"))?,
            workspace_roots: if self.workspace_roots.is_empty() {
                std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .into_iter()
                    .collect()
            } else {
                self.workspace_roots
                    .iter()
                    .map(std::path::absolute)
                    .collect::<std::io::Result<_>>()?
            },
            ask_keepalive: std::time::Duration::from_secs(self.ask_keepalive.max(1)),
            ask_timeout: std::time::Duration::from_secs(self.ask_timeout.max(1)),
            agent_start_timeout: std::time::Duration::from_secs(self.agent_start_timeout.max(1)),
            default_agent: self.default_agent.clone(),
            max_agents: self.max_agents.max(1),
            max_websocket_clients: crate::server::runtime::MAX_WEBSOCKET_CLIENTS,
            sync_wait: crate::server::runtime::SYNC_WAIT,
            summary_gather: crate::server::runtime::SUMMARY_GATHER,
            #[cfg(feature = "test-hooks")]
            in_process_mock: self
                .mock_in_process
                .then(crate::mock_agent::InProcess::unrecorded),
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
