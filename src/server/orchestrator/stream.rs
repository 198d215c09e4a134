//! Streamed agent output: the agent sends a reply in many chunks; the transcript keeps one
//! message per reply. A reply ends where another row entered the transcript (a tool call, a
//! question, a permission request) — known in memory, so a chunk costs no probe query.

use crate::model::MessageKind;

/// One reply being streamed: its message id and content so far.
#[derive(Debug, Default)]
struct Open {
    id: String,
    content: String,
    /// The session's foreign-row count when this reply began.
    mark: u64,
}

/// The open text reply and the open thought of a turn.
#[derive(Debug, Default)]
pub struct StreamMerge {
    text: Option<Open>,
    thought: Option<Open>,
}

/// What to do with a chunk.
#[derive(Debug, PartialEq)]
pub enum Chunk {
    /// Start a new message with this content.
    New(String),
    /// Replace message `id`'s content with `content`.
    Extend { id: String, content: String },
}

impl StreamMerge {
    fn slot(&mut self, kind: MessageKind) -> &mut Option<Open> {
        if kind == MessageKind::Thinking {
            &mut self.thought
        } else {
            &mut self.text
        }
    }

    /// Another row entered the transcript: the next chunk starts a new message.
    pub fn break_here(&mut self) {
        self.text = None;
        self.thought = None;
    }

    /// Folds `chunk` into the open reply of `kind`, unless rows were written since it began
    /// (`mark` is the session's current foreign-row count).
    pub fn push(&mut self, kind: MessageKind, chunk: &str, mark: u64) -> Chunk {
        if [&self.text, &self.thought]
            .iter()
            .any(|o| o.as_ref().is_some_and(|o| o.mark != mark))
        {
            self.break_here();
        }
        match self.slot(kind) {
            Some(open) => {
                open.content.push_str(chunk);
                Chunk::Extend {
                    id: open.id.clone(),
                    content: open.content.clone(),
                }
            }
            None => Chunk::New(chunk.to_string()),
        }
    }

    /// Records the message a `Chunk::New` created.
    pub fn opened(&mut self, kind: MessageKind, id: String, content: String, mark: u64) {
        *self.slot(kind) = Some(Open { id, content, mark });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MessageKind::*;

    #[test]
    fn chunks_of_one_reply_become_one_message() {
        let mut m = StreamMerge::default();
        assert_eq!(m.push(Text, "Hel", 0), Chunk::New("Hel".into()));
        m.opened(Text, "m1".into(), "Hel".into(), 0);
        assert_eq!(
            m.push(Text, "lo", 0),
            Chunk::Extend {
                id: "m1".into(),
                content: "Hello".into()
            }
        );
        // Thoughts stream separately.
        assert_eq!(m.push(Thinking, "hmm", 0), Chunk::New("hmm".into()));
    }

    #[test]
    fn a_row_written_elsewhere_ends_the_reply() {
        let mut m = StreamMerge::default();
        m.opened(Text, "m1".into(), "Before".into(), 3);
        assert_eq!(m.push(Text, " after", 4), Chunk::New(" after".into()));
        m.opened(Text, "m2".into(), " after".into(), 4);
        m.break_here();
        assert_eq!(m.push(Text, "x", 4), Chunk::New("x".into()));
    }
}
