//! The live channel: one WebSocket per page (`/ws`, through `leptos-use-websocket`; after a
//! close it reopens with exponential backoff and jitter from `client::backoff`). Pushes are typed (`model::Notification`) and folded into
//! stores with the pure merges of `client::store` (P3/P9: an older value never overwrites a
//! newer one). A (re)connection or a `resync` bumps `resync`, so every view refetches its
//! snapshot (P10). `<body data-ws>` and the `connection-status` indicator show the state.

use leptos::prelude::*;

use crate::client::notify::Alerts;
use crate::client::store::{SessionBook, TaskBook, Transcript};
use crate::model::Notification;

/// The connection as the user sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    Connecting,
    Open,
    Reconnecting,
}

#[derive(Clone, Copy)]
pub struct Live {
    /// Tasks the socket told us about (merged over page snapshots by `client::store`).
    pub tasks: RwSignal<TaskBook>,
    /// Sessions of the task being shown.
    pub sessions: RwSignal<SessionBook>,
    /// The watched session's transcript (with its id).
    pub transcript: RwSignal<(Option<String>, Transcript)>,
    /// The task being shown (sessions pushes are kept for it).
    pub shown_task: RwSignal<Option<String>>,
    /// The session the page shows; the socket subscribes to it.
    pub watched: RwSignal<Option<String>>,
    /// Bumped on every (re)connection and `resync`: snapshots refetch (P10).
    pub resync: RwSignal<u64>,
    /// Bumped when the socket confirms the watched session's subscription (its transcript
    /// refetches once: nothing between the snapshot and the subscription is missed).
    pub subscribed: RwSignal<u64>,
    /// Bumped when the watched session's questions change (the overlay refetches).
    pub questions: RwSignal<u64>,
    /// Bumped when the watched session's permission requests change.
    pub permissions: RwSignal<u64>,
    /// Bumped when the shown task's sessions change in ways pushes do not carry.
    pub session_list: RwSignal<u64>,
    pub connection: RwSignal<Connection>,
    /// The watched session's question that expired (its session ended), until a new one.
    pub expired: RwSignal<Option<String>>,
    /// New questions and permission requests elsewhere (title count, browser notifications).
    pub alerts: RwSignal<Alerts>,
}

impl Live {
    /// Applies one push to every store it concerns.
    pub fn apply(&self, n: &Notification) {
        if matches!(n, Notification::Resync { .. }) {
            self.resync.update(|v| *v += 1);
            return;
        }
        self.tasks.update(|b| {
            b.apply(n);
        });
        if let Some(task) = self.shown_task.get_untracked() {
            self.sessions.update(|b| {
                b.apply(&task, n);
            });
            if matches!(n, Notification::SessionCreated { session } if session.task_id == task) {
                self.session_list.update(|v| *v += 1);
            }
        }
        let watched = self.watched.get_untracked();
        if let Some(session) = &watched {
            self.transcript.update(|(id, t)| {
                if id.as_deref() == Some(session.as_str()) {
                    t.apply(session, n);
                }
            });
        }
        let ours = watched.is_some() && n.session_id() == watched.as_deref();
        match n {
            Notification::ClarificationExpired { bundle } if ours => {
                self.expired.set(Some(bundle.pending_id.clone()));
                self.questions.update(|v| *v += 1)
            }
            Notification::ClarificationRequested { .. } if ours => {
                self.expired.set(None);
                self.questions.update(|v| *v += 1)
            }
            Notification::ClarificationRequested { .. }
            | Notification::ClarificationAnswered { .. }
            | Notification::ClarificationRejected { .. }
            | Notification::ClarificationDetached { .. }
            | Notification::ClarificationExpired { .. }
            | Notification::ClarificationStaleDismissed { .. }
            | Notification::ClarificationRestored { .. }
            | Notification::TurnStarted { .. }
                if ours =>
            {
                self.questions.update(|v| *v += 1)
            }
            Notification::PermissionRequested { .. } | Notification::PermissionResolved { .. }
                if ours =>
            {
                self.permissions.update(|v| *v += 1)
            }
            _ => {}
        }
        let shown = self.shown_task.get_untracked();
        self.alerts.update(|a| {
            a.on_push(n, shown.as_deref());
        });
    }
}

#[cfg(feature = "hydrate")]
pub use browser::hydration_done;

/// Provides [`Live`] and, in the browser, connects the socket.
pub fn provide_live() -> Live {
    let live = Live {
        tasks: RwSignal::new(TaskBook::default()),
        sessions: RwSignal::new(SessionBook::default()),
        transcript: RwSignal::new((None, Transcript::default())),
        shown_task: RwSignal::new(None),
        watched: RwSignal::new(None),
        resync: RwSignal::new(0),
        subscribed: RwSignal::new(0),
        questions: RwSignal::new(0),
        permissions: RwSignal::new(0),
        session_list: RwSignal::new(0),
        connection: RwSignal::new(Connection::Connecting),
        expired: RwSignal::new(None),
        alerts: RwSignal::new(Alerts::default()),
    };
    provide_context(live);
    #[cfg(feature = "hydrate")]
    browser::start(live);
    live
}

/// The `connection-status` indicator.
#[component]
pub fn ConnectionStatus() -> impl IntoView {
    let live = expect_context::<Live>();
    let text = move || match live.connection.get() {
        Connection::Connecting => "Connecting…",
        Connection::Open => "Live",
        Connection::Reconnecting => "Reconnecting…",
    };
    view! {
        <p
            class="connection-status"
            class:live=move || live.connection.get() == Connection::Open
            data-testid="connection-status"
            role="status"
            aria-live="polite"
        >
            {text}
        </p>
    }
}

#[cfg(feature = "hydrate")]
mod browser {
    use std::sync::Arc;
    use std::time::Duration;

    use codee::string::FromToStringCodec;
    use leptos::prelude::*;
    use leptos_use_websocket::{
        ConnectionReadyState, ReconnectLimit, UseWebSocketOptions, UseWebSocketReturn,
        use_websocket_with_options,
    };

    use super::{Connection, Live};
    use crate::client::backoff::reconnect_delay_ms;
    use crate::model::{Push, session_request};

    fn set_body_ws(state: &str) {
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-ws", state);
        }
    }

    thread_local! {
        static HYDRATED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        static WAITING: std::cell::RefCell<Vec<Box<dyn FnOnce()>>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    /// The page finished hydrating: mark it and run what waited for it.
    pub fn hydration_done() {
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
        }
        HYDRATED.set(true);
        for f in WAITING.take() {
            f();
        }
    }

    fn after_hydration(f: impl FnOnce() + 'static) {
        if HYDRATED.get() {
            f();
        } else {
            WAITING.with_borrow_mut(|w| w.push(Box::new(f)));
        }
    }

    pub fn start(live: Live) {
        let on_message = move |text: &String| {
            match Push::from_json(text) {
                Ok(Push::Notification(n)) => live.apply(&n),
                // From now on the session's rows are pushed: refetch its transcript once, so a
                // row added between the snapshot and the subscription is not missed.
                Ok(Push::Subscribed(session))
                    if Some(session.as_str()) == live.watched.get_untracked().as_deref() =>
                {
                    live.subscribed.update(|v| *v += 1)
                }
                _ => {}
            }
        };
        // The library's own reconnect is off (its interval is fixed): after a close, `open()`
        // runs again after a backoff delay; a successful open resets the attempts.
        let attempts = StoredValue::new(0u32);
        let reopen = StoredValue::new(None::<Arc<dyn Fn() + Send + Sync>>);
        let UseWebSocketReturn {
            ready_state,
            send,
            open,
            ..
        } = use_websocket_with_options::<String, String, FromToStringCodec, _, _>(
            "/ws",
            UseWebSocketOptions::default()
                .immediate(false)
                .reconnect_limit(ReconnectLimit::Limited(0))
                .on_open(move |_| attempts.set_value(0))
                .on_close(move |_| {
                    let attempt = attempts.get_value();
                    attempts.set_value(attempt.saturating_add(1));
                    let delay = reconnect_delay_ms(attempt, js_sys::Math::random());
                    set_timeout(
                        move || {
                            if let Some(open) = reopen.get_value() {
                                open();
                            }
                        },
                        Duration::from_millis(u64::from(delay)),
                    );
                })
                .on_message(on_message),
        );
        // Connect only once the whole page hydrated (`hydration_done`), lazy routes included: a
        // push folded into the stores while Suspense bodies still hydrate would make them
        // differ from the server's HTML, and a page whose chunk arrives after the connection
        // would keep its server-rendered snapshot past the refetch on connect (P10).
        after_hydration({
            let open = open.clone();
            move || set_timeout(open, Duration::ZERO)
        });
        reopen.set_value(Some(Arc::new(open)));
        let send = Arc::new(send);
        // Track the state; subscribe the watched session on every (re)connection and change.
        let was_open = StoredValue::new(false);
        Effect::new({
            let send = send.clone();
            move |_| {
                let state = ready_state.get();
                let open = state == ConnectionReadyState::Open;
                set_body_ws(if open { "open" } else { "closed" });
                live.connection.set(match (open, was_open.get_value()) {
                    (true, _) => Connection::Open,
                    (false, true) => Connection::Reconnecting,
                    (false, false) if live.connection.get_untracked() == Connection::Open => {
                        Connection::Reconnecting
                    }
                    (false, false) => live.connection.get_untracked(),
                });
                if open
                    && !was_open.get_value()
                    && let Some(id) = live.watched.get_untracked()
                {
                    send(&session_request(true, &id));
                }
                was_open.set_value(open);
            }
        });
        // One subscription at a time: the session shown (a connection may hold only a few).
        Effect::new(move |previous: Option<Option<String>>| {
            let watched = live.watched.get();
            if ready_state.get_untracked() == ConnectionReadyState::Open {
                if let Some(old) = previous
                    .flatten()
                    .filter(|old| Some(old) != watched.as_ref())
                {
                    send(&session_request(false, &old));
                }
                if let Some(id) = &watched {
                    send(&session_request(true, id));
                }
            }
            watched
        });
    }
}
