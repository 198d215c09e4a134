//! `/ws`: the push channel of spec/api.md. Every client gets workspace-wide notifications;
//! `session.message.*` only for sessions it subscribed to. A client gets `resync` when it
//! connects (so a reconnect after a restart refetches) and whenever it lags (P10).

use std::collections::HashSet;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::server::events::Event;
use crate::server::state::AppState;
use crate::server::time::format_micros;

pub async fn upgrade(State(state): State<AppState>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| serve(state, socket))
}

#[derive(Deserialize)]
struct Request {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<Value>,
    action: String,
    #[serde(default)]
    payload: Value,
}

fn envelope(
    state: &AppState,
    kind: &str,
    id: Option<&Value>,
    action: &str,
    payload: Value,
) -> Message {
    let mut e = json!({ "type": kind, "action": action, "payload": payload, "ts": format_micros(state.clock.now()) });
    if let Some(id) = id {
        e["id"] = id.clone();
    }
    Message::Text(e.to_string().into())
}

fn is_session_scoped(event: &Event) -> bool {
    event.action.starts_with("session.message.")
}

async fn serve(state: AppState, socket: WebSocket) {
    use std::sync::atomic::Ordering;
    state
        .metrics
        .websocket_clients
        .fetch_add(1, Ordering::Relaxed);
    serve_client(&state, socket).await;
    state
        .metrics
        .websocket_clients
        .fetch_sub(1, Ordering::Relaxed);
}

async fn serve_client(state: &AppState, mut socket: WebSocket) {
    let state = state.clone();
    // Subscribe before the resync, so nothing between the client's refetch and now is lost.
    let mut events = state.hub.subscribe();
    let mut subscribed: HashSet<String> = HashSet::new();
    let hello = json!({ "reason": "connected", "epoch": state.epoch.to_string() });
    if socket
        .send(envelope(&state, "notification", None, "resync", hello))
        .await
        .is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            incoming = socket.recv() => {
                let text = match incoming {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => continue,
                };
                let reply = handle_request(&state, &mut subscribed, text.as_str());
                if socket.send(reply).await.is_err() {
                    return;
                }
            }
            event = events.recv() => {
                let message = match event {
                    Ok(e) if is_session_scoped(&e) && !e.session_id.as_ref().is_some_and(|s| subscribed.contains(s)) => continue,
                    Ok(e) => envelope(&state, "notification", None, &e.action, e.payload),
                    Err(RecvError::Lagged(missed)) => {
                        envelope(&state, "notification", None, "resync", json!({ "reason": "lagged", "missed": missed }))
                    }
                    Err(RecvError::Closed) => return,
                };
                if socket.send(message).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn handle_request(state: &AppState, subscribed: &mut HashSet<String>, text: &str) -> Message {
    let request: Request = match serde_json::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            let payload = json!({ "code": "bad_request", "message": format!("invalid request envelope: {e}") });
            return envelope(state, "error", None, "error", payload);
        }
    };
    let id = request.id.as_ref();
    let bad = |message: String| {
        envelope(
            state,
            "error",
            id,
            &request.action,
            json!({ "code": "bad_request", "message": message }),
        )
    };
    if request.kind != "request" {
        return bad(format!("expected type \"request\", got {:?}", request.kind));
    }
    let session_id = || {
        request
            .payload
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match request.action.as_str() {
        "ping" => envelope(state, "response", id, "ping", json!({ "pong": true })),
        "subscribe.session" | "unsubscribe.session" => {
            let Some(session_id) = session_id() else {
                return bad("payload.session_id (a string) is required".into());
            };
            if request.action == "subscribe.session" {
                subscribed.insert(session_id.clone());
            } else {
                subscribed.remove(&session_id);
            }
            envelope(
                state,
                "response",
                id,
                &request.action,
                json!({ "session_id": session_id }),
            )
        }
        other => bad(format!(
            "unknown action {other:?} (expected subscribe.session, unsubscribe.session, ping)"
        )),
    }
}
