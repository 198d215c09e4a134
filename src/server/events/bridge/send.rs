//! Sending: local events and server-to-server messages in order, large bodies through the
//! spill table.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::wire::body;
use super::{CHANNEL, INLINE_LIMIT, Outgoing, SPILL_TTL_MICROS};

pub(super) async fn notify(pool: &PgPool, body: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(body)
        .execute(pool)
        .await
        .map(|_| ())
}

/// Sends local events in publication order.
pub(super) async fn send_loop(
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
pub(super) async fn send_text(
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
pub(super) async fn spill(
    pool: &PgPool,
    origin: &str,
    text: &str,
    sweep: bool,
) -> Result<(), sqlx::Error> {
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
