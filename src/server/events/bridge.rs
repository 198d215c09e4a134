//! Several servers on one PostgreSQL database (issue 13, part 1): every server publishes its
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
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgPool, Row};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Event, EventHub, InProcessHub, ListenerState, Request};

/// The `LISTEN`/`NOTIFY` channel of every server on the database.
pub const CHANNEL: &str = "turnstile_events";
/// Bodies up to this size travel in the notification (PostgreSQL's limit is 8,000 bytes).
pub const INLINE_LIMIT: usize = 7_000;
/// Events waiting to be sent; beyond it the other servers are told to resync.
const OUTBOX: usize = 4_096;
/// How often a server says it is alive; a peer not heard from for `PEER_TTL` is gone.
const HEARTBEAT: Duration = Duration::from_secs(10);
const PEER_TTL: Duration = Duration::from_secs(30);
/// Between attempts to reconnect the listener.
const RETRY: Duration = Duration::from_millis(250);
/// Spilled bodies older than this are deleted (a receiver reads them within moments).
const SPILL_TTL_MICROS: i64 = 10 * 60 * 1_000_000;

/// What the sender task sends: an event, or a message between servers about one answer.
enum Outgoing {
    Event(Event),
    Text(String),
}

/// Who waits for a delivery confirmation: `pending_id` → the offering call.
type Replies = Arc<Mutex<HashMap<String, oneshot::Sender<bool>>>>;
/// Requests this server sent and waits for: request id → the caller.
type Calls = Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>;
/// The other servers heard from: server id → when.
type Peers = Arc<Mutex<HashMap<String, std::time::Instant>>>;

pub struct PgBridge {
    server_id: String,
    local: Arc<InProcessHub>,
    outbox: mpsc::Sender<Outgoing>,
    replies: Replies,
    peers: Peers,
    offers: Mutex<Option<mpsc::Receiver<String>>>,
    calls: Calls,
    requests: Mutex<Option<mpsc::Receiver<Request>>>,
    /// Set when an event could not be queued: the next notification asks for a resync.
    overflowed: Arc<AtomicBool>,
    listener: Arc<AtomicU8>,
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
            outbox,
            replies: Replies::default(),
            peers: Peers::default(),
            offers: Mutex::new(Some(offers)),
            calls: Calls::default(),
            requests: Mutex::new(Some(requests)),
            overflowed: Arc::new(AtomicBool::new(false)),
            listener: Arc::new(AtomicU8::new(ListenerState::Connected as u8)),
        });
        tokio::spawn(heartbeat(
            bridge.outbox.clone(),
            bridge.server_id.clone(),
            shutdown.clone(),
        ));
        tokio::spawn(send_loop(
            sender_pool.clone(),
            server_id.clone(),
            queued,
            bridge.overflowed.clone(),
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
                peers: bridge.peers.clone(),
                calls: bridge.calls.clone(),
                requested,
                outbox: bridge.outbox.clone(),
                own: bridge.server_id.clone(),
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

    fn has_peers(&self) -> bool {
        let mut peers = self.peers.lock().expect("peers lock");
        peers.retain(|_, seen| seen.elapsed() < PEER_TTL);
        !peers.is_empty()
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
}

/// The notification body of a local event.
fn body(origin: &str, e: &Event) -> String {
    json!({
        "o": origin,
        "a": e.action,
        "t": e.task_id,
        "s": e.session_id,
        "p": *e.payload,
    })
    .to_string()
}

async fn notify(pool: &PgPool, body: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(body)
        .execute(pool)
        .await
        .map(|_| ())
}

/// Sends local events in publication order.
async fn send_loop(
    pool: PgPool,
    origin: String,
    mut queued: mpsc::Receiver<Outgoing>,
    overflowed: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    let resync = json!({ "o": origin, "resync": "lost" }).to_string();
    let mut spilled = 0u64;
    loop {
        let event = match tokio::select! {
            _ = shutdown.cancelled() => return,
            e = queued.recv() => match e { Some(e) => e, None => return },
        } {
            Outgoing::Event(e) => e,
            Outgoing::Text(text) => {
                if let Err(e) = send_text(&pool, &origin, &text, &mut spilled).await {
                    tracing::warn!(error = %e, "cannot send a message to the other servers");
                }
                continue;
            }
        };
        if overflowed.swap(false, Ordering::SeqCst)
            && let Err(e) = notify(&pool, &resync).await
        {
            tracing::warn!(error = %e, "cannot ask the other servers to resync");
            overflowed.store(true, Ordering::SeqCst);
        }
        let text = body(&origin, &event);
        if let Err(e) = send_text(&pool, &origin, &text, &mut spilled).await {
            // Another server missed this event: it resyncs its clients.
            tracing::warn!(error = %e, action = %event.action, "cannot relay an event");
            overflowed.store(true, Ordering::SeqCst);
        }
    }
}

/// Notifies `text`, through the spill table when it is too large for `NOTIFY`.
async fn send_text(
    pool: &PgPool,
    origin: &str,
    text: &str,
    spilled: &mut u64,
) -> Result<(), sqlx::Error> {
    if text.len() <= INLINE_LIMIT {
        return notify(pool, text).await;
    }
    *spilled += 1;
    spill(pool, origin, text, spilled.is_multiple_of(64)).await
}

/// Stores a large body and notifies its row id; now and then deletes old rows.
async fn spill(pool: &PgPool, origin: &str, text: &str, sweep: bool) -> Result<(), sqlx::Error> {
    let id = uuid::Uuid::now_v7().to_string();
    let now = chrono::Utc::now().timestamp_micros();
    sqlx::query("INSERT INTO event_spill (id, body, created_at) VALUES ($1, $2, $3)")
        .bind(&id)
        .bind(text)
        .bind(now)
        .execute(pool)
        .await?;
    if sweep {
        sqlx::query("DELETE FROM event_spill WHERE created_at < $1")
            .bind(now - SPILL_TTL_MICROS)
            .execute(pool)
            .await?;
    }
    notify(pool, &json!({ "o": origin, "spill": id }).to_string()).await
}

/// What a notification asks of this server.
#[derive(Debug, PartialEq)]
enum Received {
    /// Relay this event.
    Event(Event),
    /// Read the body from `event_spill`.
    Spilled(String),
    /// The sender lost events: this server's clients refetch.
    Resync,
    /// Another server offers the answer of a call that may wait here.
    Offer(String),
    /// Another server delivered the answer we offered.
    Delivered(String),
    /// Another server is alive; `hello` when it just started and waits for our answer.
    Alive { origin: String, hello: bool },
    /// A request addressed to this server.
    Request(Request),
    /// The reply to request `rid` of this server.
    Reply(String, Value),
    /// Our own notification, or one we cannot read.
    Ignore,
}

fn parse(own: &str, text: &str) -> Received {
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return Received::Ignore;
    };
    if v["o"].as_str().is_none_or(|o| o == own) || v["to"].as_str().is_some_and(|to| to != own) {
        return Received::Ignore;
    }
    if let (Some(rid), Some(body)) = (v["rid"].as_str(), v.get("req")) {
        return Received::Request(Request {
            from: v["o"].as_str().unwrap_or_default().to_string(),
            rid: rid.to_string(),
            body: body.clone(),
        });
    }
    if let (Some(rid), Some(body)) = (v["rid"].as_str(), v.get("rep")) {
        return Received::Reply(rid.to_string(), body.clone());
    }
    if v.get("resync").is_some() {
        return Received::Resync;
    }
    if let Some(id) = v["spill"].as_str() {
        return Received::Spilled(id.to_string());
    }
    if v.get("alive").is_some() {
        return Received::Alive {
            origin: v["o"].as_str().unwrap_or_default().to_string(),
            hello: v["hello"] == true,
        };
    }
    if let Some(id) = v["offer"].as_str() {
        return Received::Offer(id.to_string());
    }
    if let Some(id) = v["delivered"].as_str() {
        return Received::Delivered(id.to_string());
    }
    let Some(action) = v["a"].as_str() else {
        return Received::Ignore;
    };
    let mut e = Event::new(action, v["p"].clone());
    e.task_id = v["t"].as_str().map(str::to_string);
    e.session_id = v["s"].as_str().map(str::to_string);
    e.remote = true;
    Received::Event(e)
}

fn resync(local: &InProcessHub, reason: &str) {
    let mut e = Event::new("resync", json!({ "reason": reason }));
    e.remote = true;
    local.publish(e);
}

async fn listen(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Where received notifications go.
struct Relay {
    local: Arc<InProcessHub>,
    offered: mpsc::Sender<String>,
    replies: Replies,
    peers: Peers,
    calls: Calls,
    requested: mpsc::Sender<Request>,
    outbox: mpsc::Sender<Outgoing>,
    own: String,
}

fn alive(own: &str, hello: bool) -> Outgoing {
    Outgoing::Text(json!({ "o": own, "alive": 1, "hello": hello }).to_string())
}

/// Says hello when the server starts, then that it is alive every `HEARTBEAT`, so the others
/// know whether an answer could be waited for elsewhere.
async fn heartbeat(outbox: mpsc::Sender<Outgoing>, own: String, shutdown: CancellationToken) {
    let mut hello = true;
    loop {
        let _ = outbox.try_send(alive(&own, hello));
        hello = false;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(HEARTBEAT) => {}
        }
    }
}

/// Relays other servers' events into the local hub. A lost connection is replaced (its
/// notifications are gone, so the local clients resync); `/healthz` shows the gap.
async fn listen_loop(
    first: PgListener,
    listener_pool: PgPool,
    pool: PgPool,
    own: String,
    relay: Relay,
    state: Arc<AtomicU8>,
    shutdown: CancellationToken,
) {
    let local = &relay.local;
    let set = |s: ListenerState| state.store(s as u8, Ordering::SeqCst);
    let mut listener = Some(first);
    loop {
        let Some(l) = listener.as_mut() else {
            match listen(&listener_pool).await {
                Ok(l) => {
                    listener = Some(l);
                    set(ListenerState::Connected);
                    tracing::warn!("event listener reconnected; clients resync");
                    resync(local, "listener");
                }
                Err(e) => {
                    tracing::debug!(error = %e, "event listener still down");
                    // A retry delay between attempts, not a wait for state.
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
            continue;
        };
        let next = tokio::select! {
            _ = shutdown.cancelled() => return,
            n = l.try_recv() => n,
        };
        match next {
            Ok(Some(n)) => match receive(&pool, &own, n.payload()).await {
                Received::Event(e) => local.publish(e),
                Received::Resync => resync(local, "relay"),
                // Full: the offer goes unanswered and its server takes the detached path.
                Received::Offer(id) => drop(relay.offered.try_send(id)),
                Received::Delivered(id) => {
                    let waiting = relay.replies.lock().expect("replies lock").remove(&id);
                    if let Some(tx) = waiting {
                        let _ = tx.send(true);
                    }
                }
                Received::Alive { origin, hello } => {
                    relay
                        .peers
                        .lock()
                        .expect("peers lock")
                        .insert(origin, std::time::Instant::now());
                    if hello {
                        let _ = relay.outbox.try_send(alive(&relay.own, false));
                    }
                }
                // Full: the caller's wait ends without a reply.
                Received::Request(r) => drop(relay.requested.try_send(r)),
                Received::Reply(rid, body) => {
                    let waiting = relay.calls.lock().expect("calls lock").remove(&rid);
                    if let Some(tx) = waiting {
                        let _ = tx.send(body);
                    }
                }
                Received::Spilled(_) | Received::Ignore => {}
            },
            // The connection was lost and is already back: what was sent meanwhile is gone.
            Ok(None) => {
                tracing::warn!("event listener reconnected; clients resync");
                resync(local, "listener");
            }
            Err(e) => {
                set(ListenerState::Reconnecting);
                tracing::warn!(error = %e, "event listener lost its connection; reconnecting");
                listener = None;
            }
        }
    }
}

/// A notification, with a spilled body read back.
async fn receive(pool: &PgPool, own: &str, text: &str) -> Received {
    match parse(own, text) {
        Received::Spilled(id) => {
            match sqlx::query("SELECT body FROM event_spill WHERE id = $1")
                .bind(&id)
                .fetch_optional(pool)
                .await
            {
                Ok(Some(row)) => parse(own, row.get::<&str, _>("body")),
                // Gone or unreadable: this server's clients refetch instead.
                _ => Received::Resync,
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_travels_with_its_routing_and_comes_back_remote() {
        let e = Event::new("task.created", json!({ "task": { "id": "t1" } }))
            .for_task("t1")
            .for_session("s1");
        let text = body("a", &e);
        assert_eq!(parse("a", &text), Received::Ignore, "our own notification");
        let Received::Event(back) = parse("b", &text) else {
            panic!("relayed")
        };
        assert_eq!(back, e);
        assert!(back.remote);
    }

    #[test]
    fn bad_or_partial_notifications_are_ignored_or_resync() {
        assert_eq!(parse("b", "not json"), Received::Ignore);
        assert_eq!(parse("b", r#"{"a":"x"}"#), Received::Ignore, "no origin");
        assert_eq!(parse("b", r#"{"o":"a"}"#), Received::Ignore, "no action");
        assert_eq!(parse("b", r#"{"o":"a","resync":"lost"}"#), Received::Resync);
        assert_eq!(
            parse("b", r#"{"o":"a","spill":"42"}"#),
            Received::Spilled("42".into())
        );
        assert_eq!(
            parse("b", r#"{"o":"a","offer":"p"}"#),
            Received::Offer("p".into())
        );
        assert_eq!(
            parse("b", r#"{"o":"a","delivered":"p"}"#),
            Received::Delivered("p".into())
        );
        assert_eq!(
            parse("b", r#"{"o":"a","to":"c","rid":"1","req":{}}"#),
            Received::Ignore,
            "addressed to another server"
        );
        assert_eq!(
            parse("b", r#"{"o":"a","to":"b","rid":"1","req":{"x":1}}"#),
            Received::Request(Request {
                from: "a".into(),
                rid: "1".into(),
                body: json!({ "x": 1 })
            })
        );
        assert_eq!(
            parse("b", r#"{"o":"a","to":"b","rid":"1","rep":true}"#),
            Received::Reply("1".into(), json!(true))
        );
        assert_eq!(
            parse("b", r#"{"o":"a","alive":1,"hello":true}"#),
            Received::Alive {
                origin: "a".into(),
                hello: true
            }
        );
    }
}
