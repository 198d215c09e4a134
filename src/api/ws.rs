//! `/ws`: the push channel of spec/api.md. Every client gets workspace-wide notifications;
//! `session.message.*` only for sessions it subscribed to. A client gets `resync` when it
//! connects (so a reconnect after a restart refetches) and whenever it lags (P10).

use std::collections::HashSet;
use std::ops::ControlFlow;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, close_code};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use futures::SinkExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::server::events::Event;
use crate::server::state::AppState;
use crate::server::time::format_micros;

/// Bounds of the push channel: a client's messages are small requests, a client watches a
/// handful of sessions, and the server keeps a bounded number of sockets
/// (`RuntimeConfig::max_websocket_clients`).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;
pub const MAX_SUBSCRIPTIONS: usize = 64;

pub async fn upgrade(State(state): State<AppState>, ws: WebSocketUpgrade) -> Response {
    let cap = state.runtime.config.max_websocket_clients;
    let Some(slot) = ClientSlot::take(&state, cap) else {
        return crate::api::ApiError(crate::model::AppError::Unavailable(format!(
            "this server already serves {cap} live connections"
        )))
        .into_response();
    };
    ws.max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| async move {
            serve_client(&state, socket).await;
            drop(slot);
        })
}

/// A connection's place under the cap (`turnstile_websocket_clients`): taken before the
/// upgrade, in one atomic step (a burst of upgrades cannot pass the cap together), and given
/// back when dropped (the connection ended, or the upgrade never happened).
struct ClientSlot(AppState);

impl ClientSlot {
    fn take(state: &AppState, cap: usize) -> Option<ClientSlot> {
        use std::sync::atomic::Ordering;
        let clients = &state.metrics.websocket_clients;
        if clients.fetch_add(1, Ordering::SeqCst) >= i64::try_from(cap).unwrap_or(i64::MAX) {
            clients.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(ClientSlot(state.clone()))
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        self.0
            .metrics
            .websocket_clients
            .fetch_sub(1, Ordering::SeqCst);
    }
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
    Message::Text(envelope_text(state, kind, id, action, &payload).into())
}

/// One WebSocket frame's text. Serialized from borrowed parts: an event's payload is shared
/// by every subscriber and written into the frame as it is, never copied (B3, B4).
fn envelope_text(
    state: &AppState,
    kind: &str,
    id: Option<&Value>,
    action: &str,
    payload: &Value,
) -> String {
    #[derive(serde::Serialize)]
    struct Frame<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a Value>,
        action: &'a str,
        payload: &'a Value,
        ts: String,
    }
    serde_json::to_string(&Frame {
        kind,
        id,
        action,
        payload,
        ts: format_micros(state.clock.now()),
    })
    .expect("a frame of JSON values serializes")
}

fn is_session_scoped(event: &Event) -> bool {
    event.action.starts_with("session.message.")
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
                    Some(Ok(Message::Binary(_))) => {
                        let _ = socket.send(close(close_code::UNSUPPORTED, "send JSON text frames")).await;
                        return;
                    }
                    Some(Err(e)) => {
                        // Oversized or malformed frames: say why, then hang up.
                        let _ = socket.send(protocol_error(e)).await;
                        return;
                    }
                    Some(Ok(Message::Close(_))) | None => return,
                    Some(Ok(_)) => continue,
                };
                let reply = handle_request(&state, &mut subscribed, text.as_str());
                if socket.send(reply).await.is_err() {
                    return;
                }
            }
            event = events.recv() => {
                // A burst (creating a task publishes about ten notifications) goes out as one
                // write: frames are fed, then flushed once (B4: syscalls per client, not per frame).
                let mut item = Some(event);
                let mut fed = 0;
                while let Some(current) = item.take() {
                    match notification(&state, &subscribed, current) {
                        ControlFlow::Break(()) => return,
                        ControlFlow::Continue(Some(message)) => {
                            if socket.feed(message).await.is_err() {
                                return;
                            }
                        }
                        ControlFlow::Continue(None) => {}
                    }
                    fed += 1;
                    if fed < BURST_FRAMES {
                        item = match events.try_recv() {
                            Ok(e) => Some(Ok(e)),
                            Err(TryRecvError::Lagged(n)) => Some(Err(RecvError::Lagged(n))),
                            Err(TryRecvError::Closed) => Some(Err(RecvError::Closed)),
                            Err(TryRecvError::Empty) => None,
                        };
                    }
                }
                if socket.flush().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Frames written before one flush, at most.
const BURST_FRAMES: usize = 64;

/// What a client gets for one item of the hub: nothing (a session it did not subscribe to), a
/// frame, or the end of the stream.
fn notification(
    state: &AppState,
    subscribed: &HashSet<String>,
    item: Result<Event, RecvError>,
) -> ControlFlow<(), Option<Message>> {
    ControlFlow::Continue(match item {
        Ok(e)
            if is_session_scoped(&e)
                && !e
                    .session_id
                    .as_ref()
                    .is_some_and(|s| subscribed.contains(s)) =>
        {
            None
        }
        // Serialized once for every client (its `ts` is when the first one sent it).
        Ok(e) => Some(Message::Text(
            e.frame(|| envelope_text(state, "notification", None, &e.action, &e.payload))
                .into(),
        )),
        Err(RecvError::Lagged(missed)) => Some(envelope(
            state,
            "notification",
            None,
            "resync",
            json!({ "reason": "lagged", "missed": missed }),
        )),
        Err(RecvError::Closed) => return ControlFlow::Break(()),
    })
}

/// The close frame for a frame the socket could not take: 1009 when too big, 1007 when its
/// text is not UTF-8, 1002 for any other protocol error; the reason says which.
fn protocol_error(e: axum::Error) -> Message {
    let reason = format!("protocol error: {e}");
    let code = match e.into_inner().downcast::<tungstenite::Error>().map(|e| *e) {
        Ok(tungstenite::Error::Capacity(_)) => close_code::SIZE,
        Ok(tungstenite::Error::Utf8(_)) => close_code::INVALID,
        _ => close_code::PROTOCOL,
    };
    close(code, &reason)
}

fn close(code: u16, reason: &str) -> Message {
    let reason: String = reason.chars().take(100).collect();
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
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
            let Some(session_id) = session_id().filter(|s| !s.is_empty() && s.len() <= 64) else {
                return bad("payload.session_id (a string of 1–64 characters) is required".into());
            };
            if request.action == "subscribe.session" {
                if subscribed.len() >= MAX_SUBSCRIPTIONS && !subscribed.contains(&session_id) {
                    return bad(format!(
                        "a connection may watch at most {MAX_SUBSCRIPTIONS} sessions; unsubscribe first"
                    ));
                }
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
