//! In-memory coordination of live work: the session workers, the waiting `ask_user_question`
//! calls, the waiting permission requests, which agents run, and small per-session counters.
//! Truth stays in the database; nothing here needs to survive a restart.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::model::{Question, Response};
use crate::server::agents::AgentError;

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
    /// Working directory for agent processes.
    pub workdir: PathBuf,
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

/// A map where exactly one party can take an entry (L13/L15: one of respond, cancel, timeout,
/// supersession wins a waiter).
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

    pub fn contains(&self, key: &str) -> bool {
        self.inner.lock().expect("slots lock").contains_key(key)
    }

    /// How many entries wait to be taken.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("slots lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn keys(&self) -> Vec<String> {
        self.inner
            .lock()
            .expect("slots lock")
            .keys()
            .cloned()
            .collect()
    }
}

/// What a waiting `ask_user_question` call is told. A sender dropped without a message means
/// the responder that took it could not record the delivery (nothing was delivered): the call
/// registers again and keeps waiting.
#[derive(Debug)]
pub enum WaiterMsg {
    /// L15: the answer (or the rejection). The responder has already moved the session back
    /// to `running` with the delivery record, and published it (decision 0032).
    Answer { response: Response },
    /// The wait is over without an answer: an identical call took it over (L8), or a newer
    /// turn superseded the question (L5).
    Ended(&'static str),
}

/// Which sessions have a running agent process, and since when each one is idle (no open
/// turn). At the cap, the longest-idle agent makes room; busy agents are never stopped.
pub struct AgentSlots {
    max: usize,
    running: Mutex<HashMap<String, Option<Instant>>>,
}

impl AgentSlots {
    pub fn new(max: usize) -> Self {
        AgentSlots {
            max: max.max(1),
            running: Mutex::new(HashMap::new()),
        }
    }

    /// Admits `session` as busy. `Ok(Some(victim))`: the idle agent of `victim` must stop to
    /// make room (its slot is already given away). `Err`: every agent is busy.
    pub fn admit(&self, session: &str) -> Result<Option<String>, AgentError> {
        let mut running = self.running.lock().expect("agents lock");
        if running.contains_key(session) || running.len() < self.max {
            running.insert(session.to_string(), None);
            return Ok(None);
        }
        let victim = running
            .iter()
            .filter_map(|(id, idle)| idle.map(|since| (since, id.clone())))
            .min()
            .map(|(_, id)| id);
        match victim {
            Some(v) => {
                running.remove(&v);
                running.insert(session.to_string(), None);
                Ok(Some(v))
            }
            None => Err(AgentError::from(format!(
                "{} agents are busy (the limit of --max-agents); try again when one finishes",
                self.max
            ))),
        }
    }

    /// Whether a new agent could start now (a free slot, or an idle agent to stop).
    pub fn has_room(&self) -> bool {
        let running = self.running.lock().expect("agents lock");
        running.len() < self.max || running.values().any(Option::is_some)
    }

    pub fn busy(&self, session: &str) {
        self.set(session, None);
    }

    pub fn idle(&self, session: &str) {
        self.idle_at(session, Instant::now());
    }

    pub fn idle_at(&self, session: &str, since: Instant) {
        self.set(session, Some(since));
    }

    fn set(&self, session: &str, idle: Option<Instant>) {
        self.running
            .lock()
            .expect("agents lock")
            .insert(session.to_string(), idle);
    }

    pub fn leave(&self, session: &str) {
        self.running.lock().expect("agents lock").remove(session);
    }

    pub fn count(&self) -> usize {
        self.running.lock().expect("agents lock").len()
    }
}

/// Per-session counters the stream merger reads.
#[derive(Default)]
pub struct SessionCounters {
    /// session → rows written into its transcript by others than its worker (questions), so
    /// a streamed reply ends where such a row entered (no per-chunk query).
    foreign_rows: Mutex<HashMap<String, u64>>,
}

impl SessionCounters {
    pub fn note_foreign_row(&self, session: &str) {
        *self
            .foreign_rows
            .lock()
            .expect("rows lock")
            .entry(session.to_string())
            .or_default() += 1;
    }

    pub fn foreign_rows(&self, session: &str) -> u64 {
        self.foreign_rows
            .lock()
            .expect("rows lock")
            .get(session)
            .copied()
            .unwrap_or(0)
    }
}

pub struct Runtime {
    pub config: RuntimeConfig,
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
    /// E7: `elicitation/complete` of the agents, met with the link questions they complete.
    pub completions: Completions,
}

/// E7: an agent's `elicitation/complete` for a link it asked the user to open. The completion
/// may arrive before its question is written (the two travel on different tasks): it is kept
/// until the question waits for it; the kept ones are bounded (a hostile agent cannot grow
/// them).
#[derive(Default)]
pub struct Completions {
    inner: Mutex<HashMap<String, Completion>>,
}

enum Completion {
    Waiting(oneshot::Sender<()>),
    Done,
}

/// Completions kept before their question waits for them.
const KEPT_COMPLETIONS: usize = 1024;

impl Completions {
    fn key(session_id: &str, elicitation_id: &str) -> String {
        format!("{session_id}\u{0}{elicitation_id}")
    }

    /// Resolves when the agent completes `elicitation_id` (at once if it already has).
    pub fn wait(&self, session_id: &str, elicitation_id: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let key = Self::key(session_id, elicitation_id);
        let mut map = self.inner.lock().expect("completions lock");
        match map.remove(&key) {
            Some(Completion::Done) => {
                let _ = tx.send(());
            }
            _ => {
                map.insert(key, Completion::Waiting(tx));
            }
        }
        rx
    }

    pub fn complete(&self, session_id: &str, elicitation_id: &str) {
        let key = Self::key(session_id, elicitation_id);
        let mut map = self.inner.lock().expect("completions lock");
        match map.remove(&key) {
            Some(Completion::Waiting(tx)) => {
                let _ = tx.send(());
            }
            _ if map.len() < KEPT_COMPLETIONS => {
                map.insert(key, Completion::Done);
            }
            _ => {}
        }
    }

    /// The question is no longer waiting.
    pub fn forget(&self, session_id: &str, elicitation_id: &str) {
        self.inner
            .lock()
            .expect("completions lock")
            .remove(&Self::key(session_id, elicitation_id));
    }
}

/// An agent's elicitation and the session it came from.
pub struct Elicitation {
    pub session_id: String,
    pub ask: crate::server::agents::ElicitationAsk,
}

/// Elicitations waiting to be asked; a full queue answers the agent `cancel`.
const ELICITATION_QUEUE: usize = 256;

/// Bundles a [`QuestionCache`] keeps; beyond it the oldest go first.
const CACHED_BUNDLES: usize = 4096;

/// The questions of bundles this server wrote, by pending id: an answer validates against
/// them (L12) without reading its bundle back (B3: one read less per answer). A bundle's
/// questions never change once written, and whether it can still be answered is always
/// decided by the claim's compare-and-set, never by this cache; a miss reads the bundle.
#[derive(Default)]
pub struct QuestionCache {
    inner: Mutex<Remembered>,
}

#[derive(Default)]
struct Remembered {
    by_id: HashMap<String, Arc<Vec<Question>>>,
    /// Pending ids, oldest first (forgotten ones until they reach the front).
    order: VecDeque<String>,
}

impl QuestionCache {
    pub fn put(&self, pending_id: &str, questions: Arc<Vec<Question>>) {
        let mut guard = self.inner.lock().expect("question cache lock");
        let Remembered { by_id: map, order } = &mut *guard;
        while map.len() >= CACHED_BUNDLES {
            match order.pop_front() {
                Some(oldest) => {
                    map.remove(&oldest);
                }
                None => break,
            }
        }
        if map.insert(pending_id.to_string(), questions).is_none() {
            order.push_back(pending_id.to_string());
        }
        // Ids forgotten early stay in `order` until they reach its front; never let them pile up.
        if order.len() > 2 * CACHED_BUNDLES {
            order.retain(|id| map.contains_key(id));
        }
    }

    pub fn get(&self, pending_id: &str) -> Option<Arc<Vec<Question>>> {
        let guard = self.inner.lock().expect("question cache lock");
        guard.by_id.get(pending_id).cloned()
    }

    /// The bundle was answered or rejected here: no answer will need its questions again
    /// (a late one reads them).
    pub fn forget(&self, pending_id: &str) {
        self.inner
            .lock()
            .expect("question cache lock")
            .by_id
            .remove(pending_id);
    }
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Self {
        let (elicitations, elicitations_rx) = mpsc::channel(ELICITATION_QUEUE);
        Runtime {
            elicitations,
            elicitations_rx: Mutex::new(Some(elicitations_rx)),
            lease_rounds: tokio::sync::watch::Sender::new(0),
            profile_checks: Slots::default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e7_a_completion_meets_its_question_in_either_order_and_is_bounded() {
        let c = Completions::default();
        // Completed first, then waited for: resolves at once.
        c.complete("s", "early");
        assert_eq!(c.wait("s", "early").try_recv(), Ok(()));
        // Waited for first: resolves when completed; another session's id is another link.
        let mut rx = c.wait("s", "late");
        c.complete("other", "late");
        assert!(rx.try_recv().is_err());
        c.complete("s", "late");
        assert_eq!(rx.try_recv(), Ok(()));
        // Completions nobody waits for are kept up to the bound only.
        for i in 0..KEPT_COMPLETIONS + 10 {
            c.complete("s", &format!("stray-{i}"));
        }
        assert_eq!(c.inner.lock().unwrap().len(), KEPT_COMPLETIONS);
        c.forget("s", "stray-0");
        assert_eq!(c.inner.lock().unwrap().len(), KEPT_COMPLETIONS - 1);
    }

    #[test]
    fn the_question_cache_is_bounded_and_forgets_the_oldest_first() {
        let cache = QuestionCache::default();
        let questions = Arc::new(Vec::new());
        for i in 0..CACHED_BUNDLES + 10 {
            cache.put(&format!("b{i}"), questions.clone());
        }
        assert_eq!(cache.inner.lock().unwrap().by_id.len(), CACHED_BUNDLES);
        assert!(cache.get("b9").is_none(), "the oldest went first");
        assert!(cache.get("b10").is_some());
        // Forgotten ids never pile up in the eviction order.
        for i in 0..3 * CACHED_BUNDLES {
            let id = format!("c{i}");
            cache.put(&id, questions.clone());
            cache.forget(&id);
        }
        assert!(cache.inner.lock().unwrap().order.len() <= 2 * CACHED_BUNDLES + 1);
        assert!(cache.get(&format!("b{}", CACHED_BUNDLES + 9)).is_some());
    }

    #[test]
    fn at_the_cap_the_longest_idle_agent_makes_room() {
        let slots = AgentSlots::new(2);
        assert_eq!(slots.admit("a"), Ok(None));
        assert_eq!(slots.admit("b"), Ok(None));
        assert!(slots.admit("c").is_err(), "both busy: nobody is stopped");
        let t0 = Instant::now();
        slots.idle_at("b", t0);
        slots.idle_at("a", t0 + Duration::from_millis(5));
        assert_eq!(slots.admit("c"), Ok(Some("b".into())), "b idles longest");
        assert_eq!(slots.count(), 2);
        assert_eq!(slots.admit("a"), Ok(None), "already admitted");
        slots.leave("a");
        assert_eq!(slots.admit("d"), Ok(None));
    }
}
