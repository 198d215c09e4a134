//! The event hub: services publish notifications after their transaction commits (P10); the
//! projector and WebSocket clients subscribe. A trait, so a PostgreSQL LISTEN/NOTIFY bridge can
//! relay between replicas later without touching publishers.

use std::sync::Arc;

use serde_json::Value;

use crate::model::Notification;
use tokio::sync::broadcast;

/// One notification (`action` and `payload` of the WebSocket envelope). `session_id` marks a
/// session-scoped notification (sent only to subscribers of that session); `task_id` tells the
/// projector which task to refresh.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub action: String,
    pub payload: Value,
    pub task_id: Option<String>,
    pub session_id: Option<String>,
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
            payload,
            task_id,
            session_id,
        }
    }
}

impl Event {
    /// A raw event (tests, and actions this build does not type yet).
    pub fn new(action: impl Into<String>, payload: Value) -> Self {
        Event {
            action: action.into(),
            payload,
            task_id: None,
            session_id: None,
        }
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
        a.starts_with("session.message.")
            || a.starts_with("session.turn.")
            || a.starts_with("clarification.")
            || a.starts_with("permission.")
            || a == "session.state_changed"
            || a == "session.created"
    }
}

pub trait EventHub: Send + Sync + 'static {
    /// Publishes to every current subscriber; call only after the write committed (P10).
    fn publish(&self, event: Event);
    fn subscribe(&self) -> broadcast::Receiver<Event>;
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
