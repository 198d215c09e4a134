//! Projections and summaries (P1–P9, I2, I9) on both databases: the projector reacting to hub
//! events, reconciliation at boot and on reads, the session list and its revisions.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{TestServer, marker_task, next_event, projector_idle, raw_exec};
use turnstile::model::{
    BundleStatus, MessageAuthor, MessageKind, PendingAction, SessionState, SummaryBody,
};
use turnstile::server::events::Event;
use turnstile::server::repo::*;
use turnstile::server::state::AppState;
use turnstile::server::summary::projector::{MAX_CAS_ATTEMPTS, RefreshError, Scope, refresh_task};

both_http!(
    p4_newer_ordinary_message_clears_an_older_turn_question,
    i9_skipped_newer_question_stays_cleared_across_turns_and_restart,
    p2_permission_outranks_clarification,
    p5_loader_failure_keeps_the_question,
    p6_competing_revision_is_rebased_without_losing_fields,
    p6_an_unchanged_summary_is_confirmed_by_a_read_not_a_write,
    p6_exhausted_retries_invalidate_and_reads_fall_back,
    p7_boot_and_reads_repair_a_stale_summary,
    p7_a_list_read_never_writes_back_an_older_pending_action,
    p7_a_refresh_gathering_at_shutdown_is_written_before_exit,
    p7_a_session_that_recovery_moves_to_waiting_is_projected,
    p8_session_list_fails_closed,
    p1_p9_session_list_carries_pending_actions_and_revisions,
    p4_a_burst_of_events_for_one_task_costs_one_refresh,
    p4_a_summary_that_comes_back_within_the_gather_is_not_rewritten,
    p10_a_projector_that_lagged_reconciles_every_task,
    p10_a_projector_that_lagged_repairs_every_projected_field,
    p10_a_request_that_finishes_while_the_server_drains_is_projected,
    p4_a_message_in_a_turn_that_counts_asks_for_no_refresh,
    p4_l19_a_message_that_makes_a_reservation_current_clears_its_question,
);

/// A task with one primary running session, driven through the repository plus the hub
/// events services publish after commit.
struct Story {
    state: AppState,
    task: String,
    session: String,
}

impl Story {
    async fn new(state: &AppState) -> Story {
        let now = state.clock.now();
        let task = state
            .repo
            .create_task(
                &NewTask {
                    title: "p".into(),
                    ..Default::default()
                },
                now,
            )
            .await
            .unwrap()
            .id;
        let session = Self::add_session(state, &task, true).await;
        Story {
            state: state.clone(),
            task,
            session,
        }
    }

    async fn add_session(state: &AppState, task: &str, primary: bool) -> String {
        let s = state
            .repo
            .create_session(
                &NewSession {
                    task_id: task.into(),
                    agent_profile_id: None,
                    name: "agent".into(),
                    state: SessionState::Running,
                    is_primary: primary,
                    mcp_token_hash: None,
                },
                state.clock.now(),
            )
            .await
            .unwrap();
        s.id
    }

    fn publish(&self, action: &str, session: &str) {
        self.state.hub.publish(
            Event::new(action, json!({}))
                .for_task(self.task.clone())
                .for_session(session),
        );
    }

    async fn turn(&self, session: &str) -> String {
        let now = self.state.clock.now();
        let t = self
            .state
            .repo
            .insert_turn(&NewTurn {
                id: None,
                session_id: session.into(),
                started_at: now,
                created_at: now,
                fence: None,
            })
            .await
            .unwrap();
        self.publish("session.turn.started", session);
        t.id
    }

    async fn message(&self, session: &str, turn: &str) {
        self.state
            .repo
            .insert_message(
                &NewMessage {
                    session_id: session.into(),
                    turn_id: turn.into(),
                    author: MessageAuthor::Agent,
                    kind: MessageKind::Text,
                    content: "ok".into(),
                    pending_id: None,
                },
                self.state.clock.now(),
            )
            .await
            .unwrap();
        self.publish("session.message.added", session);
    }

    async fn ask(&self, session: &str, turn: &str) -> String {
        let pending_id = self.ask_unannounced(session, turn).await;
        self.publish("clarification.requested", session);
        pending_id
    }

    /// A question written with no event published: only a reconciliation can find it.
    async fn ask_unannounced(&self, session: &str, turn: &str) -> String {
        let (b, _) = self
            .state
            .repo
            .insert_bundle(
                &NewBundle {
                    pending_id: None,
                    session_id: session.into(),
                    turn_id: turn.into(),
                    context: None,
                    dedup_key: uuid::Uuid::now_v7().to_string(),
                    questions: vec![],
                    message_content: "?".into(),
                },
                self.state.clock.now(),
            )
            .await
            .unwrap();
        b.pending_id
    }

    async fn summary(&self) -> Option<SummaryRecord> {
        self.state.repo.get_summary(&self.task).await.unwrap()
    }
}

/// A task whose session asked in its first turn, the background projector idle afterwards and
/// the summary refreshed once by the test: only the test's own refreshes run after it (P6).
async fn asked_with_projector_idle(url: &str) -> (TestServer, Story, SummaryRecord) {
    let server = TestServer::start(url).await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let t1 = s.turn(&s.session).await;
    s.ask(&s.session, &t1).await;
    projector_idle(&server.state, &mut rx).await;
    let base = refresh_task(&s.state, &s.task, Scope::Full).await.unwrap();
    (server, s, base)
}

fn summary_of<'a>(task: &'a str) -> impl Fn(&Event) -> bool + 'a {
    move |e| e.action == "task.status_summary.updated" && e.payload["task_id"] == task
}

fn pending_in(e: &Event) -> Value {
    e.payload["status_summary"]["pending_action"].clone()
}

/// Waits until the projector published a summary for the task with this pending action.
async fn await_pending(rx: &mut tokio::sync::broadcast::Receiver<Event>, task: &str, want: Value) {
    next_event(rx, |e| summary_of(task)(e) && pending_in(e) == want).await;
}

async fn p4_newer_ordinary_message_clears_an_older_turn_question(url: String) {
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let t1 = s.turn(&s.session).await;
    s.ask(&s.session, &t1).await;
    await_pending(&mut rx, &s.task, json!("clarification")).await;
    let t2 = s.turn(&s.session).await;
    s.message(&s.session, &t2).await;
    await_pending(&mut rx, &s.task, Value::Null).await;
    let stored = s.summary().await.unwrap();
    assert_eq!(stored.body.pending_action, None);
    assert_eq!(
        stored.body.primary_session.as_ref().map(|p| p.id.as_str()),
        Some(s.session.as_str())
    );
    server.stop().await;
}

async fn i9_skipped_newer_question_stays_cleared_across_turns_and_restart(url: String) {
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let t1 = s.turn(&s.session).await;
    s.ask(&s.session, &t1).await;
    let t2 = s.turn(&s.session).await;
    let newer = s.ask(&s.session, &t2).await;
    await_pending(&mut rx, &s.task, json!("clarification")).await;
    let claim = Claim {
        status: BundleStatus::Rejected,
        response: "{}".into(),
        reject_reason: None,
        by: "test".into(),
    };
    assert!(matches!(
        s.state
            .repo
            .claim_bundle(&newer, &claim, s.state.clock.now())
            .await
            .unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    s.publish("clarification.rejected", &s.session);
    await_pending(&mut rx, &s.task, Value::Null).await;
    // Further turns and completions never bring the older question back.
    for _ in 0..3 {
        let t = s.turn(&s.session).await;
        s.message(&s.session, &t).await;
        s.state
            .repo
            .complete_turn(&t, s.state.clock.now())
            .await
            .unwrap();
        s.publish("session.turn.completed", &s.session);
    }
    // The projector handles events in order: once a later marker task is projected, every
    // event above was handled.
    projector_idle(&server.state, &mut rx).await;
    assert_eq!(s.summary().await.unwrap().body.pending_action, None);
    server.stop().await;

    let restarted = TestServer::start(&url).await;
    let client = support::client();
    let task: Value = client
        .get(restarted.url(&format!("/api/v1/tasks/{}", s.task)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(task["task_pending_action"], Value::Null);
    assert_eq!(task["status_summary"]["pending_action"], Value::Null);
    restarted.stop().await;
}

async fn p2_permission_outranks_clarification(url: String) {
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let other = Story::add_session(&server.state, &s.task, false).await;
    let t1 = s.turn(&s.session).await;
    s.ask(&s.session, &t1).await;
    await_pending(&mut rx, &s.task, json!("clarification")).await;
    let t2 = s.turn(&other).await;
    let perm = server
        .state
        .repo
        .insert_permission_request(
            &NewPermissionRequest {
                id: None,
                session_id: other.clone(),
                turn_id: t2,
                tool_call: "{}".into(),
                options: "[]".into(),
                message_content: "Permission requested".into(),
            },
            server.state.clock.now(),
        )
        .await
        .unwrap()
        .0;
    s.publish("permission.requested", &other);
    await_pending(&mut rx, &s.task, json!("permission")).await;
    server
        .state
        .repo
        .resolve_permission_request(
            &perm.id,
            "selected",
            Some("allow"),
            server.state.clock.now(),
        )
        .await
        .unwrap();
    s.publish("permission.resolved", &other);
    await_pending(&mut rx, &s.task, json!("clarification")).await;
    server.stop().await;
}

async fn p5_loader_failure_keeps_the_question(url: String) {
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let t1 = s.turn(&s.session).await;
    let p = s.ask(&s.session, &t1).await;
    await_pending(&mut rx, &s.task, json!("clarification")).await;
    // The ask's event can land while the refresh that already saw the question runs: the
    // task is then refreshed once more a gather later, and that refresh must not see the
    // claim below (it would rightly clear the question before the loader breaks).
    projector_idle(&server.state, &mut rx).await;
    let before = s.summary().await.unwrap();
    let claim = Claim {
        status: BundleStatus::Answered,
        response: "{}".into(),
        reject_reason: None,
        by: "test".into(),
    };
    s.state
        .repo
        .claim_bundle(&p, &claim, s.state.clock.now())
        .await
        .unwrap();
    break_loader(&url).await;
    let failures = || {
        server
            .state
            .metrics
            .summary_loader_failures
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before_failures = failures();
    s.publish("clarification.answered", &s.session);
    let err = refresh_task(&s.state, &s.task, Scope::Full)
        .await
        .unwrap_err();
    assert!(matches!(err, RefreshError::Loader { .. }), "{err}");
    // The projector processed the event too, and its loader failed as well: both failures
    // are counted (and exported, `turnstile_summary_loader_failures_total`).
    support::until("the projector's failed refresh", async || {
        failures() >= before_failures + 2
    })
    .await;
    assert_eq!(
        s.summary().await.unwrap(),
        before,
        "P5: never optimistically cleared"
    );
    mend_loader(&url).await;
    s.publish("clarification.answered", &s.session);
    await_pending(&mut rx, &s.task, Value::Null).await;
    server.stop().await;
}

async fn p6_competing_revision_is_rebased_without_losing_fields(url: String) {
    let (server, s, base) = asked_with_projector_idle(&url).await;
    // A competing writer lands between the projector's read and its compare-and-set, once.
    let repo = s.state.repo.clone();
    let fired = Arc::new(AtomicU32::new(0));
    let f = fired.clone();
    s.state.hooks.set(
        turnstile::server::hooks::Point::BeforeSummaryCas,
        move |task_id| {
            let repo = repo.clone();
            let f = f.clone();
            async move {
                if f.fetch_add(1, Ordering::SeqCst) == 0 {
                    let cur = repo.get_summary(&task_id).await.unwrap().unwrap();
                    let body = SummaryBody {
                        last_error: Some(competitor_error()),
                        pending_action: None,
                        ..cur.body.clone()
                    };
                    assert!(matches!(
                        repo.cas_summary(&task_id, Some(cur.revision), &body, 1)
                            .await
                            .unwrap(),
                        CasOutcome::Written { .. }
                    ));
                }
            }
        },
    );
    let got = refresh_task(&s.state, &s.task, Scope::Full).await.unwrap();
    s.state
        .hooks
        .clear(turnstile::server::hooks::Point::BeforeSummaryCas);
    assert_eq!(
        fired.load(Ordering::SeqCst),
        2,
        "one lost attempt, one winning retry"
    );
    assert_eq!(got.revision, base.revision + 2);
    assert_eq!(
        got.body.pending_action,
        Some(PendingAction::Clarification),
        "reloaded and reapplied"
    );
    assert_eq!(
        got.body.last_error,
        Some(competitor_error()),
        "the competitor's field survives"
    );
    assert_eq!(s.summary().await.unwrap(), got);
    server.stop().await;
}

/// P6, B3 (decision 0023): a refresh that finds the stored summary already right sends no
/// compare-and-set; it confirms with a read that the revision it started from is still stored
/// (`p6_competing_revision_is_rebased_without_losing_fields` covers the revision having moved).
/// A summary that does need writing is written, once.
async fn p6_an_unchanged_summary_is_confirmed_by_a_read_not_a_write(url: String) {
    let (server, s, base) = asked_with_projector_idle(&url).await;
    let writes = || s.state.metrics.summary_writes.load(Ordering::Relaxed);
    let before = writes();
    let again = refresh_task(&s.state, &s.task, Scope::Full).await.unwrap();
    assert_eq!(again, base, "nothing changed");
    assert_eq!(writes(), before, "no compare-and-set was sent");
    // Invalidated (P6 exhausted elsewhere): the same body must be written again.
    s.state
        .repo
        .invalidate_summary(&s.task, s.state.clock.now())
        .await
        .unwrap();
    let rewritten = refresh_task(&s.state, &s.task, Scope::Full).await.unwrap();
    assert_eq!(writes(), before + 1);
    assert_eq!(rewritten.revision, base.revision + 1);
    assert!(!rewritten.invalidated);
    assert_eq!(s.summary().await.unwrap(), rewritten);
    server.stop().await;
}

async fn p6_exhausted_retries_invalidate_and_reads_fall_back(url: String) {
    let (server, s, _) = asked_with_projector_idle(&url).await;
    // Every attempt loses: a competitor always bumps the revision first.
    let repo = s.state.repo.clone();
    s.state.hooks.set(
        turnstile::server::hooks::Point::BeforeSummaryCas,
        move |task_id| {
            let repo = repo.clone();
            async move {
                let cur = repo.get_summary(&task_id).await.unwrap().unwrap();
                let body = SummaryBody {
                    pending_action: None,
                    queued_prompt_count: cur.body.queued_prompt_count + 1,
                    ..cur.body
                };
                repo.cas_summary(&task_id, Some(cur.revision), &body, 1)
                    .await
                    .unwrap();
            }
        },
    );
    let err = refresh_task(&s.state, &s.task, Scope::Full)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RefreshError::Exhausted {
                attempts: MAX_CAS_ATTEMPTS,
                ..
            }
        ),
        "{err}"
    );
    assert!(s.summary().await.unwrap().invalidated);
    // A read whose repair fails returns no summary, the flag, and the authoritative action.
    let client = support::client();
    let list: Value = client
        .get(server.url("/api/v1/tasks"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == s.task.as_str())
        .unwrap()
        .clone();
    assert_eq!(task["status_summary"], Value::Null);
    assert_eq!(task["status_summary_invalidated"], true);
    assert_eq!(task["task_pending_action"], "clarification");
    s.state
        .hooks
        .clear(turnstile::server::hooks::Point::BeforeSummaryCas);
    let task: Value = client
        .get(server.url(&format!("/api/v1/tasks/{}", s.task)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        task["status_summary_invalidated"], false,
        "the next read repairs it"
    );
    assert_eq!(task["status_summary"]["pending_action"], "clarification");
    server.stop().await;
}

/// P7 with P6: the question is answered (and projected) while a list read is between its two
/// reads. The list must not write the pending action it read before the answer over the
/// newer summary: the stored summary is read first, so the older view loses its
/// compare-and-set and is re-read.
async fn p7_a_list_read_never_writes_back_an_older_pending_action(url: String) {
    use turnstile::server::hooks::Point;
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let t1 = s.turn(&s.session).await;
    let p = s.ask(&s.session, &t1).await;
    await_pending(&mut rx, &s.task, json!("clarification")).await;
    let (state, task) = (s.state.clone(), s.task.clone());
    let fired = Arc::new(AtomicU32::new(0));
    let f = fired.clone();
    s.state.hooks.set(Point::ReconcileReads, move |_| {
        let (state, task, p, f) = (state.clone(), task.clone(), p.clone(), f.clone());
        async move {
            if f.fetch_add(1, Ordering::SeqCst) > 0 {
                return;
            }
            let claim = Claim {
                status: BundleStatus::Answered,
                response: "{}".into(),
                reject_reason: None,
                by: "test".into(),
            };
            state
                .repo
                .claim_bundle(&p, &claim, state.clock.now())
                .await
                .unwrap();
            let projected = refresh_task(&state, &task, Scope::Full).await.unwrap();
            assert_eq!(projected.body.pending_action, None);
        }
    });
    let list: Value = support::get(server.url("/api/v1/tasks"))
        .await
        .json()
        .await
        .unwrap();
    s.state.hooks.clear(Point::ReconcileReads);
    assert_eq!(fired.load(Ordering::SeqCst), 1, "the list read reconciled");
    let listed = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == s.task.as_str())
        .unwrap()
        .clone();
    assert_eq!(listed["status_summary"]["pending_action"], Value::Null);
    assert_eq!(
        s.summary().await.unwrap().body.pending_action,
        None,
        "P7: the answered question is not written back by the list read"
    );
    server.stop().await;
}

/// P7 across a restart: a refresh still gathering when the server stops is written before it
/// exits. Boot reconciliation repairs only the pending action, so a dropped refresh would leave
/// the task's other fields (here its activity) stale until its next event.
async fn p7_a_refresh_gathering_at_shutdown_is_written_before_exit(url: String) {
    let server = TestServer::start_with(&url, |r| {
        // Longer than the test: only the shutdown can bring the refresh forward.
        r.summary_gather = std::time::Duration::from_secs(600);
    })
    .await;
    let s = Story::new(&server.state).await;
    let first = refresh_task(&s.state, &s.task, Scope::Full).await.unwrap();
    assert_eq!(first.body.activity.as_deref(), Some("generating"));
    // Waiting for input is not a state boot recovery touches: only this refresh can fix it.
    s.state
        .repo
        .set_session_state(
            &s.session,
            SessionState::WaitingForInput,
            s.state.clock.now(),
        )
        .await
        .unwrap()
        .expect("moved");
    s.publish("session.state_changed", &s.session);
    server.stop().await;

    let restarted = TestServer::start(&url).await;
    assert_eq!(
        task_activity(&restarted, &s.task).await,
        json!("idle"),
        "the queued refresh was written at shutdown"
    );
    restarted.stop().await;
}

/// P7 at boot: a session whose agent died with the server waits for input after recovery,
/// and its task's summary says so, also when it had no open turn to complete.
async fn p7_a_session_that_recovery_moves_to_waiting_is_projected(url: String) {
    let server = TestServer::start(&url).await;
    let s = Story::new(&server.state).await;
    let first = refresh_task(&s.state, &s.task, Scope::Full).await.unwrap();
    assert_eq!(first.body.activity.as_deref(), Some("generating"));
    server.stop().await;

    let restarted = TestServer::start(&url).await;
    assert_eq!(
        restarted
            .state
            .repo
            .get_session(&s.session)
            .await
            .unwrap()
            .expect("session")
            .state,
        SessionState::WaitingForInput
    );
    assert_eq!(task_activity(&restarted, &s.task).await, json!("idle"));
    restarted.stop().await;
}

async fn task_activity(server: &TestServer, task: &str) -> Value {
    let task: Value = support::get(server.url(&format!("/api/v1/tasks/{task}")))
        .await
        .json()
        .await
        .unwrap();
    task["status_summary"]["activity"].clone()
}

async fn p7_boot_and_reads_repair_a_stale_summary(url: String) {
    let server = TestServer::start(&url).await;
    let mut rx0 = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let t1 = s.turn(&s.session).await;
    s.message(&s.session, &t1).await;
    projector_idle(&server.state, &mut rx0).await;
    let stale = SummaryBody {
        pending_action: Some(PendingAction::Clarification),
        last_error: Some(competitor_error()),
        ..Default::default()
    };
    let rev = match s.state.repo.get_summary(&s.task).await.unwrap() {
        Some(cur) => match s
            .state
            .repo
            .cas_summary(&s.task, Some(cur.revision), &stale, 5)
            .await
            .unwrap()
        {
            CasOutcome::Written { revision } => revision,
            other => panic!("{other:?}"),
        },
        None => match s
            .state
            .repo
            .cas_summary(&s.task, None, &stale, 5)
            .await
            .unwrap()
        {
            CasOutcome::Written { revision } => revision,
            other => panic!("{other:?}"),
        },
    };
    server.stop().await;

    // Boot repairs it: only the pending action changes, the revision is bumped.
    let booted = TestServer::start(&url).await;
    let repaired = booted
        .state
        .repo
        .get_summary(&s.task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(repaired.body.pending_action, None);
    assert_eq!(
        repaired.body.last_error,
        Some(competitor_error()),
        "unrelated fields preserved"
    );
    // P7 bumps once for the pending action; recovery's refresh of the task whose open turn it
    // completed (P3: activity, queued prompts) may bump once more.
    assert!(
        (rev + 1..=rev + 2).contains(&repaired.revision),
        "{} after {rev}",
        repaired.revision
    );

    // A task-list read repairs a summary that went stale while running, and publishes it.
    let mut rx = booted.state.hub.subscribe();
    booted
        .state
        .repo
        .cas_summary(&s.task, Some(repaired.revision), &stale, 6)
        .await
        .unwrap();
    let list: Value = support::get(booted.url("/api/v1/tasks"))
        .await
        .json()
        .await
        .unwrap();
    let task = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == s.task.as_str())
        .unwrap()
        .clone();
    assert_eq!(task["status_summary"]["pending_action"], Value::Null);
    assert_eq!(task["status_summary"]["revision"], repaired.revision + 2);
    let e = next_event(&mut rx, summary_of(&s.task)).await;
    assert_eq!(pending_in(&e), Value::Null);
    assert_eq!(
        e.payload["status_summary"]["last_error"]["message"],
        competitor_error().message
    );
    booted.stop().await;
}

/// Breaks the authority's pending-action read for real: every batch form reads
/// `sessions.current_turn_pending` (decision 0028). [`mend_loader`] undoes it.
async fn break_loader(url: &str) {
    raw_exec(
        url,
        "ALTER TABLE sessions RENAME COLUMN current_turn_pending TO current_turn_pending_away",
    )
    .await;
}

async fn mend_loader(url: &str) {
    raw_exec(
        url,
        "ALTER TABLE sessions RENAME COLUMN current_turn_pending_away TO current_turn_pending",
    )
    .await;
}

async fn p8_session_list_fails_closed(url: String) {
    let server = TestServer::start(&url).await;
    let s = Story::new(&server.state).await;
    let url_sessions = server.url(&format!("/api/v1/tasks/{}/sessions", s.task));
    assert_eq!(support::get(&url_sessions).await.status(), StatusCode::OK);
    break_loader(&url).await;
    let r = support::get(&url_sessions).await;
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "internal");
    mend_loader(&url).await;
    assert_eq!(support::get(&url_sessions).await.status(), StatusCode::OK);
    let r = support::get(server.url("/api/v1/tasks/no-such-task/sessions")).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}

async fn p1_p9_session_list_carries_pending_actions_and_revisions(url: String) {
    let server = TestServer::start(&url).await;
    let s = Story::new(&server.state).await;
    let newer = Story::add_session(&server.state, &s.task, false).await;
    let t = s.turn(&newer).await;
    s.ask(&newer, &t).await;
    let get = || async {
        let v: Value = support::get(server.url(&format!("/api/v1/tasks/{}/sessions", s.task)))
            .await
            .json()
            .await
            .unwrap();
        v["sessions"].as_array().unwrap().clone()
    };
    let first = get().await;
    assert_eq!(first.len(), 2);
    assert_eq!(first[0]["id"], newer.as_str(), "newest first");
    assert_eq!(first[0]["pending_action"], "clarification");
    assert_eq!(first[1]["pending_action"], Value::Null);
    assert_eq!(first[1]["is_primary"], true);
    let rev = &first[0]["pending_action_revision"];
    assert_eq!(rev["epoch"], server.state.epoch.to_string());
    let second = get().await;
    assert!(second[0]["pending_action_revision"]["sequence"].as_u64() > rev["sequence"].as_u64());
    server.stop().await;
}

/// An unrelated summary field another writer sets (P3 `last_error`), which repairs keep.
fn competitor_error() -> turnstile::model::LastError {
    turnstile::model::LastError {
        message: "the agent crashed".into(),
        occurred_at: "2026-01-01T00:00:00.000000Z".into(),
    }
}

/// P4 under load: events that wait while the projector is busy are covered by one refresh per
/// task (it reads the state after all of them), not one each. The projector's first refresh
/// is held at its compare-and-set while 50 more events for the task queue up.
async fn p4_a_burst_of_events_for_one_task_costs_one_refresh(url: String) {
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    projector_idle(&server.state, &mut rx).await;

    let refreshed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (r, g, held) = (refreshed.clone(), gate.clone(), s.task.clone());
    s.state.hooks.set(
        turnstile::server::hooks::Point::BeforeSummaryCas,
        move |task_id| {
            let first = {
                let mut seen = r.lock().unwrap();
                seen.push(task_id.clone());
                task_id == held && seen.iter().filter(|t| **t == held).count() == 1
            };
            let g = g.clone();
            async move {
                if first {
                    g.acquire().await.expect("gate").forget();
                }
            }
        },
    );
    let event = || Event::new("session.message.added", json!({})).for_task(s.task.clone());
    s.state.hub.publish(event());
    let count = |task: &str| {
        refreshed
            .lock()
            .unwrap()
            .iter()
            .filter(|t| *t == task)
            .count()
    };
    support::until("the first refresh to reach the gate", async || {
        count(&s.task) == 1
    })
    .await;
    for _ in 0..50 {
        s.state.hub.publish(event());
    }
    let last = marker_task(&s.state).await;
    gate.add_permits(1);
    support::until("the projector to reach the last task", async || {
        count(&last) == 1
    })
    .await;
    s.state
        .hooks
        .clear(turnstile::server::hooks::Point::BeforeSummaryCas);
    assert_eq!(
        count(&s.task),
        2,
        "the held refresh, then one for the 50 that waited"
    );
}

/// P4 with the gather (decision 0039): a task's events within `summary_gather` of its first
/// one are covered by one refresh, which reads the state after all of them. A question
/// answered and the next one asked within it (a B3 round trip) leave the summary as it was:
/// one refresh and no write, where refreshing after each event writes twice (no question,
/// then a question again). The gather is long here so that the repository writes between the
/// events fit in it on a loaded machine; the server's default is a few milliseconds.
async fn p4_a_summary_that_comes_back_within_the_gather_is_not_rewritten(url: String) {
    let server = TestServer::start_with(&url, |r| {
        r.summary_gather = std::time::Duration::from_secs(2);
    })
    .await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let turn = s.turn(&s.session).await;
    let first = s.ask(&s.session, &turn).await;
    await_pending(&mut rx, &s.task, json!("clarification")).await;
    let base = s.summary().await.expect("written");
    let writes = || s.state.metrics.summary_writes.load(Ordering::Relaxed);
    let (refreshes_before, writes_before) = (refreshes(&s.state), writes());

    let claim = Claim {
        status: BundleStatus::Answered,
        response: "{}".into(),
        reject_reason: None,
        by: s.state.runtime.config.server_id.clone(),
    };
    let claimed = s
        .state
        .repo
        .claim_bundle(&first, &claim, s.state.clock.now())
        .await
        .unwrap();
    assert!(matches!(claimed, ClaimOutcome::Claimed(_)), "{claimed:?}");
    s.publish("clarification.answered", &s.session);
    s.ask(&s.session, &turn).await;
    projector_idle(&s.state, &mut rx).await;

    assert_eq!(
        refreshes(&s.state) - refreshes_before,
        2,
        "one refresh for the task's two events, one for the marker task"
    );
    assert_eq!(
        writes() - writes_before,
        1,
        "only the marker task's summary was written"
    );
    assert_eq!(
        s.summary().await.unwrap(),
        base,
        "the question is still the pending action"
    );
    server.stop().await;
}

/// P10: a projector that missed events (its receiver lagged behind the hub) reconciles every
/// task, so a change it never heard of is not left stale. Its refresh of another task is held
/// at the compare-and-set while more events than the hub holds are published; a question that
/// was written with no event at all is in the summary afterwards.
async fn p10_a_projector_that_lagged_reconciles_every_task(url: String) {
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let quiet = Story::new(&server.state).await;
    let turn = quiet.turn(&quiet.session).await;
    let busy = Story::new(&server.state).await;
    projector_idle(&server.state, &mut rx).await;
    drop(rx);
    quiet.ask_unannounced(&quiet.session, &turn).await;

    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = Arc::new(AtomicU32::new(0));
    let (g, h, task) = (gate.clone(), held.clone(), busy.task.clone());
    server.state.hooks.set(
        turnstile::server::hooks::Point::BeforeSummaryCas,
        move |task_id| {
            let hold = task_id == task && h.fetch_add(1, Ordering::SeqCst) == 0;
            let g = g.clone();
            async move {
                if hold {
                    g.acquire().await.expect("gate").forget();
                }
            }
        },
    );
    busy.publish("session.message.added", &busy.session);
    support::until("the busy task's refresh to reach the gate", async || {
        held.load(Ordering::SeqCst) == 1
    })
    .await;
    for _ in 0..turnstile::server::startup::HUB_CAPACITY + 10 {
        busy.publish("session.message.added", &busy.session);
    }
    let mut rx = server.state.hub.subscribe();
    gate.add_permits(1);
    await_pending(&mut rx, &quiet.task, json!("clarification")).await;
    server
        .state
        .hooks
        .clear(turnstile::server::hooks::Point::BeforeSummaryCas);
    assert_eq!(
        pending_in_summary(&quiet).await,
        json!("clarification"),
        "stored as well as published"
    );
    server.stop().await;
}

/// P10, P3: a lag lost events that moved more than the pending action — here the primary
/// session's state, hence the task's activity. The repair after the lag refreshes every
/// projected field, not only the pending action.
async fn p10_a_projector_that_lagged_repairs_every_projected_field(url: String) {
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let quiet = Story::new(&server.state).await;
    quiet.turn(&quiet.session).await;
    let busy = Story::new(&server.state).await;
    projector_idle(&server.state, &mut rx).await;
    drop(rx);
    let before = quiet.summary().await.expect("a summary").body;
    assert_eq!(before.activity.as_deref(), Some("generating"), "{before:?}");
    // Moved without an event: only a full refresh can see it.
    server
        .state
        .repo
        .set_session_state(
            &quiet.session,
            SessionState::WaitingForInput,
            server.state.clock.now(),
        )
        .await
        .unwrap()
        .expect("moved");

    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = Arc::new(AtomicU32::new(0));
    let (g, h, task) = (gate.clone(), held.clone(), busy.task.clone());
    server.state.hooks.set(
        turnstile::server::hooks::Point::BeforeSummaryCas,
        move |task_id| {
            let hold = task_id == task && h.fetch_add(1, Ordering::SeqCst) == 0;
            let g = g.clone();
            async move {
                if hold {
                    g.acquire().await.expect("gate").forget();
                }
            }
        },
    );
    busy.publish("session.message.added", &busy.session);
    support::until("the busy task's refresh to reach the gate", async || {
        held.load(Ordering::SeqCst) == 1
    })
    .await;
    for _ in 0..turnstile::server::startup::HUB_CAPACITY + 10 {
        busy.publish("session.message.added", &busy.session);
    }
    gate.add_permits(1);
    support::until("the lagged projector to repair the activity", async || {
        quiet
            .summary()
            .await
            .is_some_and(|s| s.body.activity.as_deref() == Some("idle"))
    })
    .await;
    let after = quiet.summary().await.expect("a summary").body;
    assert_eq!(
        after.primary_session.map(|p| p.state),
        Some(SessionState::WaitingForInput),
        "the primary session's state too"
    );
    server
        .state
        .hooks
        .clear(turnstile::server::hooks::Point::BeforeSummaryCas);
    server.stop().await;
}

/// P10: a shutdown began while a request was still running (the HTTP server drains open
/// requests before it exits); the projector stopped at once and the request's events were
/// never projected: the task kept its question after the restart. The projector stops only
/// once nothing serves requests any more (`startup::finish`).
async fn p10_a_request_that_finishes_while_the_server_drains_is_projected(url: String) {
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let t1 = s.turn(&s.session).await;
    let pending = s.ask(&s.session, &t1).await;
    await_pending(&mut rx, &s.task, json!("clarification")).await;
    projector_idle(&server.state, &mut rx).await;
    let (arrived, go) = (
        Arc::new(tokio::sync::Semaphore::new(0)),
        Arc::new(tokio::sync::Semaphore::new(0)),
    );
    {
        let (a, g) = (arrived.clone(), go.clone());
        server
            .state
            .hooks
            .set(turnstile::server::hooks::Point::AfterClaim, move |_| {
                let (a, g) = (a.clone(), g.clone());
                async move {
                    a.add_permits(1);
                    g.acquire().await.expect("gate").forget();
                }
            });
    }
    let rejecting = {
        let api = support::Api::new(&server.base);
        tokio::spawn(async move { api.respond(&pending, json!({ "rejected": true })).await })
    };
    arrived.acquire().await.unwrap().forget();
    turnstile::server::startup::shutdown(&server.state);
    go.add_permits(1);
    let (status, body) = rejecting.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    turnstile::server::startup::finish(&server.state).await;
    assert_eq!(
        pending_in_summary(&s).await,
        Value::Null,
        "the rejection was projected before the projector stopped"
    );
}

async fn pending_in_summary(s: &Story) -> Value {
    let summary = s.summary().await.expect("a summary");
    serde_json::to_value(summary.body.pending_action).unwrap()
}

/// How many summary refreshes the projector has attempted (`/metrics`).
fn refreshes(state: &AppState) -> u64 {
    state.metrics.summary_refreshes.load(Ordering::Relaxed)
}

/// An agent message written into its turn, through the worker's own path.
async fn agent_message(state: &AppState, session: &str, turn: &str) -> MessageWritten {
    state
        .repo
        .insert_message(
            &NewMessage {
                session_id: session.into(),
                turn_id: turn.into(),
                author: MessageAuthor::Agent,
                kind: MessageKind::Text,
                content: "part".into(),
                pending_id: None,
            },
            state.clock.now(),
        )
        .await
        .unwrap()
}

/// P4 (decision 0037): a reply streamed into a turn that already counts changes no input of
/// the projection (sessions' states, current turns, bundles, permissions), so neither its new
/// message nor its rewrites cost a refresh; the events still reach the transcript.
async fn p4_a_message_in_a_turn_that_counts_asks_for_no_refresh(url: String) {
    use turnstile::server::orchestrator::publish::{MessageEvent, message_written};
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let t1 = s.turn(&s.session).await;
    s.ask(&s.session, &t1).await;
    await_pending(&mut rx, &s.task, json!("clarification")).await;
    projector_idle(&server.state, &mut rx).await;
    let before = refreshes(&s.state);

    let written = agent_message(&s.state, &s.session, &t1).await;
    assert!(!written.can_move_turn, "t1 already counts");
    let revision = s.state.next_pending_revision().await;
    message_written(&s.state, MessageEvent::Added, &written, revision);
    let added = next_event(&mut rx, |e| e.action == "session.message.added").await;
    assert!(!added.refreshes_projection());
    assert_eq!(added.payload["message"]["id"], json!(written.message.id));
    let rewritten = s
        .state
        .repo
        .update_message_content(&written.message.id, "part two", s.state.clock.now())
        .await
        .unwrap()
        .unwrap();
    let revision = s.state.next_pending_revision().await;
    message_written(&s.state, MessageEvent::Updated, &rewritten, revision);
    let updated = next_event(&mut rx, |e| e.action == "session.message.updated").await;
    assert!(!updated.refreshes_projection());
    assert_eq!(updated.payload["pending_action"], json!("clarification"));

    projector_idle(&server.state, &mut rx).await;
    assert_eq!(
        refreshes(&s.state) - before,
        1,
        "only the marker task's refresh ran"
    );
    let stored = s.summary().await.unwrap();
    assert_eq!(
        stored.body.pending_action,
        Some(PendingAction::Clarification)
    );
    server.stop().await;
}

/// P4 with L19: a message written into a resume reservation makes that turn count, and so
/// current; the older turn's question is superseded. The message's event alone must bring the
/// summary along.
async fn p4_l19_a_message_that_makes_a_reservation_current_clears_its_question(url: String) {
    use turnstile::server::orchestrator::publish::{MessageEvent, message_written};
    let server = TestServer::start(&url).await;
    let mut rx = server.state.hub.subscribe();
    let s = Story::new(&server.state).await;
    let t1 = s.turn(&s.session).await;
    let asked = s.ask(&s.session, &t1).await;
    await_pending(&mut rx, &s.task, json!("clarification")).await;
    // A refresh queued again by the ask's event could otherwise run after the message below
    // and publish the cleared question before `message.added`, which the wait for that
    // event would skip (as in P5's test).
    projector_idle(&server.state, &mut rx).await;
    let reserved = s
        .state
        .repo
        .reserve_turn(&s.session, &asked, s.state.clock.now())
        .await
        .unwrap();
    assert_eq!(
        s.state.repo.current_turn_id(&s.session).await.unwrap(),
        Some(t1.clone()),
        "a reservation alone does not count (L19)"
    );

    let written = agent_message(&s.state, &s.session, &reserved.id).await;
    // The statement's RETURNING row is computed before the trigger moves the pointer on both
    // databases, so its `pending_action` still reads the old turn: the refresh must correct it.
    assert!(written.can_move_turn);
    let revision = s.state.next_pending_revision().await;
    message_written(&s.state, MessageEvent::Added, &written, revision);
    let added = next_event(&mut rx, |e| e.action == "session.message.added").await;
    assert!(added.refreshes_projection());
    await_pending(&mut rx, &s.task, Value::Null).await;
    assert_eq!(s.summary().await.unwrap().body.pending_action, None);
    server.stop().await;
}
