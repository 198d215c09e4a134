//! Repository conformance: one story per behaviour, each run on SQLite and on PostgreSQL
//! (`both!`). Rule ids from shared/spec/lifecycle.md name the stories.

use std::sync::Arc;

use turnstile::model::{
    BundleStatus, MessageAuthor, MessageKind, PendingAction, Question, QuestionOption,
    SessionState, SummaryBody,
};
use turnstile::server::repo::*;

/// A little world on top of a repository: one task, helpers for sessions, turns and bundles.
struct World {
    repo: Arc<dyn Repository>,
    task_id: String,
}

const T0: i64 = 1_700_000_000_000_000;

impl World {
    async fn new(repo: Arc<dyn Repository>) -> Self {
        let task = repo
            .create_task(
                &NewTask {
                    title: "story".into(),
                    ..Default::default()
                },
                T0,
            )
            .await
            .expect("create task");
        World {
            repo,
            task_id: task.id,
        }
    }

    async fn session(&self, state: SessionState) -> String {
        self.repo
            .create_session(
                &NewSession {
                    task_id: self.task_id.clone(),
                    agent_profile_id: None,
                    name: "s".into(),
                    state,
                    is_primary: false,
                    mcp_token_hash: None,
                },
                T0,
            )
            .await
            .expect("create session")
            .id
    }

    async fn turn_at(
        &self,
        session: &str,
        started_at: i64,
        created_at: i64,
        id: Option<&str>,
    ) -> String {
        self.repo
            .insert_turn(&NewTurn {
                id: id.map(str::to_string),
                session_id: session.to_string(),
                started_at,
                created_at,
                fence: None,
            })
            .await
            .expect("insert turn")
            .id
    }

    async fn turn(&self, session: &str, at: i64) -> String {
        self.turn_at(session, at, at, None).await
    }

    async fn message(&self, session: &str, turn: &str, at: i64) -> String {
        self.repo
            .insert_message(
                &NewMessage {
                    session_id: session.into(),
                    turn_id: turn.into(),
                    author: MessageAuthor::Agent,
                    kind: MessageKind::Text,
                    content: "hello".into(),
                    pending_id: None,
                },
                at,
            )
            .await
            .expect("insert message")
            .message
            .id
    }

    async fn ask(&self, session: &str, turn: &str, at: i64) -> String {
        let (bundle, _) = self
            .repo
            .insert_bundle(
                &NewBundle {
                    pending_id: None,
                    session_id: session.into(),
                    turn_id: turn.into(),
                    context: None,
                    dedup_key: format!("k-{at}"),
                    questions: vec![db_question()],
                    message_content: "Which database?".into(),
                },
                at,
            )
            .await
            .expect("insert bundle");
        bundle.pending_id
    }

    async fn active_ids(&self, session: &str) -> Vec<String> {
        self.repo
            .active_bundles(session)
            .await
            .expect("active bundles")
            .into_iter()
            .map(|b| b.record.pending_id)
            .collect()
    }

    async fn bundle(&self, pending_id: &str) -> BundleView {
        self.repo
            .get_bundle(pending_id)
            .await
            .expect("get bundle")
            .expect("bundle exists")
    }
}

fn db_question() -> Question {
    Question {
        id: "db".into(),
        title: None,
        prompt: "Which database should we use for this project?".into(),
        options: ["postgresql", "mongodb", "sqlite"]
            .iter()
            .map(|o| QuestionOption {
                id: (*o).into(),
                label: (*o).into(),
                description: String::new(),
            })
            .collect(),
        form: Default::default(),
    }
}

fn answer_claim() -> Claim {
    Claim {
        status: BundleStatus::Answered,
        response: r#"{"answers":[]}"#.into(),
        reject_reason: None,
        by: "test".into(),
    }
}

both!(
    n_a_session_is_claimed_by_one_live_server_and_a_takeover_fences_the_old_claim,
    l1_equal_started_at_falls_back_to_created_at_then_id,
    l1_completed_turn_stays_current,
    l2_older_turn_pending_bundle_is_never_active,
    l2_terminal_session_has_no_active_bundles,
    l4_deleting_newer_messages_keeps_old_bundle_inert,
    l9_repeat_detach_is_a_no_op,
    l10_completing_an_older_turn_detaches_nothing,
    l11_expiry_touches_only_the_current_turn,
    l13_exactly_one_concurrent_claim_wins,
    n3_concurrent_step_moves_from_one_step_advance_the_task_once,
    l14_claim_on_superseded_bundle_is_not_active_and_writes_nothing,
    l18_restore_puts_an_undelivered_claim_back,
    l19_unattempted_reservation_is_not_current,
    l19_an_abandoned_claim_is_settled_by_its_claimers_fate,
    p1_pending_action_prefers_clarification_then_latest_permission,
    p1_a_permission_request_and_its_transcript_row_are_written_together,
    p3_summary_cas_rejects_stale_and_skips_equal_content,
    p9_epoch_strictly_increases,
    bad_input_is_rejected_and_writes_nothing,
    seed_is_idempotent,
    b5_recovery_lists_only_sessions_with_work,
    p6_batch_cas_writes_each_row_only_at_its_revision,
    p1_session_and_message_writes_return_the_p1_of_their_own_statement,
);

async fn l1_equal_started_at_falls_back_to_created_at_then_id(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::Running).await;
    // Same started_at: the later created_at wins, whatever the insertion order.
    let later_created = w.turn_at(&s, T0 + 10, T0 + 20, Some("turn-a")).await;
    let _earlier_created = w.turn_at(&s, T0 + 10, T0 + 15, Some("turn-z")).await;
    assert_eq!(
        w.repo.current_turn_id(&s).await.unwrap().as_deref(),
        Some(later_created.as_str())
    );
    // Same started_at and created_at: the greatest id wins.
    let s2 = w.session(SessionState::Running).await;
    w.turn_at(&s2, T0, T0, Some("turn-b")).await;
    w.turn_at(&s2, T0, T0, Some("turn-c")).await;
    w.turn_at(&s2, T0, T0, Some("turn-a2")).await;
    assert_eq!(
        w.repo.current_turn_id(&s2).await.unwrap().as_deref(),
        Some("turn-c")
    );
    // started_at dominates created_at.
    let s3 = w.session(SessionState::Running).await;
    let newest_start = w.turn_at(&s3, T0 + 50, T0, None).await;
    w.turn_at(&s3, T0 + 40, T0 + 100, None).await;
    assert_eq!(
        w.repo.current_turn_id(&s3).await.unwrap(),
        Some(newest_start)
    );
    // No turns: no current turn.
    let empty = w.session(SessionState::Running).await;
    assert_eq!(w.repo.current_turn_id(&empty).await.unwrap(), None);
}

async fn l1_completed_turn_stays_current(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::Running).await;
    let t1 = w.turn(&s, T0).await;
    let p = w.ask(&s, &t1, T0 + 1).await;
    assert!(w.repo.detach_turn(&t1).await.unwrap().contains(&p));
    assert!(w.repo.complete_turn(&t1, T0 + 2).await.unwrap());
    assert_eq!(w.repo.current_turn_id(&s).await.unwrap(), Some(t1));
    // A detached bundle of a completed-but-current turn stays active (answerable, L9/L17).
    assert_eq!(w.active_ids(&s).await, vec![p.clone()]);
    let b = w.bundle(&p).await;
    assert!(b.active && b.record.detached);
}

async fn l2_older_turn_pending_bundle_is_never_active(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::WaitingForInput).await;
    let t1 = w.turn(&s, T0).await;
    let old = w.ask(&s, &t1, T0 + 1).await;
    assert_eq!(w.active_ids(&s).await, vec![old.clone()]);
    let t2 = w.turn(&s, T0 + 10).await;
    assert!(
        w.active_ids(&s).await.is_empty(),
        "a newer turn supersedes the bundle (L5)"
    );
    assert!(!w.bundle(&old).await.active);
    assert_eq!(
        w.bundle(&old).await.record.status,
        BundleStatus::Pending,
        "L5: raw status kept"
    );
    let new = w.ask(&s, &t2, T0 + 11).await;
    assert_eq!(w.active_ids(&s).await, vec![new]);
    assert_eq!(
        w.repo
            .pending_actions_for_sessions(std::slice::from_ref(&s))
            .await
            .unwrap()[&s],
        Some(PendingAction::Clarification)
    );
}

async fn l2_terminal_session_has_no_active_bundles(repo: Arc<dyn Repository>) {
    for terminal in SessionState::TERMINAL {
        let w = World::new(repo.clone()).await;
        let s = w.session(SessionState::Running).await;
        let t = w.turn(&s, T0).await;
        let p = w.ask(&s, &t, T0 + 1).await;
        assert_eq!(w.active_ids(&s).await, vec![p.clone()]);
        w.repo
            .set_session_state(&s, terminal, T0 + 2)
            .await
            .unwrap()
            .expect("moved");
        // Even without expiry (L11 failing), L2 already excludes terminal sessions.
        assert!(
            w.active_ids(&s).await.is_empty(),
            "{terminal}: no active bundles"
        );
        assert!(!w.bundle(&p).await.active);
        assert_eq!(
            w.repo
                .pending_actions_for_sessions(std::slice::from_ref(&s))
                .await
                .unwrap()[&s],
            None
        );
        // A terminal session never moves again.
        assert!(
            w.repo
                .set_session_state(&s, SessionState::Running, T0 + 3)
                .await
                .unwrap()
                .is_none()
        );
    }
}

async fn l4_deleting_newer_messages_keeps_old_bundle_inert(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::Running).await;
    let t1 = w.turn(&s, T0).await;
    let old = w.ask(&s, &t1, T0 + 1).await;
    let t2 = w.turn(&s, T0 + 10).await;
    let m1 = w.message(&s, &t2, T0 + 11).await;
    let m2 = w.message(&s, &t2, T0 + 12).await;
    for m in [m1, m2] {
        assert!(w.repo.delete_message(&m).await.unwrap().is_some());
    }
    assert_eq!(w.repo.current_turn_id(&s).await.unwrap(), Some(t2));
    assert!(w.active_ids(&s).await.is_empty());
    assert!(!w.bundle(&old).await.active);
    assert_eq!(
        w.repo
            .pending_actions_for_sessions(std::slice::from_ref(&s))
            .await
            .unwrap()[&s],
        None
    );
}

async fn l9_repeat_detach_is_a_no_op(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::WaitingForInput).await;
    let t = w.turn(&s, T0).await;
    let p1 = w.ask(&s, &t, T0 + 1).await;
    let p2 = w.ask(&s, &t, T0 + 2).await;
    let mut first = w.repo.detach_session(&s).await.unwrap();
    first.sort();
    let mut expected = vec![p1.clone(), p2.clone()];
    expected.sort();
    assert_eq!(first, expected);
    let before = (w.bundle(&p1).await, w.bundle(&p2).await);
    // I7: a second detach changes nothing and returns nothing.
    assert!(w.repo.detach_session(&s).await.unwrap().is_empty());
    assert!(w.repo.detach_turn(&t).await.unwrap().is_empty());
    assert!(!w.repo.detach_bundle(&p1).await.unwrap());
    assert_eq!((w.bundle(&p1).await, w.bundle(&p2).await), before);
    // Detached bundles stay active (answerable).
    assert!(before.0.active && before.0.record.detached);
}

async fn l10_completing_an_older_turn_detaches_nothing(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::Running).await;
    let t1 = w.turn(&s, T0).await;
    let old = w.ask(&s, &t1, T0 + 1).await;
    let _t2 = w.turn(&s, T0 + 10).await;
    assert!(w.repo.detach_turn(&t1).await.unwrap().is_empty());
    assert!(!w.repo.detach_bundle(&old).await.unwrap());
    assert!(w.repo.detach_session(&s).await.unwrap().is_empty());
    assert!(
        !w.bundle(&old).await.record.detached,
        "L5: superseded history is never re-written"
    );
}

async fn l11_expiry_touches_only_the_current_turn(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::Running).await;
    let t1 = w.turn(&s, T0).await;
    let old = w.ask(&s, &t1, T0 + 1).await;
    let t2 = w.turn(&s, T0 + 10).await;
    let cur = w.ask(&s, &t2, T0 + 11).await;
    w.repo
        .set_session_state(&s, SessionState::Cancelled, T0 + 12)
        .await
        .unwrap()
        .expect("moved");
    assert_eq!(
        w.repo.expire_session(&s, T0 + 13).await.unwrap(),
        vec![cur.clone()]
    );
    assert_eq!(w.bundle(&cur).await.record.status, BundleStatus::Expired);
    assert_eq!(
        w.bundle(&old).await.record.status,
        BundleStatus::Pending,
        "L5"
    );
    assert!(
        w.repo.expire_session(&s, T0 + 14).await.unwrap().is_empty(),
        "repeat is a no-op"
    );
}

/// N3: moving a task is a compare-and-set from the step it was in. Twenty
/// movers released together from the same step: exactly one moves it; a mover that read an
/// older step afterwards moves nothing.
async fn n3_concurrent_step_moves_from_one_step_advance_the_task_once(repo: Arc<dyn Repository>) {
    let step = |name: &str| NewWorkflowStep {
        name: name.into(),
        on_turn_complete: None,
    };
    let flow = repo
        .create_workflow(
            &NewWorkflow {
                name: "flow".into(),
                is_default: false,
                steps: vec![step("plan"), step("build"), step("ship")],
            },
            T0,
        )
        .await
        .unwrap();
    let (plan, build, ship) = (&flow.steps[0].id, &flow.steps[1].id, &flow.steps[2].id);
    let task = repo
        .create_task(
            &NewTask {
                title: "moved".into(),
                workflow_id: Some(flow.workflow.id.clone()),
                step_id: Some(plan.clone()),
                ..Default::default()
            },
            T0,
        )
        .await
        .unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let mut movers = Vec::new();
    for i in 0..20 {
        let (repo, barrier) = (repo.clone(), barrier.clone());
        let (task, plan, build) = (task.id.clone(), plan.clone(), build.clone());
        movers.push(tokio::spawn(async move {
            barrier.wait().await;
            repo.move_task_step(&task, &plan, &build, T0 + 1 + i)
                .await
                .unwrap()
        }));
    }
    let mut moved = 0;
    for m in movers {
        moved += usize::from(m.await.unwrap());
    }
    assert_eq!(moved, 1, "I6: one advance");
    let now = repo.get_task(&task.id).await.unwrap().unwrap();
    assert_eq!(now.step_id.as_deref(), Some(build.as_str()));
    assert!(
        !repo
            .move_task_step(&task.id, plan, ship, T0 + 100)
            .await
            .unwrap(),
        "a move from a step the task has left does nothing"
    );
    let now = repo.get_task(&task.id).await.unwrap().unwrap();
    assert_eq!(now.step_id.as_deref(), Some(build.as_str()));
}

async fn l13_exactly_one_concurrent_claim_wins(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::WaitingForInput).await;
    let t = w.turn(&s, T0).await;
    let p = w.ask(&s, &t, T0 + 1).await;
    w.repo.detach_bundle(&p).await.unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let mut handles = Vec::new();
    for i in 0..20 {
        let repo = w.repo.clone();
        let p = p.clone();
        let barrier = barrier.clone();
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            repo.claim_bundle(&p, &answer_claim(), T0 + 100 + i)
                .await
                .unwrap()
        }));
    }
    let mut claimed = 0;
    for h in handles {
        match h.await.unwrap() {
            ClaimOutcome::Claimed(r) => {
                claimed += 1;
                assert!(r.delivery_pending);
                assert_eq!(r.status, BundleStatus::Answered);
            }
            ClaimOutcome::AlreadyResolved(r) => assert_eq!(r.status, BundleStatus::Answered),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(claimed, 1, "I3: exactly one responder wins");
    assert!(w.repo.finalize_delivery(&p).await.unwrap());
    assert!(!w.repo.finalize_delivery(&p).await.unwrap());
    assert_eq!(
        w.repo
            .claim_bundle("no-such-id", &answer_claim(), T0)
            .await
            .unwrap(),
        ClaimOutcome::NotFound
    );
}

async fn l14_claim_on_superseded_bundle_is_not_active_and_writes_nothing(
    repo: Arc<dyn Repository>,
) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::Running).await;
    let t1 = w.turn(&s, T0).await;
    let old = w.ask(&s, &t1, T0 + 1).await;
    w.repo.detach_session(&s).await.unwrap();
    w.turn(&s, T0 + 10).await;
    let before = w.bundle(&old).await;
    match w
        .repo
        .claim_bundle(&old, &answer_claim(), T0 + 20)
        .await
        .unwrap()
    {
        ClaimOutcome::NotActive(r) => assert_eq!(r, before.record),
        other => panic!("expected NotActive, got {other:?}"),
    }
    assert_eq!(w.bundle(&old).await, before, "I5: nothing written");
}

async fn l18_restore_puts_an_undelivered_claim_back(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::WaitingForInput).await;
    let t = w.turn(&s, T0).await;
    let p = w.ask(&s, &t, T0 + 1).await;
    w.repo.detach_bundle(&p).await.unwrap();
    assert!(matches!(
        w.repo
            .claim_bundle(&p, &answer_claim(), T0 + 2)
            .await
            .unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    let reservation = w.repo.reserve_turn(&s, &p, T0 + 3).await.unwrap();
    assert!(w.repo.delete_reservation(&reservation.id).await.unwrap());
    assert!(w.repo.restore_bundle(&p).await.unwrap());
    let b = w.bundle(&p).await;
    assert_eq!(b.record.status, BundleStatus::Pending);
    assert!(b.active && !b.record.delivery_pending && b.record.response.is_none());
    assert!(
        !w.repo.restore_bundle(&p).await.unwrap(),
        "nothing left to restore"
    );
    // After acceptance (delivery finalized) a claim is never restored.
    assert!(matches!(
        w.repo
            .claim_bundle(&p, &answer_claim(), T0 + 4)
            .await
            .unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    assert!(w.repo.finalize_delivery(&p).await.unwrap());
    assert!(!w.repo.restore_bundle(&p).await.unwrap());
    assert_eq!(w.bundle(&p).await.record.status, BundleStatus::Answered);
}

/// Decision 0036: a claim is abandoned once its claimer is gone (restarted, or not seen
/// beating), never while it lives; settling restores it only while it is still that claim,
/// withdraws an offer of it first, and finalizes one that is no longer current.
async fn l19_an_abandoned_claim_is_settled_by_its_claimers_fate(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::WaitingForInput).await;
    let t = w.turn(&s, T0).await;
    let p = w.ask(&s, &t, T0 + 1).await;
    let by = |server: &str| Claim {
        by: server.into(),
        ..answer_claim()
    };
    let claim = w.repo.claim_bundle(&p, &by("alive"), T0 + 2).await.unwrap();
    assert!(matches!(claim, ClaimOutcome::Claimed(_)), "{claim:?}");
    // `alive` beat at T0 + 5; `me` is the server starting. Alive since T0 + 3: nothing is
    // abandoned — the claim's request may still accept or undo it.
    w.repo.beat("alive", T0 + 5).await.unwrap();
    assert_eq!(w.repo.abandoned_claims("me", T0 + 3).await.unwrap(), vec![]);
    // Its claimer restarted (it is the one starting): abandoned, and restored while current.
    let abandoned = w.repo.abandoned_claims("alive", T0 + 3).await.unwrap();
    assert_eq!(
        abandoned,
        vec![AbandonedClaim {
            pending_id: p.clone(),
            task_id: w.task_id.clone(),
            claimed_by: Some("alive".into()),
        }]
    );
    // An offer of it to another server is withdrawn with the restore (the holder can no
    // longer take it).
    w.repo.offer_handoff(&p, T0 + 6).await.unwrap();
    // A stale read of the claim (another claimer) settles nothing.
    let stale = AbandonedClaim {
        claimed_by: Some("someone else".into()),
        ..abandoned[0].clone()
    };
    let before = w.bundle(&p).await;
    assert_eq!(
        w.repo.settle_abandoned(&stale).await.unwrap(),
        ClaimSettled::Untouched
    );
    assert_eq!(
        w.bundle(&p).await,
        before,
        "a claim made anew is left alone"
    );
    assert_eq!(
        w.repo.settle_abandoned(&abandoned[0]).await.unwrap(),
        ClaimSettled::Restored
    );
    let b = w.bundle(&p).await;
    assert!(b.active && b.record.status == BundleStatus::Pending && !b.record.delivery_pending);
    assert_eq!(
        w.repo.accept_handoff(&p, T0 + 7).await.unwrap(),
        turnstile::server::repo::HandoffAccepted::Withdrawn,
        "the offer was withdrawn with the restore"
    );
    assert_eq!(
        w.repo.settle_abandoned(&abandoned[0]).await.unwrap(),
        ClaimSettled::Untouched,
        "settled once"
    );
    // A claimer not seen since: abandoned on any server's heartbeat (no server restarting).
    w.repo.claim_bundle(&p, &by("gone"), T0 + 8).await.unwrap();
    let gone = w.repo.abandoned_claims("", T0 + 3).await.unwrap();
    assert_eq!(gone.len(), 1);
    // No longer current (a newer turn): its outcome stays, its marker is cleared.
    w.turn(&s, T0 + 9).await;
    assert_eq!(
        w.repo.settle_abandoned(&gone[0]).await.unwrap(),
        ClaimSettled::Finalized
    );
    let b = w.bundle(&p).await;
    assert!(b.record.status == BundleStatus::Answered && !b.record.delivery_pending);
    assert_eq!(w.repo.abandoned_claims("", i64::MAX).await.unwrap(), vec![]);
}

async fn l19_unattempted_reservation_is_not_current(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::WaitingForInput).await;
    let t = w.turn(&s, T0).await;
    let p = w.ask(&s, &t, T0 + 1).await;
    w.repo.detach_bundle(&p).await.unwrap();
    assert!(matches!(
        w.repo
            .claim_bundle(&p, &answer_claim(), T0 + 2)
            .await
            .unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    let r = w.repo.reserve_turn(&s, &p, T0 + 3).await.unwrap();
    assert_eq!(r.reservation, "reserved");
    assert_eq!(
        w.repo.current_turn_id(&s).await.unwrap().as_deref(),
        Some(t.as_str()),
        "reserved: not current"
    );
    assert!(
        w.repo
            .list_turns(&s)
            .await
            .unwrap()
            .iter()
            .all(|x| x.id != r.id),
        "reservations are hidden"
    );
    assert!(w.repo.mark_attempted(&r.id).await.unwrap());
    assert!(!w.repo.mark_attempted(&r.id).await.unwrap());
    assert_eq!(
        w.repo.current_turn_id(&s).await.unwrap().as_deref(),
        Some(r.id.as_str()),
        "attempted: current"
    );
    assert!(
        !w.repo.delete_reservation(&r.id).await.unwrap(),
        "an attempted turn is kept"
    );
    assert!(w.repo.publish_turn(&r.id).await.unwrap());
    assert_eq!(
        w.repo.get_turn(&r.id).await.unwrap().unwrap().reservation,
        "none"
    );
    assert!(
        w.repo
            .list_turns(&s)
            .await
            .unwrap()
            .iter()
            .any(|x| x.id == r.id)
    );

    // A reservation referenced by a message counts even before it is attempted (L1).
    let s2 = w.session(SessionState::Running).await;
    let t2 = w.turn(&s2, T0).await;
    let r2 = w.repo.reserve_turn(&s2, "unused", T0 + 5).await.unwrap();
    assert_eq!(w.repo.current_turn_id(&s2).await.unwrap(), Some(t2));
    w.message(&s2, &r2.id, T0 + 6).await;
    assert_eq!(
        w.repo.current_turn_id(&s2).await.unwrap(),
        Some(r2.id.clone())
    );
    assert!(
        !w.repo.delete_reservation(&r2.id).await.unwrap(),
        "a referenced reservation is kept"
    );
}

/// Defect (CI flake): the request was written, then its row; a reader between the two saw
/// `pending_action: permission` with nothing in the transcript to answer.
async fn p1_a_permission_request_and_its_transcript_row_are_written_together(
    repo: Arc<dyn Repository>,
) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::Running).await;
    let t = w.turn(&s, T0).await;
    let new = |turn: &str| NewPermissionRequest {
        id: None,
        session_id: s.clone(),
        turn_id: turn.to_string(),
        tool_call: "{}".into(),
        options: "[]".into(),
        message_content: "Permission requested: rm".into(),
    };
    let (request, message) = w
        .repo
        .insert_permission_request(&new(&t), T0 + 1)
        .await
        .unwrap();
    let rows = w.repo.list_messages(&s, None, 100).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].id.as_str(),
            rows[0].kind.as_str(),
            rows[0].pending_id.as_deref(),
            rows[0].turn_id.as_str(),
            rows[0].content.as_str(),
        ),
        (
            message.id.as_str(),
            "permission_request",
            Some(request.id.as_str()),
            t.as_str(),
            "Permission requested: rm",
        )
    );
    // A turn of another session: neither the request nor a row is written.
    let other = w.session(SessionState::Running).await;
    let foreign = w.turn(&other, T0).await;
    let err = w
        .repo
        .insert_permission_request(&new(&foreign), T0 + 2)
        .await
        .unwrap_err();
    assert!(matches!(err, RepoError::NotFound(_)), "{err}");
    assert_eq!(w.repo.list_messages(&s, None, 100).await.unwrap().len(), 1);
    assert!(
        w.repo
            .list_messages(&other, None, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        w.repo.pending_permission_requests(&s).await.unwrap().len(),
        1
    );
    assert!(
        w.repo
            .pending_permission_requests(&other)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn p1_pending_action_prefers_clarification_then_latest_permission(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::Running).await;
    let t = w.turn(&s, T0).await;
    let perm = |at: i64| {
        let repo = w.repo.clone();
        let (s, t) = (s.clone(), t.clone());
        async move {
            repo.insert_permission_request(
                &NewPermissionRequest {
                    id: None,
                    session_id: s,
                    turn_id: t,
                    tool_call: "{}".into(),
                    options: "[]".into(),
                    message_content: "Permission requested".into(),
                },
                at,
            )
            .await
            .unwrap()
            .0
            .id
        }
    };
    let ids = vec![s.clone()];
    let first = perm(T0 + 1).await;
    assert_eq!(
        w.repo.pending_actions_for_sessions(&ids).await.unwrap()[&s],
        Some(PendingAction::Permission)
    );
    let p = w.ask(&s, &t, T0 + 2).await;
    assert_eq!(
        w.repo.pending_actions_for_sessions(&ids).await.unwrap()[&s],
        Some(PendingAction::Clarification)
    );
    w.repo
        .claim_bundle(&p, &answer_claim(), T0 + 3)
        .await
        .unwrap();
    assert_eq!(
        w.repo.pending_actions_for_sessions(&ids).await.unwrap()[&s],
        Some(PendingAction::Permission)
    );
    // Only the latest permission request of the current turn counts.
    let second = perm(T0 + 4).await;
    assert!(
        w.repo
            .resolve_permission_request(&second, "selected", Some("allow"), T0 + 5)
            .await
            .unwrap()
    );
    assert!(
        !w.repo
            .resolve_permission_request(&second, "cancelled", None, T0 + 6)
            .await
            .unwrap()
    );
    assert_eq!(
        w.repo.pending_actions_for_sessions(&ids).await.unwrap()[&s],
        None
    );
    assert_eq!(
        w.repo
            .get_permission_request(&first)
            .await
            .unwrap()
            .unwrap()
            .status,
        "pending"
    );
    // Not input-capable: nothing pending.
    let idle = w.session(SessionState::Created).await;
    let ti = w.turn(&idle, T0).await;
    w.ask(&idle, &ti, T0 + 1).await;
    let got = w
        .repo
        .pending_actions_for_sessions(&[idle.clone(), "unknown".into()])
        .await
        .unwrap();
    assert_eq!(got[&idle], None);
    assert_eq!(got["unknown"], None);
}

async fn p3_summary_cas_rejects_stale_and_skips_equal_content(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let body = SummaryBody {
        pending_action: Some(PendingAction::Clarification),
        ..Default::default()
    };
    assert_eq!(
        w.repo
            .cas_summary(&w.task_id, None, &body, T0)
            .await
            .unwrap(),
        CasOutcome::Written { revision: 1 }
    );
    // Creating again when one exists is a conflict.
    assert!(matches!(
        w.repo
            .cas_summary(&w.task_id, None, &body, T0)
            .await
            .unwrap(),
        CasOutcome::Conflict { .. }
    ));
    // Equal content is not rewritten (revision and updated_at unchanged).
    assert_eq!(
        w.repo
            .cas_summary(&w.task_id, Some(1), &body, T0 + 5)
            .await
            .unwrap(),
        CasOutcome::Unchanged { revision: 1 }
    );
    assert_eq!(
        w.repo
            .get_summary(&w.task_id)
            .await
            .unwrap()
            .unwrap()
            .updated_at,
        T0
    );
    let cleared = SummaryBody {
        pending_action: None,
        queued_prompt_count: 2,
        ..Default::default()
    };
    assert_eq!(
        w.repo
            .cas_summary(&w.task_id, Some(1), &cleared, T0 + 6)
            .await
            .unwrap(),
        CasOutcome::Written { revision: 2 }
    );
    // A stale revision is rejected and reports what is stored now.
    match w
        .repo
        .cas_summary(&w.task_id, Some(1), &body, T0 + 7)
        .await
        .unwrap()
    {
        CasOutcome::Conflict { current: Some(c) } => {
            assert_eq!(c.revision, 2);
            assert_eq!(c.body, cleared);
        }
        other => panic!("expected conflict, got {other:?}"),
    }
    let stored = w.repo.get_summary(&w.task_id).await.unwrap().unwrap();
    assert_eq!(
        (stored.revision, stored.body, stored.updated_at),
        (2, cleared, T0 + 6)
    );
}

async fn p9_epoch_strictly_increases(repo: Arc<dyn Repository>) {
    let e0 = repo.current_epoch().await.unwrap();
    let e1 = repo.bump_epoch().await.unwrap();
    let e2 = repo.bump_epoch().await.unwrap();
    assert!(e0 < e1 && e1 < e2, "{e0} < {e1} < {e2}");
    assert_eq!(repo.current_epoch().await.unwrap(), e2);
    // Concurrent bumps never hand out the same value.
    let mut handles = Vec::new();
    for _ in 0..10 {
        let repo = repo.clone();
        handles.push(tokio::spawn(
            async move { repo.bump_epoch().await.unwrap() },
        ));
    }
    let mut seen = Vec::new();
    for h in handles {
        seen.push(h.await.unwrap());
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 10);
    assert!(seen[0] > e2);
}

async fn bad_input_is_rejected_and_writes_nothing(repo: Arc<dyn Repository>) {
    let before = repo.list_tasks().await.unwrap().len();
    let err = repo
        .create_task(
            &NewTask {
                title: "   ".into(),
                ..Default::default()
            },
            T0,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RepoError::Invalid(_)), "{err}");
    assert_eq!(repo.list_tasks().await.unwrap().len(), before);
    let w = World::new(repo.clone()).await;
    let s = w.session(SessionState::Running).await;
    // A message or bundle for a turn of another session is refused and writes nothing.
    let other = w.session(SessionState::Running).await;
    let t_other = w.turn(&other, T0).await;
    let err = w
        .repo
        .insert_message(
            &NewMessage {
                session_id: s.clone(),
                turn_id: t_other.clone(),
                author: MessageAuthor::User,
                kind: MessageKind::Text,
                content: "x".into(),
                pending_id: None,
            },
            T0,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RepoError::NotFound(_)), "{err}");
    assert!(
        w.repo
            .list_messages(&s, None, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        w.repo
            .list_messages(&other, None, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        w.repo
            .claim_bundle(
                "x",
                &Claim {
                    status: BundleStatus::Expired,
                    response: "{}".into(),
                    reject_reason: None,
                    by: "test".into(),
                },
                T0
            )
            .await,
        Err(RepoError::Invalid(_))
    ));
}

async fn seed_is_idempotent(repo: Arc<dyn Repository>) {
    use turnstile::server::startup::{DEFAULT_STEPS, MOCK_PROFILE, seed};
    seed(repo.as_ref(), T0).await.unwrap();
    seed(repo.as_ref(), T0 + 1).await.unwrap();
    let workflows = repo.list_workflows().await.unwrap();
    assert_eq!(workflows.len(), 1);
    let names: Vec<_> = workflows[0].steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, DEFAULT_STEPS);
    let profiles = repo.list_agent_profiles().await.unwrap();
    assert_eq!(
        profiles.iter().filter(|p| p.name == MOCK_PROFILE).count(),
        1
    );
}

#[test]
fn migrations_are_the_same_on_both_databases() {
    let list = |dir: &str| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let sqlite = list(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"));
    let postgres = list(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres"));
    assert!(!sqlite.is_empty());
    assert_eq!(
        sqlite, postgres,
        "migrations/sqlite and migrations/postgres must list the same files"
    );
}

/// B5 / L9: start-up recovery visits the sessions that were busy or still hold an open turn or
/// an undetached question — never an idle one (a boot with 10,000 idle sessions wrote to each).
async fn b5_recovery_lists_only_sessions_with_work(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let idle = w.session(SessionState::WaitingForInput).await;
    let done = w.turn(&idle, T0).await;
    assert!(w.repo.complete_turn(&done, T0 + 1).await.unwrap());
    let running = w.session(SessionState::Running).await;
    let open_turn = w.session(SessionState::WaitingForInput).await;
    w.turn(&open_turn, T0).await;
    let asking = w.session(SessionState::WaitingForInput).await;
    let t = w.turn(&asking, T0).await;
    w.ask(&asking, &t, T0 + 1).await;
    assert!(w.repo.complete_turn(&t, T0 + 2).await.unwrap());
    let detached = w.session(SessionState::WaitingForInput).await;
    let t = w.turn(&detached, T0).await;
    let p = w.ask(&detached, &t, T0 + 1).await;
    assert!(w.repo.detach_bundle(&p).await.unwrap());
    assert!(w.repo.complete_turn(&t, T0 + 2).await.unwrap());
    let ended = w.session(SessionState::Failed).await;
    w.turn(&ended, T0).await;
    let mut listed: Vec<String> = w
        .repo
        .sessions_to_recover()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    listed.sort();
    let mut expected = vec![running, open_turn, asking];
    expected.sort();
    assert_eq!(
        listed, expected,
        "idle, detached-only and ended sessions need nothing"
    );
}

/// P6 for the batch used by reconciliation (B5): each write is its own compare-and-set inside
/// one transaction — a missing row is created, a row at the expected revision is replaced, a
/// row someone else moved on is left alone and reported (`None`) for a retry.
async fn p6_batch_cas_writes_each_row_only_at_its_revision(repo: Arc<dyn Repository>) {
    let w = World::new(repo).await;
    let mut tasks = Vec::new();
    for n in 0..6 {
        let t = w
            .repo
            .create_task(
                &NewTask {
                    title: format!("t{n}"),
                    ..Default::default()
                },
                T0,
            )
            .await
            .unwrap()
            .id;
        tasks.push(t);
    }
    let asking = SummaryBody {
        pending_action: Some(PendingAction::Clarification),
        ..Default::default()
    };
    let clean = SummaryBody::default();
    for t in &tasks[1..] {
        w.repo.cas_summary(t, None, &asking, T0).await.unwrap();
    }
    // Task 4's summary was marked stale (P6): an equal body still replaces it.
    assert!(w.repo.invalidate_summary(&tasks[4], T0).await.unwrap());
    let stale_revision = w.repo.get_summaries(&tasks).await.unwrap()[&tasks[4]].revision;
    // Task 2's row moved on (revision 2) after we read revision 1.
    w.repo
        .cas_summary(&tasks[2], Some(1), &clean, T0 + 1)
        .await
        .unwrap();
    let write = |task: &String, expected: Option<i64>, body: &SummaryBody| SummaryWrite {
        task_id: task.clone(),
        expected,
        body: body.clone(),
    };
    let writes = [
        write(&tasks[0], None, &asking),
        write(&tasks[1], Some(1), &clean),
        write(&tasks[2], Some(1), &asking),
        // An equal summary is not rewritten.
        write(&tasks[3], Some(1), &asking),
        write(&tasks[4], Some(stale_revision), &asking),
        // Created only if absent.
        write(&tasks[5], None, &clean),
    ];
    assert_eq!(
        w.repo.cas_summaries(&writes, T0 + 2).await.unwrap(),
        vec![Some(1), Some(2), None, None, Some(stale_revision + 1), None]
    );
    let stored = w.repo.get_summaries(&tasks).await.unwrap();
    assert_eq!(stored[&tasks[0]].body, asking);
    assert_eq!(stored[&tasks[1]].body, clean);
    assert_eq!(
        stored[&tasks[3]].revision, 1,
        "an equal summary is not rewritten"
    );
    assert!(
        !stored[&tasks[4]].invalidated,
        "the stale summary was replaced"
    );
    assert_eq!(
        stored[&tasks[5]].body, asking,
        "an existing summary is not created again"
    );
    assert_eq!(
        (stored[&tasks[2]].revision, &stored[&tasks[2]].body),
        (2, &clean),
        "the lost write changed nothing"
    );
    // A task named twice: the writes apply in order, so the second, made against the
    // revision the first replaced, loses.
    let twice = [&asking, &clean].map(|body| write(&tasks[1], Some(2), body));
    assert_eq!(
        w.repo.cas_summaries(&twice, T0 + 3).await.unwrap(),
        vec![Some(3), None]
    );
    assert_eq!(
        w.repo.get_summaries(&tasks).await.unwrap()[&tasks[1]].body,
        asking
    );
    assert!(w.repo.cas_summaries(&[], T0).await.unwrap().is_empty());
}

/// B3: a write about a session (its state) or one of its messages returns the session's P1 as
/// that statement read it, equal to what the authority's batch read says right after; events
/// publish it instead of reading again.
async fn p1_session_and_message_writes_return_the_p1_of_their_own_statement(
    repo: Arc<dyn Repository>,
) {
    let w = World::new(repo).await;
    let s = w.session(SessionState::Running).await;
    let t = w.turn(&s, T0).await;
    let batch = |session: String| {
        let repo = w.repo.clone();
        async move {
            repo.pending_actions_for_sessions(std::slice::from_ref(&session))
                .await
                .unwrap()
                .remove(&session)
                .unwrap()
        }
    };
    let message = NewMessage {
        session_id: s.clone(),
        turn_id: t.clone(),
        author: MessageAuthor::Agent,
        kind: MessageKind::Text,
        content: "hello".into(),
        pending_id: None,
    };
    let written = w.repo.insert_message(&message, T0 + 1).await.unwrap();
    assert_eq!(written.pending_action, None, "nothing pending yet");
    w.ask(&s, &t, T0 + 2).await;
    let updated = w
        .repo
        .update_message_content(&written.message.id, "hello again", T0 + 3)
        .await
        .unwrap()
        .expect("the message exists");
    assert_eq!(updated.message.content, "hello again");
    assert_eq!(updated.pending_action, Some(PendingAction::Clarification));
    assert_eq!(updated.pending_action, batch(s.clone()).await);
    let waiting = w
        .repo
        .set_session_state(&s, SessionState::WaitingForInput, T0 + 4)
        .await
        .unwrap()
        .expect("moved");
    assert_eq!(waiting.pending_action, Some(PendingAction::Clarification));
    assert_eq!(
        w.repo
            .get_session(&s)
            .await
            .unwrap()
            .unwrap()
            .pending_action,
        Some(PendingAction::Clarification)
    );
    // P1: a session that cannot take input has none, whatever its turn waits for.
    let cancelled = w
        .repo
        .set_session_state(&s, SessionState::Cancelled, T0 + 5)
        .await
        .unwrap()
        .expect("moved");
    assert_eq!(cancelled.pending_action, None);
    assert_eq!(batch(s.clone()).await, None);
    let after = w
        .repo
        .insert_message(
            &NewMessage {
                content: "late".into(),
                ..message
            },
            T0 + 6,
        )
        .await
        .unwrap();
    assert_eq!(after.pending_action, None);
}

/// One agent per session across servers: a claim is a compare-and-set (granted when unowned,
/// already this server's, or its owner is dead); a takeover passes the session on only from a
/// dead owner; each bumps the epoch, and the writes that start agent work (a prompt's turn, a
/// dispatched resume) carrying an old claim are refused.
async fn n_a_session_is_claimed_by_one_live_server_and_a_takeover_fences_the_old_claim(
    repo: Arc<dyn Repository>,
) {
    use turnstile::server::repo::{Fence, RepoError};
    let w = World::new(repo).await;
    let s = w.session(SessionState::WaitingForInput).await;
    let (alive, dead) = (T0 - 10, T0 + 10);
    w.repo.beat("a", T0).await.unwrap();
    w.repo.beat("b", T0).await.unwrap();
    assert_eq!(w.repo.claim_session(&s, "a", alive).await.unwrap(), Some(1));
    assert_eq!(
        w.repo.claim_session(&s, "b", alive).await.unwrap(),
        None,
        "A is alive"
    );
    assert_eq!(
        w.repo.claim_session(&s, "a", alive).await.unwrap(),
        Some(2),
        "A again"
    );
    assert_eq!(
        w.repo.transfer_session(&s, "a", "b", alive).await.unwrap(),
        None,
        "not from a live owner"
    );
    assert_eq!(
        w.repo.transfer_session(&s, "c", "b", dead).await.unwrap(),
        None,
        "not from a server that does not own it"
    );
    let a = Fence {
        server_id: "a".into(),
        epoch: 2,
    };
    let turn = |at: i64, fence: &Fence| NewTurn {
        id: None,
        session_id: s.clone(),
        started_at: at,
        created_at: at,
        fence: Some(fence.clone()),
    };
    let t1 = w.repo.insert_turn(&turn(T0, &a)).await.unwrap();
    assert_eq!(
        w.repo.transfer_session(&s, "a", "b", dead).await.unwrap(),
        Some(3)
    );
    let b = Fence {
        server_id: "b".into(),
        epoch: 3,
    };
    assert!(matches!(
        w.repo.insert_turn(&turn(T0 + 1, &a)).await,
        Err(RepoError::Fenced(_))
    ));
    // An answer owed in A's turn: A's dispatch is refused, B's goes through, once.
    let p = w.ask(&s, &t1.id, T0 + 2).await;
    w.repo.detach_bundle(&p).await.unwrap();
    assert!(matches!(
        w.repo
            .claim_bundle(&p, &answer_claim(), T0 + 3)
            .await
            .unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    let owed = w
        .repo
        .owe_resume(&p, "resume", T0 + 4)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        w.repo.dispatch_resume(&owed.id, T0 + 5, Some(&a)).await,
        Err(RepoError::Fenced(_))
    ));
    assert!(
        w.repo
            .dispatch_resume(&owed.id, T0 + 6, Some(&b))
            .await
            .unwrap()
    );
    assert!(
        !w.repo
            .dispatch_resume(&owed.id, T0 + 7, Some(&b))
            .await
            .unwrap()
    );
    assert!(w.repo.insert_turn(&turn(T0 + 8, &b)).await.is_ok());
    assert_eq!(
        w.repo.claim_session(&s, "a", alive).await.unwrap(),
        None,
        "B owns it and is alive"
    );
}
