//! The mock agent's output is on the wire before its next MCP call (decision 0033's agent
//! side). The ACP crate queues what the agent sends and writes it from its own task, so an
//! MCP call made right after a reply can reach the server before the reply's last chunks
//! reach the agent's stdout: no mark in the server's reading of that stream can put them back
//! before the question (the mock showed it about once in twenty runs of
//! `agents::l8_a_question_that_takes_over_an_identical_one_still_writes_the_reply_before_it`).
//! An agent that writes its reply before it calls a tool is what the server expects; the
//! mock counts its `session/update` notifications as it sends them and as the crate's writer
//! flushes them, and waits for the two to meet before it calls a tool.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::AsyncWrite;

/// A `session/update` line's method once serialized (compact JSON). Text inside a string
/// value has its quotes escaped, so only the method itself matches.
const UPDATE: &[u8] = br#""method":"session/update""#;

/// The longest a tool call waits for the agent's own output (a stuck writer must not stop
/// the agent: the server's mark then gives up as before).
const WAIT: Duration = Duration::from_secs(1);

/// `session/update` notifications sent and written so far.
#[derive(Debug, Default)]
pub struct Written {
    sent: AtomicU64,
    flushed: AtomicU64,
    notify: tokio::sync::Notify,
}

impl Written {
    /// One more notification queued for the writer.
    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits until everything sent so far was written and flushed (bounded by [`WAIT`]).
    pub async fn flushed(&self) {
        let target = self.sent.load(Ordering::SeqCst);
        let _ = tokio::time::timeout(WAIT, async {
            loop {
                let notified = self.notify.notified();
                if self.flushed.load(Ordering::SeqCst) >= target {
                    return;
                }
                notified.await;
            }
        })
        .await;
    }
}

/// The agent's output stream, counting the `session/update` lines it has flushed. The crate
/// writes one line at a time, each followed by a flush; the first write of a line carries all
/// of it.
pub struct CountingWriter<W> {
    inner: Pin<Box<W>>,
    written: std::sync::Arc<Written>,
    line_start: bool,
    update: bool,
}

impl<W> CountingWriter<W> {
    pub fn new(inner: W, written: std::sync::Arc<Written>) -> Self {
        CountingWriter {
            inner: Box::pin(inner),
            written,
            line_start: true,
            update: false,
        }
    }
}

impl<W: AsyncWrite> AsyncWrite for CountingWriter<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.line_start {
            self.update = buf.windows(UPDATE.len()).any(|w| w == UPDATE);
            self.line_start = false;
        }
        self.inner.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let ready = self.inner.as_mut().poll_flush(cx);
        if let Poll::Ready(Ok(())) = ready
            && !self.line_start
        {
            if self.update {
                self.written.flushed.fetch_add(1, Ordering::SeqCst);
                self.written.notify.notify_waiters();
            }
            self.line_start = true;
            self.update = false;
        }
        ready
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.as_mut().poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::AsyncWriteExt;
    use std::sync::Arc;

    /// Counts only the `session/update` lines, once each is flushed; `flushed()` waits for
    /// them.
    #[tokio::test]
    async fn flushed_waits_for_every_update_sent_to_be_written() {
        let written = Arc::new(Written::default());
        let mut w = CountingWriter::new(Vec::<u8>::new(), written.clone());
        written.sent();
        let waiter = {
            let written = written.clone();
            tokio::spawn(async move { written.flushed().await })
        };
        w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n")
            .await
            .unwrap();
        w.flush().await.unwrap();
        assert_eq!(
            written.flushed.load(Ordering::SeqCst),
            0,
            "a response is not an update"
        );
        assert!(!waiter.is_finished());
        w.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{}}\n")
            .await
            .unwrap();
        assert_eq!(written.flushed.load(Ordering::SeqCst), 0, "not flushed yet");
        w.flush().await.unwrap();
        assert_eq!(written.flushed.load(Ordering::SeqCst), 1);
        tokio::time::timeout(Duration::from_millis(500), waiter)
            .await
            .expect("the waiter is released")
            .unwrap();
    }
}
