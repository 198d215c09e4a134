//! L19/I8: the process stops at each point of a detached answer's delivery; after a restart no
//! answered and no pending question is lost, and an owed answer reaches the agent exactly once.
//! The durable state at each crash point is written with the same repository calls the respond
//! path and the worker make, in the same order (claim → owe → dispatch); the restart is a fresh
//! server on the same database. A reservation left by an older version is recovered too.

use crate::support;

use serde_json::{Value, json};
use support::{Api, SHORT_TIMEOUT, TestServer};
use turnstile::model::BundleStatus;
use turnstile::server::repo::{Claim, ClaimOutcome};

#[derive(Clone, Copy, Debug)]
/// The last durable step before the crash.
enum CrashAt {
    /// Claimed, not yet accepted.
    Claim,
    /// An older version's empty reservation (reserved, never attempted).
    LegacyReservation,
    /// Accepted: the resume is owed.
    Owed,
    /// Handed to the agent (which died with the server).
    Dispatched,
}

/// A session whose current turn holds a detached, active question; returns (task, session,
/// pending_id).
async fn detached_question(api: &Api) -> (String, String, String) {
    let (_, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "crash", "prompt": SHORT_TIMEOUT }),
        )
        .await;
    let task_id = task["id"].as_str().unwrap().to_string();
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    let messages = api
        .wait_for_message(&session, "the timeout", |m| {
            m["content"] == "Question timed out, continuing without answer."
        })
        .await;
    let pending_id = messages
        .iter()
        .find(|m| m["kind"] == "clarification_request")
        .unwrap()["pending_id"]
        .as_str()
        .unwrap()
        .to_string();
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "turn completed",
        |v| v["turns"][0]["completed_at"].is_string(),
    )
    .await;
    (task_id, session, pending_id)
}

async fn crash_story(url: String, at: CrashAt) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (task, session, pending_id) = detached_question(&api).await;
    // The turn's completion is in the database before its worker is done with it: the worker
    // may still look for owed resumes. Only once it is idle is what we write below "owed at
    // the crash" (otherwise it could hand the resume to the old agent first: `Dispatched`).
    let state = server.state.clone();
    support::until("the worker to be idle", async || {
        turnstile::server::orchestrator::worker::idle_mark(&state, &session).is_some()
    })
    .await;
    let repo = server.state.repo.clone();
    let now = server.state.clock.now();
    let response = json!({ "pending_id": pending_id, "answers": [{ "question_id": "db", "selected_options": ["sqlite"], "custom_text": null }], "rejected": false, "reject_reason": null, "responded_at": "2026-01-01T00:00:00.000000Z" });
    let claim = Claim {
        status: BundleStatus::Answered,
        response: response.to_string(),
        reject_reason: None,
        by: "test".into(),
    };
    assert!(matches!(
        repo.claim_bundle(&pending_id, &claim, now).await.unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    match at {
        CrashAt::Claim => {}
        CrashAt::LegacyReservation => {
            repo.reserve_turn(&session, &pending_id, now + 1)
                .await
                .unwrap();
        }
        CrashAt::Owed | CrashAt::Dispatched => {
            let prompt = "[turnstile:clarification-answer]\nQ: Which database?\nA: sqlite";
            let owed = repo
                .owe_resume(&pending_id, prompt, now + 1)
                .await
                .unwrap()
                .expect("owed");
            if matches!(at, CrashAt::Dispatched) {
                assert!(repo.dispatch_resume(&owed.id, now + 2, None).await.unwrap());
            }
        }
    }
    // A crash: nothing of the old process runs on (its agent, its workers).
    server.stop().await;

    let restarted = TestServer::start(&url).await;
    let api = Api::new(&restarted.base);
    let bundle = api
        .get(&format!("/api/v1/clarifications/{pending_id}"))
        .await
        .1;
    let stored = restarted
        .state
        .repo
        .get_bundle(&pending_id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !stored.record.delivery_pending,
        "{at:?}: no delivery left half-done"
    );
    let turns = api
        .get(&format!("/api/v1/sessions/{session}/turns"))
        .await
        .1;
    let turn_count = turns["turns"].as_array().unwrap().len();
    assert!(
        restarted
            .state
            .repo
            .unpublished_reservations()
            .await
            .unwrap()
            .iter()
            .all(|t| t.is_owed()),
        "{at:?}: only owed resumes survive recovery"
    );
    let resumes = async || {
        api.agent_lines(&session)
            .await
            .iter()
            .filter(|l| l.starts_with("Thanks, continuing"))
            .count()
    };
    match at {
        CrashAt::Claim | CrashAt::LegacyReservation => {
            // Not yet accepted: the question is pending and answerable again (no question lost).
            assert_eq!(
                (bundle["status"].as_str(), bundle["active"].as_bool()),
                (Some("pending"), Some(true)),
                "{at:?}"
            );
            assert_eq!(bundle["response"], Value::Null);
            assert_eq!(turn_count, 1, "{at:?}: the empty reservation is gone");
            let (status, r) = api
                .respond(&pending_id, json!({ "answers": [{ "question_id": "db", "selected_options": ["postgresql"] }] }))
                .await;
            assert_eq!(
                (status.as_u16(), r["claimed"].as_bool()),
                (200, Some(true)),
                "{r}"
            );
            api.wait_for(
                &format!("/api/v1/sessions/{session}/turns"),
                "the resume turn",
                |v| {
                    v["turns"]
                        .as_array()
                        .is_some_and(|t| t.len() == 2 && t[1]["completed_at"].is_string())
                },
            )
            .await;
        }
        CrashAt::Owed | CrashAt::Dispatched => {
            // Accepted: the answer is final (no answer lost) and the resume turn stays.
            assert_eq!(
                (bundle["status"].as_str(), bundle["active"].as_bool()),
                (Some("answered"), Some(false)),
                "{at:?}"
            );
            assert_eq!(
                bundle["response"]["answers"][0]["selected_options"][0],
                "sqlite"
            );
            assert_eq!(turn_count, 2, "{at:?}: the resume turn stays");
            if matches!(at, CrashAt::Owed) {
                // L18: the start-up launch delivers what is owed, once.
                api.wait_turns_done(&session, 2).await;
                assert_eq!(resumes().await, 1, "I4: {:?}", api.messages(&session).await);
            } else {
                // Handed over before the crash: never delivered a second time.
                assert_eq!(resumes().await, 0, "I4");
                assert!(
                    restarted
                        .state
                        .repo
                        .owed_resumes(&session)
                        .await
                        .unwrap()
                        .is_empty()
                );
            }
        }
    }
    // I2: the summary agrees with the repository after the restart.
    let t = api
        .wait_for(&format!("/api/v1/tasks/{task}"), "summary", |t| {
            !t["status_summary"].is_null()
        })
        .await;
    assert_eq!(
        t["status_summary"]["pending_action"], t["task_pending_action"],
        "{at:?}"
    );
    restarted.stop().await;
}

async fn l19_crash_after_claim(url: String) {
    crash_story(url, CrashAt::Claim).await;
}
async fn l19_an_older_versions_empty_reservation_is_undone(url: String) {
    crash_story(url, CrashAt::LegacyReservation).await;
}
async fn l18_crash_after_acceptance_delivers_the_owed_answer_at_start_up(url: String) {
    crash_story(url, CrashAt::Owed).await;
}
async fn l18_crash_after_dispatch_never_delivers_twice(url: String) {
    crash_story(url, CrashAt::Dispatched).await;
}

both_http!(
    l19_crash_after_claim,
    l19_an_older_versions_empty_reservation_is_undone,
    l18_crash_after_acceptance_delivers_the_owed_answer_at_start_up,
    l18_crash_after_dispatch_never_delivers_twice,
);
