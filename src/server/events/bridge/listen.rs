//! Receiving: the listener connection (rebuilt when lost) and where each notification goes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::json;
use sqlx::postgres::PgListener;
use sqlx::{PgPool, Row};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::wire::{Received, parse};
use super::{CHANNEL, Calls, RETRY, Replies};
use crate::server::events::{Event, EventHub, InProcessHub, ListenerState, Request};

pub(super) fn resync(local: &InProcessHub, reason: &str) {
    let mut e = Event::new("resync", json!({ "reason": reason }));
    e.remote = true;
    local.publish(e);
}

pub(super) async fn listen(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Where received notifications go.
pub(super) struct Relay {
    pub(super) local: Arc<InProcessHub>,
    pub(super) offered: mpsc::Sender<String>,
    pub(super) replies: Replies,
    pub(super) calls: Calls,
    pub(super) requested: mpsc::Sender<Request>,
    pub(super) peers: Arc<super::Peers>,
}

/// Relays other servers' events into the local hub. A lost connection is replaced (its
/// notifications are gone, so the local clients resync); `/healthz` shows the gap.
pub(super) async fn listen_loop(
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
            Ok(Some(n)) => match receive(&pool, &own, n.payload())
                .await
                .heard_by(&relay.peers)
            {
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
                // Full: the caller's wait ends without a reply.
                Received::Request(r) => drop(relay.requested.try_send(r)),
                Received::Reply(rid, body) => {
                    let waiting = relay.calls.lock().expect("calls lock").remove(&rid);
                    if let Some(tx) = waiting {
                        let _ = tx.send(body);
                    }
                }
                Received::Hello(from) => relay.peers.welcome(&from),
                Received::Welcome(from) => relay.peers.welcomed(from),
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

impl Received {
    /// Anything but our own or an unreadable notification comes from another server.
    fn heard_by(self, peers: &super::Peers) -> Self {
        if self != Received::Ignore {
            peers.heard();
        }
        self
    }
}

/// A notification, with a spilled body read back.
pub(super) async fn receive(pool: &PgPool, own: &str, text: &str) -> Received {
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
