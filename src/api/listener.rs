//! The listener the router is served on: a bounded number of open connections, each sending
//! at once.
//!
//! - **Bounded** (spec "Server process", bounds): at most [`MAX_CONNECTIONS`] connections are
//!   open at once — idle keep-alive ones, upgraded WebSockets and long MCP streams included,
//!   which the router's in-flight limit does not see. At the cap the server stops accepting:
//!   new connections wait in the kernel's backlog until one closes, instead of each costing a
//!   task, buffers and a descriptor.
//! - **`TCP_NODELAY`** (decision 0035): without it a small write (the next WebSocket frame, SSE
//!   event or response) waits for the ACK of the one before, which the peer may delay by up to
//!   40 ms (Nagle's algorithm meeting delayed ACK): B3's p99 at 500 answers/s was 21–23 ms
//!   with it, 10–11 ms without.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections open at once, at most (above the WebSocket cap and the in-flight limit, so
/// those answer 503 before this one makes clients wait).
pub const MAX_CONNECTIONS: usize = 4096;

/// [`bounded`] with [`MAX_CONNECTIONS`], as axum serves it (its `TapIo` carries the remote
/// address to `ConnectInfo`).
pub fn listener(tcp: TcpListener) -> axum::serve::TapIo<Bounded, fn(&mut Held)> {
    axum::serve::ListenerExt::tap_io(bounded(tcp, MAX_CONNECTIONS), no_delay)
}

fn no_delay(held: &mut Held) {
    if let Err(e) = held.stream.set_nodelay(true) {
        tracing::warn!(error = %e, "cannot set TCP_NODELAY on a connection");
    }
}

/// `tcp`, accepting at most `cap` connections open at once.
pub fn bounded(tcp: TcpListener, cap: usize) -> Bounded {
    Bounded {
        tcp,
        slots: Arc::new(Semaphore::new(cap.max(1))),
    }
}

pub struct Bounded {
    tcp: TcpListener,
    slots: Arc<Semaphore>,
}

impl axum::serve::Listener for Bounded {
    type Io = Held;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Held, SocketAddr) {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the connection slots are never closed");
        loop {
            match self.tcp.accept().await {
                Ok((stream, addr)) => {
                    return (
                        Held {
                            stream,
                            _slot: slot,
                        },
                        addr,
                    );
                }
                // As axum's own listener: a connection that failed before it was accepted
                // is skipped; anything else (out of descriptors) is retried after a pause.
                Err(e) if is_connection_error(&e) => {}
                Err(e) => {
                    tracing::error!(error = %e, "accept failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
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

/// An accepted connection holding its slot until it is dropped.
pub struct Held {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl Held {
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

impl AsyncRead for Held {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Held {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;

    #[tokio::test]
    async fn accepted_connections_send_at_once_and_at_most_cap_are_open() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let mut listener =
            axum::serve::ListenerExt::tap_io(bounded(tcp, 1), no_delay as fn(&mut Held));
        let _a = TcpStream::connect(addr).await.unwrap();
        let (first, _) = listener.accept().await;
        assert!(first.stream().nodelay().unwrap(), "TCP_NODELAY");
        // The second connection completes in the kernel's backlog but is not accepted while
        // the first is open (the slot is taken before accepting).
        let _b = TcpStream::connect(addr).await.unwrap();
        let mut next = tokio::spawn(async move { listener.accept().await.1 });
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut next)
                .await
                .is_err(),
            "accepted beyond the cap"
        );
        drop(first);
        let accepted = tokio::time::timeout(Duration::from_secs(10), next)
            .await
            .expect("accepted once a slot is free")
            .unwrap();
        assert_eq!(accepted.ip(), addr.ip());
    }
}
