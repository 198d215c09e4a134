//! L19/I8: the process stops at each point of a detached answer's delivery; after a restart no
//! answered and no pending question is lost. The durable state at each crash point is written
//! with the same repository calls the respond path makes, in the same order (claim → reserve
//! → attempted → publish → finalize); the restart is a fresh server on the same database.

mod support;

use serde_json::{Value, json};
use support::{Api, SHORT_TIMEOUT, TestServer};
use turnstile::model::BundleStatus;
use turnstile::server::repo::{Claim, ClaimOutcome};

#[derive(Clone, Copy, Debug)]
/// The last durable step before the crash.
enum CrashAt {
    Claim,
    Reserve,
    Attempted,
    Publish,
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
    let msgs = api
        .wait_for(
            &format!("/api/v1/sessions/{session}/messages"),
            "the timeout",
            |v| {
                v["messages"].as_array().is_some_and(|m| {
                    m.iter()
                        .any(|m| m["content"] == "Question timed out, continuing without answer.")
                })
            },
        )
        .await;
    let pending_id = msgs["messages"]
        .as_array()
        .unwrap()
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
    let repo = server.state.repo.clone();
    let now = server.state.clock.now();
    let response = json!({ "pending_id": pending_id, "answers": [{ "question_id": "db", "selected_options": ["sqlite"], "custom_text": null }], "rejected": false, "reject_reason": null, "responded_at": "2026-01-01T00:00:00.000000Z" });
    let claim = Claim {
        status: BundleStatus::Answered,
        response: response.to_string(),
        reject_reason: None,
    };
    assert!(matches!(
        repo.claim_bundle(&pending_id, &claim, now).await.unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    if !matches!(at, CrashAt::Claim) {
        let turn = repo
            .reserve_turn(&session, &pending_id, now + 1)
            .await
            .unwrap();
        if matches!(at, CrashAt::Attempted | CrashAt::Publish) {
            assert!(repo.mark_attempted(&turn.id).await.unwrap());
        }
        if matches!(at, CrashAt::Publish) {
            assert!(repo.publish_turn(&turn.id).await.unwrap());
        }
    }
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
            .is_empty()
    );
    match at {
        CrashAt::Claim | CrashAt::Reserve => {
            // Not yet accepted: the question is pending and answerable again (no question lost).
            assert_eq!(
                (bundle["status"].as_str(), bundle["active"].as_bool()),
                (Some("pending"), Some(true)),
                "{at:?}"
            );
            assert_eq!(bundle["response"], Value::Null);
            assert_eq!(turn_count, 1, "{at:?}: the empty reservation is gone");
            let (status, r) = api
                .post(&format!("/api/v1/clarifications/{pending_id}/respond"), json!({ "answers": [{ "question_id": "db", "selected_options": ["postgresql"] }] }))
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
        CrashAt::Attempted | CrashAt::Publish => {
            // Accepted: the answer is final (no answer lost) and the resume turn is current.
            assert_eq!(
                (bundle["status"].as_str(), bundle["active"].as_bool()),
                (Some("answered"), Some(false)),
                "{at:?}"
            );
            assert_eq!(
                bundle["response"]["answers"][0]["selected_options"][0],
                "sqlite"
            );
            assert_eq!(turn_count, 2, "{at:?}: the attempted turn stays");
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
async fn l19_crash_between_claim_and_dispatch(url: String) {
    crash_story(url, CrashAt::Reserve).await;
}
async fn l19_crash_between_attempted_and_publish(url: String) {
    crash_story(url, CrashAt::Attempted).await;
}
async fn l19_crash_after_publish(url: String) {
    crash_story(url, CrashAt::Publish).await;
}

both_http!(
    l19_crash_after_claim,
    l19_crash_between_claim_and_dispatch,
    l19_crash_between_attempted_and_publish,
    l19_crash_after_publish,
);
