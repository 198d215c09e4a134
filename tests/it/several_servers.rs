//! Several servers on one PostgreSQL database. Servers
//! relay their committed events to each other with LISTEN/NOTIFY; a WebSocket client of one
//! server sees what happens on another (P10), and pending-action revisions of different
//! servers order among each other (P9). PostgreSQL only: SQLite is one server by design, and
//! without `TEST_POSTGRES_URL` they fail unless `TURNSTILE_SKIP_POSTGRES=1` (support::postgres_url).

use crate::support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::ws::{Socket, connect, next_frame, send};
use support::{Api, TestServer};
use tokio::sync::Semaphore;

/// Runs `story` on a fresh PostgreSQL database, or says why it did not.
macro_rules! postgres_only {
    ($($story:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $story() {
                let Some(url) = crate::support::postgres_url().await else {
                    return;
                };
                super::$story(url.clone()).await;
                crate::support::drop_postgres(&url).await;
            }
        )+
    };
}

mod on_postgres {
    postgres_only!(
        p10_a_question_on_one_server_reaches_the_clients_of_another_and_clears,
        p9_revisions_of_two_servers_order_by_time_not_by_server,
        p10_an_event_too_large_for_notify_travels_through_the_spill_table,
        p10_a_burst_of_events_reaches_the_other_server_complete_and_in_order,
        p10_a_lost_listener_reconnects_and_its_clients_resync,
        i3_an_answer_given_on_another_server_reaches_the_waiting_agent_once,
        l13_concurrent_responders_on_three_servers_claim_once,
        i4_an_offer_nobody_takes_is_withdrawn_and_the_answer_is_owed_once,
        l19_a_server_starting_up_leaves_the_live_sessions_of_another_alone,
        n_a_prompt_sent_through_another_server_reaches_the_sessions_agent,
        l9_a_killed_servers_question_is_taken_over_and_answered_once,
        l5_an_answer_given_elsewhere_ends_the_superseded_wait_on_the_agents_server,
        l18_an_answer_owed_by_a_server_that_died_before_waking_the_agents_server_is_delivered,
        l18_an_answer_owed_by_a_server_that_stays_dead_is_delivered_by_the_agents_server,
        n6_an_answer_given_elsewhere_cancels_the_superseded_permission_on_the_agents_server,
        l18_a_handed_over_answer_the_agents_server_cannot_record_is_owed_once,
        l15_an_answer_handed_over_to_a_turn_that_ended_is_owed_once,
        l15_a_handed_over_answer_is_not_read_back_after_its_commit,
        p3_a_refresh_on_another_server_keeps_the_queued_prompt_count,
        n_a_paused_server_starts_no_agent_work_for_a_session_taken_over,
        n_a_server_never_launches_an_agent_for_a_live_servers_session,
        n_a_server_that_just_started_forwards_to_the_sessions_server,
        n6_a_permission_answered_on_another_server_reaches_the_waiting_agent,
        n_a_server_whose_session_was_taken_over_stops_its_agent,
        n_a_server_taking_a_session_over_keeps_beating,
        n_a_server_cut_off_from_the_database_stops_its_agents,
        n_a_lone_server_cut_off_from_the_database_keeps_its_agents,
        p10_a_lone_server_sends_no_events_until_another_says_hello,
        p10_a_server_whose_hello_went_unheard_is_found_by_the_heartbeat,
    );
}

/// Server `name` on the database (each its own server id).
async fn server(url: &str, name: &str) -> TestServer {
    TestServer::start_with(url, |c| c.server_id = name.to_string()).await
}

/// Server `name` whose heartbeat, fencing and take-over follow a TTL of `ttl_ms`.
async fn server_with_ttl(url: &str, name: &str, ttl_ms: u64) -> TestServer {
    TestServer::start_with(url, |c| {
        c.server_id = name.to_string();
        c.server_ttl = std::time::Duration::from_millis(ttl_ms);
    })
    .await
}

async fn resynced(server: &TestServer) -> Socket {
    let mut ws = connect(server).await;
    next_frame(&mut ws, |v| v["action"] == "resync").await;
    ws
}

fn summary_of(task: &str, pending: Value) -> impl Fn(&Value) -> bool {
    let task = task.to_string();
    move |v| {
        v["action"] == "task.status_summary.updated"
            && v["payload"]["task_id"] == task.as_str()
            && v["payload"]["status_summary"]["pending_action"] == pending
    }
}

/// The agent's transcript lines of `session` that start with one of `prefixes` (how many
/// times an answer reached the agent).
async fn lines_starting(api: &Api, session: &str, prefixes: &[&str]) -> Vec<String> {
    api.agent_lines(session)
        .await
        .into_iter()
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .collect()
}

const LIVE: &str = "You answered:";
const RESUMED: &str = "Thanks, continuing with your answer:";

/// (epoch, sequence) of a session snapshot, as clients compare them (P9).
fn revision(session: &Value) -> (u64, u64) {
    let r = &session["pending_action_revision"];
    (
        r["epoch"].as_str().unwrap().parse().unwrap(),
        r["sequence"].as_u64().unwrap(),
    )
}

async fn p10_a_question_on_one_server_reaches_the_clients_of_another_and_clears(url: String) {
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let (api_a, api_b) = (Api::new(&a.base), Api::new(&b.base));
    let mut on_b = resynced(&b).await;

    // The agent runs on A and asks; B's client sees the task wait for an answer.
    let (task, session) = api_a.start_task("/e2e:clarification").await;
    next_frame(&mut on_b, summary_of(&task, json!("clarification"))).await;
    let listed = api_b.get(&format!("/api/v1/tasks/{task}/sessions")).await.1;
    assert_eq!(listed["sessions"][0]["pending_action"], "clarification");

    // Answered where the agent waits: it gets the answer once, and B's client sees it clear.
    let pending = api_a.pending_id(&session).await;
    let (status, body) = api_a
        .respond(
            &pending,
            json!({ "answers": [{ "question_id": "db", "selected_options": ["sqlite"] }] }),
        )
        .await;
    assert_eq!((status.as_u16(), &body["claimed"]), (200, &json!(true)));
    next_frame(&mut on_b, summary_of(&task, Value::Null)).await;
    api_a.wait_turns_done(&session, 1).await;
    let answered = lines_starting(&api_a, &session, &[LIVE]).await;
    assert_eq!(
        answered.len(),
        1,
        "the agent received the answer exactly once (I3)"
    );
    b.stop().await;
    a.stop().await;
}

/// Server B starts after A, so B's epoch is greater. A snapshot B reads after A's event must
/// still order after it, or B's clients would drop B's fresh reads as older than A's events.
async fn p9_revisions_of_two_servers_order_by_time_not_by_server(url: String) {
    let early = server(&url, "a").await;
    let late = server(&url, "b").await;
    assert!(late.state.epoch > early.state.epoch);
    let mut on_early = resynced(&early).await;

    let (task, session) = Api::new(&late.base).start_task("/e2e:clarification").await;
    let relayed = next_frame(&mut on_early, |v| {
        v["action"] == "session.state_changed"
            && v["payload"]["session"]["id"] == session.as_str()
            && v["payload"]["session"]["pending_action"] == "clarification"
    })
    .await;
    let read_later = Api::new(&early.base)
        .get(&format!("/api/v1/tasks/{task}/sessions"))
        .await
        .1;
    assert!(
        revision(&read_later["sessions"][0]) > revision(&relayed["payload"]["session"]),
        "a later read orders after an earlier event: {} vs {}",
        read_later["sessions"][0]["pending_action_revision"],
        relayed["payload"]["session"]["pending_action_revision"]
    );
    late.stop().await;
    early.stop().await;
}

async fn p10_an_event_too_large_for_notify_travels_through_the_spill_table(url: String) {
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let api_a = Api::new(&a.base);
    // An idle session: the next prompt starts a turn at once and its row is written.
    let (_, session) = api_a.start_task("hello").await;
    api_a.wait_turns_done(&session, 1).await;
    let mut on_b = resynced(&b).await;
    send(
        &mut on_b,
        json!({ "type": "request", "id": 1, "action": "subscribe.session", "payload": { "session_id": session } }),
    )
    .await;
    next_frame(&mut on_b, |v| v["id"] == 1).await;

    // Far beyond NOTIFY's 8,000 bytes.
    let long = "x".repeat(20_000);
    let (status, _) = api_a
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": long }),
        )
        .await;
    assert!(status.is_success(), "{status}");
    let added = next_frame(&mut on_b, |v| {
        v["action"] == "session.message.added"
            && v["payload"]["message"]["author"] == "user"
            && v["payload"]["message"]["content"]
                .as_str()
                .is_some_and(|c| c.len() == 20_000)
    })
    .await;
    assert_eq!(added["payload"]["message"]["session_id"], session.as_str());
    b.stop().await;
    a.stop().await;
}

/// P10: a burst of events — pairs of identical ones (`NOTIFY` keeps one of two identical
/// payloads sent in one transaction), and now and then one too large for `NOTIFY` — reaches
/// another server complete and in publication order.
async fn p10_a_burst_of_events_reaches_the_other_server_complete_and_in_order(url: String) {
    const BURST: usize = 500;
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let mut on_b = b.state.hub.subscribe();
    let payload = |i: usize| {
        if i.is_multiple_of(97) {
            json!({ "n": i, "pad": "x".repeat(9_000) })
        } else {
            json!({ "n": i / 2 })
        }
    };
    for i in 0..BURST {
        a.state.hub.publish(turnstile::server::events::Event::new(
            "test.burst",
            payload(i),
        ));
    }
    for i in 0..BURST {
        let e = support::next_event(&mut on_b, |e| e.action == "test.burst").await;
        assert!(e.remote, "relayed from server a");
        assert_eq!(*e.payload, payload(i), "event {i} of the burst");
    }
    b.stop().await;
    a.stop().await;
}

async fn p10_a_lost_listener_reconnects_and_its_clients_resync(url: String) {
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let api_b = Api::new(&b.base);
    let listening = format!(
        "turnstile_event_listener_connected{{server_id=\"{}\"}} 1",
        b.state.runtime.config.server_id
    );
    assert!(b.metrics().await.contains(&listening));
    assert_eq!(
        api_b.get("/healthz").await,
        (reqwest::StatusCode::OK, json!({ "status": "ok" }))
    );
    let mut on_b = resynced(&b).await;

    // Cut B's listener connection from the database side, and keep it out for a while: B
    // answers /healthz with 503 until it is back.
    let cut = CutOff::start_ending(
        &url,
        Backends::ListenerOf(&b.state.runtime.config.server_id),
    )
    .await;
    support::until("B to report its listener down", async || {
        api_b.get("/healthz").await
            == (
                reqwest::StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "status": "degraded",
                    "server_id": b.state.runtime.config.server_id,
                    "listener": "reconnecting",
                }),
            )
    })
    .await;
    assert!(b.metrics().await.contains(&listening.replace("} 1", "} 0")));
    cut.end().await;
    let resync = next_frame(&mut on_b, |v| v["action"] == "resync").await;
    assert_eq!(resync["payload"]["reason"], "listener");

    // Back in the relay: what A does next reaches B's client.
    let (status, created) = Api::new(&a.base)
        .post("/api/v1/tasks", json!({ "title": "after the cut" }))
        .await;
    assert!(status.is_success(), "{status} {created}");
    next_frame(&mut on_b, |v| {
        v["action"] == "task.created" && v["payload"]["task"]["title"] == "after the cut"
    })
    .await;
    assert!(b.metrics().await.contains(&listening));
    assert_eq!(api_b.get("/healthz").await.1, json!({ "status": "ok" }));
    b.stop().await;
    a.stop().await;
}

fn answer(option: &str) -> Value {
    json!({ "answers": [{ "question_id": "db", "selected_options": [option] }] })
}

/// Three servers: the agent waits on A, a client watches B, the answer is given on C. The
/// answer reaches the waiting call on A (no owed resume, no agent on C) exactly once.
async fn i3_an_answer_given_on_another_server_reaches_the_waiting_agent_once(url: String) {
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let c = server(&url, "c").await;
    let api_a = Api::new(&a.base);
    let mut on_b = resynced(&b).await;
    let (task, session) = api_a.start_task("/e2e:clarification").await;
    next_frame(&mut on_b, summary_of(&task, json!("clarification"))).await;
    let pending = api_a.pending_id(&session).await;
    let mut on_a = a.state.hub.subscribe();

    let (status, body) = Api::new(&c.base)
        .respond(&pending, answer("postgresql"))
        .await;
    assert_eq!((status.as_u16(), &body["claimed"]), (200, &json!(true)));
    // L7 on the agent's server: the session runs again once, with the hand-off's delivery
    // record (decision 0032), before the turn ends.
    let moved = support::next_event(&mut on_a, |e| {
        e.session_id.as_deref() == Some(session.as_str()) && e.action == "session.state_changed"
    })
    .await;
    assert_eq!(
        moved.payload["session"]["state"], "running",
        "{}",
        moved.payload
    );
    assert_eq!(moved.payload["session"]["pending_action"], Value::Null);
    next_frame(&mut on_b, summary_of(&task, Value::Null)).await;
    let turns = api_a.wait_turns_done(&session, 1).await;
    assert_eq!(
        turns.len(),
        1,
        "delivered live in the asking turn, not as a resume: {turns:?}"
    );
    let answered = lines_starting(&api_a, &session, &[LIVE, RESUMED]).await;
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert!(
        answered[0].starts_with(LIVE),
        "live, not resumed: {answered:?}"
    );
    assert!(answered[0].contains("postgresql"), "{answered:?}");
    assert_eq!(c.state.runtime.agents.count(), 0, "C started no agent");
    let bundle = Api::new(&b.base)
        .get(&format!("/api/v1/clarifications/{pending}"))
        .await
        .1;
    assert_eq!(bundle["status"], "answered");
    c.stop().await;
    b.stop().await;
    a.stop().await;
}

/// L13 across servers: responders on A, B and C at once; one claim wins.
async fn l13_concurrent_responders_on_three_servers_claim_once(url: String) {
    let servers = [
        server(&url, "a").await,
        server(&url, "b").await,
        server(&url, "c").await,
    ];
    let api_a = Api::new(&servers[0].base);
    let (_, session) = api_a.start_task("/e2e:clarification").await;
    let pending = api_a.pending_id(&session).await;
    let options = ["postgresql", "sqlite", "mongodb"];
    let responses = futures::future::join_all(servers.iter().zip(options).map(|(s, o)| {
        let api = Api::new(&s.base);
        let path = format!("/api/v1/clarifications/{pending}/respond");
        async move { api.post(&path, answer(o)).await }
    }))
    .await;
    let winners: Vec<_> = responses
        .iter()
        .filter(|(status, body)| status.as_u16() == 200 && body["claimed"] == true)
        .collect();
    assert_eq!(winners.len(), 1, "{responses:?}");
    let chosen = winners[0].1["response"]["answers"][0]["selected_options"][0]
        .as_str()
        .unwrap()
        .to_string();
    api_a.wait_turns_done(&session, 1).await;
    let answered = lines_starting(&api_a, &session, &[LIVE, RESUMED]).await;
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert!(answered[0].contains(&chosen), "{answered:?}");
    for s in servers {
        s.stop().await;
    }
}

/// The server holding the call is too slow to take the offer (a test gate holds it): the
/// offer is withdrawn and the answer becomes an owed resume. When the holder gets to the offer
/// it finds it withdrawn and ends the call; the agent ends its turn and the server that runs
/// the session's agent (A) delivers the resume — once (L17, I4). C starts no agent.
async fn i4_an_offer_nobody_takes_is_withdrawn_and_the_answer_is_owed_once(url: String) {
    let a = server(&url, "a").await;
    let c = server(&url, "c").await;
    let api_a = Api::new(&a.base);
    let (_, session) = api_a.start_task("/e2e:clarification").await;
    let pending = api_a.pending_id(&session).await;
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    a.state
        .hooks
        .set(turnstile::server::hooks::Point::AcceptOffer, move |_| {
            let g = g.clone();
            async move { g.acquire().await.expect("gate").forget() }
        });

    let (status, body) = Api::new(&c.base).respond(&pending, answer("sqlite")).await;
    assert_eq!((status.as_u16(), &body["claimed"]), (200, &json!(true)));
    gate.add_permits(1);
    let turns = api_a
        .wait_for(
            &format!("/api/v1/sessions/{session}/turns"),
            "the owed resume to run",
            |v| {
                v["turns"].as_array().is_some_and(|t| {
                    t.len() >= 2 && t.iter().all(|t| t["completed_at"].is_string())
                })
            },
        )
        .await;
    assert_eq!(
        turns["turns"].as_array().unwrap().len(),
        2,
        "one resume: {turns}"
    );
    let delivered = lines_starting(&api_a, &session, &[LIVE, RESUMED]).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert_eq!(c.state.runtime.agents.count(), 0, "C started no agent");
    c.stop().await;
    a.stop().await;
}

/// A session's agent runs on the server that launched it: prompts and cancels sent through
/// another server go there, so the session never has two agents.
async fn n_a_prompt_sent_through_another_server_reaches_the_sessions_agent(url: String) {
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let api_a = Api::new(&a.base);
    let (_, session) = api_a.start_task("hello").await;
    api_a.wait_turns_done(&session, 1).await;

    let (status, body) = Api::new(&b.base)
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "again" }),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    assert_eq!(body["queued"], false, "{body}");
    api_a.wait_turns_done(&session, 2).await;
    let lines = api_a.agent_lines(&session).await;
    assert_eq!(
        lines.iter().filter(|l| *l == "Echo: again").count(),
        1,
        "{lines:?}"
    );
    assert_eq!(b.state.runtime.agents.count(), 0, "B started no agent");
    assert_eq!(a.state.runtime.agents.count(), 1);
    // Bad input is refused where it arrives, with the same error.
    let (status, _) = Api::new(&b.base)
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "" }),
        )
        .await;
    assert_eq!(status.as_u16(), 400);
    b.stop().await;
    a.stop().await;
}

/// Start-up recovery completes open turns, detaches questions and cancels permissions of the
/// sessions that were running when the server stopped. Sessions whose agent runs on another
/// live server are that server's: a second server starting up leaves them as they are.
async fn l19_a_server_starting_up_leaves_the_live_sessions_of_another_alone(url: String) {
    let a = server(&url, "a").await;
    let api_a = Api::new(&a.base);
    let (_, asking) = api_a.start_task("/e2e:clarification").await;
    let pending = api_a.pending_id(&asking).await;
    let (_, permitting) = api_a.start_task("/e2e:permission").await;
    api_a.pending_id(&permitting).await;

    let b = server(&url, "b").await;
    let bundle = Api::new(&b.base)
        .get(&format!("/api/v1/clarifications/{pending}"))
        .await
        .1;
    assert_eq!(
        (&bundle["status"], &bundle["detached"], &bundle["active"]),
        (&json!("pending"), &json!(false), &json!(true)),
        "{bundle}"
    );
    let turns = api_a
        .get(&format!("/api/v1/sessions/{asking}/turns"))
        .await
        .1;
    assert!(turns["turns"][0]["completed_at"].is_null(), "{turns}");
    let permission = api_a
        .messages(&permitting)
        .await
        .into_iter()
        .find(|m| m["kind"] == "permission_request")
        .unwrap();
    let p = api_a
        .get(&format!(
            "/api/v1/permissions/{}",
            permission["pending_id"].as_str().unwrap()
        ))
        .await
        .1;
    assert_eq!(p["status"], "pending", "{p}");

    // And the waiting agent still gets its answer live.
    let (status, body) = api_a.respond(&pending, answer("sqlite")).await;
    assert_eq!((status.as_u16(), &body["claimed"]), (200, &json!(true)));
    assert_eq!(api_a.wait_turns_done(&asking, 1).await.len(), 1);
    b.stop().await;
    a.stop().await;
}

/// A server killed (SIGKILL) while its agent waits for an answer. Once it has missed its
/// heartbeats for the server TTL, another server takes the session over: the question is
/// detached (L9) and answerable there, and the answer is delivered once, by the agent that
/// server relaunches (`session/load`, L17/L18). Its pending permission request is cancelled
/// (N6): its agent is gone.
async fn l9_a_killed_servers_question_is_taken_over_and_answered_once(url: String) {
    let data = support::temp_dir("server-a");
    let a =
        support::BinaryServer::spawn(&url, &data, &["--server-id", "a", "--server-ttl", "2"], &[])
            .await;
    let b = server_with_ttl(&url, "b", 2_000).await;
    let (_, session) = a.api.start_task("/e2e:clarification").await;
    let pending = a.api.pending_id(&session).await;
    let (permitting_task, permitting) = a.api.start_task("/e2e:permission").await;
    let permission = a.api.pending_id(&permitting).await;
    a.signal(libc::SIGKILL);

    let api_b = Api::new(&b.base);
    support::until("B to take the question over", async || {
        api_b
            .get(&format!("/api/v1/clarifications/{pending}"))
            .await
            .1["detached"]
            == true
    })
    .await;
    // N6: the killed agent's permission request is cancelled; nothing waits for it.
    support::until(
        "the killed agent's permission to be cancelled",
        async || {
            api_b
                .get(&format!("/api/v1/permissions/{permission}"))
                .await
                .1["status"]
                == "cancelled"
        },
    )
    .await;
    let (status, _) = api_b
        .post(
            &format!("/api/v1/permissions/{permission}/respond"),
            json!({ "option_id": "allow" }),
        )
        .await;
    assert_eq!(status.as_u16(), 409);
    api_b
        .wait_for(
            &format!("/api/v1/tasks/{permitting_task}"),
            "its task to show no pending action",
            |t| t["status_summary"].is_object() && t["status_summary"]["pending_action"].is_null(),
        )
        .await;
    let (status, body) = api_b.respond(&pending, answer("sqlite")).await;
    assert_eq!((status.as_u16(), &body["claimed"]), (200, &json!(true)));
    let turns = api_b
        .wait_for(
            &format!("/api/v1/sessions/{session}/turns"),
            "the resume on B",
            |v| {
                v["turns"].as_array().is_some_and(|t| {
                    t.len() == 2 && t.iter().all(|t| t["completed_at"].is_string())
                })
            },
        )
        .await;
    assert_eq!(turns["turns"].as_array().unwrap().len(), 2, "{turns}");
    let delivered = lines_starting(&api_b, &session, &[LIVE, RESUMED]).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert!(delivered[0].starts_with(RESUMED), "{delivered:?}");
    assert_eq!(b.state.runtime.agents.count(), 1, "B relaunched the agent");
    b.stop().await;
    drop(a);
}

/// A mock-agent script: a question the agent stops waiting for after a second (it is
/// detached), then `then`, in the same turn. (Much shorter, and the call may be cancelled
/// before the server has written its question at all.)
fn detached_then(then: &str) -> String {
    let q = json!({ "questions": [{ "id": "db", "prompt": "Which database first?", "options": [{ "id": "sqlite", "label": "SQLite" }, { "id": "postgresql", "label": "PostgreSQL" }] }] });
    format!("e2e:ask-timeout(1000, {q})\n{then}")
}

/// Starts `script` on A and waits until its first question is detached and the agent waits
/// on A for what comes next (`waits_on_a`); returns the session and the detached question.
async fn detached_and_waiting(
    a: &TestServer,
    script: &str,
    waits_on_a: impl Fn(&TestServer, &[turnstile::server::repo::BundleRecord]) -> bool,
) -> (String, String) {
    let api_a = Api::new(&a.base);
    let (_, session) = api_a.start_task(script).await;
    let repo = a.state.repo.clone();
    let mut detached = String::new();
    support::until("a detached question and a wait on A", async || {
        let bundles = repo.session_bundles(&session).await.unwrap();
        match bundles.iter().find(|b| b.detached) {
            Some(b) => detached = b.pending_id.clone(),
            None => return false,
        }
        waits_on_a(a, &bundles)
    })
    .await;
    (session, detached)
}

/// The agent waits on A for its second question, and that question is written: a call's
/// wait is registered before its question is (L15), and a question written only after the
/// first one's answer is owed finds itself superseded and never waits.
fn waits_for_its_question(
    a: &TestServer,
    bundles: &[turnstile::server::repo::BundleRecord],
) -> bool {
    bundles.iter().any(|b| {
        !b.detached
            && b.status == turnstile::model::BundleStatus::Pending
            && a.state.runtime.waiters.contains(&b.pending_id)
    })
}

/// Answers `pending` through `via`: claimed, and the agent on `a` gets it once, as an owed
/// resume in a second turn.
async fn answered_and_resumed_once(a: &TestServer, via: &TestServer, session: &str, pending: &str) {
    let (status, body) = Api::new(&via.base).respond(pending, answer("sqlite")).await;
    assert_eq!((status.as_u16(), &body["claimed"]), (200, &json!(true)));
    let api_a = Api::new(&a.base);
    let turns = api_a.wait_turns_done(session, 2).await;
    assert_eq!(turns.len(), 2, "the asking turn and one resume: {turns:?}");
    let delivered = lines_starting(&api_a, session, &[LIVE, RESUMED]).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert!(delivered[0].starts_with(RESUMED), "{delivered:?}");
}

/// The agent on A asked a question it stopped waiting for, then a second one it waits for.
/// The first is answered on B: its resume is owed, so the second question is superseded
/// (L5) — the wait for it, held on A, must end, or the turn never ends and the resume is
/// never delivered. Delivered once, on A.
async fn l5_an_answer_given_elsewhere_ends_the_superseded_wait_on_the_agents_server(url: String) {
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let live = json!({ "questions": [{ "id": "next", "prompt": "And then?", "options": [{ "id": "x", "label": "X" }, { "id": "y", "label": "Y" }] }] });
    let (session, detached) = detached_and_waiting(
        &a,
        &detached_then(&format!("e2e:ask({live})")),
        waits_for_its_question,
    )
    .await;

    answered_and_resumed_once(&a, &b, &session, &detached).await;
    assert_eq!(b.state.runtime.agents.count(), 0, "B started no agent");
    b.stop().await;
    a.stop().await;
}

/// As above, but B dies right after the answer became owed (accepted, L18), before it woke A:
/// A's agent still waits on the superseded question. B starting again wakes the server
/// running the session (decision 0036), whose wait ends there, and the resume is delivered
/// once, on A.
async fn l18_an_answer_owed_by_a_server_that_died_before_waking_the_agents_server_is_delivered(
    url: String,
) {
    owed_by_a_server_that_died(&url, true).await;
}

/// As above, but B never starts again: A's heartbeat finds the owed resume of its own session
/// (decision 0036).
async fn l18_an_answer_owed_by_a_server_that_stays_dead_is_delivered_by_the_agents_server(
    url: String,
) {
    owed_by_a_server_that_died(&url, false).await;
}

/// B accepts an answer for the session whose agent runs on A and dies before it wakes A;
/// `restart`: B starts again (else A's heartbeat, every 100 ms here, has to find it).
async fn owed_by_a_server_that_died(url: &str, restart: bool) {
    use turnstile::server::hooks::Point;
    // Restarting, A's heartbeat (a third of its TTL) must not find the owed resume first.
    let a = server_with_ttl(url, "a", if restart { 600_000 } else { 300 }).await;
    let b = server(url, "b").await;
    let live = json!({ "questions": [{ "id": "next", "prompt": "And then?", "options": [{ "id": "x", "label": "X" }, { "id": "y", "label": "Y" }] }] });
    let (session, detached) = detached_and_waiting(
        &a,
        &detached_then(&format!("e2e:ask({live})")),
        waits_for_its_question,
    )
    .await;
    // B holds the answer at `Owed` until it is killed there (the held task unwinds, as a
    // killed process runs nothing after the point it was at).
    let (reached, gate) = (
        std::sync::Arc::new(tokio::sync::Semaphore::new(0)),
        std::sync::Arc::new(tokio::sync::Semaphore::new(0)),
    );
    let (r, g) = (reached.clone(), gate.clone());
    b.state.hooks.set(Point::Owed, move |_| {
        let (r, g) = (r.clone(), g.clone());
        async move {
            r.add_permits(1);
            if g.acquire().await.is_err() {
                std::panic::resume_unwind(Box::new("killed at Owed"));
            }
        }
    });
    let api_b = Api::new(&b.base);
    let url_b = format!("{}/api/v1/clarifications/{detached}/respond", api_b.base);
    let respond = tokio::spawn(async move {
        api_b
            .client
            .post(url_b)
            .json(&answer("sqlite"))
            .send()
            .await
    });
    reached.acquire().await.unwrap().forget();
    assert_eq!(
        a.state.repo.owed_resumes(&session).await.unwrap().len(),
        1,
        "accepted: owed in the database"
    );
    b.stop().await;
    gate.close();
    assert!(
        respond.await.unwrap().is_err(),
        "the request died with its server"
    );
    let b = if restart {
        assert_eq!(
            a.state.runtime.waiters.len(),
            1,
            "nobody woke A: its agent still waits on the superseded question"
        );
        Some(server(url, "b").await)
    } else {
        None
    };
    let api_a = Api::new(&a.base);
    let turns = api_a.wait_turns_done(&session, 2).await;
    assert_eq!(turns.len(), 2, "the asking turn and one resume: {turns:?}");
    let delivered = lines_starting(&api_a, &session, &[LIVE, RESUMED]).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert!(delivered[0].starts_with(RESUMED), "{delivered:?}");
    if let Some(b) = b {
        assert_eq!(b.state.runtime.agents.count(), 0, "B started no agent");
        b.stop().await;
    }
    a.stop().await;
}

/// As above with a permission request after the detached question: the answer given on B
/// supersedes it (N6). It is cancelled where the agent waits for it (A), so the turn ends and
/// the resume is delivered once.
async fn n6_an_answer_given_elsewhere_cancels_the_superseded_permission_on_the_agents_server(
    url: String,
) {
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let (session, detached) =
        detached_and_waiting(&a, &detached_then("e2e:permission()"), |a, _| {
            a.state.runtime.permissions.len() == 1
        })
        .await;

    answered_and_resumed_once(&a, &b, &session, &detached).await;
    let permission = a
        .state
        .repo
        .pending_permission_requests(&session)
        .await
        .unwrap();
    assert!(permission.is_empty(), "{permission:?}");
    b.stop().await;
    a.stop().await;
}

/// The server holding the waiting call (A) cannot record the delivery of an answer given on B
/// (an injected failure where it accepts the offer). It must not hand the answer to the agent
/// unrecorded — a restart would reopen a question the agent already used (L19). It ends the
/// call instead; B withdraws its offer and the answer becomes an owed resume: delivered once,
/// and still answered after A restarts (L18, I4).
async fn l18_a_handed_over_answer_the_agents_server_cannot_record_is_owed_once(url: String) {
    use turnstile::server::hooks::Point;
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let api_a = Api::new(&a.base);
    let (_, session) = api_a.start_task("/e2e:clarification").await;
    let pending = api_a.pending_id(&session).await;
    a.state.hooks.fail(Point::Finalize, 1);

    answered_and_resumed_once(&a, &b, &session, &pending).await;
    assert_eq!(
        a.state.hooks.armed(Point::Finalize),
        0,
        "the failure was hit"
    );

    a.stop().await;
    let a = server(&url, "a").await;
    let api_a = Api::new(&a.base);
    let bundle = api_a
        .get(&format!("/api/v1/clarifications/{pending}"))
        .await
        .1;
    assert_eq!(bundle["status"], "answered", "{bundle}");
    let delivered = lines_starting(&api_a, &session, &[LIVE, RESUMED]).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    b.stop().await;
    a.stop().await;
}

/// A pause at `point` on `server`: `arrived` gets a permit when something reaches it, which
/// then waits for a permit on `go`.
fn pause_at(
    server: &TestServer,
    point: turnstile::server::hooks::Point,
) -> (Arc<Semaphore>, Arc<Semaphore>) {
    let (arrived, go) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let (a, g) = (arrived.clone(), go.clone());
    server.state.hooks.set(point, move |_| {
        let (a, g) = (a.clone(), g.clone());
        async move {
            a.add_permits(1);
            g.acquire().await.expect("gate").forget();
        }
    });
    (arrived, go)
}

/// L15 across servers: an answer given on B was taken by A for the call waiting there; before A
/// recorded the delivery the agent gave the call up and ended its turn. A recorded it anyway
/// (no turn-ended guard on the hand-over), handed the answer to a call nobody reads, and B
/// answered 200: lost. The hand-over has the local delivery's guard: A records nothing, B
/// withdraws its offer and owes the answer, which the agent gets once as its next prompt.
/// Forced: A is held after taking the call until the turn ended; B is held before it withdraws
/// until A decided.
async fn l15_an_answer_handed_over_to_a_turn_that_ended_is_owed_once(url: String) {
    use turnstile::server::hooks::Point;
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let api_a = Api::new(&a.base);
    let (taken, take) = pause_at(&a, Point::Accepting);
    let decided = Arc::new(Semaphore::new(0));
    {
        let decided = decided.clone();
        a.state.hooks.set(Point::Accepted, move |_| {
            decided.add_permits(1);
            async {}
        });
    }
    let (withdrawing, withdraw) = pause_at(&b, Point::Withdraw);
    let (_, session) = api_a
        .start_task(r#"e2e:ask-timeout(1500, {"questions": [{"id": "db", "prompt": "Which database?", "options": [{"id": "postgresql", "label": "PostgreSQL"}, {"id": "sqlite", "label": "SQLite"}]}]})
e2e:message("after")"#)
        .await;
    let pending = api_a.pending_id(&session).await;
    let answering = {
        let api_b = Api::new(&b.base);
        let pending = pending.clone();
        tokio::spawn(async move { api_b.respond(&pending, answer("sqlite")).await })
    };
    taken.acquire().await.unwrap().forget();
    // The agent gives the call up and ends its turn while A holds the answer.
    api_a.wait_turns_done(&session, 1).await;
    withdrawing.acquire().await.unwrap().forget();
    take.add_permits(1);
    decided.acquire().await.unwrap().forget();
    withdraw.add_permits(1);
    let (status, body) = answering.await.unwrap();
    assert_eq!(
        (status.as_u16(), &body["claimed"]),
        (200, &json!(true)),
        "{body}"
    );
    let turns = api_a.wait_turns_done(&session, 2).await;
    assert_eq!(turns.len(), 2, "{turns:?}");
    let delivered = lines_starting(&api_a, &session, &[LIVE, RESUMED]).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert!(delivered[0].starts_with(RESUMED), "{delivered:?}");
    b.stop().await;
    a.stop().await;
}

/// L15 across servers: after A recorded a handed-over answer's delivery it read the bundle back;
/// when that read failed it gave up, the waiting call never got the answer, and B answered 200.
/// Nothing is read back after the commit now (the statement returns the row). Forced: the
/// questions' table is unreadable from the moment A took the call until it decided.
async fn l15_a_handed_over_answer_is_not_read_back_after_its_commit(url: String) {
    use turnstile::server::hooks::Point;
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let api_a = Api::new(&a.base);
    let (taken, take) = pause_at(&a, Point::Accepting);
    let decided = Arc::new(Semaphore::new(0));
    {
        let decided = decided.clone();
        a.state.hooks.set(Point::Accepted, move |_| {
            decided.add_permits(1);
            async {}
        });
    }
    let (_, session) = api_a.start_task("/e2e:clarification").await;
    let pending = api_a.pending_id(&session).await;
    let answering = {
        let api_b = Api::new(&b.base);
        let pending = pending.clone();
        tokio::spawn(async move { api_b.respond(&pending, answer("sqlite")).await })
    };
    taken.acquire().await.unwrap().forget();
    support::raw_exec(
        &url,
        "ALTER TABLE clarification_questions RENAME TO questions_away",
    )
    .await;
    take.add_permits(1);
    decided.acquire().await.unwrap().forget();
    support::raw_exec(
        &url,
        "ALTER TABLE questions_away RENAME TO clarification_questions",
    )
    .await;
    let (status, body) = answering.await.unwrap();
    assert_eq!(
        (status.as_u16(), &body["claimed"]),
        (200, &json!(true)),
        "{body}"
    );
    let turns = api_a.wait_turns_done(&session, 1).await;
    assert_eq!(turns.len(), 1, "live, in the asking turn: {turns:?}");
    let delivered = lines_starting(&api_a, &session, &[LIVE, RESUMED]).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert!(delivered[0].starts_with(LIVE), "{delivered:?}");
    b.stop().await;
    a.stop().await;
}

/// P3: prompts queue on the server that runs the session; a full refresh of the task's summary
/// on another server wrote that server's own count (0) over them. The count is the session's,
/// stored, so every server writes the same; the queue dies with its server, and so does the
/// count.
async fn p3_a_refresh_on_another_server_keeps_the_queued_prompt_count(url: String) {
    use turnstile::server::summary::projector::{Scope, refresh_task};
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let api_a = Api::new(&a.base);
    let (task, session) = api_a.start_task("e2e:delay(60000)").await;
    api_a
        .wait_for(&format!("/api/v1/tasks/{task}/sessions"), "running", |v| {
            v["sessions"][0]["state"] == "running"
        })
        .await;
    let (status, body) = api_a
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "e2e:message(\"later\")" }),
        )
        .await;
    assert_eq!(
        (status.as_u16(), &body["queued"]),
        (200, &json!(true)),
        "{body}"
    );
    let queued = |n: u64| move |t: &Value| t["status_summary"]["queued_prompt_count"] == json!(n);
    api_a
        .wait_for(&format!("/api/v1/tasks/{task}"), "one queued", queued(1))
        .await;
    let refreshed = refresh_task(&b.state, &task, Scope::Full).await.unwrap();
    assert_eq!(refreshed.body.queued_prompt_count, 1, "{refreshed:?}");
    // The queue dies with its server: after a restart the count is 0.
    a.stop().await;
    let a = server(&url, "a").await;
    Api::new(&a.base)
        .wait_for(&format!("/api/v1/tasks/{task}"), "none queued", queued(0))
        .await;
    b.stop().await;
    a.stop().await;
}

/// A server that has just started knows which server runs a session as well as one that ran
/// for days (the database says, not what it has heard over the bridge): the prompt it gets
/// first thing goes to the session's agent, not to a second one.
async fn n_a_server_that_just_started_forwards_to_the_sessions_server(url: String) {
    let a = server(&url, "a").await;
    let api_a = Api::new(&a.base);
    let (_, session) = api_a.start_task("hello").await;
    api_a.wait_turns_done(&session, 1).await;

    let b = server(&url, "b").await;
    let (status, body) = Api::new(&b.base)
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "again" }),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    api_a.wait_turns_done(&session, 2).await;
    assert_eq!(b.state.runtime.agents.count(), 0, "B started no agent");
    assert_eq!(a.state.runtime.agents.count(), 1);
    b.stop().await;
    a.stop().await;
}

/// N6 across servers: the agent on A asks for a permission; the user answers it on B. The
/// answer reaches A's waiting agent (not 409 "its agent is gone"), once, and is recorded.
async fn n6_a_permission_answered_on_another_server_reaches_the_waiting_agent(url: String) {
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let api_a = Api::new(&a.base);
    let (_, session) = api_a.start_task("/e2e:permission").await;
    let permission = api_a.pending_id(&session).await;

    let api_b = Api::new(&b.base);
    let (status, body) = api_b
        .post(
            &format!("/api/v1/permissions/{permission}/respond"),
            json!({ "option_id": "allow" }),
        )
        .await;
    assert_eq!(status.as_u16(), 200, "{body}");
    assert_eq!(body["status"], "selected", "{body}");
    api_a.wait_turns_done(&session, 1).await;
    assert!(a.state.runtime.permissions.is_empty());
    // Answered once: a second answer, on either server, is a conflict.
    for api in [&api_a, &api_b] {
        let (status, _) = api
            .post(
                &format!("/api/v1/permissions/{permission}/respond"),
                json!({ "option_id": "allow" }),
            )
            .await;
        assert_eq!(status.as_u16(), 409);
    }
    b.stop().await;
    a.stop().await;
}

/// One agent per session: A was paused (its heartbeat stalled, its agent and worker went on)
/// long enough for B to take the session over; then A's turn ended and A went to deliver the
/// answer owed to its agent. A's claim is fenced by B's takeover (a new epoch): A's dispatch is
/// refused, A stops its agent, and B delivers the answer, once. Forced: A's heartbeat and its
/// turn's end are held until B took the session; B is held until A decided.
async fn n_a_paused_server_starts_no_agent_work_for_a_session_taken_over(url: String) {
    use turnstile::server::hooks::Point;
    let a = server_with_ttl(&url, "a", 600).await;
    let api_a = Api::new(&a.base);
    let (ending, end) = pause_at(&a, Point::StepGuard);
    let (_, session) = api_a.start_task(&detached_then("e2e:delay(500)")).await;
    let pending = api_a.pending_id(&session).await;
    api_a
        .wait_for(
            &format!("/api/v1/clarifications/{pending}"),
            "detached",
            |b| b["detached"] == true,
        )
        .await;
    let (status, body) = api_a.respond(&pending, answer("sqlite")).await;
    assert_eq!(
        (status.as_u16(), &body["claimed"]),
        (200, &json!(true)),
        "{body}"
    );
    // A's turn ends (held before it delivers what is owed); A stops beating.
    ending.acquire().await.unwrap().forget();
    let (_beating, _beat) = pause_at(&a, Point::Beat);
    let b = server_with_ttl(&url, "b", 600).await;
    let (taking, take) = pause_at(&b, Point::TakingOver);
    taking.acquire().await.unwrap().forget();
    // B owns the session now; A goes on and tries to hand its agent the answer.
    a.state.hooks.clear(Point::StepGuard);
    end.add_permits(1);
    support::until("A to stop its agent for the session B owns", async || {
        a.state.runtime.agents.count() == 0 && a.state.runtime.owned.is_empty()
    })
    .await;
    assert_eq!(
        lines_starting(&api_a, &session, &[RESUMED]).await.len(),
        0,
        "A handed nothing over"
    );
    b.state.hooks.clear(Point::TakingOver);
    take.add_permits(1);
    let api_b = Api::new(&b.base);
    api_b.wait_turns_done(&session, 2).await;
    assert_eq!(
        lines_starting(&api_b, &session, &[RESUMED]).await.len(),
        1,
        "I4"
    );
    assert_eq!(b.state.runtime.owned.keys(), vec![session.clone()]);
    b.stop().await;
    a.stop().await;
}

/// One agent per session: a server that is taking sessions over (here held right after the
/// owner row names it, as a slow recovery of many sessions would hold it) still records its
/// heartbeat. Were the takeover done on the heartbeat's own loop, B would look dead after one
/// TTL and a third server would take B's sessions over while B recovers them.
async fn n_a_server_taking_a_session_over_keeps_beating(url: String) {
    use turnstile::server::hooks::Point;
    let (a, _session) = session_running_on(&url, 600).await;
    let (_beating, _beat) = pause_at(&a, Point::Beat);
    let b = server_with_ttl(&url, "b", 600).await;
    let (taking, take) = pause_at(&b, Point::TakingOver);
    taking.acquire().await.unwrap().forget();
    let held_at = b.state.clock.now();
    let repo = b.state.repo.clone();
    support::until("B to beat while its takeover is held", async || {
        repo.other_live_servers("", held_at)
            .await
            .unwrap()
            .contains(&"b".to_string())
    })
    .await;
    b.state.hooks.clear(Point::TakingOver);
    take.add_permits(1);
    b.stop().await;
    a.stop().await;
}

/// One agent per session: B is asked to deliver an answer owed in a session whose agent runs
/// on A, which is alive. B's claim is refused (A owns it and beats), so B launches no agent;
/// A delivers.
async fn n_a_server_never_launches_an_agent_for_a_live_servers_session(url: String) {
    let a = server(&url, "a").await;
    let b = server(&url, "b").await;
    let api_a = Api::new(&a.base);
    let (task, session) = api_a.start_task(&detached_then("e2e:delay(300)")).await;
    let pending = api_a.pending_id(&session).await;
    api_a.wait_turns_done(&session, 1).await;
    // B acts for the session as if it ran it (the wake-up that forwarding sends to A).
    turnstile::server::orchestrator::worker::deliver_owed(&b.state, &session, &task);
    let (status, body) = api_a.respond(&pending, answer("sqlite")).await;
    assert_eq!(
        (status.as_u16(), &body["claimed"]),
        (200, &json!(true)),
        "{body}"
    );
    turnstile::server::orchestrator::worker::deliver_owed(&b.state, &session, &task);
    api_a.wait_turns_done(&session, 2).await;
    assert_eq!(
        lines_starting(&api_a, &session, &[RESUMED]).await.len(),
        1,
        "I4"
    );
    assert_eq!(b.state.runtime.agents.count(), 0, "B launched no agent");
    assert!(b.state.runtime.owned.is_empty());
    b.stop().await;
    a.stop().await;
}

/// A with a short TTL, one session whose agent runs on A (idle after its first turn).
async fn session_running_on(url: &str, ttl_ms: u64) -> (TestServer, String) {
    let a = server_with_ttl(url, "a", ttl_ms).await;
    let api_a = Api::new(&a.base);
    let (_, session) = api_a.start_task("hello").await;
    api_a.wait_turns_done(&session, 1).await;
    assert_eq!(a.state.runtime.owned.keys(), vec![session.clone()]);
    assert_eq!(a.state.runtime.agents.count(), 1);
    (a, session)
}

/// A was out of touch long enough for B to take its session over (here: B's heartbeat and
/// owner row written directly). At its next heartbeat A sees the session is no longer its
/// own and stops its agent, so the session never has two.
async fn n_a_server_whose_session_was_taken_over_stops_its_agent(url: String) {
    let (a, session) = session_running_on(&url, 1_500).await;
    let repo = a.state.repo.clone();
    repo.beat("b", a.state.clock.now()).await.unwrap();
    repo.transfer_session(&session, "a", "b", i64::MAX)
        .await
        .unwrap()
        .expect("transferred");
    support::until(
        "A to stop the agent of the session B runs now",
        async || a.state.runtime.agents.count() == 0 && a.state.runtime.owned.is_empty(),
    )
    .await;
    assert_eq!(
        repo.live_owner(&session, 0).await.unwrap().as_deref(),
        Some("b"),
        "A left the owner row to B"
    );
    a.stop().await;
}

/// A cannot reach the database (its connections are cut and refused). Another server (B) was
/// alive at A's last heartbeat, so before A's lease can expire and B may take its sessions
/// over, A stops their agents itself (a server that was alone keeps them: nobody would take
/// over). Back in touch, the next prompt relaunches the agent on A (`session/load`).
async fn n_a_server_cut_off_from_the_database_stops_its_agents(url: String) {
    let b = server_with_ttl(&url, "b", 1_500).await;
    let (a, session) = session_running_on(&url, 1_500).await;
    let cut = CutOff::start(&url).await;
    support::until("A to stop its agent while cut off", async || {
        a.state.runtime.agents.count() == 0
    })
    .await;
    cut.end().await;
    prompt_again(&a, &session).await;
    assert_eq!(a.state.runtime.agents.count(), 1);
    assert_eq!(b.state.runtime.agents.count(), 0);
    a.stop().await;
    b.stop().await;
}

/// The same cut-off with A alone: nobody could take its sessions over, so A keeps their
/// agents however long it is out of touch (stopping them would only interrupt the user's
/// agents for nothing). Seen after a failed heartbeat past the fence time.
async fn n_a_lone_server_cut_off_from_the_database_keeps_its_agents(url: String) {
    use turnstile::server::hooks::Point;
    let (a, session) = session_running_on(&url, 1_500).await;
    let past_fence = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = past_fence.clone();
    a.state.hooks.set(Point::HeartbeatFailed, move |key| {
        if key == "past-fence" {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        async {}
    });
    let cut = CutOff::start(&url).await;
    support::until("a failed heartbeat past the fence time", async || {
        past_fence.load(std::sync::atomic::Ordering::SeqCst) > 0
    })
    .await;
    assert_eq!(
        a.state.runtime.agents.count(),
        1,
        "the lone server kept its agent"
    );
    assert_eq!(a.state.runtime.owned.keys(), vec![session.clone()]);
    cut.end().await;
    prompt_again(&a, &session).await;
    assert_eq!(a.state.runtime.agents.count(), 1);
    a.stop().await;
}

/// Back in touch: the session's next prompt reaches its agent on `server` (relaunched there if
/// it was stopped) and its second turn completes.
async fn prompt_again(server: &TestServer, session: &str) {
    let api = Api::new(&server.base);
    let (status, body) = api
        .post(
            &format!("/api/v1/sessions/{session}/prompt"),
            json!({ "content": "again" }),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    api.wait_turns_done(session, 2).await;
}

/// The test database refuses new connections, and the open ones `which` selects are ended,
/// until [`CutOff::end`].
struct CutOff {
    admin: String,
    database: String,
}

/// Which open connections a [`CutOff`] ends.
enum Backends<'a> {
    /// Every connection to the database.
    All,
    /// Only the event listener of the server with this id.
    ListenerOf(&'a str),
}

impl CutOff {
    async fn start(url: &str) -> Self {
        Self::start_ending(url, Backends::All).await
    }

    async fn start_ending(url: &str, which: Backends<'_>) -> Self {
        let admin = std::env::var("TEST_POSTGRES_URL").unwrap();
        let database = url
            .rsplit('/')
            .next()
            .unwrap()
            .split('?')
            .next()
            .unwrap()
            .to_string();
        support::raw_exec(
            &admin,
            &format!("ALTER DATABASE {database} ALLOW_CONNECTIONS false"),
        )
        .await;
        let only = match which {
            Backends::All => "pid <> pg_backend_pid()".to_string(),
            Backends::ListenerOf(server) => {
                format!("application_name = 'turnstile-listener {server}'")
            }
        };
        support::raw_exec(
            &admin,
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = '{database}' AND {only}"
            ),
        )
        .await;
        CutOff { admin, database }
    }

    async fn end(self) {
        support::raw_exec(
            &self.admin,
            &format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", self.database),
        )
        .await;
    }
}

/// B3 on PostgreSQL (decision 0018, amendment): a server alone on its database sends none of
/// its events (nobody but its own listener would read them). A second server's hello makes it
/// send again before the newcomer serves anyone (the newcomer waits for its welcome), so the
/// newcomer's clients see what the first publishes from then on; and the first asks every
/// server's clients to resync, since what it published alone reached nobody.
async fn p10_a_lone_server_sends_no_events_until_another_says_hello(url: String) {
    use sqlx::postgres::PgListener;
    use turnstile::server::events::bridge::CHANNEL;
    let mut channel = PgListener::connect(&url).await.unwrap();
    channel.listen(CHANNEL).await.unwrap();
    let a = server(&url, "a").await;
    // Its hello, queued when its listener started, is the first thing a sends; it may be
    // sent after a already found itself alone (its sender runs on its own).
    let hello: Value = serde_json::from_str(channel.recv().await.unwrap().payload()).unwrap();
    assert_eq!(hello, json!({ "o": "a", "hello": true }));
    let peers = || a.state.hub.peers().expect("the bridge");
    support::until("server a to find itself alone", async || peers().alone()).await;
    let api_a = Api::new(&a.base);
    let skipped = peers().skipped();
    let (status, _) = api_a
        .post("/api/v1/tasks", json!({ "title": "alone" }))
        .await;
    assert_eq!(status, 200);
    support::until("a's events to be left unsent", async || {
        peers().skipped() > skipped
    })
    .await;
    let metrics = a.metrics().await;
    assert_eq!(
        support::metric(&metrics, "turnstile_events_alone"),
        Some(1.0),
        "{metrics}"
    );
    let unsent = support::metric(&metrics, "turnstile_events_unsent_total");
    assert!(unsent.is_some_and(|n| n > skipped as f64), "{metrics}");
    // Nothing of a's is on the channel: a marker sent now is the first thing there.
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query("SELECT pg_notify($1, 'marker')")
        .bind(CHANNEL)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(channel.recv().await.unwrap().payload(), "marker");

    // B starts: its start-up returns once a has welcomed it, so a sends again.
    let b = server(&url, "b").await;
    assert!(!peers().alone(), "a heard b's hello before b served");
    let mut heard = Vec::new();
    while !heard.iter().any(|t: &Value| t["welcome"] == true) {
        let n = channel.recv().await.unwrap();
        heard.push(serde_json::from_str(n.payload()).unwrap());
    }
    let from_a: Vec<&Value> = heard.iter().filter(|t| t["o"] == "a").collect();
    assert_eq!(
        from_a,
        [
            &json!({ "o": "a", "resync": "peer" }),
            &json!({ "o": "a", "to": "b", "welcome": true })
        ],
        "a asks the clients to resync, then welcomes b: {heard:?}"
    );
    let mut on_b = connect(&b).await;
    let (status, created) = api_a
        .post("/api/v1/tasks", json!({ "title": "together" }))
        .await;
    assert_eq!(status, 200);
    let id = created["id"].clone();
    next_frame(&mut on_b, |v| {
        v["action"] == "task.created" && v["payload"]["task"]["id"] == id
    })
    .await;
    b.stop().await;
    a.stop().await;
}

/// Decision 0018, amendment: a server can also learn of another from its heartbeat's look at
/// the live servers (the other's hello went unheard, e.g. while this one's listener
/// reconnected). It then sends again and asks the clients to resync; once the other stops
/// beating for a TTL it is alone again.
async fn p10_a_server_whose_hello_went_unheard_is_found_by_the_heartbeat(url: String) {
    use sqlx::postgres::PgListener;
    use turnstile::server::events::bridge::CHANNEL;
    let a = server_with_ttl(&url, "a", 600).await;
    let peers = || a.state.hub.peers().expect("the bridge");
    support::until("server a to find itself alone", async || peers().alone()).await;
    let mut channel = PgListener::connect(&url).await.unwrap();
    channel.listen(CHANNEL).await.unwrap();
    // A server that beats but never said hello (nothing of it reaches a's listener).
    a.state
        .repo
        .beat("quiet", a.state.clock.now())
        .await
        .unwrap();
    let n = tokio::time::timeout(std::time::Duration::from_secs(20), channel.recv())
        .await
        .expect("a's heartbeat finds the other server")
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(n.payload()).unwrap(),
        json!({ "o": "a", "resync": "peer" }),
        "a's next look finds the other and asks every client to resync"
    );
    assert!(!peers().alone());
    support::until(
        "a to be alone again once the other stops beating",
        async || peers().alone(),
    )
    .await;
    a.stop().await;
}
