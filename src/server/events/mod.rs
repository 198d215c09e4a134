//! The event hub: services publish notifications after their transaction commits (P10); the
//! projector and WebSocket clients subscribe. On SQLite the hub is in-process; on PostgreSQL
//! [`bridge::PgBridge`] also relays events between the servers sharing the database.

pub mod bridge;

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::model::Notification;
use tokio::sync::{broadcast, mpsc, oneshot};

/// One notification (`action` and `payload` of the WebSocket envelope). `session_id` marks a
/// session-scoped notification (sent only to subscribers of that session); `task_id` tells the
/// projector which task to refresh. Every subscriber receives its own clone of the event, so
/// the payload is shared and the WebSocket frame is serialized once, by the first client that
/// sends it (B4: 500 clients cost 500 writes, not 500 deep copies and serializations).
#[derive(Clone, Debug)]
pub struct Event {
    pub action: String,
    pub payload: Arc<Value>,
    pub task_id: Option<String>,
    pub session_id: Option<String>,
    /// Relayed from another server (or made by the bridge itself): never sent on, and the
    /// projector leaves it to the server where it happened.
    pub remote: bool,
    /// P4: the projector needs no refresh for this event (decision 0037), because either
    /// - it announces a commit an earlier event of the same step already announced (the
    ///   question a session's `waiting_for_input` came with, the answer its `running` came
    ///   with): the refresh that event caused read after the whole commit; or
    /// - its write changed no input of the projection (a message in a turn that already
    ///   counted, [`crate::server::repo::authority::message_can_move_current_turn`]).
    ///
    /// B3: one refresh per question and one per answer, not one per event.
    pub no_refresh: bool,
    frame: Arc<OnceLock<String>>,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        (&self.action, &self.payload, &self.task_id, &self.session_id)
            == (
                &other.action,
                &other.payload,
                &other.task_id,
                &other.session_id,
            )
    }
}

/// Production events are typed: their wire form (action, payload) and routing (task,
/// session) come from the notification.
impl From<Notification> for Event {
    fn from(n: Notification) -> Self {
        let task_id = n.task_id().map(str::to_string);
        let session_id = n.session_id().map(str::to_string);
        let action = n.action().to_string();
        let payload = serde_json::to_value(&n)
            .ok()
            .and_then(|mut v| v.get_mut("payload").map(Value::take))
            .unwrap_or(Value::Null);
        Event {
            action,
            payload: Arc::new(payload),
            task_id,
            session_id,
            remote: false,
            no_refresh: false,
            frame: Arc::default(),
        }
    }
}

impl Event {
    /// A raw event (tests, and actions this build does not type yet).
    pub fn new(action: impl Into<String>, payload: Value) -> Self {
        Event {
            action: action.into(),
            payload: Arc::new(payload),
            task_id: None,
            session_id: None,
            remote: false,
            no_refresh: false,
            frame: Arc::default(),
        }
    }

    /// Marks the event as asking the projector for no refresh ([`Event::no_refresh`]).
    pub fn without_refresh(mut self) -> Self {
        self.no_refresh = true;
        self
    }

    /// The event's wire frame, made by `make` the first time any subscriber asks.
    pub fn frame(&self, make: impl FnOnce() -> String) -> String {
        self.frame.get_or_init(make).clone()
    }

    pub fn for_task(mut self, task_id: impl Into<String>) -> Self {
        self.task_id = Some(task_id.into());
        self
    }

    pub fn for_session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// P4: events after which the projector re-reads the pending state of the task.
    pub fn refreshes_projection(&self) -> bool {
        let a = self.action.as_str();
        !self.remote
            && !self.no_refresh
            && (a.starts_with("session.message.")
                || a.starts_with("session.turn.")
                || a.starts_with("clarification.")
                || a.starts_with("permission.")
                || a == "session.state_changed"
                || a == "session.created")
    }
}

pub trait EventHub: Send + Sync + 'static {
    /// Publishes to every current subscriber; call only after the write committed (P10).
    fn publish(&self, event: Event);
    fn subscribe(&self) -> broadcast::Receiver<Event>;
    /// The connection that receives other servers' events, when there is one (`/healthz`).
    fn listener(&self) -> Option<ListenerState> {
        None
    }

    /// Several servers: asks the other servers whether one of them holds the waiting call of
    /// `pending_id` and delivers its (stored) answer; the receiver says whether it did. `None`
    /// when there are no other servers.
    fn offer_answer(&self, _pending_id: &str) -> Option<oneshot::Receiver<bool>> {
        None
    }

    /// The offers other servers make to this one (taken once, by the service that serves them).
    fn take_offers(&self) -> Option<mpsc::Receiver<String>> {
        None
    }

    /// Tells the offering server that this server delivered `pending_id`'s answer.
    fn confirm_delivery(&self, _pending_id: &str) {}

    /// Several servers: sends `request` to server `to`; the receiver gets its reply. `None` when there
    /// are no other servers.
    fn request(&self, _to: &str, _request: Value) -> Option<oneshot::Receiver<Value>> {
        None
    }

    /// The requests other servers send to this one (taken once, by the service that serves
    /// them).
    fn take_requests(&self) -> Option<mpsc::Receiver<Request>> {
        None
    }

    /// Answers request `rid` of server `to`.
    fn reply(&self, _to: &str, _rid: &str, _reply: Value) {}

    /// Whether other servers listen (the bridge's; `None` in process).
    fn peers(&self) -> Option<&bridge::Peers> {
        None
    }
}

/// A request from another server.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub from: String,
    pub rid: String,
    pub body: Value,
}

/// The state of the bridge's listener connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ListenerState {
    Connected = 0,
    Reconnecting = 1,
}

impl ListenerState {
    pub fn from_u8(v: u8) -> Self {
        if v == ListenerState::Connected as u8 {
            ListenerState::Connected
        } else {
            ListenerState::Reconnecting
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ListenerState::Connected => "connected",
            ListenerState::Reconnecting => "reconnecting",
        }
    }
}

/// The hub for the repository's database: the PostgreSQL bridge when the repository has a
/// PostgreSQL pool, else in-process.
pub async fn connect(
    postgres: Option<sqlx::postgres::PgConnectOptions>,
    server_id: &str,
    capacity: usize,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<Arc<dyn EventHub>, sqlx::Error> {
    Ok(match postgres {
        Some(options) => {
            bridge::PgBridge::start(options, server_id.to_string(), capacity, shutdown).await?
        }
        None => InProcessHub::new(capacity),
    })
}

/// The in-process hub: a bounded tokio broadcast channel. A subscriber that falls behind gets
/// `RecvError::Lagged` and must resync (P10).
pub struct InProcessHub {
    sender: broadcast::Sender<Event>,
}

impl InProcessHub {
    pub fn new(capacity: usize) -> Arc<Self> {
        let (sender, _) = broadcast::channel(capacity);
        Arc::new(InProcessHub { sender })
    }
}

impl EventHub for InProcessHub {
    fn publish(&self, event: Event) {
        // No subscriber is not an error: nobody is listening yet.
        let _ = self.sender.send(event);
    }

    fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// B4: every subscriber receives a clone of the event; the payload is shared and the wire
    /// frame is made once, whoever asks first.
    #[tokio::test]
    async fn subscribers_share_one_payload_and_one_frame() {
        let hub = InProcessHub::new(8);
        let (mut a, mut b) = (hub.subscribe(), hub.subscribe());
        hub.publish(Event::new(
            "task.created",
            serde_json::json!({ "big": "x".repeat(1000) }),
        ));
        let (ea, eb) = (a.recv().await.unwrap(), b.recv().await.unwrap());
        assert!(Arc::ptr_eq(&ea.payload, &eb.payload));
        let made = std::sync::atomic::AtomicUsize::new(0);
        let make = || {
            made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            "frame".to_string()
        };
        assert_eq!(ea.frame(make), "frame");
        assert_eq!(eb.frame(make), "frame");
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(ea, eb);
    }
}
