//! `/ws` over a real socket (spec/api.md WebSocket, P10): envelope, subscriptions, summary
//! push, resync on connect, after a restart and on lag.

use crate::support;

use futures::SinkExt;
use serde_json::{Value, json};
use support::ws::{connect, next_frame, send};
use support::{TestServer, sqlite_url};
use tokio_tungstenite::tungstenite::Message;
use turnstile::model::{BundleStatus, SessionState};
use turnstile::server::events::Event;
use turnstile::server::repo::*;

fn action(a: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v["action"] == a
}

both_http!(
    p10_connect_gets_resync_and_requests_get_responses,
    summary_updates_reach_every_client_and_messages_only_subscribers
);

async fn p10_connect_gets_resync_and_requests_get_responses(url: String) {
    let server = TestServer::start(&url).await;
    let mut ws = connect(&server).await;
    let hello = next_frame(&mut ws, |_| true).await;
    assert_eq!(hello["type"], "notification");
    assert_eq!(hello["action"], "resync");
    assert_eq!(hello["payload"]["reason"], "connected");
    assert_eq!(hello["payload"]["epoch"], server.state.epoch.to_string());
    assert!(hello["ts"].as_str().is_some_and(|t| t.ends_with('Z')));

    send(
        &mut ws,
        json!({ "type": "request", "id": 7, "action": "ping", "payload": {} }),
    )
    .await;
    let pong = next_frame(&mut ws, |v| v["id"] == 7).await;
    assert_eq!(
        (pong["type"].as_str(), pong["action"].as_str()),
        (Some("response"), Some("ping"))
    );

    // Bad requests get a clear error and change nothing.
    send(
        &mut ws,
        json!({ "type": "request", "id": 8, "action": "subscribe.session", "payload": {} }),
    )
    .await;
    let err = next_frame(&mut ws, |v| v["id"] == 8).await;
    assert_eq!(err["type"], "error");
    assert_eq!(err["payload"]["code"], "bad_request");
    send(
        &mut ws,
        json!({ "type": "request", "id": 9, "action": "fly", "payload": {} }),
    )
    .await;
    assert_eq!(next_frame(&mut ws, |v| v["id"] == 9).await["type"], "error");
    ws.send(Message::Text("{not json".into())).await.unwrap();
    assert_eq!(
        next_frame(&mut ws, |v| v["type"] == "error").await["payload"]["code"],
        "bad_request"
    );

    // After a restart, the next connection gets a resync with a newer epoch.
    let epoch = server.state.epoch;
    drop(ws);
    server.stop().await;
    let restarted = TestServer::start(&url).await;
    let mut ws = connect(&restarted).await;
    let hello = next_frame(&mut ws, action("resync")).await;
    let new_epoch: i64 = hello["payload"]["epoch"].as_str().unwrap().parse().unwrap();
    assert!(new_epoch > epoch);
    restarted.stop().await;
}

async fn summary_updates_reach_every_client_and_messages_only_subscribers(url: String) {
    let server = TestServer::start(&url).await;
    let state = &server.state;
    let now = state.clock.now();
    let task = state
        .repo
        .create_task(
            &NewTask {
                title: "ws".into(),
                ..Default::default()
            },
            now,
        )
        .await
        .unwrap()
        .id;
    let session = state
        .repo
        .create_session(
            &NewSession {
                task_id: task.clone(),
                agent_profile_id: None,
                name: "a".into(),
                state: SessionState::Running,
                is_primary: true,
                mcp_token_hash: None,
            },
            now,
        )
        .await
        .unwrap()
        .id;
    let mut subscribed = connect(&server).await;
    let mut other = connect(&server).await;
    next_frame(&mut subscribed, action("resync")).await;
    next_frame(&mut other, action("resync")).await;
    send(&mut subscribed, json!({ "type": "request", "id": 1, "action": "subscribe.session", "payload": { "session_id": session } })).await;
    next_frame(&mut subscribed, |v| v["id"] == 1).await;

    // The agent asks (durable write, then the events a service publishes after commit).
    let turn = state
        .repo
        .insert_turn(&NewTurn {
            id: None,
            session_id: session.clone(),
            started_at: now,
            created_at: now,
            fence: None,
        })
        .await
        .unwrap()
        .id;
    let (bundle, message) = state
        .repo
        .insert_bundle(
            &NewBundle {
                pending_id: None,
                session_id: session.clone(),
                turn_id: turn,
                context: None,
                dedup_key: "k".into(),
                questions: vec![],
                message_content: "?".into(),
            },
            now,
        )
        .await
        .unwrap();
    state.hub.publish(
        Event::new(
            "session.message.added",
            json!({ "message": message.to_dto() }),
        )
        .for_task(task.clone())
        .for_session(session.clone()),
    );
    let is_clarification = |v: &Value| {
        v["action"] == "task.status_summary.updated"
            && v["payload"]["status_summary"]["pending_action"] == "clarification"
    };
    for ws in [&mut subscribed, &mut other] {
        let e = next_frame(ws, is_clarification).await;
        assert_eq!(e["payload"]["task_id"], task.as_str());
    }
    // The answer clears it for everyone.
    let claim = Claim {
        status: BundleStatus::Answered,
        response: "{}".into(),
        reject_reason: None,
        by: "test".into(),
    };
    state
        .repo
        .claim_bundle(&bundle.pending_id, &claim, now)
        .await
        .unwrap();
    state.hub.publish(
        Event::new("clarification.answered", json!({}))
            .for_task(task.clone())
            .for_session(session.clone()),
    );
    let is_cleared = |v: &Value| {
        v["action"] == "task.status_summary.updated"
            && v["payload"]["status_summary"]["pending_action"].is_null()
    };
    next_frame(&mut subscribed, is_cleared).await;
    next_frame(&mut other, is_cleared).await;
    // Session-scoped messages go only to the subscriber: a message event, then a marker
    // workspace event. Each client gets the hub's events in order, so the subscriber meets the
    // message before the marker and the other client meets the marker first.
    state.hub.publish(
        Event::new(
            "session.message.added",
            json!({ "message": message.to_dto() }),
        )
        .for_task(task.clone())
        .for_session(session.clone()),
    );
    state
        .hub
        .publish(Event::new("task.updated", json!({ "marker": true })));
    let message_or_marker =
        |v: &Value| v["action"] == "session.message.added" || v["payload"]["marker"] == true;
    let got = next_frame(&mut subscribed, message_or_marker).await;
    assert_eq!(
        got["action"], "session.message.added",
        "the subscriber gets the session's messages"
    );
    let first = next_frame(&mut other, message_or_marker).await;
    assert_eq!(
        first["payload"]["marker"], true,
        "unsubscribed clients get no session messages"
    );
    server.stop().await;
}

/// P10: a client that falls behind the hub gets `resync`. Single-threaded runtime: the socket
/// task cannot run while the events are published, so the lag is certain, not hoped for.
#[tokio::test(flavor = "current_thread")]
async fn p10_lagging_client_gets_resync() {
    let server = TestServer::start(&sqlite_url()).await;
    let mut ws = connect(&server).await;
    next_frame(&mut ws, action("resync")).await;
    let capacity = turnstile::server::startup::HUB_CAPACITY;
    for i in 0..capacity * 2 {
        server
            .state
            .hub
            .publish(Event::new("task.updated", json!({ "i": i })));
    }
    let resync = next_frame(&mut ws, action("resync")).await;
    assert_eq!(resync["payload"]["reason"], "lagged");
    assert!(resync["payload"]["missed"].as_u64().unwrap() >= capacity as u64);
    server.stop().await;
}

both_http!(message_events_carry_the_pending_action_and_its_revision);

async fn message_events_carry_the_pending_action_and_its_revision(url: String) {
    let server = TestServer::start(&url).await;
    let api = support::Api::new(&server.base);
    let (_, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "ws", "prompt": "/e2e:simple-message" }),
        )
        .await;
    let session = task["primary_session_id"].as_str().unwrap();
    let mut ws = connect(&server).await;
    next_frame(&mut ws, action("resync")).await;
    send(&mut ws, json!({ "type": "request", "id": 1, "action": "subscribe.session", "payload": { "session_id": session } })).await;
    next_frame(&mut ws, |v| v["id"] == 1).await;
    // Subscribed first, then the agent asks: the event cannot be missed.
    let ask = "e2e:ask({\"questions\": [{\"id\": \"db\", \"prompt\": \"Which?\", \"options\": [{\"label\": \"A\"}, {\"label\": \"B\"}]}]})";
    api.post(
        &format!("/api/v1/sessions/{session}/prompt"),
        json!({ "content": ask }),
    )
    .await;
    let added = next_frame(&mut ws, |v| {
        v["action"] == "session.message.added"
            && v["payload"]["message"]["kind"] == "clarification_request"
    })
    .await;
    assert_eq!(added["payload"]["pending_action"], "clarification");
    let rev = &added["payload"]["pending_action_revision"];
    assert_eq!(rev["epoch"], server.state.epoch.to_string());
    assert!(rev["sequence"].as_u64().unwrap() > 0);
    // The list read afterwards carries a newer revision (P9).
    let list = api
        .get(&format!(
            "/api/v1/tasks/{}/sessions",
            task["id"].as_str().unwrap()
        ))
        .await
        .1;
    assert!(
        list["sessions"][0]["pending_action_revision"]["sequence"].as_u64()
            > rev["sequence"].as_u64()
    );
    server.stop().await;
}

both_http!(real_agent_question_reaches_every_client_and_metrics_count_it);

/// The WebSocket contract with the real agent: subscribed and unsubscribed clients get the
/// summary with `clarification`; the answer clears it. `/metrics` counts clients and bundles.
async fn real_agent_question_reaches_every_client_and_metrics_count_it(url: String) {
    let server = TestServer::start(&url).await;
    let api = support::Api::new(&server.base);
    let mut a = connect(&server).await;
    let mut b = connect(&server).await;
    next_frame(&mut a, action("resync")).await;
    next_frame(&mut b, action("resync")).await;
    let (_, task) = api
        .post(
            "/api/v1/tasks",
            json!({ "title": "live", "prompt": "/e2e:clarification" }),
        )
        .await;
    let task_id = task["id"].as_str().unwrap().to_string();
    let session = task["primary_session_id"].as_str().unwrap().to_string();
    send(&mut a, json!({ "type": "request", "id": 1, "action": "subscribe.session", "payload": { "session_id": session } })).await;
    let asked = |v: &Value| {
        v["action"] == "task.status_summary.updated"
            && v["payload"]["task_id"] == task_id.as_str()
            && v["payload"]["status_summary"]["pending_action"] == "clarification"
    };
    next_frame(&mut a, asked).await;
    next_frame(&mut b, asked).await;
    let metrics = server.metrics().await;
    for (name, value) in [
        ("turnstile_websocket_clients", 2.0),
        ("turnstile_active_bundles", 1.0),
    ] {
        assert_eq!(support::metric(&metrics, name), Some(value), "{metrics}");
    }
    assert!(
        metrics.contains("turnstile_http_requests_total"),
        "{metrics}"
    );

    let pending_id = api
        .pending_id_of_kind(&session, "clarification_request")
        .await;
    api.respond(
        &pending_id,
        json!({ "answers": [{ "question_id": "db", "selected_options": ["sqlite"] }] }),
    )
    .await;
    let cleared = |v: &Value| {
        v["action"] == "task.status_summary.updated"
            && v["payload"]["task_id"] == task_id.as_str()
            && v["payload"]["status_summary"]["pending_action"].is_null()
    };
    next_frame(&mut a, cleared).await;
    next_frame(&mut b, cleared).await;
    server.stop().await;
}

both_http!(the_socket_cap_refuses_one_more_and_frees_its_place_on_close);

/// Bounds (spec "Server process"): a server serves a bounded number of sockets. At the cap
/// one more upgrade is refused with 503 (nothing is held for it); a socket that closes gives
/// its place back.
async fn the_socket_cap_refuses_one_more_and_frees_its_place_on_close(url: String) {
    let server = TestServer::start_with(&url, |r| r.max_websocket_clients = 2).await;
    let mut first = connect(&server).await;
    next_frame(&mut first, action("resync")).await;
    let mut second = connect(&server).await;
    next_frame(&mut second, action("resync")).await;
    for _ in 0..3 {
        assert_eq!(
            support::ws_handshake(&server.base, &[("authorization", support::TEST_BEARER)]).await,
            Err(503)
        );
    }
    let metrics = server.metrics().await;
    assert_eq!(
        support::metric(&metrics, "turnstile_websocket_clients"),
        Some(2.0),
        "refused upgrades hold no place: {metrics}"
    );
    first.close(None).await.unwrap();
    support::until("the closed socket's place to be free", async || {
        support::ws_handshake(&server.base, &[("authorization", support::TEST_BEARER)])
            .await
            .is_ok()
    })
    .await;
    drop(second);
    server.stop().await;
}
