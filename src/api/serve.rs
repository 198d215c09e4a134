//! Serving connections (spec "Server process", slow clients and bounds). `axum::serve` has no
//! timer, so a client could hold a connection open forever by sending half a request line;
//! here hyper's HTTP/1 connection is built by hand:
//!
//! - **Header read timeout** ([`Limits::header_read`], 10 s): a request's head must arrive
//!   within it, and an idle keep-alive connection waiting for its next request is closed after
//!   it too (hyper starts the timer whenever it waits for a head).
//! - **Body deadline** ([`Limits::body_read`]): a request body must arrive whole within it.
//! - **Connection caps** ([`Admission`]): at most [`Limits::total`] connections open at once,
//!   at most [`Limits::per_client`] from one client (an IPv4 address or an IPv6 /64) other than
//!   this machine's own (127.0.0.1, ::1), and other clients together never take the last
//!   [`Limits::loopback_reserve`] slots: agents reach `/mcp` at 127.0.0.1, and must get in
//!   while the LAN is hostile. A connection over a cap is closed at once (it never waits in the
//!   kernel's backlog, where it would hold up everyone behind it).
//! - **`TCP_NODELAY`** (decision 0035): without it a small write (the next WebSocket frame,
//!   SSE event or response) waits for the ACK of the one before, which the peer may delay by up
//!   to 40 ms.
//!
//! HTTP/1 only: browsers speak HTTP/2 only over TLS, which a proxy in front terminates; a
//! cleartext HTTP/2 connection would have no header timeout.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::ConnectInfo;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::server::auth::{client_key, is_local};

/// Connections open at once, at most (above the WebSocket cap and the in-flight limit, so
/// those answer 503 before this one turns clients away).
pub const MAX_CONNECTIONS: usize = 4096;

/// The serving limits; [`Limits::default`] is what the server uses.
#[derive(Clone, Debug)]
pub struct Limits {
    pub header_read: Duration,
    pub body_read: Duration,
    pub total: usize,
    pub per_client: usize,
    pub loopback_reserve: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read: Duration::from_secs(10),
            body_read: Duration::from_secs(30),
            total: MAX_CONNECTIONS,
            per_client: 256,
            loopback_reserve: 512,
        }
    }
}

/// Counts open connections per client and decides who gets in.
pub struct Admission {
    limits: Limits,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    all: usize,
    beyond_loopback: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// An admitted connection: its slot is given back when this drops.
pub struct Slot {
    admission: Arc<Admission>,
    client: Option<IpAddr>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.admission.open.lock().expect("admission lock");
        open.all -= 1;
        if let Some(client) = self.client {
            open.beyond_loopback -= 1;
            if let Some(n) = open.per_client.get_mut(&client) {
                *n -= 1;
                if *n == 0 {
                    open.per_client.remove(&client);
                }
            }
        }
    }
}

impl Admission {
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            open: Mutex::new(Open::default()),
        })
    }

    /// A slot for a connection from `ip`, or `None` when a cap is reached.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let limits = &self.limits;
        let mut open = self.open.lock().expect("admission lock");
        if open.all >= limits.total {
            return None;
        }
        let client = if is_local(ip) {
            None
        } else {
            let key = client_key(ip);
            let mine = open.per_client.get(&key).copied().unwrap_or(0);
            let remote_cap = limits.total.saturating_sub(limits.loopback_reserve);
            if mine >= limits.per_client || open.beyond_loopback >= remote_cap {
                return None;
            }
            *open.per_client.entry(key).or_insert(0) += 1;
            open.beyond_loopback += 1;
            Some(key)
        };
        open.all += 1;
        Some(Slot {
            admission: self.clone(),
            client,
        })
    }

    /// Connections open now (tests and `/metrics`).
    pub fn open(&self) -> usize {
        self.open.lock().expect("admission lock").all
    }
}

/// Serves `app` on `tcp` until `shutdown` completes (or this future is dropped), then shuts every
/// connection down gracefully and waits for open requests to finish (upgraded sockets and
/// streams end with the server's own shutdown; `main` bounds the wait).
pub async fn serve(
    tcp: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let admission = Admission::new(limits.clone());
    let stopping = CancellationToken::new();
    // Dropped (the serving task aborted) or done: every connection is shut down gracefully, so
    // none keeps the router — and the state and database pool behind it — alive.
    let _stop_connections = stopping.clone().drop_guard();
    let connections = TaskTracker::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .keep_alive(true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = accept(&tcp) => accepted,
            () = &mut shutdown => break,
        };
        let Some(slot) = admission.admit(peer.ip()) else {
            // Closed at once: a client over its cap gets nothing, and costs nothing.
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
        let body_read = limits.body_read;
        let service =
            tower::ServiceExt::map_request(app.clone(), move |req: http::Request<Incoming>| {
                let (mut parts, body) = req.into_parts();
                parts.extensions.insert(ConnectInfo(peer));
                http::Request::from_parts(parts, Body::new(DeadlineBody::new(body, body_read)))
            });
        let connection = http
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
            .with_upgrades();
        let stopping = stopping.clone();
        connections.spawn(async move {
            // A connection's end (closed, timed out, reset) is the client's business.
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = stopping.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(slot);
        });
    }
    drop(tcp);
    connections.close();
    stopping.cancel();
    connections.wait().await;
}

/// The next connection. As axum's own listener: a connection that failed before it was
/// accepted is skipped; anything else (out of descriptors) is retried after a pause.
async fn accept(tcp: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match tcp.accept().await {
            Ok(accepted) => return accepted,
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                tracing::error!(error = %e, "accept failed; retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// A request body that must arrive whole within a deadline, counted from its first read
/// (tower-http's `TimeoutBody` restarts its timer at every frame, so a body trickling one
/// byte at a time would never end).
struct DeadlineBody {
    body: Incoming,
    limit: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl DeadlineBody {
    fn new(body: Incoming, limit: Duration) -> DeadlineBody {
        DeadlineBody {
            body,
            limit,
            deadline: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
struct BodyTooSlow(Duration);

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let limit = self.limit;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTooSlow(limit)))));
        }
        Pin::new(&mut self.body)
            .poll_frame(cx)
            .map_err(|e| Box::new(e) as axum::BoxError)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            total: 10,
            per_client: 3,
            loopback_reserve: 4,
            ..Limits::default()
        }
    }

    #[test]
    fn one_client_beyond_loopback_gets_its_share_and_no_more() {
        let a = Admission::new(limits());
        let lan: IpAddr = "192.0.2.7".parse().unwrap();
        let held: Vec<_> = (0..3)
            .map(|_| a.admit(lan).expect("within its share"))
            .collect();
        assert!(a.admit(lan).is_none(), "over its share");
        assert!(a.admit("192.0.2.8".parse().unwrap()).is_some());
        drop(held);
        assert!(
            a.admit(lan).is_some(),
            "slots come back when connections close"
        );
    }

    #[test]
    fn an_ipv6_64_is_one_client() {
        let a = Admission::new(limits());
        let _held: Vec<_> = ["2001:db8::1", "2001:db8::2", "2001:db8::3"]
            .iter()
            .map(|ip| a.admit(ip.parse().unwrap()).unwrap())
            .collect();
        assert!(a.admit("2001:db8::ffff".parse().unwrap()).is_none());
        assert!(a.admit("2001:db8:0:1::1".parse().unwrap()).is_some());
    }

    #[test]
    fn the_lan_never_takes_the_slots_kept_for_loopback() {
        let a = Admission::new(limits());
        let mut held = Vec::new();
        for host in 1..=10u8 {
            if let Some(s) = a.admit(IpAddr::from([192, 0, 2, host])) {
                held.push(s);
            }
        }
        assert_eq!(held.len(), 6, "total 10 minus the loopback reserve of 4");
        let local: Vec<_> = (0..4)
            .map(|_| {
                a.admit("127.0.0.1".parse().unwrap())
                    .expect("kept for loopback")
            })
            .collect();
        assert!(
            a.admit("127.0.0.1".parse().unwrap()).is_none(),
            "the total cap"
        );
        assert_eq!(a.open(), 10);
        drop(local);
        assert!(a.admit("::1".parse().unwrap()).is_some());
    }
}
