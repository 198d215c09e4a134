//! A randomized model test of the clarification lifecycle (issue "Answering questions"):
//! seeded random sequences of {ask, ask-with-timeout, answer, reject, concurrent answer, new
//! prompt, turn completion, delete messages, session cancel, restart (with crash points)}
//! run against the real repository and start-up recovery, and against a small reference
//! model; I1–I9 are checked after every step. 2,000 sequences per database by default;
//! `TURNSTILE_LIFECYCLE_SEQUENCES=<n>` runs more, `TURNSTILE_SEED=<seed>` replays one.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use turnstile::model::{BundleStatus, MessageAuthor, MessageKind, PendingAction, SessionState};
use turnstile::server::clarification::recovery;
use turnstile::server::repo::*;

const LANES: u64 = 4;
const STEPS: usize = 14;

#[derive(Clone, Debug)]
struct MBundle {
    turn: String,
    status: BundleStatus,
    detached: bool,
}

#[derive(Debug, Default)]
struct Model {
    /// Turns in creation order (timestamps strictly increase, so this is L1 order).
    turns: Vec<String>,
    terminal: bool,
    bundles: BTreeMap<String, MBundle>,
    /// Bundles that were active once and then superseded: they must never come back (I9).
    superseded: BTreeSet<String>,
    /// Owed resume turns not yet dispatched (L18), oldest first.
    owed: Vec<String>,
}

impl Model {
    fn current(&self) -> Option<&String> {
        self.turns.last()
    }

    fn is_active(&self, b: &MBundle) -> bool {
        !self.terminal && b.status == BundleStatus::Pending && Some(&b.turn) == self.current()
    }

    fn active(&self) -> BTreeSet<String> {
        self.bundles
            .iter()
            .filter(|(_, b)| self.is_active(b))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// A new current turn supersedes every pending bundle of older turns (L5).
    fn push_turn(&mut self, id: String) {
        let before = self.active();
        self.turns.push(id);
        let after = self.active();
        self.superseded.extend(before.difference(&after).cloned());
    }
}

struct Seq {
    repo: Arc<dyn Repository>,
    session: String,
    now: i64,
    m: Model,
    seed: u64,
    log: Vec<String>,
}

impl Seq {
    fn tick(&mut self) -> i64 {
        self.now += 10;
        self.now
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {} (replay with TURNSTILE_SEED={}): {what}\nsteps: {:#?}\nmodel: {:#?}",
            self.seed, self.seed, self.log, self.m
        )
    }

    async fn new_turn(&mut self) {
        let at = self.tick();
        let inserted = self
            .repo
            .insert_turn(&NewTurn {
                id: None,
                session_id: self.session.clone(),
                started_at: at,
                created_at: at,
                fence: None,
            })
            .await;
        // L18/I4: no turn starts while an answer is owed (the owed resume goes first).
        if !self.m.owed.is_empty() {
            match inserted {
                Err(turnstile::server::repo::RepoError::ResumeOwed(_)) => return,
                other => self.fail(&format!(
                    "L18: a turn started while an answer was owed: {other:?}"
                )),
            }
        }
        self.m.push_turn(inserted.unwrap().id);
    }

    async fn ask(&mut self, detach: bool) {
        let Some(turn) = self.m.current().cloned() else {
            return;
        };
        // L6: an owed resume is not a turn an agent asks in (the service refuses it).
        if self.m.owed.contains(&turn) {
            return;
        }
        let at = self.tick();
        let (b, _) = self
            .repo
            .insert_bundle(
                &NewBundle {
                    pending_id: None,
                    session_id: self.session.clone(),
                    turn_id: turn.clone(),
                    context: None,
                    dedup_key: format!("k{at}"),
                    questions: vec![],
                    message_content: "?".into(),
                },
                at,
            )
            .await
            .unwrap();
        self.m.bundles.insert(
            b.pending_id.clone(),
            MBundle {
                turn,
                status: BundleStatus::Pending,
                detached: false,
            },
        );
        if detach {
            self.detach(&b.pending_id).await;
        }
    }

    /// L9: only active, attached bundles change; a repeat is a no-op (I7).
    async fn detach(&mut self, pending_id: &str) {
        let expected = {
            let b = &self.m.bundles[pending_id];
            self.m.is_active(b) && !b.detached
        };
        let changed = self.repo.detach_bundle(pending_id).await.unwrap();
        if changed != expected {
            self.fail(&format!(
                "detach_bundle({pending_id}) = {changed}, model says {expected}"
            ));
        }
        if changed {
            self.m.bundles.get_mut(pending_id).unwrap().detached = true;
        }
        if self.repo.detach_bundle(pending_id).await.unwrap() {
            self.fail("I7: a repeated detach changed something");
        }
    }

    async fn complete_turn(&mut self, older: bool) {
        let Some(turn) = (if older {
            self.m.turns.first().cloned()
        } else {
            self.m.current().cloned()
        }) else {
            return;
        };
        self.repo.complete_turn(&turn, self.now).await.unwrap();
        let mut expected: Vec<String> = self
            .m
            .bundles
            .iter()
            .filter(|(_, b)| b.turn == turn && self.m.is_active(b) && !b.detached)
            .map(|(id, _)| id.clone())
            .collect();
        let mut got = self.repo.detach_turn(&turn).await.unwrap();
        expected.sort();
        got.sort();
        if got != expected {
            self.fail(&format!(
                "detach_turn: got {got:?}, model {expected:?} (L9/L10)"
            ));
        }
        for id in got {
            self.m.bundles.get_mut(&id).unwrap().detached = true;
        }
    }

    /// `n` concurrent responders; with a detached answer the winner resumes the agent, and
    /// the process may "crash" at a point of that delivery (then the step restarts).
    async fn respond(&mut self, rng: &mut SmallRng, reject: bool, n: usize) {
        let Some(pending_id) = self.pick_bundle(rng) else {
            return;
        };
        let status = if reject {
            BundleStatus::Rejected
        } else {
            BundleStatus::Answered
        };
        let before = self.repo.get_bundle(&pending_id).await.unwrap().unwrap();
        let model_b = self.m.bundles[&pending_id].clone();
        let active = self.m.is_active(&model_b);
        let claim = Claim {
            status,
            response: "{}".into(),
            reject_reason: None,
            by: "test".into(),
        };
        let mut handles = Vec::new();
        for _ in 0..n {
            let (repo, id, claim, at) = (
                self.repo.clone(),
                pending_id.clone(),
                claim.clone(),
                self.now + 1,
            );
            handles.push(tokio::spawn(async move {
                repo.claim_bundle(&id, &claim, at).await.unwrap()
            }));
        }
        let mut winners = 0;
        for h in handles {
            match h.await.unwrap() {
                ClaimOutcome::Claimed(_) => winners += 1,
                ClaimOutcome::AlreadyResolved(r) => {
                    if !active
                        && !matches!(
                            model_b.status,
                            BundleStatus::Answered | BundleStatus::Rejected
                        )
                    {
                        self.fail(&format!(
                            "AlreadyResolved for a bundle the model says is {:?}",
                            r.status
                        ));
                    }
                }
                ClaimOutcome::NotActive(_) => {
                    if active {
                        self.fail("NotActive for an active bundle");
                    }
                }
                ClaimOutcome::NotFound => self.fail("bundle vanished"),
            }
        }
        if winners != usize::from(active) {
            self.fail(&format!(
                "I3: {winners} winners for a bundle with active={active}"
            ));
        }
        if !active {
            let after = self.repo.get_bundle(&pending_id).await.unwrap().unwrap();
            if after.record != before.record {
                self.fail("I5: a refused claim wrote something");
            }
            return;
        }
        self.m.bundles.get_mut(&pending_id).unwrap().status = status;
        if reject || !model_b.detached {
            // Live delivery or a detached rejection: finalized at once, no resume (I4).
            assert!(self.repo.finalize_delivery(&pending_id).await.unwrap());
            return;
        }
        // L17/L18: the resume becomes owed (accepted) in one transaction, then is dispatched;
        // the process may crash before or after acceptance.
        let crash = rng.random_range(0..4);
        if crash == 0 {
            return self.restart(Some(&pending_id)).await;
        }
        let at = self.tick();
        let turn = self
            .repo
            .owe_resume(&pending_id, "resume", at)
            .await
            .unwrap()
            .expect("an answered bundle of a live session is owed a resume");
        if self
            .repo
            .owe_resume(&pending_id, "resume", at)
            .await
            .unwrap()
            .is_some()
        {
            self.fail("I4: a second resume was owed for one answer");
        }
        // Attempted counts (L1): the owed turn is current at once.
        self.m.push_turn(turn.id.clone());
        self.m.owed.push(turn.id.clone());
        if crash == 1 {
            return self.restart(None).await;
        }
        self.dispatch_owed().await;
    }

    /// Hands the oldest owed resume to the agent: exactly once (I4), only while it is the
    /// current turn (a stale one stays owed: moving it ahead would revive what it superseded).
    async fn dispatch_owed(&mut self) {
        if self.m.owed.is_empty() {
            return;
        }
        let turn = self.m.owed[0].clone();
        let at = self.tick();
        let expected = !self.m.terminal && self.m.current() == Some(&turn);
        let dispatched = self.repo.dispatch_resume(&turn, at, None).await.unwrap();
        if dispatched != expected {
            self.fail(&format!(
                "dispatch_resume = {dispatched}, model says {expected}"
            ));
        }
        if !dispatched {
            return;
        }
        self.m.owed.remove(0);
        if self.repo.dispatch_resume(&turn, at, None).await.unwrap() {
            self.fail("I4: an owed resume was dispatched twice");
        }
        self.m.turns.retain(|t| t != &turn);
        self.m.push_turn(turn);
    }

    fn pick_bundle(&self, rng: &mut SmallRng) -> Option<String> {
        let ids: Vec<&String> = self.m.bundles.keys().collect();
        (!ids.is_empty()).then(|| ids[rng.random_range(0..ids.len())].clone())
    }

    /// Start-up recovery (L19 + session recovery). `undelivered` is a claimed bundle whose
    /// resume never became owed: recovery must hand it back as pending (I8). Owed resumes stay
    /// owed (their answers are final).
    async fn restart(&mut self, undelivered: Option<&str>) {
        if let Some(id) = undelivered {
            let b = self.m.bundles.get_mut(id).unwrap();
            b.status = BundleStatus::Pending;
        }
        let at = self.tick();
        recovery::recover(self.repo.as_ref(), at).await.unwrap();
        let at = self.tick();
        recovery::recover_sessions(self.repo.as_ref(), at)
            .await
            .unwrap();
        // Every active bundle of the current turn is now detached (agents died), and no claim
        // is left half-delivered.
        let active = self.m.active();
        for id in active {
            self.m.bundles.get_mut(&id).unwrap().detached = true;
        }
        if !self
            .repo
            .bundles_pending_delivery()
            .await
            .unwrap()
            .iter()
            .all(|b| b.session_id != self.session)
        {
            self.fail("I8: a delivery is still pending after recovery");
        }
        let mut owed: Vec<String> = self
            .repo
            .unpublished_reservations()
            .await
            .unwrap()
            .into_iter()
            .filter(|t| t.session_id == self.session)
            .inspect(|t| {
                if !t.is_owed() {
                    self.fail("L19: a reservation that was never owed survived recovery");
                }
            })
            .map(|t| t.id)
            .collect();
        let mut expected = self.m.owed.clone();
        owed.sort();
        expected.sort();
        if owed != expected {
            self.fail(&format!(
                "L18: owed after recovery {owed:?}, model {expected:?}"
            ));
        }
    }

    async fn delete_messages(&mut self, rng: &mut SmallRng) {
        if self.m.turns.is_empty() {
            return;
        }
        let turn = self.m.turns[rng.random_range(0..self.m.turns.len())].clone();
        let at = self.tick();
        self.repo
            .insert_message(
                &NewMessage {
                    session_id: self.session.clone(),
                    turn_id: turn.clone(),
                    author: MessageAuthor::Agent,
                    kind: MessageKind::Text,
                    content: "m".into(),
                    pending_id: None,
                },
                at,
            )
            .await
            .unwrap();
        // L4: delete every message of that turn, clarification rows included.
        for m in self
            .repo
            .list_messages(&self.session, None, 1000)
            .await
            .unwrap()
        {
            if m.turn_id == turn {
                self.repo.delete_message(&m.id).await.unwrap();
            }
        }
    }

    async fn cancel_session(&mut self) {
        if self.m.terminal {
            return;
        }
        let at = self.tick();
        self.repo
            .set_session_state(&self.session, SessionState::Cancelled, at)
            .await
            .unwrap()
            .expect("moved");
        let mut expected: Vec<String> = self
            .m
            .bundles
            .iter()
            .filter(|(_, b)| b.status == BundleStatus::Pending && Some(&b.turn) == self.m.current())
            .map(|(id, _)| id.clone())
            .collect();
        let mut got = self.repo.expire_session(&self.session, at).await.unwrap();
        expected.sort();
        got.sort();
        if got != expected {
            self.fail(&format!("L11: expired {got:?}, model {expected:?}"));
        }
        self.m.terminal = true;
        for id in got {
            self.m.bundles.get_mut(&id).unwrap().status = BundleStatus::Expired;
        }
    }

    /// I1, I3, I9 and P1 after every step.
    async fn check(&self) {
        let current = self.repo.current_turn_id(&self.session).await.unwrap();
        if current.as_ref() != self.m.current() {
            self.fail(&format!("L1: current turn {current:?}"));
        }
        let active: BTreeSet<String> = self
            .repo
            .active_bundles(&self.session)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.record.pending_id)
            .collect();
        if active != self.m.active() {
            self.fail(&format!(
                "I1/L2: active {active:?} vs model {:?}",
                self.m.active()
            ));
        }
        if let Some(back) = active.intersection(&self.m.superseded).next() {
            self.fail(&format!("I9: superseded bundle {back} is active again"));
        }
        let stored = self.repo.session_bundles(&self.session).await.unwrap();
        if stored.len() != self.m.bundles.len() {
            self.fail(&format!(
                "{} bundles stored, model has {}",
                stored.len(),
                self.m.bundles.len()
            ));
        }
        for b in stored {
            let mb = &self.m.bundles[&b.pending_id];
            if b.status != mb.status || b.detached != mb.detached {
                self.fail(&format!(
                    "bundle {}: stored {:?}/detached={} vs model {:?}/detached={}",
                    b.pending_id, b.status, b.detached, mb.status, mb.detached
                ));
            }
        }
        let state = self
            .repo
            .get_session(&self.session)
            .await
            .unwrap()
            .unwrap()
            .state;
        let batch = self
            .repo
            .pending_actions_for_sessions(std::slice::from_ref(&self.session))
            .await
            .unwrap()[&self.session];
        let clarification = state.is_input_capable() && !active.is_empty();
        if (batch == Some(PendingAction::Clarification)) != clarification {
            self.fail(&format!(
                "P1: batch {batch:?} with {} active bundles in state {state}",
                active.len()
            ));
        }
    }
}

async fn run_sequence(repo: Arc<dyn Repository>, task_id: &str, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let session = repo
        .create_session(
            &NewSession {
                task_id: task_id.into(),
                agent_profile_id: None,
                name: "m".into(),
                state: SessionState::WaitingForInput,
                is_primary: false,
                mcp_token_hash: None,
            },
            0,
        )
        .await
        .unwrap()
        .id;
    let mut s = Seq {
        repo,
        session,
        now: 1_000_000 + (seed as i64 % 1000) * 1_000_000,
        m: Model::default(),
        seed,
        log: vec![],
    };
    s.new_turn().await;
    for _ in 0..STEPS {
        let op = rng.random_range(0..100);
        let name = match op {
            0..=17 => {
                s.ask(false).await;
                "ask"
            }
            18..=27 => {
                s.ask(true).await;
                "ask-with-timeout"
            }
            28..=45 => {
                s.respond(&mut rng, false, 1).await;
                "answer"
            }
            46..=53 => {
                s.respond(&mut rng, true, 1).await;
                "reject"
            }
            54..=61 => {
                let n = rng.random_range(2..5);
                s.respond(&mut rng, false, n).await;
                "concurrent answer"
            }
            62..=71 => {
                s.new_turn().await;
                "new prompt"
            }
            72..=79 => {
                let older = rng.random_bool(0.3);
                s.complete_turn(older).await;
                if older {
                    "complete older turn"
                } else {
                    "turn completion"
                }
            }
            80..=86 => {
                s.delete_messages(&mut rng).await;
                "delete messages"
            }
            87..=90 => {
                s.cancel_session().await;
                "session cancel"
            }
            91..=94 => {
                s.dispatch_owed().await;
                "dispatch owed resume"
            }
            _ => {
                s.restart(None).await;
                "restart"
            }
        };
        s.log.push(name.to_string());
        s.check().await;
    }
    // Done: a terminal session stays out of later sequences' restarts in this lane.
    s.repo
        .set_session_state(&s.session, SessionState::Completed, s.now + 1)
        .await
        .unwrap();
}

fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var("TURNSTILE_SEED") {
        return vec![seed.parse().expect("TURNSTILE_SEED is a u64")];
    }
    let n: u64 = std::env::var("TURNSTILE_LIFECYCLE_SEQUENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    (0..n).map(|i| 0x11fe_0000 + i).collect()
}

async fn run(open: impl AsyncFn() -> Option<Arc<dyn Repository>>) {
    let seeds = seeds();
    let mut lanes = Vec::new();
    for lane in 0..LANES.min(seeds.len() as u64) {
        let Some(repo) = open().await else { return };
        let mine: Vec<u64> = seeds
            .iter()
            .copied()
            .filter(|s| s % LANES == lane || seeds.len() == 1)
            .collect();
        lanes.push(tokio::spawn(async move {
            let task = repo
                .create_task(
                    &NewTask {
                        title: "model".into(),
                        ..Default::default()
                    },
                    0,
                )
                .await
                .unwrap()
                .id;
            for seed in mine {
                run_sequence(repo.clone(), &task, seed).await;
            }
        }));
    }
    let count = seeds.len();
    for lane in lanes {
        lane.await
            .expect("a lane failed (its seed is in the panic message above)");
    }
    eprintln!("lifecycle model: {count} sequences passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_model_sqlite() {
    run(async || Some(support::sqlite_repo().await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_model_postgres() {
    run(support::postgres_repo).await;
}
