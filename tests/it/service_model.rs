//! A randomized model test of the real services: seeded random sequences of agent turns (live
//! and detached questions, questions after a detach, permissions, crashes), answers, skips,
//! concurrent answers, permission answers, cancels, retries and restarts, with failures
//! injected at the named points of a delivery (before the resume is owed, before a delivery is
//! recorded, before an owed resume is dispatched) — all through HTTP, the session workers and
//! the bundled mock agent (in process, so thousands of sequences stay fast).
//!
//! Rarer step kinds force, with hook gates (never with sleeps), windows random timing seldom
//! hits:
//! - a server dies while a delivery is in flight — held claimed but not accepted, accepted but
//!   not dispatched, or dispatched while the agent replies; the held task unwinds there — and
//!   starts again (I8: L19 restores a claim never accepted, L18 delivers an accepted one);
//! - a prompt arrives between a resume's acceptance and its dispatch (L1/L18 order);
//! - a prompt is held right before its turn's insert while the answer to a detached question
//!   becomes owed: its turn must not start while the answer is owed, the resume goes first
//!   (L18, the same order check);
//! - an agent asks, stops waiting and exits; its worker is held right before the session's
//!   guarded move to `failed` while the answer becomes owed: the session waits for input,
//!   never fails with an owed answer, launches nothing by itself, and the next retry or prompt
//!   delivers the answer, once (L18, I4);
//! - several servers: the server the session's owner row names stops beating (its heartbeat
//!   held, its last one aged by the TTL in the database as if the time had passed) until
//!   another takes the session over, which is held right after the owner row names it; the
//!   stopped server dies and starts again meanwhile and must leave the taken session alone,
//!   then the taker goes on — sometimes with an answer accepted (owed) and held before anyone
//!   is woken to deliver it;
//! - several servers: the server running a turn is paused (its heartbeat and its turn's end
//!   held, sometimes with an answer owed behind the turn) until another takes the session
//!   over; it goes on first and must stop its agent having handed it nothing (its claim is
//!   older than the taker's), then the taker goes on and delivers what is owed.
//!
//! At every quiescent point I1–I9 are checked: I2 on the persisted summaries as stored (no P7
//! repair first); I4 counted at the agent (and an accepted detached answer has its resume);
//! I6 per turn — a trigger in the database logs every step move with the active bundles it
//! saw (none allowed), and the moves since the last point are exactly the turns whose step
//! action ran since then (each at most once, N3); I7 by repeating the detaches made so far,
//! which must change nothing and announce nothing; the L1/L18 order of a resume and a prompt
//! that arrived before its dispatch. And two more: one agent per session — at most one server
//! holds the session's claim with a running agent, the server its owner row names, and the
//! lane's servers run one agent at most (counted per server: the in-process mock agent does
//! not expose its connections); and every answer a responder was told 200 `claimed: true` for
//! reached the agent exactly once — live (L15) or as its resume (L17) — or its resume is still
//! owed (L18), never both and never twice (I4).
//!
//! 2,000 sequences per database by default; `TURNSTILE_SERVICE_SEQUENCES=<n>` runs more,
//! `TURNSTILE_SEED=<seed>` replays one.
//!
//! `service_model_three_servers` runs the same sequences against three servers on one
//! PostgreSQL database, every request sent to one of them at random (the session's agent
//! runs on the server that claimed it; the others forward to it or hand answers over), faults
//! injected on any of them, any of them restarted, with a heartbeat TTL short enough
//! ([`SERVER_TTL`]) for takeovers within a step. `TURNSTILE_SERVERS_SEQUENCES=<n>` (default
//! 300) sets how many.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use support::{Api, TestServer, table_counts};
use turnstile::mock_agent::InProcess;
use turnstile::model::RESUME_MARKER;
use turnstile::model::{BundleStatus, MessageAuthor, PendingAction};
use turnstile::server::hooks::Point;
use turnstile::server::orchestrator::{forward, worker};
use turnstile::server::repo::authority::bundle_is_active;
use turnstile::server::repo::{BundleRecord, MessageRecord, TurnRecord};
use turnstile::server::summary::loader;

const LANES: u64 = 8;
/// Databases at once in the three-server run (three servers each).
const THREE_SERVER_LANES: u64 = 4;
const STEPS: usize = 6;
/// The heartbeat TTL of the servers of a three-server lane: a server that stops beating is
/// taken over within about 4/3 of it (the taker looks every third of it). Long enough that a
/// server starved of CPU by the rest of the run (12 servers, PostgreSQL and the test on two
/// cores) is not taken for dead: then two servers would run the session's agent until the
/// starved one's next heartbeat (`lease`), which the one-agent check reports.
const SERVER_TTL: Duration = Duration::from_secs(2);
/// As many steps as a workflow may have (I6 counts them; a sequence rarely completes more
/// turns than this).
const WORKFLOW_STEPS: usize = 20;

/// One database and its servers (one, or three sharing the in-process mock agent).
struct Lane {
    url: String,
    servers: Vec<Option<TestServer>>,
    agent: InProcess,
    /// A connection of the test's own, outside the servers: the step log (I6).
    raw: Raw,
    /// pending id → how often a server announced it detached (I7: at most once), counted
    /// from each server's start on.
    detached_announced: Announced,
    /// The lane's last steps, earlier sequences' included: a failure that depends on what
    /// an earlier sequence left behind (a seed alone does not replay it) names them.
    history: std::collections::VecDeque<String>,
}

type Announced = std::sync::Arc<std::sync::Mutex<BTreeMap<String, usize>>>;

impl Lane {
    async fn new(url: String, servers: usize) -> Lane {
        let agent = InProcess::default();
        let announced = Announced::default();
        let mut started = Vec::new();
        for i in 0..servers {
            started.push(Some(
                Self::start_on(&url, &agent, &announced, servers, i).await,
            ));
        }
        // After the first start-up created and migrated the database.
        let mut raw = Raw::connect(&url).await;
        raw.log_step_moves().await;
        Lane {
            url,
            servers: started,
            agent,
            raw,
            detached_announced: announced,
            history: Default::default(),
        }
    }

    async fn start(&self, i: usize) -> TestServer {
        Self::start_on(
            &self.url,
            &self.agent,
            &self.detached_announced,
            self.servers.len(),
            i,
        )
        .await
    }

    async fn start_on(
        url: &str,
        agent: &InProcess,
        announced: &Announced,
        servers: usize,
        i: usize,
    ) -> TestServer {
        let agent = agent.clone();
        let id = (servers > 1).then(|| server_id(i));
        let server = TestServer::start_with(url, move |r| {
            r.in_process_mock = Some(agent);
            r.agent_start_timeout = Duration::from_secs(10);
            if let Some(id) = id {
                r.server_id = id;
                r.server_ttl = SERVER_TTL;
            }
        })
        .await;
        // Every announcement counts, whenever it is published (a call's own detach may be
        // announced after the quiescent point that saw its row).
        let (mut events, announced) = (server.state.hub.subscribe(), announced.clone());
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match events.recv().await {
                    Ok(e) if !e.remote && e.action == "clarification.detached" => {
                        let id = e.payload["bundle"]["pending_id"].as_str().unwrap_or("");
                        *announced.lock().unwrap().entry(id.to_string()).or_default() += 1;
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(n)) => panic!("the I7 counter missed {n} events"),
                    Err(RecvError::Closed) => break,
                }
            }
        });
        server
    }

    fn server(&self, i: usize) -> &TestServer {
        self.servers[i].as_ref().expect("running")
    }

    fn all(&self) -> impl Iterator<Item = &TestServer> {
        self.servers.iter().map(|s| s.as_ref().expect("running"))
    }

    async fn restart(&mut self, i: usize) {
        if let Some(s) = self.servers[i].take() {
            s.stop().await;
        }
        self.servers[i] = Some(self.start(i).await);
    }

    /// Server `i` dies where `gate` holds one of its tasks: it stops, and the held task
    /// unwinds at the hook point (a killed process runs nothing after the point it was at).
    async fn kill(&mut self, i: usize, gate: &Gate) {
        if let Some(s) = self.servers[i].take() {
            s.stop().await;
        }
        gate.kill();
    }

    async fn stop(&mut self) {
        for s in &mut self.servers {
            if let Some(s) = s.take() {
                s.stop().await;
            }
        }
    }
}

/// The test's own connection to a lane's database.
enum Raw {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl Raw {
    async fn connect(url: &str) -> Raw {
        use sqlx::Connection;
        if url.starts_with("sqlite:") {
            Raw::Sqlite(sqlx::SqliteConnection::connect(url).await.expect("sqlite"))
        } else {
            Raw::Postgres(sqlx::PgConnection::connect(url).await.expect("postgres"))
        }
    }

    async fn execute(&mut self, sql: String) {
        let sql = sqlx::AssertSqlSafe(sql);
        match self {
            Raw::Sqlite(c) => sqlx::query(sql).execute(c).await.map(|_| ()),
            Raw::Postgres(c) => sqlx::query(sql).execute(c).await.map(|_| ()),
        }
        .expect("test-only schema");
    }

    /// I6, observed where it happens: a trigger logs every move of a task's step with the
    /// number of active bundles (L2, the authority's own predicate) of the task at that moment,
    /// in the transaction of the move. The product knows nothing of this table.
    async fn log_step_moves(&mut self) {
        let active = bundle_is_active("b");
        let insert = format!(
            "INSERT INTO model_step_moves (task_id, from_step, to_step, moved_at, active) \
             SELECT NEW.id, OLD.step_id, NEW.step_id, NEW.updated_at, COUNT(*) \
             FROM clarification_bundles b WHERE b.task_id = NEW.id AND {active}"
        );
        match self {
            Raw::Sqlite(_) => {
                self.execute(
                    "CREATE TABLE model_step_moves (seq INTEGER PRIMARY KEY AUTOINCREMENT, \
                     task_id TEXT NOT NULL, from_step TEXT, to_step TEXT, moved_at BIGINT, active BIGINT NOT NULL)"
                        .into(),
                )
                .await;
                self.execute(format!(
                    "CREATE TRIGGER model_step_moved AFTER UPDATE OF step_id ON tasks \
                     WHEN OLD.step_id IS NOT NEW.step_id BEGIN {insert}; END"
                ))
                .await;
            }
            Raw::Postgres(_) => {
                self.execute(
                    "CREATE TABLE model_step_moves (seq BIGSERIAL PRIMARY KEY, \
                     task_id TEXT NOT NULL, from_step TEXT, to_step TEXT, moved_at BIGINT, active BIGINT NOT NULL)"
                        .into(),
                )
                .await;
                self.execute(format!(
                    "CREATE FUNCTION model_step_moved() RETURNS trigger LANGUAGE plpgsql AS \
                     $body$ BEGIN {insert}; RETURN NEW; END $body$"
                ))
                .await;
                self.execute(
                    "CREATE TRIGGER model_step_moved AFTER UPDATE OF step_id ON tasks \
                     FOR EACH ROW WHEN (OLD.step_id IS DISTINCT FROM NEW.step_id) \
                     EXECUTE FUNCTION model_step_moved()"
                        .into(),
                )
                .await;
            }
        }
    }

    /// Server `id`'s last heartbeat is recorded `by` earlier than it was: a server whose
    /// heartbeat is held counts as dead that much sooner, as if the time had passed.
    async fn age_heartbeat(&mut self, id: &str, by: Duration) {
        self.execute(format!(
            "UPDATE servers SET seen_at = seen_at - {} WHERE id = '{id}'",
            by.as_micros()
        ))
        .await;
    }

    /// The task's step moves in order: when, and the active bundles each one saw.
    async fn step_moves(&mut self, task: &str) -> Vec<(i64, i64)> {
        const SQL: &str =
            "SELECT moved_at, active FROM model_step_moves WHERE task_id = $1 ORDER BY seq";
        match self {
            Raw::Sqlite(c) => sqlx::query_as(SQL).bind(task).fetch_all(c).await,
            Raw::Postgres(c) => sqlx::query_as(SQL).bind(task).fetch_all(c).await,
        }
        .expect("the step log")
    }
}

/// Holds the first pass through a hook point with a given key, on whichever server it comes,
/// until opened — or until that server is killed ([`Lane::kill`]): the held task then unwinds
/// right there, as if its process had died (`resume_unwind` runs no panic hook).
#[derive(Clone)]
struct Gate {
    permits: Arc<tokio::sync::Semaphore>,
    reached: Arc<tokio::sync::Notify>,
    at: Arc<std::sync::Mutex<Option<usize>>>,
    taken: Arc<AtomicBool>,
    point: Point,
}

impl Gate {
    fn new(lane: &Lane, point: Point, key: &str) -> Gate {
        let gate = Gate {
            permits: Arc::new(tokio::sync::Semaphore::new(0)),
            reached: Arc::default(),
            at: Arc::default(),
            taken: Arc::default(),
            point,
        };
        for (i, server) in lane.all().enumerate() {
            let (g, key) = (gate.clone(), key.to_string());
            server.state.hooks.set(point, move |k| {
                let first = k == key && !g.taken.swap(true, Ordering::SeqCst);
                let g = g.clone();
                async move {
                    if first {
                        *g.at.lock().unwrap() = Some(i);
                        g.reached.notify_one();
                        match g.permits.acquire().await {
                            Ok(permit) => permit.forget(),
                            Err(_) => std::panic::resume_unwind(Box::new("killed at a hook")),
                        }
                    }
                }
            });
        }
        gate
    }

    /// Waits until a task is held; returns the server it is on.
    async fn reached(&self) -> Option<usize> {
        tokio::time::timeout(Duration::from_secs(20), self.reached.notified())
            .await
            .ok()?;
        *self.at.lock().unwrap()
    }

    fn open(&self) {
        self.permits.add_permits(1);
    }

    fn kill(&self) {
        self.permits.close();
    }

    /// Removes the hook from every running server (a restarted one has none).
    fn clear(&self, lane: &Lane) {
        for s in lane.servers.iter().flatten() {
            s.state.hooks.clear(self.point);
        }
    }
}

/// Where a restart cuts a delivery in flight.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cut {
    /// The claim is written, nothing accepted or handed over yet (L18: before acceptance).
    Claimed,
    /// A detached answer's resume is owed, not yet dispatched (L18: after acceptance).
    Owed,
    /// The resume was dispatched and the agent is replying to it.
    Replying,
}

/// What the agent does in a turn (a mock-agent script).
#[derive(Clone, Copy, Debug)]
enum Turn {
    Message,
    LiveQuestion,
    DetachedQuestion,
    QuestionAfterDetach,
    Permission,
    Crash,
}

struct Seq<'a> {
    lane: &'a mut Lane,
    /// The server this step's requests go to.
    via: usize,
    seed: u64,
    log: Vec<String>,
    task: String,
    session: String,
    questions: usize,
    /// pending id → the unique prompt text of its question.
    prompts: BTreeMap<String, String>,
    /// Prompt texts of questions the agent asks with its own timeout: it acts again by itself,
    /// so such a question never makes a quiescent point (its timeout would race the model).
    self_timed: BTreeSet<String>,
    /// pending id → how many responders were told `claimed: true`.
    claimed: BTreeMap<String, usize>,
    /// Answers (not skips) a responder was told 200 `claimed: true` for: each one reaches the
    /// agent exactly once or is still owed ([`Seq::check_answers_delivered`]).
    answered: BTreeSet<String>,
    /// Once active, then inactive while still pending: must never come back (I9).
    superseded: BTreeSet<String>,
    was_active: BTreeSet<String>,
    /// N3/I6: completed turn → whether its step action has run (false: deferred, waiting for
    /// the barrier). Each completed turn runs it at most once.
    workflow: BTreeMap<String, bool>,
    /// Step moves of the task already accounted for (I6).
    moves_seen: usize,
    /// L1/L18: resumes owed before a prompt arrived, which must reach the agent first.
    orders: Vec<Order>,
    /// Makes prompts unique (the agent records them).
    marks: usize,
    /// The workflow's step ids in order.
    steps: Vec<String>,
}

/// What [`Seq::repeat_detaches`] did, for [`Seq::check_repeated_detach`].
struct Repeated {
    /// What the repeats changed (must be nothing).
    changed: Vec<String>,
    /// Bundles whose rows the repeats are about.
    rows: BTreeSet<String>,
}

/// An owed resume and a prompt that arrived before it was dispatched.
struct Order {
    pending_id: String,
    question: String,
    prompt: String,
    /// Both reached the agent in order and the prompt's turn started after the resume's:
    /// nothing can change that any more.
    done: bool,
}

impl Seq<'_> {
    fn api(&self) -> Api {
        Api::new(&self.lane.server(self.via).base)
    }

    /// Any server: they share the database.
    fn state(&self) -> turnstile::server::state::AppState {
        self.lane.server(0).state.clone()
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {} (replay with TURNSTILE_SEED={}): {what}\nsteps: {:#?}\nthe lane's last \
             steps before this sequence (oldest first): {:#?}",
            self.seed, self.seed, self.log, self.lane.history
        )
    }

    fn question(&mut self) -> String {
        self.questions += 1;
        let text = self.question_text();
        json!({ "questions": [{ "id": "q", "prompt": text, "options": [{ "id": "a", "label": "A" }, { "id": "b", "label": "B" }] }] }).to_string()
    }

    fn question_text(&self) -> String {
        format!("Q{}-{}", self.seed, self.questions)
    }

    /// A question the agent stops waiting for after a few milliseconds (`e2e:ask-timeout`).
    fn self_timed_question(&mut self) -> String {
        let question = self.question();
        self.self_timed.insert(self.question_text());
        question
    }

    fn script(&mut self, turn: Turn) -> String {
        match turn {
            Turn::Message => "e2e:message(\"hello\")".into(),
            Turn::LiveQuestion => format!("e2e:ask({})", self.question()),
            Turn::DetachedQuestion => {
                format!("e2e:ask-timeout(5, {})", self.self_timed_question())
            }
            Turn::QuestionAfterDetach => {
                let (a, b) = (self.self_timed_question(), self.question());
                format!("e2e:ask-timeout(5, {a})\ne2e:ask({b})")
            }
            Turn::Permission => "e2e:permission()".into(),
            Turn::Crash => "e2e:exit(3)".into(),
        }
    }

    async fn prompt(&mut self, turn: Turn) {
        let content = self.script(turn);
        self.send_prompt(content).await;
    }

    /// `POST /sessions/{id}/prompt` through the step's server.
    async fn post_prompt(&self, content: &str) -> (reqwest::StatusCode, Value) {
        self.api()
            .post(
                &format!("/api/v1/sessions/{}/prompt", self.session),
                json!({ "content": content }),
            )
            .await
    }

    async fn send_prompt(&mut self, content: String) {
        // An armed dispatch failure hits the owed resume this prompt delivers first.
        let fault = self
            .lane
            .all()
            .any(|s| s.state.hooks.armed(Point::Dispatch) > 0);
        let (status, body) = self.post_prompt(&content).await;
        let ok = match status.as_u16() {
            200 | 409 => true,
            500 | 503 => fault,
            _ => false,
        };
        if !ok {
            self.fail(&format!("prompt: {status} {body}"));
        }
    }

    /// Every bundle of the session with its L2 activity now, and whether it is detached. The
    /// list is read before the activity: a quiescent point may still see the server write a
    /// question the agent already gave up on (`ask-timeout`), and one written between the two
    /// reads must not look inactive (it is active, so it is left out until the next read).
    async fn bundles(&self) -> Vec<(String, BundleStatus, bool, bool)> {
        let repo = &self.state().repo;
        let all = repo.session_bundles(&self.session).await.unwrap();
        let active: BTreeSet<String> = repo
            .active_bundles(&self.session)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.record.pending_id)
            .collect();
        all.into_iter()
            .map(|b| {
                let is_active = active.contains(&b.pending_id);
                (b.pending_id, b.status, is_active, b.detached)
            })
            .collect()
    }

    async fn pick(&self, rng: &mut SmallRng) -> Option<(String, BundleStatus, bool, bool)> {
        let all = self.bundles().await;
        let active: Vec<_> = all.iter().filter(|b| b.2).cloned().collect();
        if !active.is_empty() && rng.random_bool(0.75) {
            return Some(active[rng.random_range(0..active.len())].clone());
        }
        (!all.is_empty()).then(|| all[rng.random_range(0..all.len())].clone())
    }

    /// `n` concurrent responders (one when `n == 1`), with an optional injected failure on
    /// server `fault_at`.
    async fn respond(
        &mut self,
        rng: &mut SmallRng,
        reject: bool,
        n: usize,
        fault: Option<Point>,
        fault_at: usize,
    ) {
        let Some((pending_id, status, active, detached)) = self.pick(rng).await else {
            return;
        };
        let state = self.state();
        let faulty = self.lane.server(fault_at).state.clone();
        if let Some(point) = fault {
            faulty.hooks.fail(point, 1);
        }
        let refused = !active && !matches!(status, BundleStatus::Answered | BundleStatus::Rejected);
        let detached = active && detached;
        let waited = self.waited(&pending_id);
        let counts_before = if refused {
            Some(table_counts(&self.lane.url).await)
        } else {
            None
        };
        let body = response_body(reject);
        let api = self.api();
        let mut calls = Vec::new();
        for _ in 0..n {
            let (client, url, body) = (
                api.client.clone(),
                format!("{}/api/v1/clarifications/{pending_id}/respond", api.base),
                body.clone(),
            );
            calls.push(tokio::spawn(async move {
                let r = client.post(url).json(&body).send().await.unwrap();
                (
                    r.status().as_u16(),
                    r.json::<Value>().await.unwrap_or(Value::Null),
                )
            }));
        }
        let mut results = Vec::new();
        for c in calls {
            results.push(c.await.unwrap());
        }
        let winners = results
            .iter()
            .filter(|(s, b)| *s == 200 && b["claimed"] == true)
            .count();
        let retryable = results
            .iter()
            .filter(|(s, b)| *s == 500 && b["retryable"] == true)
            .count();
        *self.claimed.entry(pending_id.clone()).or_default() += winners;
        for (s, b) in &results {
            self.note_answered(&pending_id, *s, b);
        }
        if self.claimed[&pending_id] > 1 {
            self.fail(&format!("I3: {pending_id} was claimed twice: {results:?}"));
        }
        let resolved = matches!(status, BundleStatus::Answered | BundleStatus::Rejected);
        for (s, b) in &results {
            let ok = match s {
                200 if b["claimed"] == true => active,
                200 => active || resolved,
                409 => !active && !resolved,
                500 => fault.is_some() && b["retryable"] == true,
                _ => false,
            };
            if !ok {
                self.fail(&format!(
                    "respond to {pending_id} ({status}, active {active}): {s} {b}"
                ));
            }
        }
        if active && winners + retryable == 0 {
            self.fail(&format!(
                "I3: nobody won the active {pending_id}: {results:?}"
            ));
        }
        if let Some(before) = counts_before {
            let after = table_counts(&self.lane.url).await;
            if after != before {
                let messages = self.api().messages(&self.session).await;
                let last = &messages[messages.len().saturating_sub(3)..];
                self.fail(&format!(
                    "I5: a 409 wrote something: {pending_id} ({status}) rows {before:?} → {after:?}: {results:?}; the session's last messages: {last:#?}"
                ));
            }
        }
        if detached && !reject && winners == 1 {
            // L17/I4: the 200 came after exactly one resume was accepted (owed) — a detached
            // question's agent no longer waits, so nothing else reaches it.
            let turns = state.repo.list_turns(&self.session).await.unwrap();
            if !turns
                .iter()
                .any(|t| t.resume_pending_id.as_deref() == Some(&pending_id))
            {
                self.fail(&format!(
                    "I4/L17: the answer to detached {pending_id} was accepted with no resume \
                     (a call was still registered as waiting for it: {waited}): {results:?}"
                ));
            }
        }
        if winners == 0 && retryable > 0 {
            // L18: failed before acceptance — nothing changed, the question is open again.
            let b = state.repo.get_bundle(&pending_id).await.unwrap().unwrap();
            if !(b.record.status == BundleStatus::Pending && b.active) {
                self.fail(&format!(
                    "L18: a retryable failure left {pending_id} {:?}",
                    b.record.status
                ));
            }
        }
        if let Some(point) = fault
            && point != Point::Dispatch
        {
            faulty.hooks.fail(point, 0);
        }
    }

    async fn answer_permission(&mut self) {
        let state = self.state();
        let Some(p) = state
            .repo
            .pending_permission_requests(&self.session)
            .await
            .unwrap()
            .pop()
        else {
            return;
        };
        let waiting = self
            .lane
            .all()
            .any(|s| s.state.runtime.permissions.contains(&p.id));
        let (status, body) = self
            .api()
            .post(
                &format!("/api/v1/permissions/{}/respond", p.id),
                json!({ "option_id": "allow" }),
            )
            .await;
        let expected = if waiting { 200 } else { 409 };
        if status.as_u16() != expected {
            self.fail(&format!(
                "permission {}: {status} {body}, waiting {waiting}",
                p.id
            ));
        }
    }

    async fn post(&mut self, what: &str, allowed: &[u16]) {
        let (status, body) = self
            .api()
            .post(
                &format!("/api/v1/sessions/{}/{what}", self.session),
                json!({}),
            )
            .await;
        if !allowed.contains(&status.as_u16()) {
            self.fail(&format!("{what}: {status} {body}"));
        }
    }

    /// Quiescent: no server's worker has anything to do, and every open turn waits for the
    /// human (a live question or a permission request) — agents act only within turns. (No
    /// request between servers is in flight: every request of a step returned, and each
    /// waits for the server it asked.)
    async fn quiet(&self) -> bool {
        let marks = |lane: &Lane| -> Option<Vec<_>> {
            lane.all()
                .map(|s| worker::idle_mark(&s.state, &self.session))
                .collect()
        };
        let Some(before) = marks(self.lane) else {
            return false;
        };
        // The reads below count only if no worker handled anything meanwhile (a turn read as
        // complete while the worker still writes its error message is no quiescent point).
        let quiet = self.quiet_in_database().await;
        quiet && marks(self.lane) == Some(before)
    }

    /// `quiet`'s database half: every open turn waits for the human (or owes a resume).
    async fn quiet_in_database(&self) -> bool {
        let state = self.state();
        let repo = &state.repo;
        let waits = |pending: &str| {
            self.lane
                .all()
                .any(|s| s.state.runtime.waiters.contains(pending))
        };
        let asks = |permission: &str| {
            self.lane
                .all()
                .any(|s| s.state.runtime.permissions.contains(permission))
        };
        let turns = repo.list_turns(&self.session).await.unwrap();
        // N6: a permission request of a superseded turn is cancelled; one that still waits
        // is stuck, not quiescent.
        let current = repo.current_turn_id(&self.session).await.unwrap();
        let owed: BTreeSet<String> = repo
            .owed_resumes(&self.session)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        for t in turns
            .iter()
            .filter(|t| t.completed_at.is_none() && !owed.contains(&t.id))
        {
            let mut waits_for_answer = false;
            for b in repo.session_bundles(&self.session).await.unwrap() {
                if b.turn_id == t.id
                    && b.status == BundleStatus::Pending
                    && !b.detached
                    && waits(&b.pending_id)
                {
                    // Only an answerable (active) question waits for the human: a superseded
                    // one whose call still waits is stuck (L5), not quiescent.
                    let stored = repo.get_bundle(&b.pending_id).await.unwrap().unwrap();
                    waits_for_answer |=
                        stored.active && !self.self_timed.contains(&stored.questions[0].prompt);
                }
            }
            let waits_for_permission = repo
                .pending_permission_requests(&self.session)
                .await
                .unwrap()
                .iter()
                .any(|p| p.turn_id == t.id && Some(&t.id) == current.as_ref() && asks(&p.id));
            if !(waits_for_answer || waits_for_permission) {
                return false;
            }
        }
        true
    }

    /// Waits for a quiescent point, re-checking whenever the server publishes something (or
    /// every 25 ms: the worker going idle publishes nothing).
    async fn settle(&self) {
        let mut events = self.lane.server(0).state.hub.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !self.quiet().await {
            if tokio::time::Instant::now() > deadline {
                let repo = &self.state().repo;
                let turns = repo.list_turns(&self.session).await.unwrap();
                let bundles = repo.session_bundles(&self.session).await.unwrap();
                let waiting: Vec<_> = bundles
                    .iter()
                    .map(|b| {
                        let on: Vec<usize> = (0..self.lane.servers.len())
                            .filter(|&i| {
                                self.lane
                                    .server(i)
                                    .state
                                    .runtime
                                    .waiters
                                    .contains(&b.pending_id)
                            })
                            .collect();
                        (b.pending_id.clone(), on)
                    })
                    .collect();
                let idle: Vec<_> = self
                    .lane
                    .all()
                    .map(|s| worker::idle_mark(&s.state, &self.session).is_some())
                    .collect();
                let session = repo.get_session(&self.session).await.unwrap();
                self.fail(&format!(
                    "no quiescent point within 20 s: session {session:#?}, workers idle {idle:?}, \
                     calls waiting {waiting:?}, turns {turns:#?}, bundles {bundles:#?}"
                ));
            }
            let _ = tokio::time::timeout(Duration::from_millis(5), events.recv()).await;
            while events.try_recv().is_ok() {}
        }
    }

    /// I1, I2, I4, I6, I7, I9 and the L1/L18 order of owed resumes at a quiescent point.
    async fn check(&mut self) {
        let state = self.state();
        let repo = &state.repo;
        let current = repo.current_turn_id(&self.session).await.unwrap();
        let active = repo.active_bundles(&self.session).await.unwrap();
        for b in &active {
            if Some(&b.record.turn_id) != current.as_ref() {
                self.fail(&format!(
                    "I1: active {} outside the current turn",
                    b.record.pending_id
                ));
            }
        }
        let active: BTreeSet<String> = active.into_iter().map(|b| b.record.pending_id).collect();
        let bundles = repo.session_bundles(&self.session).await.unwrap();
        for b in &bundles {
            let id = &b.pending_id;
            if active.contains(id) {
                if self.superseded.contains(id) {
                    self.fail(&format!("I9: superseded {id} is active again"));
                }
                self.was_active.insert(id.clone());
            } else if b.status == BundleStatus::Pending && self.was_active.contains(id) {
                self.superseded.insert(id.clone());
            }
        }
        let turns = repo.list_turns(&self.session).await.unwrap();
        let repeated = self
            .repeat_detaches(current.as_deref(), &bundles, &turns)
            .await;
        // I2: the stored summary converges on the authority (the projector is asynchronous,
        // so allow it to catch up; no read below repairs anything).
        let mut events = state.hub.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let want = loader::load(repo.as_ref(), &self.task)
                .await
                .unwrap()
                .pending_action;
            let stored = repo.get_summary(&self.task).await.unwrap();
            let have: Option<PendingAction> = stored.as_ref().and_then(|s| s.body.pending_action);
            if stored.is_some() && have == want {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                self.fail(&format!(
                    "I2: stored summary says {have:?}, the authority {want:?}"
                ));
            }
            let _ = tokio::time::timeout(Duration::from_millis(5), events.recv()).await;
            while events.try_recv().is_ok() {}
        }
        // I4: at the agent, one resume per detached answer once dispatched, none otherwise.
        let prompts = self.lane.agent.prompts();
        for (pending_id, text) in &self.prompts {
            let delivered = prompts
                .iter()
                .filter(|p| p.starts_with(RESUME_MARKER) && p.contains(&format!("Q: {text}\n")))
                .count();
            let owed_turn = turns
                .iter()
                .find(|t| t.resume_pending_id.as_deref() == Some(pending_id));
            let expected = match &owed_turn {
                Some(t) if !t.is_owed() => 1,
                _ => 0,
            };
            if delivered != expected {
                self.fail(&format!(
                    "I4: {pending_id} reached the agent {delivered} times, expected {expected} \
                     (resume turn {owed_turn:?})"
                ));
            }
        }
        self.check_workflow(&turns).await;
        self.check_repeated_detach(&bundles, repeated).await;
        self.check_orders(&turns).await;
        self.check_one_agent().await;
        self.check_answers_delivered(&turns, &messages_of(&state, &self.session).await)
            .await;
    }

    /// One agent per session at any time: at most one server holds the session's claim with a
    /// running agent (`owned`; PostgreSQL, where servers claim sessions), and that server is
    /// the one the owner row names; the lane's servers run at most one agent between them
    /// (every earlier sequence stopped its session's agent, and none launches for an ended
    /// session). The in-process mock agent does not expose its connections: agents are
    /// counted per server.
    async fn check_one_agent(&self) {
        let owners: Vec<usize> = (0..self.lane.servers.len())
            .filter(|&i| {
                self.lane
                    .server(i)
                    .state
                    .runtime
                    .owned
                    .contains(&self.session)
            })
            .collect();
        let agents: Vec<usize> = self
            .lane
            .all()
            .map(|s| s.state.runtime.agents.count())
            .collect();
        let row = self
            .state()
            .repo
            .live_owner(&self.session, i64::MIN)
            .await
            .unwrap();
        let named = owners.iter().all(|&i| {
            row.as_deref() == Some(self.lane.server(i).state.runtime.config.server_id.as_str())
        });
        if owners.len() > 1 || agents.iter().sum::<usize>() > 1 || !named {
            let state = self.state();
            let ttl = i64::try_from(SERVER_TTL.as_micros()).unwrap_or(i64::MAX);
            let live = state
                .repo
                .other_live_servers("", state.clock.now() - ttl)
                .await
                .unwrap();
            let beats: Vec<(String, i64)> = {
                let mut ages = vec![];
                for i in 0..self.lane.servers.len() {
                    let since = state.clock.now() - 60_000_000;
                    let alive = state
                        .repo
                        .other_live_servers("", since)
                        .await
                        .unwrap()
                        .contains(&server_id(i));
                    ages.push((server_id(i), i64::from(alive)));
                }
                ages
            };
            self.fail(&format!(
                "one agent per session: servers {owners:?} hold the session's claim with an \
                 agent, the owner row names {row:?}; agents running per server {agents:?}; \
                 servers with a heartbeat within the TTL now: {live:?}; within a minute: {beats:?}"
            ));
        }
    }

    /// L15/L17/L18/I4, for every answer a responder was told 200 `claimed: true` for: it
    /// reached the agent exactly once — as its resume (the resume prompt, counted at the agent
    /// as I4 does) or, with no resume, live — or its resume is still owed (and then never
    /// reached it). Never lost, never twice. Live deliveries are counted per turn, since the
    /// agent's "You answered" names no question (and a question's row may be written after a
    /// later question's): each turn has exactly as many answers delivered live (not skips) as
    /// it has such answers without a resume — less at most those to questions the agent stops
    /// waiting for by itself (`ask-timeout`): an answer handed to the call while the agent's
    /// cancel is on its way is delivered as far as the server can know (L15; MCP lets a
    /// response cross a cancel, and the agent then ignores it; docs/lifecycle.md).
    async fn check_answers_delivered(&self, turns: &[TurnRecord], messages: &[MessageRecord]) {
        let repo = self.state().repo.clone();
        let owed: BTreeSet<String> = repo
            .owed_resumes(&self.session)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|t| t.resume_pending_id)
            .collect();
        let turn_of: BTreeMap<String, String> = repo
            .session_bundles(&self.session)
            .await
            .unwrap()
            .into_iter()
            .map(|b| (b.pending_id, b.turn_id))
            .collect();
        let prompts = self.lane.agent.prompts();
        let resumes: Vec<&String> = prompts
            .iter()
            .filter(|p| p.starts_with(RESUME_MARKER))
            .collect();
        let shown = || -> Vec<(&str, &str, Option<&str>, &str)> {
            messages
                .iter()
                .map(|m| {
                    (
                        m.turn_id.as_str(),
                        m.author.as_str(),
                        m.pending_id.as_deref(),
                        m.content.as_str(),
                    )
                })
                .collect()
        };
        // turn → the answers in it that must have been delivered live.
        let mut live: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
        for pending_id in &self.answered {
            let (Some(text), Some(turn)) = (self.prompts.get(pending_id), turn_of.get(pending_id))
            else {
                self.fail(&format!(
                    "answered {pending_id} is not a question of the session"
                ));
            };
            let resumed = resumes
                .iter()
                .filter(|p| p.contains(&format!("Q: {text}\n")))
                .count();
            let owes = owed.contains(pending_id);
            let resume = turns
                .iter()
                .find(|t| t.resume_pending_id.as_deref() == Some(pending_id));
            let ok = match resume {
                Some(_) => matches!((resumed, owes), (1, false) | (0, true)),
                None => {
                    live.entry(turn.as_str()).or_default().push(pending_id);
                    resumed == 0
                }
            };
            if !ok {
                self.fail(&format!(
                    "I4: the accepted (200, claimed) answer to {pending_id} ({text}) reached the \
                     agent {resumed} time(s) as a resume; its resume turn is {resume:#?}, \
                     {}owed; transcript {:#?}; resumes at the agent {resumes:#?}",
                    if owes { "" } else { "not " },
                    shown()
                ));
            }
        }
        let mut heard: BTreeMap<&str, usize> = BTreeMap::new();
        for m in messages.iter().filter(|m| m.author == MessageAuthor::Agent) {
            let n = m
                .content
                .matches("You answered: {\"q\":{\"selected_option\"")
                .count();
            if n > 0 {
                *heard.entry(m.turn_id.as_str()).or_default() += n;
            }
        }
        let turns_with: BTreeSet<&str> = live.keys().chain(heard.keys()).copied().collect();
        for turn in turns_with {
            let answers = live.get(turn).map(Vec::as_slice).unwrap_or_default();
            let expected = answers.len();
            let given_up = answers
                .iter()
                .filter(|id| self.self_timed.contains(&self.prompts[id.as_str()]))
                .count();
            let got = heard.get(turn).copied().unwrap_or(0);
            if got > expected || got + given_up < expected {
                self.fail(&format!(
                    "I4: turn {turn} holds the accepted (200, claimed) live answers to {:?}, \
                     but the agent heard {got} answer(s) in it; transcript {:#?}",
                    live.get(turn),
                    shown()
                ));
            }
        }
    }

    /// I6 (N3), per turn: each completed turn runs its step action at most once — right at its
    /// completion, or deferred (`workflow_deferred`) until a detached rejection frees the
    /// barrier — and no step moves while the session has an active bundle (as the trigger saw
    /// it at the move). The moves since the last quiescent point are exactly the turns whose
    /// action ran since then: a turn moving twice cannot hide behind another's deferral, and
    /// no completed turn goes without its action.
    async fn check_workflow(&mut self, turns: &[TurnRecord]) {
        let state = self.state();
        let (moves, task) = tokio::join!(
            self.lane.raw.step_moves(&self.task),
            state.repo.get_task(&self.task)
        );
        let task = task.unwrap().unwrap();
        for (n, (at, active)) in moves.iter().enumerate().skip(self.moves_seen) {
            if *active > 0 {
                let bundles = self
                    .state()
                    .repo
                    .session_bundles(&self.session)
                    .await
                    .unwrap();
                self.fail(&format!(
                    "I6: step move {} (at {at}) happened while the task had {active} active \
                     bundle(s); moves {moves:?}, turns {turns:#?}, bundles {bundles:#?}",
                    n + 1
                ));
            }
        }
        let mut ran = Vec::new();
        for t in turns.iter().filter(|t| t.completed_at.is_some()) {
            let before = self.workflow.get(&t.id).copied();
            match (before, t.workflow_deferred) {
                (Some(true), true) => self.fail(&format!(
                    "N3: turn {} ran its step action and then deferred it again (two runs)",
                    t.id
                )),
                (None | Some(false), false) => ran.push(t.id.clone()),
                _ => {}
            }
            self.workflow
                .insert(t.id.clone(), before == Some(true) || !t.workflow_deferred);
        }
        let new = moves.len() - self.moves_seen;
        // One move per turn whose action ran — fewer only at the last step, where there is
        // nowhere to move (a turn completed without its action running is N3's bug too).
        let last = task.step_id.as_ref() == self.steps.last();
        if new > ran.len() || (new < ran.len() && !last) {
            self.fail(&format!(
                "I6/N3: {new} step move(s) since the last check, but {} turn(s) ran their \
                 action since then ({ran:?}); turns: {turns:#?}",
                ran.len()
            ));
        }
        self.moves_seen = moves.len();
        // The log and the task agree (nothing else moves the task).
        let step = self
            .steps
            .iter()
            .position(|s| Some(s) == task.step_id.as_ref())
            .unwrap();
        if step != moves.len() {
            self.fail(&format!(
                "the task is at step {step} after {} logged moves",
                moves.len()
            ));
        }
    }

    /// I7 (L9), first half: the detaches the services made, repeated on the current turn —
    /// the only one whose bundles can be active (L2; older turns' are inert, L10): its own if
    /// it completed (turn completion), each of its bundles' that is detached and still pending
    /// (its call stopped waiting), and, when the session has no open turn, the session's (its
    /// agent is gone: crash, restart). The same guarded statements the services run, which
    /// publish exactly what these return. An attached bundle of an open turn is left alone:
    /// the call of one the agent gave up on may be detaching it right now (a first detach).
    async fn repeat_detaches(
        &self,
        current: Option<&str>,
        bundles: &[BundleRecord],
        turns: &[TurnRecord],
    ) -> Repeated {
        let state = self.state();
        let repo = &state.repo;
        let current = turns.iter().find(|t| Some(t.id.as_str()) == current);
        let done = current.filter(|t| t.completed_at.is_some());
        let open = turns
            .iter()
            .any(|t| t.completed_at.is_none() && !t.is_owed());
        let mine = |b: &&BundleRecord| current.is_some_and(|t| t.id == b.turn_id);
        let settled: BTreeSet<String> = bundles
            .iter()
            .filter(mine)
            .filter(|_| done.is_some() || !open)
            .map(|b| b.pending_id.clone())
            .collect();
        let detached: BTreeSet<String> = bundles
            .iter()
            .filter(mine)
            .filter(|b| b.detached && b.status == BundleStatus::Pending)
            .map(|b| b.pending_id.clone())
            .collect();
        let by_bundle = detached.iter().map(|id| async move {
            let changed = repo.detach_bundle(id).await?;
            Ok(changed.then(|| id.clone()).into_iter().collect())
        });
        let (by_turn, by_bundle, by_session) = tokio::join!(
            async {
                match done {
                    Some(t) => repo.detach_turn(&t.id).await,
                    None => Ok(Vec::new()),
                }
            },
            futures::future::join_all(by_bundle),
            async {
                match open {
                    false => repo.detach_session(&self.session).await,
                    true => Ok(Vec::new()),
                }
            },
        );
        let mut changed = Vec::new();
        for r in [by_turn].into_iter().chain(by_bundle).chain([by_session]) {
            changed.extend(r.unwrap());
        }
        Repeated {
            changed,
            rows: settled.union(&detached).cloned().collect(),
        }
    }

    /// I7, second half: the repeats changed nothing — not what they returned, not the rows
    /// they were about — and no bundle was ever announced detached twice (counted from every
    /// server's events since it started, so a first announcement published late is no repeat).
    async fn check_repeated_detach(&mut self, before: &[BundleRecord], r: Repeated) {
        let after = self
            .state()
            .repo
            .session_bundles(&self.session)
            .await
            .unwrap();
        let mine = |rows: &[BundleRecord]| -> Vec<BundleRecord> {
            rows.iter()
                .filter(|b| r.rows.contains(&b.pending_id))
                .cloned()
                .collect()
        };
        let (before, after) = (mine(before), mine(&after));
        let published: Vec<String> = self
            .lane
            .detached_announced
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(id, _)| id.clone())
            .collect();
        if !r.changed.is_empty() || before != after || !published.is_empty() {
            self.fail(&format!(
                "I7: a repeated detach changed {:?}; announced detached again: {published:?}; \
                 bundles before {before:#?}, after {after:#?}",
                r.changed
            ));
        }
    }

    /// L1/L18: a resume owed before a prompt arrived reaches the agent before that prompt,
    /// once (I4 counts it too); the prompt's turn never starts while the resume is owed, and
    /// is the newer turn (L1 order), so the running turn is the current one.
    async fn check_orders(&mut self, turns: &[TurnRecord]) {
        if self.orders.iter().all(|o| o.done) {
            return;
        }
        let prompts = self.lane.agent.prompts();
        let messages = self
            .state()
            .repo
            .list_messages(&self.session, None, 100_000)
            .await
            .unwrap();
        let l1 = |t: &TurnRecord| (t.started_at, t.created_at, t.id.clone());
        let mut done = Vec::new();
        for (n, o) in self.orders.iter().enumerate().filter(|(_, o)| !o.done) {
            let resumed: Vec<usize> = (0..prompts.len())
                .filter(|&i| {
                    prompts[i].starts_with(RESUME_MARKER)
                        && prompts[i].contains(&format!("Q: {}\n", o.question))
                })
                .collect();
            let prompted: Vec<usize> = (0..prompts.len())
                .filter(|&i| prompts[i] == o.prompt)
                .collect();
            if prompted.len() > 1 || resumed.len() > 1 {
                self.fail(&format!(
                    "I4: the prompt reached the agent {} times, the resume of {} {} times",
                    prompted.len(),
                    o.pending_id,
                    resumed.len()
                ));
            }
            if let Some(&p) = prompted.first()
                && resumed.first().is_none_or(|&r| r >= p)
            {
                self.fail(&format!(
                    "L18: the prompt reached the agent (#{p}) before the resume of {} owed \
                     before it arrived ({resumed:?})",
                    o.pending_id
                ));
            }
            let resume = turns
                .iter()
                .find(|t| t.resume_pending_id.as_deref() == Some(&o.pending_id));
            let prompt_turn = messages
                .iter()
                .find(|m| m.author == MessageAuthor::User && m.content == o.prompt)
                .and_then(|m| turns.iter().find(|t| t.id == m.turn_id));
            if let Some(p) = prompt_turn {
                match resume {
                    Some(r) if !r.is_owed() && l1(r) < l1(p) => {
                        if !prompted.is_empty() {
                            done.push(n);
                        }
                    }
                    _ => self.fail(&format!(
                        "L1/L18: the prompt's turn {p:#?} started, the resume of {} is \
                         {resume:#?}",
                        o.pending_id
                    )),
                }
            }
        }
        for n in done {
            self.orders[n].done = true;
        }
    }

    /// Notes an answer a responder was told 200 `claimed: true` for.
    fn note_answered(&mut self, pending_id: &str, status: u16, body: &Value) {
        if status == 200 && body["claimed"] == true && body["status"] == "answered" {
            self.answered.insert(pending_id.to_string());
        }
    }

    /// Settles and checks: a quiescent point.
    async fn quiescent(&mut self) {
        self.settle().await;
        self.learn_questions().await;
        self.check().await;
    }

    /// Dispatch failures an earlier step armed would hit the next delivery: a step that forces
    /// an interleaving wants that delivery to go through.
    fn disarm_dispatch(&self) {
        for s in self.lane.all() {
            s.state.hooks.fail(Point::Dispatch, 0);
        }
    }

    /// Whether a tool call for `pending_id` is registered as waiting on any server.
    fn waited(&self, pending_id: &str) -> bool {
        self.lane
            .all()
            .any(|s| s.state.runtime.waiters.contains(pending_id))
    }

    /// The session's active bundles (L2), with whether each is detached.
    async fn active_bundles(&self) -> Vec<(String, bool)> {
        self.bundles()
            .await
            .into_iter()
            .filter(|b| b.2)
            .map(|b| (b.0, b.3))
            .collect()
    }

    /// An active detached question (its answer is a resume, L17): one there is, or — when the
    /// session is idle and can take a prompt — one the agent asks now (a quiescent point of its
    /// own; the agent gives up after 30 ms, enough for its question to be written first).
    /// `None` when there is none.
    async fn detached_question(&mut self, rng: &mut SmallRng) -> Option<String> {
        for attempt in 0..2 {
            let detached: Vec<String> = self
                .active_bundles()
                .await
                .into_iter()
                .filter(|b| b.1 && self.prompts.contains_key(&b.0))
                .map(|b| b.0)
                .collect();
            if !detached.is_empty() {
                return Some(detached[rng.random_range(0..detached.len())].clone());
            }
            let repo = self.state().repo.clone();
            let busy = repo
                .list_turns(&self.session)
                .await
                .unwrap()
                .iter()
                .any(|t| t.completed_at.is_none());
            let ended = repo
                .get_session(&self.session)
                .await
                .unwrap()
                .is_none_or(|s| s.state.is_terminal());
            if attempt == 1 || busy || ended {
                break;
            }
            let question = self.self_timed_question();
            self.send_prompt(format!("e2e:ask-timeout(30, {question})"))
                .await;
            self.log
                .push("prompt a detached question (for the next step)".into());
            self.quiescent().await;
        }
        None
    }

    /// One responder, in a task of its own (the step holds it at a hook point): its status and
    /// body, or the transport error when its server died with it.
    fn spawn_respond(
        &self,
        pending_id: &str,
        reject: bool,
    ) -> tokio::task::JoinHandle<Result<(u16, Value), String>> {
        let api = self.api();
        let url = format!("{}/api/v1/clarifications/{pending_id}/respond", api.base);
        let body = response_body(reject);
        tokio::spawn(async move {
            let r = api
                .client
                .post(url)
                .json(&body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = r.status().as_u16();
            Ok((status, r.json::<Value>().await.unwrap_or(Value::Null)))
        })
    }

    /// L1/L18 forced: a detached answer's resume is owed (accepted) and held before its worker
    /// is woken; a prompt arrives right then; then the answer goes on. The resume must reach
    /// the agent first, once, and the prompt's turn be the newer one ([`Seq::check_orders`]).
    async fn prompt_between_owe_and_dispatch(&mut self, rng: &mut SmallRng) -> String {
        self.disarm_dispatch();
        let Some(pending_id) = self.detached_question(rng).await else {
            return "prompt between an owed resume and its dispatch: no question".into();
        };
        let waited = self.waited(&pending_id);
        let gate = Gate::new(self.lane, Point::Owed, &pending_id);
        let mut respond = self.spawn_respond(&pending_id, false);
        tokio::select! {
            at = gate.reached() => if at.is_none() {
                self.fail(&format!("the answer to {pending_id} never became owed"));
            },
            r = &mut respond => self.fail(&format!(
                "answering {pending_id} (detached; a call still registered as waiting for it: \
                 {waited}) ended before its resume was owed: {r:?}"
            )),
        }
        // Owed, or already dispatched: the agent's server delivers owed resumes on its
        // heartbeat too (decision 0036), whatever the held request does next.
        let turns = self.state().repo.list_turns(&self.session).await.unwrap();
        if !turns
            .iter()
            .any(|t| t.resume_pending_id.as_deref() == Some(&pending_id))
        {
            self.fail(&format!(
                "L18: the answer to {pending_id} is past acceptance, but it has no resume: \
                 {turns:#?}"
            ));
        }
        let turn = random_turn(rng);
        self.marks += 1;
        let script = self.script(turn);
        let content = format!(
            "e2e:message(\"prompt {}-{} before a dispatch\")\n{script}",
            self.seed, self.marks
        );
        let (status, body) = self.post_prompt(&content).await;
        if status != 200 {
            self.fail(&format!("a prompt while a resume is owed: {status} {body}"));
        }
        gate.open();
        match respond.await.unwrap() {
            Ok((200, b)) if b["claimed"] == true => self.note_answered(&pending_id, 200, &b),
            r => self.fail(&format!("the held answer to {pending_id}: {r:?}")),
        }
        gate.clear(self.lane);
        *self.claimed.entry(pending_id.clone()).or_default() += 1;
        let question = self.prompts[&pending_id].clone();
        self.orders.push(Order {
            pending_id: pending_id.clone(),
            question,
            prompt: content,
            done: false,
        });
        format!("prompt {turn:?} between the owed resume of {pending_id} and its dispatch")
    }

    /// `POST /sessions/{id}/prompt` through the step's server, in a task of its own (the step
    /// holds it at a hook point).
    fn spawn_prompt(&self, content: &str) -> tokio::task::JoinHandle<Result<(u16, Value), String>> {
        let api = self.api();
        let url = format!("{}/api/v1/sessions/{}/prompt", api.base, self.session);
        let body = json!({ "content": content });
        tokio::spawn(async move {
            let r = api
                .client
                .post(url)
                .json(&body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = r.status().as_u16();
            Ok((status, r.json::<Value>().await.unwrap_or(Value::Null)))
        })
    }

    /// Whether the session cannot take a prompt that starts a turn right away: a turn is
    /// open (not an owed resume), or the session ended.
    async fn busy_or_ended(&self) -> bool {
        let repo = self.state().repo.clone();
        let busy = repo
            .list_turns(&self.session)
            .await
            .unwrap()
            .iter()
            .any(|t| t.completed_at.is_none() && !t.is_owed());
        busy || repo
            .get_session(&self.session)
            .await
            .unwrap()
            .is_none_or(|s| s.state.is_terminal())
    }

    /// The server the session's owner row names (several servers).
    async fn owner(&self) -> Option<usize> {
        let id = self
            .state()
            .repo
            .live_owner(&self.session, i64::MIN)
            .await
            .unwrap()?;
        (0..self.lane.servers.len()).find(|&i| server_id(i) == id)
    }

    /// The pending id of the question with prompt `text`, once it is written (and, with
    /// `detached`, its call stopped waiting); `None` if that does not happen within 5 s.
    async fn written_question(&mut self, text: &str, detached: bool) -> Option<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            self.learn_questions().await;
            let id = self
                .prompts
                .iter()
                .find(|(_, t)| t.as_str() == text)
                .map(|(id, _)| id.clone());
            if let Some(id) = id {
                let b = self.state().repo.get_bundle(&id).await.unwrap().unwrap();
                if b.record.detached || !detached {
                    return Some(id);
                }
            }
            if tokio::time::Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Server `i`'s heartbeat is held at `beat`: once it is, its last one is made a TTL older
    /// (the time a taker would otherwise wait), so another server takes its sessions over at
    /// its next heartbeat.
    async fn stop_beating(&mut self, i: usize, beat: &Gate) {
        if beat.reached().await != Some(i) {
            self.fail(&format!("server {i}'s heartbeat was not held"));
        }
        self.lane.raw.age_heartbeat(&server_id(i), SERVER_TTL).await;
    }

    /// Waits until server `i` finished a round of taking over and delivering owed resumes
    /// that began after this call (`Runtime::lease_rounds`): the takeover it was held in is
    /// done by then. (The round running now may have begun before: two rounds.)
    async fn next_beat(&self, i: usize) {
        let mut rounds = self.lane.server(i).state.runtime.lease_rounds.subscribe();
        let from = *rounds.borrow_and_update();
        let done = rounds.wait_for(|&n| n >= from + 2);
        if tokio::time::timeout(Duration::from_secs(20), done)
            .await
            .is_err()
        {
            self.fail(&format!(
                "server {i} finished no takeover round within 20 s"
            ));
        }
    }

    /// L18/I4 forced: a prompt is held right before its turn's insert while the answer to a
    /// detached question becomes owed; then the prompt goes on. Its turn must not start while
    /// the answer is owed: the resume reaches the agent first, once, and the prompt's turn is
    /// the newer one ([`Seq::check_orders`]).
    async fn prompt_while_owed(&mut self, rng: &mut SmallRng) -> String {
        self.disarm_dispatch();
        let Some(pending_id) = self.detached_question(rng).await else {
            return "prompt while an answer is being owed: no question".into();
        };
        if self.busy_or_ended().await {
            // The prompt would wait in the queue, not at its turn's insert.
            return format!(
                "prompt while the answer to {pending_id} is being owed: a turn is open"
            );
        }
        let turn = random_turn(rng);
        self.marks += 1;
        let script = self.script(turn);
        let content = format!(
            "e2e:message(\"prompt {}-{} while an answer is owed\")\n{script}",
            self.seed, self.marks
        );
        let gate = Gate::new(self.lane, Point::TurnInsert, &self.session);
        let mut prompt = self.spawn_prompt(&content);
        tokio::select! {
            at = gate.reached() => if at.is_none() {
                self.fail("the prompt never reached its turn's insert");
            },
            r = &mut prompt => self.fail(&format!(
                "the prompt ended before its turn's insert: {r:?}"
            )),
        }
        match self.spawn_respond(&pending_id, false).await.unwrap() {
            Ok((200, b)) if b["claimed"] == true => self.note_answered(&pending_id, 200, &b),
            r => self.fail(&format!(
                "answering detached {pending_id} while a prompt is held: {r:?}"
            )),
        }
        *self.claimed.entry(pending_id.clone()).or_default() += 1;
        gate.open();
        match prompt.await.unwrap() {
            Ok((200, _)) => {}
            r => self.fail(&format!("the held prompt: {r:?}")),
        }
        gate.clear(self.lane);
        let question = self.prompts[&pending_id].clone();
        self.orders.push(Order {
            pending_id: pending_id.clone(),
            question,
            prompt: content,
            done: false,
        });
        format!(
            "prompt {turn:?} held at its turn's insert while the answer to {pending_id} became owed"
        )
    }

    /// L18/I4 forced: the agent asks (and stops waiting), then exits; its worker is held right
    /// before the session's guarded move to `failed` while the answer becomes owed. The session
    /// then waits for input (never failed with an owed answer), the answer is final and owed
    /// (a crash launches nothing by itself), and the next retry or prompt delivers it, once.
    async fn crash_while_owed(&mut self, rng: &mut SmallRng) -> String {
        self.disarm_dispatch();
        if self.busy_or_ended().await {
            return "crash while an answer is being owed: the session is busy or ended".into();
        }
        let question = self.self_timed_question();
        let text = self.question_text();
        let gate = Gate::new(self.lane, Point::Failing, &self.session);
        let script = format!(
            "e2e:ask-timeout(30, {question})\n{}",
            self.script(Turn::Crash)
        );
        let (status, body) = self.post_prompt(&script).await;
        if status != 200 {
            self.fail(&format!("a prompt that crashes: {status} {body}"));
        }
        let Some(at) = gate.reached().await else {
            self.fail("the crash never reached its session's move");
        };
        let pending_id = self.written_question(&text, false).await;
        let Some(pending_id) = pending_id else {
            // The agent exited before its question was written: a plain crash.
            gate.open();
            gate.clear(self.lane);
            return "crash (its question was not written before it)".into();
        };
        match self.spawn_respond(&pending_id, false).await.unwrap() {
            Ok((200, b)) if b["claimed"] == true => self.note_answered(&pending_id, 200, &b),
            r => self.fail(&format!(
                "answering {pending_id} while its agent's crash is held (server {at}): {r:?}"
            )),
        }
        *self.claimed.entry(pending_id.clone()).or_default() += 1;
        gate.open();
        gate.clear(self.lane);
        self.settle().await;
        let repo = self.state().repo.clone();
        let session = repo.get_session(&self.session).await.unwrap().unwrap();
        let b = repo.get_bundle(&pending_id).await.unwrap().unwrap();
        let owed = repo.owed_resumes(&self.session).await.unwrap();
        if session.state != turnstile::model::SessionState::WaitingForInput
            || b.record.status != BundleStatus::Answered
            || !owed
                .iter()
                .any(|t| t.resume_pending_id.as_deref() == Some(&pending_id))
        {
            self.fail(&format!(
                "L18: after a crash with the answer to {pending_id} owed, the session is {:?} \
                 (not waiting for input), the answer {:?}, owed resumes {owed:#?}",
                session.state, b.record.status
            ));
        }
        self.learn_questions().await;
        self.check().await;
        let then = if rng.random_bool(0.5) {
            self.post("retry", &[200]).await;
            "retry".to_string()
        } else {
            let turn = random_turn(rng);
            self.marks += 1;
            let script = self.script(turn);
            let content = format!(
                "e2e:message(\"prompt {}-{} after a crash\")\n{script}",
                self.seed, self.marks
            );
            let (status, body) = self.post_prompt(&content).await;
            if status != 200 {
                self.fail(&format!(
                    "a prompt after a crash with an owed answer: {status} {body}"
                ));
            }
            let question = self.prompts[&pending_id].clone();
            self.orders.push(Order {
                pending_id: pending_id.clone(),
                question,
                prompt: content,
                done: false,
            });
            format!("prompt {turn:?}")
        };
        self.settle().await;
        let owed = repo.owed_resumes(&self.session).await.unwrap();
        if owed
            .iter()
            .any(|t| t.resume_pending_id.as_deref() == Some(&pending_id))
        {
            self.fail(&format!(
                "L18: the answer to {pending_id}, owed since a crash, is still owed after a {then}"
            ));
        }
        format!(
            "crash on server {at} held before its session's move while the answer to \
             {pending_id} became owed; then {then}"
        )
    }

    /// One agent per session, a takeover cut by a restart: the server the session's owner row
    /// names stops beating ([`Seq::stop_beating`]) — sometimes with an answer just owed and
    /// held before anyone is woken to deliver it — until another server takes its sessions
    /// over; that server is held right after the owner row names it, before it recovers the
    /// session; meanwhile the stopped server dies and starts again (and, seeing the session
    /// taken, leaves it alone); then the taker goes on, and its takeover is over at its next
    /// heartbeat. At the next point the answer reached the agent once (I4) and one server at
    /// most runs the session's agent.
    async fn restart_during_takeover(&mut self, rng: &mut SmallRng) -> String {
        self.disarm_dispatch();
        let answer = if rng.random_bool(0.5) {
            self.detached_question(rng).await
        } else {
            None
        };
        let Some(dead) = self.owner().await else {
            return "restart during a takeover: no server owns the session".into();
        };
        let beat = Gate::new(self.lane, Point::Beat, &server_id(dead));
        let take = Gate::new(self.lane, Point::TakingOver, &self.session);
        let mut owing = None;
        if let Some(pending_id) = answer {
            let gate = Gate::new(self.lane, Point::Owed, &pending_id);
            let mut respond = self.spawn_respond(&pending_id, false);
            let at = tokio::select! {
                at = gate.reached() => at,
                r = &mut respond => self.fail(&format!(
                    "answering {pending_id} ended before its resume was owed: {r:?}"
                )),
            };
            let Some(at) = at else {
                self.fail(&format!("the answer to {pending_id} never became owed"));
            };
            owing = Some((pending_id, gate, respond, at));
        }
        self.stop_beating(dead, &beat).await;
        let Some(taker) = take.reached().await else {
            self.fail(&format!(
                "no server took the session over within 20 s of server {dead}'s last heartbeat"
            ));
        };
        self.lane.kill(dead, &beat).await;
        if let Some((_, gate, _, at)) = &owing
            && *at == dead
        {
            gate.kill();
        }
        self.lane.servers[dead] = Some(self.lane.start(dead).await);
        let owed_first = rng.random_bool(0.5);
        let mut held = None;
        if let Some((pending_id, gate, respond, at)) = owing {
            if owed_first {
                gate.open();
            }
            held = Some((pending_id, gate, respond, at));
        }
        take.open();
        let mut what = String::new();
        if let Some((pending_id, gate, respond, at)) = held {
            gate.open();
            match respond.await.unwrap() {
                Ok((s, b)) if at != dead && s == 200 && b["claimed"] == true => {
                    self.note_answered(&pending_id, s, &b);
                    *self.claimed.entry(pending_id.clone()).or_default() += 1;
                }
                // The request died with its server; its answer was accepted (owed) all the same.
                Err(_) if at == dead => {
                    *self.claimed.entry(pending_id.clone()).or_default() += 1;
                }
                r => self.fail(&format!(
                    "the answer to {pending_id} held owed on server {at}: {r:?}"
                )),
            }
            gate.clear(self.lane);
            let first = match (at == dead, owed_first) {
                (true, _) => "its request died with its server",
                (false, true) => "it went on first",
                (false, false) => "it went on after the taker",
            };
            what = format!(", with the answer to {pending_id} held owed on server {at} ({first})");
        }
        beat.clear(self.lane);
        take.clear(self.lane);
        self.next_beat(taker).await;
        format!("restart server {dead} while server {taker} takes its session over{what}")
    }

    /// One agent per session, a paused server: the server running the session's turn stops
    /// beating ([`Seq::stop_beating`]) and its turn's end is held (sometimes with the answer to
    /// the turn's detached question owed behind it) until another server took the session over
    /// and is held right after; the paused server goes on first — it must find its claim gone
    /// and stop its agent without handing it anything (a dispatch carrying its older claim is
    /// refused) — then the taker recovers the session and delivers what is owed (I4, checked at
    /// the next point: once).
    async fn pause_and_resume(&mut self, rng: &mut SmallRng) -> String {
        self.disarm_dispatch();
        if self.busy_or_ended().await {
            return "pause a server: the session is busy or ended".into();
        }
        let Some(paused) = self.owner().await else {
            return "pause a server: no server owns the session".into();
        };
        let beat = Gate::new(self.lane, Point::Beat, &server_id(paused));
        let end = Gate::new(self.lane, Point::StepGuard, &self.session);
        let take = Gate::new(self.lane, Point::TakingOver, &self.session);
        self.marks += 1;
        let said = format!("e2e:message(\"paused {}-{}\")", self.seed, self.marks);
        let asked = rng.random_bool(0.5).then(|| {
            let question = self.self_timed_question();
            (question, self.question_text())
        });
        let content = match &asked {
            Some((question, _)) => {
                format!("e2e:ask-timeout(30, {question})\ne2e:delay(300)\n{said}")
            }
            None => said,
        };
        let (status, body) = self.post_prompt(&content).await;
        if status != 200 {
            self.fail(&format!("a prompt to the server to pause: {status} {body}"));
        }
        let mut answering = None;
        if let Some((_, text)) = asked
            && let Some(pending_id) = self.written_question(&text, true).await
        {
            let respond = self.spawn_respond(&pending_id, false);
            answering = Some((pending_id, respond));
        }
        let Some(at) = end.reached().await else {
            self.fail(&format!("the turn on server {paused} never ended"));
        };
        self.stop_beating(paused, &beat).await;
        let Some(taker) = take.reached().await else {
            self.fail(&format!(
                "no server took the session over within 20 s of server {paused}'s last heartbeat"
            ));
        };
        end.open();
        beat.open();
        let stopped = async {
            let s = &self.lane.server(paused).state.runtime;
            while s.owned.contains(&self.session) || s.agents.count() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(20), stopped)
            .await
            .is_err()
        {
            self.fail(&format!(
                "one agent per session: paused server {paused} still runs the agent of the \
                 session server {taker} took over"
            ));
        }
        take.open();
        let mut what = String::new();
        if let Some((pending_id, respond)) = answering {
            match respond.await.unwrap() {
                Ok((200, b)) if b["claimed"] == true => {
                    self.note_answered(&pending_id, 200, &b);
                    *self.claimed.entry(pending_id.clone()).or_default() += 1;
                }
                r => self.fail(&format!(
                    "answering {pending_id} while its server is paused: {r:?}"
                )),
            }
            what = format!(", the answer to {pending_id} owed");
        }
        for gate in [&beat, &end, &take] {
            gate.clear(self.lane);
        }
        self.next_beat(taker).await;
        format!(
            "pause server {paused} at its turn's end (held on server {at}) until server {taker} \
             took the session over{what}; resume it, then the taker"
        )
    }

    /// I8 mid-delivery: an answer held at a hook point (claimed; owed; dispatched, the agent
    /// replying) when its server dies there, and the server starts again. A claim never
    /// accepted is restored (L19); an accepted answer stays final and start-up delivers its
    /// resume (L18); a dispatched one is not delivered again (I4, checked at every point).
    async fn restart_mid_delivery(&mut self, rng: &mut SmallRng) -> String {
        self.disarm_dispatch();
        let cut = [Cut::Claimed, Cut::Owed, Cut::Replying][rng.random_range(0..3)];
        let reject = cut == Cut::Claimed && rng.random_bool(0.2);
        let mut pending_id = None;
        if cut == Cut::Claimed {
            let active: Vec<String> = self
                .active_bundles()
                .await
                .into_iter()
                .map(|b| b.0)
                .filter(|p| self.prompts.contains_key(p))
                .collect();
            if !active.is_empty() {
                pending_id = Some(active[rng.random_range(0..active.len())].clone());
            }
        }
        if pending_id.is_none() {
            pending_id = self.detached_question(rng).await;
        }
        let Some(pending_id) = pending_id else {
            return format!("restart mid-delivery ({cut:?}): no question");
        };
        let live = self.waited(&pending_id);
        let (point, key) = match cut {
            Cut::Claimed => (Point::AfterClaim, pending_id.clone()),
            Cut::Owed => (Point::Owed, pending_id.clone()),
            Cut::Replying => (Point::AgentUpdate, self.session.clone()),
        };
        let gate = Gate::new(self.lane, point, &key);
        let mut respond = self.spawn_respond(&pending_id, reject);
        let at = if cut == Cut::Replying {
            match (&mut respond).await.unwrap() {
                Ok((200, b)) if b["claimed"] == true => self.note_answered(&pending_id, 200, &b),
                r => self.fail(&format!("answering {pending_id}: {r:?}")),
            }
            *self.claimed.entry(pending_id.clone()).or_default() += 1;
            gate.reached().await
        } else {
            tokio::select! {
                at = gate.reached() => at,
                r = &mut respond => self.fail(&format!(
                    "answering {pending_id} ended before {point:?}: {r:?}"
                )),
            }
        };
        let Some(at) = at else {
            let turns = self.state().repo.list_turns(&self.session).await.unwrap();
            let b = self
                .state()
                .repo
                .get_bundle(&pending_id)
                .await
                .unwrap()
                .unwrap();
            self.fail(&format!(
                "the delivery of {pending_id} (live {live}) never reached {point:?}: bundle \
                 {:#?}, turns {turns:#?}",
                b.record
            ));
        };
        // Several servers: whether the session's agent runs on another server than the one that dies.
        let owner = forward::owner_elsewhere(&self.lane.server(at).state, &self.session).await;
        let elsewhere = match &owner {
            Some(o) => format!("; the session's agent runs on {o}"),
            None => String::new(),
        };
        self.lane.kill(at, &gate).await;
        if cut != Cut::Replying {
            // The request dies with its server (its connection closes).
            if let Ok(r) = respond.await.unwrap() {
                self.fail(&format!(
                    "answering {pending_id} returned {r:?} although its server died holding it"
                ));
            }
        }
        gate.clear(self.lane);
        self.lane.servers[at] = Some(self.lane.start(at).await);
        self.log.push(format!(
            "(server {at} died holding the delivery of {pending_id} at {cut:?}{elsewhere}, \
             and started again)"
        ));
        self.settle().await;
        let state = self.state();
        let b = state.repo.get_bundle(&pending_id).await.unwrap().unwrap();
        let turns = state.repo.list_turns(&self.session).await.unwrap();
        let resume = turns
            .iter()
            .find(|t| t.resume_pending_id.as_deref() == Some(&pending_id));
        let one_server = self.lane.servers.len() == 1;
        match cut {
            Cut::Claimed => {
                if !(b.record.status == BundleStatus::Pending && b.active && resume.is_none()) {
                    self.fail(&format!(
                        "L19: a claim of {pending_id} cut by a restart of server {at} before \
                         acceptance is {:?} (active {}, delivery pending {}){elsewhere}; \
                         resume turn {resume:#?}",
                        b.record.status, b.active, b.record.delivery_pending
                    ));
                }
            }
            Cut::Owed | Cut::Replying => {
                if b.record.status != BundleStatus::Answered {
                    self.fail(&format!(
                        "L18: the accepted answer to {pending_id} is {:?} after a restart",
                        b.record.status
                    ));
                }
                let delivered = resume.is_some_and(|t| {
                    !t.is_owed() && (cut == Cut::Owed || t.completed_at.is_some())
                });
                if one_server && !delivered {
                    self.fail(&format!(
                        "L18: after a restart at {cut:?} the resume of {pending_id} is {resume:#?}"
                    ));
                }
            }
        }
        let what = if reject { "skip" } else { "answer" };
        let live = if live { "live" } else { "detached" };
        format!(
            "restart server {at} with the {what} of {live} {pending_id} held at {cut:?}{elsewhere}"
        )
    }

    /// Learns the pending ids of questions the agent asked (their prompts are unique).
    async fn learn_questions(&mut self) {
        let repo = self.state().repo.clone();
        for b in repo.session_bundles(&self.session).await.unwrap() {
            if let std::collections::btree_map::Entry::Vacant(slot) =
                self.prompts.entry(b.pending_id.clone())
            {
                let stored = repo.get_bundle(&b.pending_id).await.unwrap().unwrap();
                slot.insert(stored.questions[0].prompt.clone());
            }
        }
    }
}

/// One of the lane's servers at random (no draw with one server, so its sequences stay as
/// they were).
fn any_server(lane: &Lane, rng: &mut SmallRng) -> usize {
    match lane.servers.len() {
        1 => 0,
        n => rng.random_range(0..n),
    }
}

/// Server `i`'s id in a lane of several.
fn server_id(i: usize) -> String {
    format!("model-{i}")
}

fn random_turn(rng: &mut SmallRng) -> Turn {
    match rng.random_range(0..10) {
        0 => Turn::Message,
        1..=3 => Turn::LiveQuestion,
        4..=5 => Turn::DetachedQuestion,
        6..=7 => Turn::QuestionAfterDetach,
        8 => Turn::Permission,
        _ => Turn::Crash,
    }
}

fn response_body(reject: bool) -> Value {
    if reject {
        json!({ "rejected": true })
    } else {
        json!({ "answers": [{ "question_id": "q", "selected_options": ["a"] }] })
    }
}

/// The session's transcript, in order.
async fn messages_of(
    state: &turnstile::server::state::AppState,
    session: &str,
) -> Vec<MessageRecord> {
    state
        .repo
        .list_messages(session, None, 100_000)
        .await
        .unwrap()
}

async fn run_sequence(lane: &mut Lane, workflow: &str, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let via = any_server(lane, &mut rng);
    let api = Api::new(&lane.server(via).base);
    let (status, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": format!("model {seed}"), "workflow_id": workflow, "prompt": "e2e:message(\"start\")" }),
        )
        .await;
    assert_eq!(status, 200, "{task}");
    let steps = lane
        .server(0)
        .state
        .repo
        .list_workflows()
        .await
        .unwrap()
        .into_iter()
        .find(|w| w.workflow.id == workflow)
        .unwrap()
        .steps
        .into_iter()
        .map(|s| s.id)
        .collect();
    let mut s = Seq {
        task: task["id"].as_str().unwrap().to_string(),
        session: task["primary_session_id"].as_str().unwrap().to_string(),
        lane,
        via,
        seed,
        log: vec![],
        questions: 0,
        prompts: BTreeMap::new(),
        self_timed: BTreeSet::new(),
        claimed: BTreeMap::new(),
        answered: BTreeSet::new(),
        superseded: BTreeSet::new(),
        was_active: BTreeSet::new(),
        workflow: BTreeMap::new(),
        moves_seen: 0,
        orders: Vec::new(),
        marks: 0,
        steps,
    };
    s.settle().await;
    for _ in 0..STEPS {
        let started = std::time::Instant::now();
        s.via = any_server(s.lane, &mut rng);
        let op = rng.random_range(0..102);
        // With several servers, half of the owe windows' share goes to the takeover windows
        // (about 1% each with one server, 0.5% with three: a takeover step waits for
        // heartbeats).
        let takeover = op >= 100 && s.lane.servers.len() > 1 && rng.random_bool(0.5);
        let name = match op {
            0..=29 => {
                let turn = random_turn(&mut rng);
                s.prompt(turn).await;
                format!("prompt {turn:?}")
            }
            30..=54 => {
                s.respond(&mut rng, false, 1, None, 0).await;
                "answer".into()
            }
            55..=61 => {
                s.respond(&mut rng, true, 1, None, 0).await;
                "skip".into()
            }
            62..=67 => {
                let (n, reject) = (rng.random_range(2..5), rng.random_bool(0.2));
                s.respond(&mut rng, reject, n, None, 0).await;
                format!("{n} concurrent responders")
            }
            68..=77 => {
                let point = [Point::Owe, Point::Finalize, Point::Dispatch][rng.random_range(0..3)];
                let reject = rng.random_bool(0.2);
                let at = any_server(s.lane, &mut rng);
                s.respond(&mut rng, reject, 1, Some(point), at).await;
                format!("answer with a failure at {point:?} on server {at}")
            }
            78..=82 => {
                s.answer_permission().await;
                "permission answer".into()
            }
            83..=87 => {
                s.post("cancel", &[200]).await;
                "cancel".into()
            }
            88..=92 => {
                s.post("retry", &[200, 409, 500, 503]).await;
                "retry".into()
            }
            93..=95 => {
                let which = any_server(s.lane, &mut rng);
                s.lane.restart(which).await;
                format!("restart server {which}")
            }
            96..=97 => s.restart_mid_delivery(&mut rng).await,
            98..=99 => s.prompt_between_owe_and_dispatch(&mut rng).await,
            100 if takeover => s.restart_during_takeover(&mut rng).await,
            100 => s.prompt_while_owed(&mut rng).await,
            _ if takeover => s.pause_and_resume(&mut rng).await,
            _ => s.crash_while_owed(&mut rng).await,
        };
        let name = if s.lane.servers.len() > 1 {
            format!("{name} (via server {})", s.via)
        } else {
            name
        };
        // Logged before its quiescent point, so a failure there names the step.
        s.log.push(name.clone());
        if s.lane.history.len() == 40 {
            s.lane.history.pop_front();
        }
        s.lane.history.push_back(format!("seed {seed}: {name}"));
        let acted = started.elapsed();
        s.settle().await;
        let settled = started.elapsed();
        s.learn_questions().await;
        s.check().await;
        if std::env::var_os("TURNSTILE_MODEL_TIMING").is_some() {
            eprintln!(
                "{name}: act {acted:?}, settle {settled:?}, check {:?}",
                started.elapsed()
            );
        }
    }
    // Done: stop its agent and end the session, so later restarts leave it alone.
    for server in s.lane.all() {
        server.state.hooks.fail(Point::Dispatch, 0);
        worker::stop(&server.state, &s.session);
    }
    let state = s.state();
    state
        .repo
        .set_session_state(
            &s.session,
            turnstile::model::SessionState::Completed,
            state.clock.now(),
        )
        .await
        .unwrap();
}

/// The seeds to run: `TURNSTILE_SEED`, or `count` (`default` unless set) from a fixed base.
fn seeds(count: &str, default: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("TURNSTILE_SEED") {
        return vec![seed.parse().expect("TURNSTILE_SEED is a u64")];
    }
    let n: u64 = std::env::var(count)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    (0..n).map(|i| 0x5e41_0000 + i).collect()
}

/// Runs `seeds` on `lanes` databases at once, each with `servers` servers.
async fn run(
    url_for_lane: impl AsyncFn() -> Option<String>,
    seeds: Vec<u64>,
    lanes: u64,
    servers: usize,
) {
    let lane_count = lanes;
    let mut lanes = Vec::new();
    for lane in 0..lane_count.min(seeds.len() as u64) {
        let Some(url) = url_for_lane().await else {
            return;
        };
        let mine: Vec<u64> = seeds
            .iter()
            .copied()
            .filter(|s| s % lane_count == lane || seeds.len() == 1)
            .collect();
        lanes.push(tokio::spawn(async move {
            let mut lane = Lane::new(url, servers).await;
            let steps: Vec<Value> = (0..WORKFLOW_STEPS)
                .map(|i| json!({ "name": format!("S{i}"), "on_turn_complete": "move_to_next" }))
                .collect();
            let (_, wf) = Api::new(&lane.server(0).base)
                .post(
                    "/api/v1/workflows",
                    json!({ "name": "model", "steps": steps }),
                )
                .await;
            let workflow = wf["id"].as_str().unwrap().to_string();
            for seed in mine {
                run_sequence(&mut lane, &workflow, seed).await;
            }
            lane.stop().await;
        }));
    }
    let count = seeds.len();
    for lane in lanes {
        lane.await
            .expect("a lane failed (its seed is in the panic message above)");
    }
    eprintln!("service model: {count} sequences passed");
}

fn one_server_seeds() -> Vec<u64> {
    seeds("TURNSTILE_SERVICE_SEQUENCES", 2000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_model_sqlite() {
    run(
        async || Some(support::sqlite_url()),
        one_server_seeds(),
        LANES,
        1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_model_postgres() {
    run(support::postgres_url, one_server_seeds(), LANES, 1).await;
}

/// Several servers: I1–I9 with every request sent to one of three servers on one database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_model_three_servers() {
    let seeds = seeds("TURNSTILE_SERVERS_SEQUENCES", 300);
    run(support::postgres_url, seeds, THREE_SERVER_LANES, 3).await;
}
