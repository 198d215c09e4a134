//! L13/I3/I4 under load: 50 concurrent responders on one live and on one detached bundle;
//! exactly one wins, and the agent receives exactly one answer or one resume.

use crate::support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::{Api, SHORT_TIMEOUT, TestServer};

const RESPONDERS: usize = 50;

/// Fires the responders together (a barrier releases them at once); returns the bodies.
async fn race(api: &Api, pending_id: &str) -> Vec<Value> {
    let barrier = Arc::new(tokio::sync::Barrier::new(RESPONDERS));
    let mut handles = Vec::new();
    for i in 0..RESPONDERS {
        let (client, url, barrier) = (
            api.client.clone(),
            format!("{}/api/v1/clarifications/{pending_id}/respond", api.base),
            barrier.clone(),
        );
        let option = if i % 2 == 0 { "sqlite" } else { "postgresql" };
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = client
                .post(url)
                .json(
                    &json!({ "answers": [{ "question_id": "db", "selected_options": [option] }] }),
                )
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }));
    }
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

fn check_one_winner(bodies: &[Value]) -> String {
    let winners: Vec<&Value> = bodies.iter().filter(|b| b["claimed"] == true).collect();
    assert_eq!(winners.len(), 1, "I3: exactly one claimed:true");
    let chosen = winners[0]["response"]["answers"][0]["selected_options"][0]
        .as_str()
        .unwrap()
        .to_string();
    for b in bodies.iter().filter(|b| b["claimed"] == false) {
        assert_eq!(b["status"], "answered");
        assert_eq!(
            b["response"]["answers"][0]["selected_options"][0],
            chosen.as_str(),
            "losers see the winner's outcome"
        );
    }
    chosen
}

both_http!(
    i3_fifty_responders_on_a_live_bundle,
    i4_fifty_responders_on_a_detached_bundle
);

async fn i3_fifty_responders_on_a_live_bundle(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (_, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "race", "prompt": "/e2e:clarification" }),
        )
        .await;
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    let pending_id = api.pending_id(&session).await;
    let chosen = check_one_winner(&race(&api, &pending_id).await);
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "the turn",
        |v| v["turns"][0]["completed_at"].is_string(),
    )
    .await;
    let answered: Vec<String> = api
        .agent_lines(&session)
        .await
        .into_iter()
        .filter(|l| l.starts_with("You answered"))
        .collect();
    assert_eq!(
        answered,
        vec![format!(
            r#"You answered: {{"db":{{"selected_option":"{chosen}"}}}}"#
        )],
        "the agent got exactly one answer"
    );
    assert_eq!(
        api.get(&format!("/api/v1/sessions/{session}/turns"))
            .await
            .1["turns"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    server.stop().await;
}

async fn i4_fifty_responders_on_a_detached_bundle(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (_, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "race", "prompt": SHORT_TIMEOUT }),
        )
        .await;
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    let pending_id = api.pending_id(&session).await;
    api.wait_for(
        &format!("/api/v1/clarifications/{pending_id}"),
        "detached",
        |b| b["detached"] == true,
    )
    .await;
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "turn done",
        |v| v["turns"][0]["completed_at"].is_string(),
    )
    .await;
    let chosen = check_one_winner(&race(&api, &pending_id).await);
    api.wait_for(
        &format!("/api/v1/sessions/{session}/turns"),
        "the resume",
        |v| {
            v["turns"]
                .as_array()
                .is_some_and(|t| t.len() == 2 && t[1]["completed_at"].is_string())
        },
    )
    .await;
    let resumed: Vec<String> = api
        .agent_lines(&session)
        .await
        .into_iter()
        .filter(|l| l.starts_with("Thanks, continuing"))
        .collect();
    assert_eq!(resumed.len(), 1, "I4: exactly one resume");
    assert!(resumed[0].contains(&chosen));
    server.stop().await;
}
