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

/// Notifies each of `texts` (each within `INLINE_LIMIT`), in order, in one statement: one
/// transaction, so the bodies must differ (`NOTIFY` keeps one of identical payloads).
pub(super) async fn notify_all(pool: &PgPool, texts: &[String]) -> Result<(), sqlx::Error> {
    // A function scan over the array yields its elements in order, and each row's `pg_notify`
    // runs as the row is produced.
    sqlx::query("SELECT pg_notify($1, b) FROM unnest($2::text[]) AS t(b)")
        .bind(CHANNEL)
        .bind(texts)
        .execute(pool)
        .await
        .map(|_| ())
}

/// At most this many queued items go out in one statement.
const BATCH: usize = 256;

/// Sends local events in publication order. Whatever queued while the last statement ran goes
/// out together: one `NOTIFY` statement per burst, not per event (B3 on PostgreSQL published
/// ~10 events per round trip, each its own round trip to the database, one after the other).
pub(super) async fn send_loop(
    pool: PgPool,
    origin: String,
    mut queued: mpsc::Receiver<Outgoing>,
    overflowed: Arc<AtomicBool>,
    peers: Arc<super::Peers>,
    shutdown: CancellationToken,
) {
    let resync = json!({ "o": origin, "resync": "lost" }).to_string();
    let mut spilled = 0u64;
    let mut burst = Vec::with_capacity(BATCH);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            n = queued.recv_many(&mut burst, BATCH) => if n == 0 { return },
        }
        // Alone: nobody reads our events (`peers.rs`); whoever comes says hello first.
        let alone = peers.alone();
        // Another server missed events: it resyncs its clients (before what follows).
        let mut texts = Vec::with_capacity(burst.len() + 1);
        let mut events = overflowed.swap(false, Ordering::SeqCst) && !alone;
        if events {
            texts.push(resync.clone());
        }
        let mut skipped = 0;
        for item in burst.drain(..) {
            texts.push(match item {
                Outgoing::Event(_) if alone => {
                    skipped += 1;
                    continue;
                }
                Outgoing::Event(e) => {
                    events = true;
                    body(&origin, &e)
                }
                Outgoing::Text(text) => text,
            });
        }
        peers.skip(skipped);
        if texts.is_empty() {
            continue;
        }
        if let Err(e) = send_texts(&pool, &origin, &texts, &mut spilled).await {
            if events {
                // Another server missed an event (or the resync): it is asked again next time.
                tracing::warn!(error = %e, "cannot relay events to the other servers");
                overflowed.store(true, Ordering::SeqCst);
            } else {
                tracing::warn!(error = %e, "cannot send a message to the other servers");
            }
        }
    }
}

/// Notifies `texts` in order: runs of inline bodies in one statement each (a run ends before a
/// body equal to one already in it, and at a body for the spill table).
async fn send_texts(
    pool: &PgPool,
    origin: &str,
    texts: &[String],
    spilled: &mut u64,
) -> Result<(), sqlx::Error> {
    // `texts[start..i]` is the run not sent yet.
    let mut start = 0;
    for (i, text) in texts.iter().enumerate() {
        let inline = text.len() <= INLINE_LIMIT;
        if start < i && (!inline || texts[start..i].contains(text)) {
            notify_all(pool, &texts[start..i]).await?;
            start = i;
        }
        if !inline {
            send_text(pool, origin, text, spilled).await?;
            start = i + 1;
        }
    }
    if start < texts.len() {
        notify_all(pool, &texts[start..]).await?;
    }
    Ok(())
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
