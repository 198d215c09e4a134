//! Whether other servers listen (decision 0018, amendment). A server alone on its database
//! sends none of its events: nobody would read them but its own listener, which reads each one
//! back only to drop it (B3 on PostgreSQL: five to six `NOTIFY` statements per round trip).
//!
//! It learns of other servers two ways: any notification from one (every server says hello
//! once it listens), at once; and its heartbeat's look at the live servers (`servers`, every
//! third of `--server-ttl`). It becomes alone only when a look found no other live server and
//! nothing was heard from one since that look began. When it stops being alone it asks the
//! others to resync their clients: what it published while alone never reached them (P10).
//! A server starting up waits (briefly) for a welcome from each live server before it serves:
//! each one has heard its hello by then, so none leaves it out of what follows.
//! Messages between servers about answers and requests are always sent.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;

use super::Outgoing;

pub struct Peers {
    own: String,
    outbox: mpsc::Sender<Outgoing>,
    /// Read for every burst the sender sends; changed under `heard`.
    alone: AtomicBool,
    /// Notifications heard from other servers so far.
    heard: Mutex<u64>,
    skipped: AtomicU64,
    /// The servers that answered our hello.
    welcomed: Mutex<HashSet<String>>,
    welcomes: tokio::sync::Notify,
}

impl Peers {
    /// Not alone until a look says so.
    pub(super) fn new(own: String, outbox: mpsc::Sender<Outgoing>) -> Self {
        Self {
            own,
            outbox,
            alone: AtomicBool::new(false),
            heard: Mutex::new(0),
            skipped: AtomicU64::new(0),
            welcomed: Mutex::default(),
            welcomes: tokio::sync::Notify::new(),
        }
    }

    /// Whether no other server listens, as far as this one knows.
    pub fn alone(&self) -> bool {
        self.alone.load(Ordering::SeqCst)
    }

    /// Events left unsent because no other server listened.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::SeqCst)
    }

    pub(super) fn skip(&self, events: u64) {
        self.skipped.fetch_add(events, Ordering::SeqCst);
    }

    /// Tells the servers listening now that this one listens too.
    pub(super) fn say_hello(&self) {
        self.send(json!({ "o": self.own, "hello": true }).to_string());
    }

    /// Server `to` said hello: it hears from us from now on (`heard` made us not alone).
    pub(super) fn welcome(&self, to: &str) {
        self.send(json!({ "o": self.own, "to": to, "welcome": true }).to_string());
    }

    pub(super) fn welcomed(&self, from: String) {
        self.welcomed.lock().expect("peers lock").insert(from);
        self.welcomes.notify_waiters();
    }

    /// Waits until each of `servers` welcomed this one, at most `within` (a server that
    /// stopped without its row expiring yet never does). Whether all did.
    pub async fn await_welcomes(&self, servers: &[String], within: Duration) -> bool {
        let all = || {
            let welcomed = self.welcomed.lock().expect("peers lock");
            servers.iter().all(|s| welcomed.contains(s))
        };
        tokio::time::timeout(within, async {
            loop {
                let next = self.welcomes.notified();
                if all() {
                    return;
                }
                next.await;
            }
        })
        .await
        .is_ok()
    }

    /// A notification came from another server.
    pub(super) fn heard(&self) {
        let mut heard = self.heard.lock().expect("peers lock");
        *heard += 1;
        self.not_alone();
    }

    /// Where a look at the live servers begins: give it to [`Peers::looked`].
    pub fn look(&self) -> u64 {
        *self.heard.lock().expect("peers lock")
    }

    /// What the look that began at `began` found: whether other servers are alive.
    pub fn looked(&self, began: u64, others_alive: bool) {
        let heard = self.heard.lock().expect("peers lock");
        if others_alive {
            self.not_alone();
        } else if *heard == began {
            self.alone.store(true, Ordering::SeqCst);
        }
    }

    /// Called with `heard` locked.
    fn not_alone(&self) {
        if self.alone.swap(false, Ordering::SeqCst) {
            self.send(json!({ "o": self.own, "resync": "peer" }).to_string());
        }
    }

    fn send(&self, text: String) {
        if self.outbox.try_send(Outgoing::Text(text)).is_err() {
            tracing::warn!("the event outbox is full; other servers resync later");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(rx: &mut mpsc::Receiver<Outgoing>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(Outgoing::Text(t)) = rx.try_recv() {
            out.push(t);
        }
        out
    }

    #[test]
    fn alone_only_when_a_look_finds_nobody_and_nothing_was_heard_meanwhile() {
        let (tx, mut rx) = mpsc::channel(8);
        let peers = Peers::new("a".into(), tx);
        assert!(!peers.alone(), "not alone until a look says so");
        let began = peers.look();
        peers.heard(); // a hello arrives while the look runs
        peers.looked(began, false);
        assert!(!peers.alone(), "the look is older than what was heard");
        let began = peers.look();
        peers.looked(began, false);
        assert!(peers.alone());
        assert!(texts(&mut rx).is_empty());
        // Someone says hello: not alone, and the others' clients resync once.
        peers.heard();
        assert!(!peers.alone());
        peers.heard();
        assert_eq!(texts(&mut rx), [r#"{"o":"a","resync":"peer"}"#]);
        // A look that finds a live server ends being alone the same way.
        let began = peers.look();
        peers.looked(began, false);
        assert!(peers.alone());
        peers.looked(peers.look(), true);
        assert!(!peers.alone());
        assert_eq!(texts(&mut rx), [r#"{"o":"a","resync":"peer"}"#]);
    }
}
