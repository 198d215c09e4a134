//! Streamed agent output: the agent sends a reply in many chunks; the transcript keeps one
//! message per reply. A reply ends where another row entered the transcript (a tool call, a
//! question, a permission request) — known in memory, so a chunk costs no probe query. A
//! question comes over MCP, not over the agent's ACP stream, so before it is written the
//! worker takes what the agent already sent (`worker::sync`, up to a mark in the agent's output
//! stream, decision 0033): the reply's last chunks stay in the reply before the question.
//!
//! Chunks are buffered in memory and written at most once per [`FLUSH_INTERVAL`] (or when
//! [`FLUSH_BYTES`] are waiting): a reply of n bytes in k chunks costs O(n) of memory copies and
//! a bounded number of writes and events, not k full rewrites (docs/decisions/0014).

use std::time::Duration;

use tokio::time::Instant;

use crate::model::MessageKind;

/// The longest a streamed chunk waits in memory before it is written and published.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Buffered bytes that are written at once, without waiting for the interval.
pub const FLUSH_BYTES: usize = 64 * 1024;

/// One reply being streamed: its message id and content so far.
#[derive(Debug, Default)]
struct Open {
    id: String,
    content: String,
    /// How much of `content` the database has.
    written: usize,
    /// The session's foreign-row count when this reply began.
    mark: u64,
}

impl Open {
    fn unwritten(&self) -> usize {
        self.content.len() - self.written
    }
}

/// A write the worker owes: message `id` gets `content`.
#[derive(Debug, PartialEq)]
pub struct Flush {
    pub id: String,
    pub content: String,
}

/// The open text reply and the open thought of a turn, and replies that ended with content
/// still unwritten.
#[derive(Debug, Default)]
pub struct StreamMerge {
    text: Option<Open>,
    thought: Option<Open>,
    closed: Vec<Flush>,
    /// When the oldest unwritten chunk arrived.
    since: Option<Instant>,
}

/// What to do with a chunk.
#[derive(Debug, PartialEq)]
pub enum Chunk {
    /// Start a new message with this content (after writing what [`StreamMerge::take`] gives).
    New(String),
    /// Kept in memory until the next flush.
    Buffered,
}

impl StreamMerge {
    fn slot(&mut self, kind: MessageKind) -> &mut Option<Open> {
        if kind == MessageKind::Thinking {
            &mut self.thought
        } else {
            &mut self.text
        }
    }

    /// Another row entered the transcript: the next chunk starts a new message. What the
    /// ended replies have unwritten stays owed ([`StreamMerge::take`]).
    pub fn break_here(&mut self) {
        for open in [self.text.take(), self.thought.take()]
            .into_iter()
            .flatten()
        {
            if open.unwritten() > 0 {
                self.closed.push(Flush {
                    id: open.id,
                    content: open.content,
                });
            }
        }
    }

    /// Folds `chunk` into the open reply of `kind`, unless rows were written since it began
    /// (`mark` is the session's current foreign-row count).
    pub fn push(&mut self, kind: MessageKind, chunk: &str, mark: u64, now: Instant) -> Chunk {
        if [&self.text, &self.thought]
            .iter()
            .any(|o| o.as_ref().is_some_and(|o| o.mark != mark))
        {
            self.break_here();
        }
        match self.slot(kind) {
            Some(open) => {
                open.content.push_str(chunk);
                self.since.get_or_insert(now);
                Chunk::Buffered
            }
            None => Chunk::New(chunk.to_string()),
        }
    }

    /// Records the message a `Chunk::New` created (its content is written).
    pub fn opened(&mut self, kind: MessageKind, id: String, content: String, mark: u64) {
        let written = content.len();
        *self.slot(kind) = Some(Open {
            id,
            content,
            written,
            mark,
        });
    }

    /// Bytes kept in memory and not yet written.
    pub fn unwritten(&self) -> usize {
        let open: usize = [&self.text, &self.thought]
            .iter()
            .filter_map(|o| o.as_ref())
            .map(Open::unwritten)
            .sum();
        open + self.closed.iter().map(|f| f.content.len()).sum::<usize>()
    }

    /// Whether a write is owed.
    pub fn owes(&self) -> bool {
        !self.closed.is_empty() || self.unwritten() > 0
    }

    /// When the owed write is due: [`FLUSH_INTERVAL`] after its oldest chunk, or now when
    /// [`FLUSH_BYTES`] wait. `None` when nothing is owed.
    pub fn due(&self) -> Option<Instant> {
        if !self.owes() {
            return None;
        }
        let since = self.since.unwrap_or_else(Instant::now);
        if self.unwritten() >= FLUSH_BYTES || !self.closed.is_empty() {
            Some(since)
        } else {
            Some(since + FLUSH_INTERVAL)
        }
    }

    /// The writes owed now, oldest reply first; afterwards nothing is owed.
    pub fn take(&mut self) -> Vec<Flush> {
        let mut flushes = std::mem::take(&mut self.closed);
        for open in [&mut self.text, &mut self.thought].into_iter().flatten() {
            if open.unwritten() > 0 {
                open.written = open.content.len();
                flushes.push(Flush {
                    id: open.id.clone(),
                    content: open.content.clone(),
                });
            }
        }
        self.since = None;
        flushes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MessageKind::*;

    #[test]
    fn chunks_of_one_reply_become_one_message_written_once() {
        let now = Instant::now();
        let mut m = StreamMerge::default();
        assert_eq!(m.push(Text, "Hel", 0, now), Chunk::New("Hel".into()));
        m.opened(Text, "m1".into(), "Hel".into(), 0);
        assert!(!m.owes());
        assert_eq!(m.push(Text, "lo", 0, now), Chunk::Buffered);
        assert_eq!(m.push(Text, "!", 0, now), Chunk::Buffered);
        assert_eq!(m.due(), Some(now + FLUSH_INTERVAL));
        assert_eq!(
            m.take(),
            vec![Flush {
                id: "m1".into(),
                content: "Hello!".into()
            }]
        );
        assert_eq!(m.due(), None);
        assert!(m.take().is_empty());
        // Thoughts stream separately.
        assert_eq!(m.push(Thinking, "hmm", 0, now), Chunk::New("hmm".into()));
    }

    #[test]
    fn a_row_written_elsewhere_ends_the_reply_and_keeps_what_it_owes() {
        let now = Instant::now();
        let mut m = StreamMerge::default();
        m.opened(Text, "m1".into(), "Before".into(), 3);
        assert_eq!(m.push(Text, " more", 3, now), Chunk::Buffered);
        // A question (mark 4) entered the transcript: the old reply is owed at once.
        assert_eq!(m.push(Text, " after", 4, now), Chunk::New(" after".into()));
        assert_eq!(m.due(), Some(now));
        assert_eq!(
            m.take(),
            vec![Flush {
                id: "m1".into(),
                content: "Before more".into()
            }]
        );
        m.opened(Text, "m2".into(), " after".into(), 4);
        m.break_here();
        assert!(!m.owes(), "nothing unwritten: breaking owes nothing");
        assert_eq!(m.push(Text, "x", 4, now), Chunk::New("x".into()));
    }

    #[test]
    fn a_large_backlog_is_due_at_once() {
        let now = Instant::now();
        let mut m = StreamMerge::default();
        m.opened(Text, "m1".into(), String::new(), 0);
        let chunk = "x".repeat(1024);
        for _ in 0..(FLUSH_BYTES / 1024 - 1) {
            m.push(Text, &chunk, 0, now);
        }
        assert_eq!(m.due(), Some(now + FLUSH_INTERVAL));
        m.push(Text, &chunk, 0, now);
        assert_eq!(m.due(), Some(now));
        assert_eq!(m.take()[0].content.len(), FLUSH_BYTES);
    }
}
