//! Streamed agent output: the agent sends a reply in many chunks; the transcript keeps one
//! message per reply. A reply ends where another row entered the transcript (a tool call, a
//! question, a permission request) — known in memory, so a chunk costs no probe query. A
//! question comes over MCP, not over the agent's ACP stream, so before it is written the
//! worker takes what the agent already sent (`worker::sync`, up to a mark in the agent's output
//! stream, decision 0033): the reply's last chunks stay in the reply before the question. What
//! of the reply is unwritten then goes to the question, which writes it in its own transaction
//! (decision 0038).
//!
//! Chunks are buffered in memory and written at most once per [`FLUSH_INTERVAL`] (or when
//! [`FLUSH_BYTES`] are waiting, or before anything else enters the transcript): a reply of n
//! bytes in k chunks costs O(n) of memory copies and a bounded number of writes and events,
//! not k full rewrites; a short reply is one write (docs/decisions/0014, amended).

use std::time::Duration;

use tokio::time::Instant;

use crate::model::MessageKind;

/// The longest a streamed chunk waits in memory before it is written and published.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Buffered bytes that are written at once, without waiting for the interval.
pub const FLUSH_BYTES: usize = 64 * 1024;
/// T8: the most text one transcript row holds; a longer reply is cut, with [`CUT_MARKER`].
pub const MESSAGE_BYTES: usize = 1 << 20;
/// Ends a reply that was cut at [`MESSAGE_BYTES`].
pub const CUT_MARKER: &str = "\n\n[… cut: a transcript row holds at most 1 MiB]";

/// One reply being streamed: its message id (once written) and content so far.
#[derive(Debug)]
struct Open {
    /// Which reply this is (to match the id its first write returns).
    reply: u64,
    kind: MessageKind,
    /// `None` until its first write creates the message.
    id: Option<String>,
    content: String,
    /// How much of `content` the database has.
    written: usize,
    /// Cut at [`MESSAGE_BYTES`]: later chunks of this reply are dropped.
    cut: bool,
    /// The session's foreign-row count when this reply began.
    mark: u64,
}

impl Open {
    fn unwritten(&self) -> usize {
        self.content.len() - self.written
    }

    fn flush(&self) -> Flush {
        Flush {
            reply: self.reply,
            kind: self.kind,
            id: self.id.clone(),
            content: self.content.clone(),
        }
    }
}

/// A write the worker owes: message `id` gets `content`, or (no id yet) a new message of
/// `kind` with `content` is created ([`StreamMerge::created`] records its id).
#[derive(Debug, PartialEq)]
pub struct Flush {
    pub reply: u64,
    pub kind: MessageKind,
    pub id: Option<String>,
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
    /// Replies begun so far.
    replies: u64,
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
                self.closed.push(open.flush());
            }
        }
    }

    /// Folds `chunk` into the open reply of `kind` (a new one when there is none, or when rows
    /// were written since it began: `mark` is the session's current foreign-row count). Kept in
    /// memory until the next flush; a new reply is created by its first write.
    pub fn push(&mut self, kind: MessageKind, chunk: &str, mark: u64, now: Instant) {
        if [&self.text, &self.thought]
            .iter()
            .any(|o| o.as_ref().is_some_and(|o| o.mark != mark))
        {
            self.break_here();
        }
        if self.slot(kind).is_none() {
            self.replies += 1;
        }
        let reply = self.replies;
        let open = self.slot(kind).get_or_insert_with(|| Open {
            reply,
            kind,
            id: None,
            content: String::new(),
            written: 0,
            cut: false,
            mark,
        });
        if open.cut {
            return;
        }
        let room = MESSAGE_BYTES.saturating_sub(open.content.len());
        if chunk.len() <= room {
            open.content.push_str(chunk);
        } else {
            let mut end = room;
            while !chunk.is_char_boundary(end) {
                end -= 1;
            }
            open.content.push_str(&chunk[..end]);
            open.content.push_str(CUT_MARKER);
            open.cut = true;
        }
        self.since.get_or_insert(now);
    }

    /// Records the id of the message `flush` (a first write) created: later writes of the
    /// same reply, if it is still open, update that message.
    pub fn created(&mut self, flush: &Flush, id: String) {
        if let Some(open) = self
            .slot(flush.kind)
            .as_mut()
            .filter(|o| o.reply == flush.reply)
        {
            open.id = Some(id);
        }
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

    /// The writes owed now, oldest reply first; afterwards nothing is owed. A write without an
    /// id creates its message: report the id with [`StreamMerge::created`] before the next
    /// chunk is pushed.
    pub fn take(&mut self) -> Vec<Flush> {
        let mut flushes = std::mem::take(&mut self.closed);
        for open in [&mut self.text, &mut self.thought].into_iter().flatten() {
            if open.unwritten() > 0 {
                open.written = open.content.len();
                flushes.push(open.flush());
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

    /// The writes `take` gives, as `(id, kind, content)`; each first write "creates" its
    /// message as `m<reply>`.
    fn take(m: &mut StreamMerge) -> Vec<(Option<String>, MessageKind, String)> {
        let flushes = m.take();
        for f in flushes.iter().filter(|f| f.id.is_none()) {
            m.created(f, format!("m{}", f.reply));
        }
        flushes
            .into_iter()
            .map(|f| (f.id, f.kind, f.content))
            .collect()
    }

    fn w(
        id: Option<&str>,
        kind: MessageKind,
        content: &str,
    ) -> (Option<String>, MessageKind, String) {
        (id.map(str::to_string), kind, content.to_string())
    }

    /// T8: a reply stops growing at [`MESSAGE_BYTES`] (cut on a character boundary, marked
    /// once); what the agent sends after is dropped.
    #[test]
    fn t8_a_reply_is_cut_at_the_row_limit() {
        let now = Instant::now();
        let mut m = StreamMerge::default();
        let big = "é".repeat(MESSAGE_BYTES / 2 - 1); // two bytes each
        m.push(Text, &big, 0, now);
        m.push(Text, "xyz€€€", 0, now);
        m.push(Text, "more", 0, now);
        let writes = take(&mut m);
        assert_eq!(writes.len(), 1);
        let content = &writes[0].2;
        assert!(content.ends_with(CUT_MARKER), "marked once, at the end");
        assert_eq!(content.matches(CUT_MARKER).count(), 1);
        let kept = &content[..content.len() - CUT_MARKER.len()];
        assert!(kept.len() <= MESSAGE_BYTES);
        assert!(kept.ends_with("xy"), "cut inside the chunk, on a boundary");
        assert!(!content.contains("more"));
    }

    #[test]
    fn chunks_of_one_reply_become_one_message_created_by_one_write() {
        let now = Instant::now();
        let mut m = StreamMerge::default();
        assert!(!m.owes());
        m.push(Text, "Hel", 0, now);
        m.push(Text, "lo", 0, now);
        m.push(Text, "!", 0, now);
        assert_eq!(m.due(), Some(now + FLUSH_INTERVAL));
        assert_eq!(take(&mut m), vec![w(None, Text, "Hello!")]);
        assert_eq!(m.due(), None);
        assert!(take(&mut m).is_empty());
        // More of the same reply updates the message it created.
        m.push(Text, " Bye.", 0, now);
        assert_eq!(take(&mut m), vec![w(Some("m1"), Text, "Hello! Bye.")]);
        // Thoughts stream separately.
        m.push(Thinking, "hmm", 0, now);
        assert_eq!(take(&mut m), vec![w(None, Thinking, "hmm")]);
    }

    #[test]
    fn a_row_written_elsewhere_ends_the_reply_and_keeps_what_it_owes() {
        let now = Instant::now();
        let mut m = StreamMerge::default();
        m.push(Text, "Before", 3, now);
        assert_eq!(take(&mut m), vec![w(None, Text, "Before")]);
        m.push(Text, " more", 3, now);
        // A question (mark 4) entered the transcript: the old reply is owed at once, and
        // what follows is a new message.
        m.push(Text, " after", 4, now);
        assert_eq!(m.due(), Some(now));
        assert_eq!(
            take(&mut m),
            vec![w(Some("m1"), Text, "Before more"), w(None, Text, " after")]
        );
        m.break_here();
        assert!(!m.owes(), "nothing unwritten: breaking owes nothing");
        m.push(Text, "x", 4, now);
        assert_eq!(take(&mut m), vec![w(None, Text, "x")]);
    }

    /// Two replies created by the same flush (the first ended before its first write): each
    /// id goes to its own reply, so the open one never updates the ended one's message.
    #[test]
    fn replies_created_in_one_flush_keep_their_own_messages() {
        let now = Instant::now();
        let mut m = StreamMerge::default();
        m.push(Text, "Short", 0, now);
        m.push(Text, "Next", 1, now);
        assert_eq!(m.due(), Some(now));
        assert_eq!(
            take(&mut m),
            vec![w(None, Text, "Short"), w(None, Text, "Next")]
        );
        m.push(Text, " more", 1, now);
        assert_eq!(take(&mut m), vec![w(Some("m2"), Text, "Next more")]);
    }

    #[test]
    fn a_large_backlog_is_due_at_once() {
        let now = Instant::now();
        let mut m = StreamMerge::default();
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
