//! In-memory coordination of live work: the session workers, the waiting `ask_user_question`
//! calls, the waiting permission requests, which agents run, and small per-session counters.
//! Truth stays in the database; nothing here needs to survive a restart.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// This server among those sharing a PostgreSQL database (`--server-id`).
    pub server_id: String,
    /// A server not heard from for this long is dead: others take its sessions over. It
    /// records a heartbeat every third of it (`--server-ttl`).
    pub server_ttl: Duration,
    /// Base URL agents use to reach our MCP endpoint (`{self_url}/mcp`).
    pub self_url: String,
    /// The bundled mock agent binary (profile `mock`).
    pub mock_agent: PathBuf,
    /// This server's binary: agents without HTTP MCP run `<server_exe> mcp-stdio` (A3).
    pub server_exe: PathBuf,
    /// A5: the profile (by name) of a session created without one.
    pub default_agent: String,
    /// W2: `<data-dir>/workspace`, holding a directory per task without a repository.
    pub workdir: PathBuf,
    /// W3: `<data-dir>/worktrees`, holding the worktree of each task on a git repository.
    pub worktrees: PathBuf,
    /// W1: repositories lie under one of these (`--workspace-root`).
    pub workspace_roots: Vec<PathBuf>,
    /// L7: progress notifications while a question waits.
    pub ask_keepalive: Duration,
    /// How long an `ask_user_question` call waits before it detaches (L9).
    pub ask_timeout: Duration,
    /// How long an agent may take to finish the ACP handshake before it is killed.
    pub agent_start_timeout: Duration,
    /// Agent processes that may run at once (idle ones are stopped to make room).
    pub max_agents: usize,
    /// WebSocket connections served at once (`/ws`); one more is refused with 503
    /// ([`MAX_WEBSOCKET_CLIENTS`] unless a test sets fewer).
    pub max_websocket_clients: usize,
    /// How long a question waits for the session worker to take the agent's earlier output
    /// (`worker::sync`, decision 0033; [`SYNC_WAIT`] unless a test sets less).
    pub sync_wait: Duration,
    /// How long the projector lets a task's events gather before it refreshes the task's
    /// summary ([`SUMMARY_GATHER`] unless a test sets another).
    pub summary_gather: Duration,
    /// The `mock` profile runs the mock agent inside this process (tests, recording prompts;
    /// `--mock-in-process`, recording nothing).
    #[cfg(feature = "test-hooks")]
    pub in_process_mock: Option<crate::mock_agent::InProcess>,
}

/// How long a question waits for the agent's earlier output by default (decision 0033): an
/// agent that withholds it delays only its own question, by at most this.
pub const SYNC_WAIT: Duration = Duration::from_secs(1);

/// How long a task's events gather before its summary is refreshed (P4; decision 0039): a
/// round trip moves the summary to `running` and back to a question within a few
/// milliseconds, and refreshed once after both it is not rewritten at all.
pub const SUMMARY_GATHER: Duration = Duration::from_millis(5);

/// The default bound on WebSocket connections served at once.
pub const MAX_WEBSOCKET_CLIENTS: usize = 1024;

mod questions;
mod slots;

pub use questions::{Completions, QuestionCache};
pub use slots::{AgentSlots, SessionCounters, Slots, WaiterMsg};

pub struct Runtime {
    pub config: RuntimeConfig,
    /// Where tasks' agents work, and the git locks (W1–W3, W7).
    pub workspaces: crate::server::workspace::Workspaces,
    /// `pending_id` → the blocked MCP tool call waiting for its answer.
    pub waiters: Slots<oneshot::Sender<WaiterMsg>>,
    /// permission request id → the agent's pending `session/request_permission`.
    pub permissions: Slots<oneshot::Sender<Option<String>>>,
    /// session id → its worker.
    pub workers: Mutex<HashMap<String, crate::server::mailbox::SessionHandle>>,
    pub agents: AgentSlots,
    /// The process groups of the agents running now (killed, whatever is left, on shutdown).
    pub agent_groups: Arc<crate::server::agents::process::AgentGroups>,
    /// Several servers: the sessions whose agent runs here and that `session_owners` records as this
    /// server's (PostgreSQL); the heartbeat checks they still are.
    pub owned: Slots<()>,
    pub counters: SessionCounters,
    /// The questions of bundles asked here, for answers to validate against (B3).
    pub questions: QuestionCache,
    /// The projector's task, awaited at shutdown while it writes the refreshes it had queued
    /// (`startup::finish`).
    pub projector: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Stops the projector: cancelled by `startup::finish` once nothing publishes any more
    /// (the HTTP server drained), not when a shutdown begins — events of requests that finish
    /// during the drain are still projected (P10).
    pub projector_stop: tokio_util::sync::CancellationToken,
    /// Agents' elicitations (E2) on their way from the session workers to the service that
    /// asks them (`clarification::elicitation::serve`, started at boot). Bounded.
    pub elicitations: mpsc::Sender<Elicitation>,
    /// The queue's other end, until boot takes it.
    pub elicitations_rx: Mutex<Option<mpsc::Receiver<Elicitation>>>,
    /// Rounds of taking dead servers' sessions over and delivering owed resumes that the
    /// heartbeat started and that finished (`startup::spawn_heartbeat`; several servers).
    pub lease_rounds: tokio::sync::watch::Sender<u64>,
    /// Profiles whose check runs now (A2: one at a time per profile).
    pub profile_checks: Slots<()>,
    /// session → prompts waiting behind its open turn on this server (P3; `/metrics`).
    pub queued: Slots<usize>,
    /// E7: `elicitation/complete` of the agents, met with the link questions they complete.
    pub completions: Completions,
}

/// An agent's elicitation and the session it came from.
pub struct Elicitation {
    pub session_id: String,
    pub ask: crate::server::agents::ElicitationAsk,
}

/// Elicitations waiting to be asked; a full queue answers the agent `cancel`.
const ELICITATION_QUEUE: usize = 256;

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Self {
        let (elicitations, elicitations_rx) = mpsc::channel(ELICITATION_QUEUE);
        Runtime {
            workspaces: crate::server::workspace::Workspaces::new(
                config.workdir.clone(),
                config.worktrees.clone(),
                &config.workspace_roots,
            ),
            elicitations,
            elicitations_rx: Mutex::new(Some(elicitations_rx)),
            lease_rounds: tokio::sync::watch::Sender::new(0),
            profile_checks: Slots::default(),
            queued: Slots::default(),
            completions: Completions::default(),
            agents: AgentSlots::new(config.max_agents),
            agent_groups: Arc::default(),
            config,
            waiters: Slots::default(),
            permissions: Slots::default(),
            workers: Mutex::new(HashMap::new()),
            owned: Slots::default(),
            counters: SessionCounters::default(),
            questions: QuestionCache::default(),
            projector: Mutex::new(None),
            projector_stop: tokio_util::sync::CancellationToken::new(),
        }
    }
}
