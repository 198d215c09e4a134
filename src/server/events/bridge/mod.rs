//! Several servers on one PostgreSQL database: every server publishes its
//! committed events with `NOTIFY` and relays the other servers' events to its own subscribers
//! (WebSocket clients). A payload too large for `NOTIFY` is stored in `event_spill` and the
//! notification names its row. A server whose listener connection was lost, or whose outgoing
//! queue overflowed, tells its clients (or every server's clients) to `resync` (P10).
//! Decision: docs/decisions/0018-event-bridge.md.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Event, EventHub, InProcessHub, ListenerState, Request};

mod listen;
mod peers;
mod send;
mod wire;

pub use peers::Peers;

use listen::{Relay, listen, listen_loop};
use send::send_loop;

/// The `LISTEN`/`NOTIFY` channel of every server on the database.
pub const CHANNEL: &str = "turnstile_events";
/// Bodies up to this size travel in the notification (PostgreSQL's limit is 8,000 bytes).
pub const INLINE_LIMIT: usize = 7_000;
/// Events waiting to be sent; beyond it the other servers are told to resync.
pub(super) const OUTBOX: usize = 4_096;
/// Between attempts to reconnect the listener.
pub(super) const RETRY: Duration = Duration::from_millis(250);
/// Spilled bodies older than this are deleted (a receiver reads them within moments).
pub(super) const SPILL_TTL_MICROS: i64 = 10 * 60 * 1_000_000;

/// What the sender task sends: an event, or a message between servers about one answer.
pub(super) enum Outgoing {
    Event(Event),
    Text(String),
}

/// Who waits for a delivery confirmation: `pending_id` → the offering call.
pub(super) type Replies = Arc<Mutex<HashMap<String, oneshot::Sender<bool>>>>;
/// Requests this server sent and waits for: request id → the caller.
pub(super) type Calls = Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>;

pub struct PgBridge {
    server_id: String,
    local: Arc<InProcessHub>,
    outbox: mpsc::Sender<Outgoing>,
    replies: Replies,
    offers: Mutex<Option<mpsc::Receiver<String>>>,
    calls: Calls,
    requests: Mutex<Option<mpsc::Receiver<Request>>>,
    /// Set when an event could not be queued: the next notification asks for a resync.
    overflowed: Arc<AtomicBool>,
    listener: Arc<AtomicU8>,
    peers: Arc<Peers>,
}

impl PgBridge {
    /// Connects the sender and the listener of server `server_id` and starts both tasks; they
    /// end with `shutdown`.
    pub async fn start(
        options: PgConnectOptions,
        server_id: String,
        capacity: usize,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, sqlx::Error> {
        let sender_pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(options.clone().application_name("turnstile-notify"))
            .await?;
        let listener_pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options.application_name(&format!("turnstile-listener {server_id}")))
            .await?;
        let listener = listen(&listener_pool).await?;
        let local = InProcessHub::new(capacity);
        let (outbox, queued) = mpsc::channel(OUTBOX);
        let (offered, offers) = mpsc::channel(OUTBOX);
        let (requested, requests) = mpsc::channel(OUTBOX);
        let bridge = Arc::new(PgBridge {
            server_id: server_id.clone(),
            local: local.clone(),
            outbox: outbox.clone(),
            replies: Replies::default(),
            offers: Mutex::new(Some(offers)),
            calls: Calls::default(),
            requests: Mutex::new(Some(requests)),
            overflowed: Arc::new(AtomicBool::new(false)),
            listener: Arc::new(AtomicU8::new(ListenerState::Connected as u8)),
            peers: Arc::new(Peers::new(server_id.clone(), outbox)),
        });
        // Listening already: the servers that hear this learn that this one listens too.
        bridge.peers.say_hello();
        tokio::spawn(send_loop(
            sender_pool.clone(),
            server_id.clone(),
            queued,
            bridge.overflowed.clone(),
            bridge.peers.clone(),
            shutdown.clone(),
        ));
        tokio::spawn(listen_loop(
            listener,
            listener_pool,
            sender_pool,
            server_id,
            Relay {
                local,
                offered,
                replies: bridge.replies.clone(),
                calls: bridge.calls.clone(),
                requested,
                peers: bridge.peers.clone(),
            },
            bridge.listener.clone(),
            shutdown,
        ));
        Ok(bridge)
    }
}

impl EventHub for PgBridge {
    fn publish(&self, event: Event) {
        self.local.publish(event.clone());
        if event.remote {
            return;
        }
        if self.outbox.try_send(Outgoing::Event(event)).is_err() {
            self.overflowed.store(true, Ordering::SeqCst);
        }
    }

    fn offer_answer(&self, pending_id: &str) -> Option<oneshot::Receiver<bool>> {
        let (tx, rx) = oneshot::channel();
        {
            let mut replies = self.replies.lock().expect("replies lock");
            // Offers whose caller stopped waiting.
            replies.retain(|_, waiting| !waiting.is_closed());
            replies.insert(pending_id.to_string(), tx);
        }
        let text = json!({ "o": self.server_id, "offer": pending_id }).to_string();
        // Not queued: the offer goes unanswered and the caller takes the detached path.
        let _ = self.outbox.try_send(Outgoing::Text(text));
        Some(rx)
    }

    fn take_offers(&self) -> Option<mpsc::Receiver<String>> {
        self.offers.lock().expect("offers lock").take()
    }

    fn request(&self, to: &str, request: Value) -> Option<oneshot::Receiver<Value>> {
        let rid = uuid::Uuid::now_v7().to_string();
        let (tx, rx) = oneshot::channel();
        {
            let mut calls = self.calls.lock().expect("calls lock");
            calls.retain(|_, waiting| !waiting.is_closed());
            calls.insert(rid.clone(), tx);
        }
        let text = json!({ "o": self.server_id, "to": to, "rid": rid, "req": request }).to_string();
        // Not queued: the caller's wait ends without a reply.
        let _ = self.outbox.try_send(Outgoing::Text(text));
        Some(rx)
    }

    fn take_requests(&self) -> Option<mpsc::Receiver<Request>> {
        self.requests.lock().expect("requests lock").take()
    }

    fn reply(&self, to: &str, rid: &str, reply: Value) {
        let text = json!({ "o": self.server_id, "to": to, "rid": rid, "rep": reply }).to_string();
        if self.outbox.try_send(Outgoing::Text(text)).is_err() {
            tracing::warn!(to, "cannot reply to another server");
        }
    }

    fn confirm_delivery(&self, pending_id: &str) {
        let text = json!({ "o": self.server_id, "delivered": pending_id }).to_string();
        if self.outbox.try_send(Outgoing::Text(text)).is_err() {
            tracing::warn!(
                pending_id,
                "cannot confirm a delivery; the offering server withdraws"
            );
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.local.subscribe()
    }

    fn listener(&self) -> Option<ListenerState> {
        Some(ListenerState::from_u8(self.listener.load(Ordering::SeqCst)))
    }

    fn peers(&self) -> Option<&Peers> {
        Some(&self.peers)
    }
}
