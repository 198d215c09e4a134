//! In-memory coordination of live work: the session workers, the waiting `ask_user_question`
//! calls and the waiting permission requests. Truth stays in the database; nothing here needs
//! to survive a restart.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::model::Response;

#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Base URL agents use to reach our MCP endpoint (`{self_url}/mcp`).
    pub self_url: String,
    /// The bundled mock agent binary (profile `mock`).
    pub mock_agent: PathBuf,
    /// Working directory for agent processes.
    pub workdir: PathBuf,
    /// L7: progress notifications while a question waits.
    pub ask_keepalive: Duration,
    /// How long an `ask_user_question` call waits before it detaches (L9).
    pub ask_timeout: Duration,
}

/// A map where exactly one party can take an entry (L13/L15: one of respond, cancel, timeout
/// wins a waiter).
pub struct Slots<T> {
    inner: Mutex<HashMap<String, T>>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            inner: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Slots<T> {
    /// Registers `value` under `key`, replacing (and returning) an older one.
    pub fn put(&self, key: &str, value: T) -> Option<T> {
        self.inner
            .lock()
            .expect("slots lock")
            .insert(key.to_string(), value)
    }

    /// Takes the entry: whoever gets `Some` owns it.
    pub fn take(&self, key: &str) -> Option<T> {
        self.inner.lock().expect("slots lock").remove(key)
    }
}

pub struct Runtime {
    pub config: RuntimeConfig,
    /// `pending_id` → the blocked MCP tool call waiting for its answer.
    pub waiters: Slots<oneshot::Sender<Response>>,
    /// permission request id → the agent's pending `session/request_permission`.
    pub permissions: Slots<oneshot::Sender<Option<String>>>,
    /// session id → its worker.
    pub workers: Mutex<HashMap<String, crate::server::orchestrator::worker::SessionHandle>>,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Self {
        Runtime {
            config,
            waiters: Slots::default(),
            permissions: Slots::default(),
            workers: Mutex::new(HashMap::new()),
        }
    }
}
