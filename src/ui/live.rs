//! The live channel: one WebSocket per page (`/ws`). Notifications bump version signals that
//! resources include in their keys, so views refetch their snapshot; `resync` (on connect,
//! after a restart, on lag) refetches everything (P10). `<body data-ws>` shows the state.

use leptos::prelude::*;

#[derive(Clone, Copy)]
pub struct Live {
    /// Bumped when tasks or their summaries change (sidebar, task page).
    pub tasks: RwSignal<u64>,
    /// Bumped when the watched session's transcript, turns, state or questions change.
    pub session: RwSignal<u64>,
    /// The session the page shows; the socket subscribes to it.
    pub watched: RwSignal<Option<String>>,
}

impl Live {
    pub fn bump_all(&self) {
        self.tasks.update(|v| *v += 1);
        self.session.update(|v| *v += 1);
    }
}

/// Provides [`Live`] and, in the browser, connects the socket.
pub fn provide_live() -> Live {
    let live = Live {
        tasks: RwSignal::new(0),
        session: RwSignal::new(0),
        watched: RwSignal::new(None),
    };
    provide_context(live);
    #[cfg(feature = "hydrate")]
    browser::start(live);
    live
}

#[cfg(feature = "hydrate")]
mod browser {
    use std::time::Duration;

    use leptos::prelude::*;
    use serde_json::{Value, json};
    use wasm_bindgen::JsCast;
    use wasm_bindgen::closure::Closure;
    use web_sys::{MessageEvent, WebSocket};

    use super::Live;

    fn set_body_ws(state: &str) {
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-ws", state);
        }
    }

    fn subscribe(ws: &WebSocket, session: &str) {
        let msg = json!({ "type": "request", "id": 1, "action": "subscribe.session", "payload": { "session_id": session } });
        let _ = ws.send_with_str(&msg.to_string());
    }

    pub fn start(live: Live) {
        let socket = StoredValue::new_local(None::<WebSocket>);
        // Subscribe whenever the watched session changes (and the socket is open).
        Effect::new(move |_| {
            let watched = live.watched.get();
            socket.with_value(|ws| {
                if let (Some(ws), Some(id)) = (ws, watched)
                    && ws.ready_state() == WebSocket::OPEN
                {
                    subscribe(ws, &id);
                }
            });
        });
        Effect::new(move |_| connect(live, socket));
    }

    fn connect(live: Live, socket: StoredValue<Option<WebSocket>, LocalStorage>) {
        let location = window().location();
        let scheme = if location.protocol().ok().as_deref() == Some("https:") {
            "wss"
        } else {
            "ws"
        };
        let Ok(host) = location.host() else { return };
        let Ok(ws) = WebSocket::new(&format!("{scheme}://{host}/ws")) else {
            return;
        };

        let opened = ws.clone();
        let on_open = Closure::<dyn FnMut()>::new(move || {
            set_body_ws("open");
            if let Some(id) = live.watched.get_untracked() {
                subscribe(&opened, &id);
            }
        });
        ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        on_open.forget();

        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
            let Some(text) = e.data().as_string() else {
                return;
            };
            let Ok(frame) = serde_json::from_str::<Value>(&text) else {
                return;
            };
            if frame["type"] != "notification" {
                return;
            }
            let action = frame["action"].as_str().unwrap_or("");
            let payload = &frame["payload"];
            if action == "resync" {
                live.bump_all();
                return;
            }
            if action.starts_with("task.")
                || action.starts_with("clarification.")
                || action.starts_with("session.state")
                || action == "session.created"
            {
                live.tasks.update(|v| *v += 1);
            }
            let watched = live.watched.get_untracked();
            let session_of = payload["message"]["session_id"]
                .as_str()
                .or(payload["turn"]["session_id"].as_str())
                .or(payload["session"]["id"].as_str())
                .or(payload["bundle"]["session_id"].as_str())
                .or(payload["session_id"].as_str());
            if watched.is_some() && session_of == watched.as_deref() {
                live.session.update(|v| *v += 1);
            }
        });
        ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        on_message.forget();

        let on_close = Closure::<dyn FnMut()>::new(move || {
            set_body_ws("closed");
            set_timeout(move || connect(live, socket), Duration::from_millis(1000));
        });
        ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        on_close.forget();
        socket.set_value(Some(ws));
    }
}
