//! The agent's output on its way to the ACP connection, with ordering marks.
//!
//! An agent's reply streams over ACP (its stdout) while its question comes over MCP (HTTP), so
//! the question can reach the server while the reply's last chunk is still unread in the pipe
//! or unparsed in the connection. `worker::sync` must take that chunk before the question is
//! written (the reply stays before the question in the transcript). A count of what the
//! worker took cannot tell; a mark can: [`Relay::mark`] asks this relay to put a
//! `_turnstile/mark` notification into the stream right after everything the agent had written
//! by then (what the pipe holds is read first; a line being read is finished first). The ACP
//! connection dispatches in order, so when the mark's event reaches the worker, every update
//! the agent sent before it already has.
//!
//! Hand-written: neither `agent-client-protocol` nor tokio offers "everything readable now"
//! on a byte stream (docs/decisions/0033-ordering-marks.md). A reader wrapper, not a copying
//! task: the connection's own read loop polls it, so the agent's output costs no extra hop.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// The JSON-RPC method of a mark. Only marks carrying this connection's nonce count (an agent
/// cannot forge one).
pub const MARK_METHOD: &str = "_turnstile/mark";

/// A mark as the ACP connection parses it.
#[derive(Debug, Clone, Serialize, Deserialize, agent_client_protocol::JsonRpcNotification)]
#[notification(method = "_turnstile/mark")]
pub struct Mark {
    pub mark: u64,
    pub nonce: String,
}

/// How many bytes wait unread in the source (a pipe's kernel buffer); 0 when unknown.
pub type Unread = Box<dyn Fn() -> usize + Send>;

/// Marks asked for and not yet put into the output, at most (one per question being asked).
pub const MAX_WAITING_MARKS: usize = 1024;

/// The longest line (one JSON-RPC message) an agent may write: T8 bounds one update to 1 MiB.
/// A longer one ends the agent's output with an error naming the limit, before the connection
/// would buffer it whole.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The handle that asks for marks.
pub struct Relay {
    marks: mpsc::Sender<u64>,
    next: AtomicU64,
    nonce: String,
    /// Why the agent's output was cut off ([`MAX_LINE_BYTES`]), once it was.
    broken: Arc<std::sync::Mutex<Option<String>>>,
}

impl Relay {
    /// `source` as the ACP connection should read it: the same bytes, with marks put in when
    /// asked for.
    pub fn wrap<R>(source: R, unread: Unread) -> (Arc<Relay>, Marked<R>)
    where
        R: AsyncRead + Unpin,
    {
        let (marks, requests) = mpsc::channel(MAX_WAITING_MARKS);
        let nonce = crate::server::repo::new_id();
        let broken = Arc::new(std::sync::Mutex::new(None));
        let reader = Marked {
            broken: broken.clone(),
            source,
            unread,
            requests,
            asking: true,
            owed: Vec::new(),
            out: Vec::new(),
            at_line_start: true,
            line_bytes: 0,
            nonce: nonce.clone(),
        };
        let relay = Arc::new(Relay {
            marks,
            next: AtomicU64::new(1),
            nonce,
            broken,
        });
        (relay, reader)
    }

    /// Asks for a mark after everything the agent has written so far; returns its number,
    /// or `None` when the agent's output is no longer read or [`MAX_WAITING_MARKS`] wait
    /// already (an agent flooding questions: the newest are not ordered, memory stays bounded).
    pub fn mark(&self) -> Option<u64> {
        let mark = self.next.fetch_add(1, Ordering::SeqCst);
        self.marks.try_send(mark).ok().map(|()| mark)
    }

    /// Whether `mark` is one of this relay's.
    pub fn owns(&self, mark: &Mark) -> bool {
        mark.nonce == self.nonce
    }

    /// Why the agent's output was cut off, if it was (T8): the reason its connection ended.
    pub fn broken(&self) -> Option<String> {
        self.broken.lock().expect("relay lock").clone()
    }
}

/// Unread bytes in the pipe behind `fd` (`FIONREAD`).
pub fn unread_in_pipe(fd: std::os::fd::RawFd) -> Unread {
    Box::new(move || {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int; `fd` belongs to the source the reader owns, which
        // outlives every call (the closure lives in the same reader).
        let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
        if rc == 0 { n.max(0) as usize } else { 0 }
    })
}

/// The agent's output with marks (see [`Relay::wrap`]).
pub struct Marked<R> {
    source: R,
    unread: Unread,
    requests: mpsc::Receiver<u64>,
    asking: bool,
    /// Marks asked for and not yet put in.
    owed: Vec<u64>,
    /// Mark lines put in and not yet read.
    out: Vec<u8>,
    /// Whether the last byte read from the source ended a line.
    at_line_start: bool,
    /// Bytes of the line being read so far.
    line_bytes: usize,
    nonce: String,
    broken: Arc<std::sync::Mutex<Option<String>>>,
}

impl<R> Marked<R> {
    fn write_marks(&mut self) {
        for mark in self.owed.drain(..) {
            let line = serde_json::json!({
                "jsonrpc": "2.0",
                "method": MARK_METHOD,
                "params": { "mark": mark, "nonce": self.nonce },
            });
            self.out.extend_from_slice(line.to_string().as_bytes());
            self.out.push(b'\n');
        }
    }

    fn hand_over(&mut self, buf: &mut ReadBuf<'_>) {
        let n = self.out.len().min(buf.remaining());
        buf.put_slice(&self.out[..n]);
        self.out.drain(..n);
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Marked<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.out.is_empty() {
            this.hand_over(buf);
            return Poll::Ready(Ok(()));
        }
        while this.asking {
            match this.requests.poll_recv(cx) {
                Poll::Ready(Some(mark)) => this.owed.push(mark),
                Poll::Ready(None) => this.asking = false,
                Poll::Pending => break,
            }
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.source).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                if let Some(last) = read.last() {
                    this.at_line_start = *last == b'\n';
                }
                this.line_bytes = match read.iter().rposition(|b| *b == b'\n') {
                    Some(end) => read.len() - end - 1,
                    None => this.line_bytes + read.len(),
                };
                let longest = read
                    .split(|b| *b == b'\n')
                    .map(<[u8]>::len)
                    .max()
                    .unwrap_or(0);
                if this.line_bytes > MAX_LINE_BYTES || longest > MAX_LINE_BYTES {
                    let reason =
                        format!("the agent sent a message of more than {MAX_LINE_BYTES} bytes");
                    *this.broken.lock().expect("relay lock") = Some(reason.clone());
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        reason,
                    )));
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        // Nothing more to read now: the mark goes in at a line's end, once the pipe is empty
        // (bytes there not yet seen by the reactor are waited for: the source wakes us).
        if !this.owed.is_empty() && this.at_line_start && (this.unread)() == 0 {
            this.write_marks();
            this.hand_over(buf);
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

    /// Bytes the agent wrote before a mark was asked for are forwarded before the mark, also
    /// when they still sit in the pipe unread (the relay has not been polled since they were
    /// written: nothing but `FIONREAD` tells it they are there).
    #[tokio::test(flavor = "current_thread")]
    async fn what_the_pipe_holds_goes_before_the_mark() {
        let (mut agent, ours) = tokio::net::unix::pipe::pipe().unwrap();
        let fd = ours.as_raw_fd();
        let (relay, acp) = Relay::wrap(ours, unread_in_pipe(fd));
        let mut acp = tokio::io::BufReader::new(acp).lines();
        agent.write_all(b"{\"first\":1}\n").await.unwrap();
        assert_eq!(acp.next_line().await.unwrap().unwrap(), "{\"first\":1}");
        // Written and marked with no await in between: the relay task has not run since.
        agent.write_all(b"{\"second\":2}\n").await.unwrap();
        let mark = relay.mark().unwrap();
        assert_eq!(acp.next_line().await.unwrap().unwrap(), "{\"second\":2}");
        let line = acp.next_line().await.unwrap().unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["method"], MARK_METHOD);
        assert_eq!(parsed["params"]["mark"], mark);
        assert!(relay.owns(&Mark {
            mark,
            nonce: parsed["params"]["nonce"].as_str().unwrap().into()
        }));
        assert!(!relay.owns(&Mark {
            mark,
            nonce: "forged".into()
        }));
    }

    /// A mark never splits a line: asked for while a line is half written, it follows the
    /// line's end.
    #[tokio::test(flavor = "current_thread")]
    async fn a_mark_waits_for_the_line_being_written() {
        let (mut agent, ours) = tokio::io::duplex(1024);
        let (relay, acp) = Relay::wrap(ours, Box::new(|| 0));
        let mut acp = tokio::io::BufReader::new(acp);
        agent.write_all(b"{\"half\":").await.unwrap();
        let mut got = vec![0u8; 8];
        acp.read_exact(&mut got).await.unwrap();
        let mark = relay.mark().unwrap();
        agent.write_all(b"1}\n").await.unwrap();
        let mut rest = String::new();
        acp.read_line(&mut rest).await.unwrap();
        assert_eq!(rest, "1}\n");
        let mut line = String::new();
        acp.read_line(&mut line).await.unwrap();
        assert!(line.contains(&format!("\"mark\":{mark}")), "{line}");
    }

    /// T8: a line longer than [`MAX_LINE_BYTES`] ends the output with an error, also when it
    /// arrives in pieces; lines up to the limit pass.
    #[tokio::test(flavor = "current_thread")]
    async fn a_message_over_the_limit_ends_the_output() {
        let (mut agent, ours) = tokio::io::duplex(64 * 1024);
        let (_relay, acp) = Relay::wrap(ours, Box::new(|| 0));
        let mut acp = tokio::io::BufReader::new(acp);
        let writer = tokio::spawn(async move {
            let mut ok = vec![b'a'; MAX_LINE_BYTES];
            ok.push(b'\n');
            agent.write_all(&ok).await.unwrap();
            let piece = vec![b'b'; 4096];
            for _ in 0..=MAX_LINE_BYTES / 4096 {
                if agent.write_all(&piece).await.is_err() {
                    return;
                }
            }
        });
        let mut line = Vec::new();
        acp.read_until(b'\n', &mut line).await.unwrap();
        assert_eq!(line.len(), MAX_LINE_BYTES + 1, "a line at the limit passes");
        let mut rest = Vec::new();
        let err = acp.read_until(b'\n', &mut rest).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("more than"), "{err}");
        drop(acp);
        writer.await.unwrap();
    }

    /// Once the agent's output is no longer read, marks are refused instead of waited for.
    #[tokio::test(flavor = "current_thread")]
    async fn no_marks_after_the_output_ends() {
        let (agent, ours) = tokio::io::duplex(64);
        let (relay, mut acp) = Relay::wrap(ours, Box::new(|| 0));
        drop(agent);
        let mut rest = Vec::new();
        acp.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        drop(acp);
        assert_eq!(relay.mark(), None);
    }
}
