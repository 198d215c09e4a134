//! A randomized model test of the real services (issue "exactly once under faults"): seeded
//! random sequences of agent turns (live and detached questions, questions after a detach,
//! permissions, crashes), answers, skips, concurrent answers, permission answers, cancels,
//! retries and restarts, with failures injected at the named points of a delivery (before the
//! resume is owed, before a delivery is recorded, before an owed resume is dispatched) — all
//! through HTTP, the session workers and the bundled mock agent (in process, so thousands of
//! sequences stay fast). At every quiescent point I1–I9 are checked: I2 on the persisted
//! summaries as stored (no P7 repair first), I4 counted at the agent, I6 as one step per
//! completed turn at most.
//!
//! 2,000 sequences per database by default; `TURNSTILE_SERVICE_SEQUENCES=<n>` runs more,
//! `TURNSTILE_SEED=<seed>` replays one.
//!
//! Issue 13: `service_model_three_servers` runs the same sequences against three servers on
//! one PostgreSQL database, every request sent to one of them at random (the session's agent
//! runs on the server that launched it; the others forward to it or hand answers over), faults
//! injected on any of them, any of them restarted. `TURNSTILE_SERVERS_SEQUENCES=<n>` (default
//! 300) sets how many.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use support::{Api, TestServer, table_counts};
use turnstile::mock_agent::InProcess;
use turnstile::model::{BundleStatus, PendingAction};
use turnstile::server::clarification::respond::RESUME_MARKER;
use turnstile::server::hooks::Point;
use turnstile::server::orchestrator::worker;
use turnstile::server::summary::loader;

const LANES: u64 = 8;
/// Databases at once in the three-server run (three servers each).
const THREE_SERVER_LANES: u64 = 4;
const STEPS: usize = 6;
/// Enough steps that advancing never runs out (I6 counts them).
const WORKFLOW_STEPS: usize = 20;

/// One database and its servers (one, or three sharing the in-process mock agent).
struct Lane {
    url: String,
    servers: Vec<Option<TestServer>>,
    agent: InProcess,
}

impl Lane {
    async fn new(url: String, servers: usize) -> Lane {
        let mut lane = Lane {
            url,
            servers: (0..servers).map(|_| None).collect(),
            agent: InProcess::default(),
        };
        for i in 0..servers {
            lane.servers[i] = Some(lane.start(i).await);
        }
        lane
    }

    async fn start(&self, i: usize) -> TestServer {
        let agent = self.agent.clone();
        let id = (self.servers.len() > 1).then(|| format!("model-{i}"));
        TestServer::start_with(&self.url, move |r| {
            r.in_process_mock = Some(agent);
            r.agent_start_timeout = Duration::from_secs(10);
            if let Some(id) = id {
                r.server_id = id;
            }
        })
        .await
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

    async fn stop(&mut self) {
        for s in &mut self.servers {
            if let Some(s) = s.take() {
                s.stop().await;
            }
        }
    }
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
    /// Once active, then inactive while still pending: must never come back (I9).
    superseded: BTreeSet<String>,
    was_active: BTreeSet<String>,
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
            "seed {} (replay with TURNSTILE_SEED={}): {what}\nsteps: {:#?}",
            self.seed, self.seed, self.log
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
        // An armed dispatch failure hits the owed resume this prompt delivers first.
        let fault = self
            .lane
            .all()
            .any(|s| s.state.hooks.armed(Point::Dispatch) > 0);
        let (status, body) = self
            .api()
            .post(
                &format!("/api/v1/sessions/{}/prompt", self.session),
                json!({ "content": content }),
            )
            .await;
        let ok = match status.as_u16() {
            200 | 409 => true,
            500 | 503 => fault,
            _ => false,
        };
        if !ok {
            self.fail(&format!("prompt: {status} {body}"));
        }
    }

    /// Every bundle of the session with its L2 activity now.
    async fn bundles(&self) -> Vec<(String, BundleStatus, bool)> {
        let repo = &self.state().repo;
        let mut out = Vec::new();
        for b in repo.session_bundles(&self.session).await.unwrap() {
            let s = repo.get_bundle(&b.pending_id).await.unwrap().unwrap();
            out.push((b.pending_id, s.record.status, s.active));
        }
        out
    }

    async fn pick(&self, rng: &mut SmallRng) -> Option<(String, BundleStatus, bool)> {
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
        let Some((pending_id, status, active)) = self.pick(rng).await else {
            return;
        };
        let state = self.state();
        let faulty = self.lane.server(fault_at).state.clone();
        if let Some(point) = fault {
            faulty.hooks.fail(point, 1);
        }
        let refused = !active && !matches!(status, BundleStatus::Answered | BundleStatus::Rejected);
        let counts_before = if refused {
            Some(table_counts(&self.lane.url).await)
        } else {
            None
        };
        let body = if reject {
            json!({ "rejected": true })
        } else {
            json!({ "answers": [{ "question_id": "q", "selected_options": ["a"] }] })
        };
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
                self.fail("no quiescent point within 20 s");
            }
            let _ = tokio::time::timeout(Duration::from_millis(5), events.recv()).await;
            while events.try_recv().is_ok() {}
        }
    }

    /// I1, I2, I4, I6, I9 at a quiescent point.
    async fn check(&mut self) {
        let state = self.state();
        let repo = &state.repo;
        let current = repo.current_turn_id(&self.session).await.unwrap();
        for b in repo.active_bundles(&self.session).await.unwrap() {
            if Some(&b.record.turn_id) != current.as_ref() {
                self.fail(&format!(
                    "I1: active {} outside the current turn",
                    b.record.pending_id
                ));
            }
        }
        for (id, status, active) in self.bundles().await {
            if active {
                if self.superseded.contains(&id) {
                    self.fail(&format!("I9: superseded {id} is active again"));
                }
                self.was_active.insert(id.clone());
            } else if status == BundleStatus::Pending && self.was_active.contains(&id) {
                self.superseded.insert(id.clone());
            }
        }
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
        let turns = repo.list_turns(&self.session).await.unwrap();
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
        // I6: at most one step per completed turn.
        let completed = turns.iter().filter(|t| t.completed_at.is_some()).count();
        let task = repo.get_task(&self.task).await.unwrap().unwrap();
        let workflow = repo
            .list_workflows()
            .await
            .unwrap()
            .into_iter()
            .find(|w| Some(&w.workflow.id) == task.workflow_id.as_ref())
            .unwrap();
        let step = workflow
            .steps
            .iter()
            .position(|s| Some(&s.id) == task.step_id.as_ref())
            .unwrap();
        if step > completed {
            self.fail(&format!("I6: {step} steps for {completed} completed turns"));
        }
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
        superseded: BTreeSet::new(),
        was_active: BTreeSet::new(),
    };
    s.settle().await;
    for _ in 0..STEPS {
        let started = std::time::Instant::now();
        s.via = any_server(s.lane, &mut rng);
        let op = rng.random_range(0..100);
        let name = match op {
            0..=34 => {
                let turn = match rng.random_range(0..10) {
                    0 => Turn::Message,
                    1..=3 => Turn::LiveQuestion,
                    4..=5 => Turn::DetachedQuestion,
                    6..=7 => Turn::QuestionAfterDetach,
                    8 => Turn::Permission,
                    _ => Turn::Crash,
                };
                s.prompt(turn).await;
                format!("prompt {turn:?}")
            }
            35..=54 => {
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
            _ => {
                let which = any_server(s.lane, &mut rng);
                s.lane.restart(which).await;
                format!("restart server {which}")
            }
        };
        let name = if s.lane.servers.len() > 1 {
            format!("{name} (via server {})", s.via)
        } else {
            name
        };
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
        s.log.push(name);
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
    support::count_story("sqlite");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_model_postgres() {
    run(support::postgres_url, one_server_seeds(), LANES, 1).await;
    if std::env::var("TEST_POSTGRES_URL").is_ok_and(|u| !u.is_empty()) {
        support::count_story("postgres");
    }
}

/// Issue 13: I1–I9 with every request sent to one of three servers on one database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_model_three_servers() {
    let seeds = seeds("TURNSTILE_SERVERS_SEQUENCES", 300);
    run(support::postgres_url, seeds, THREE_SERVER_LANES, 3).await;
    if std::env::var("TEST_POSTGRES_URL").is_ok_and(|u| !u.is_empty()) {
        support::count_story("postgres");
    }
}
