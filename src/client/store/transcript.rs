//! One session's transcript, oldest first, with pushes folded in.

use crate::model::{Message, Notification};

/// One session's transcript, oldest first, with pushes folded in.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transcript {
    pub messages: Vec<Message>,
    /// Whether older messages exist before the first one held.
    pub more_before: bool,
}

impl Transcript {
    fn position(&self, id: &str) -> Option<usize> {
        self.messages.iter().position(|m| m.id == id)
    }

    fn insert_sorted(&mut self, m: Message) {
        let at = self
            .messages
            .partition_point(|x| (&x.created_at, &x.id) < (&m.created_at, &m.id));
        self.messages.insert(at, m);
    }

    /// A snapshot page (ascending) merged with what pushes brought meanwhile: for a message in
    /// both, the later `updated_at` wins.
    pub fn with_snapshot(&self, page: &[Message], more_before: bool) -> Transcript {
        let mut t = Transcript {
            messages: page.to_vec(),
            more_before,
        };
        for m in &self.messages {
            match t.position(&m.id) {
                Some(i) if t.messages[i].updated_at >= m.updated_at => {}
                Some(i) => t.messages[i] = m.clone(),
                None => t.insert_sorted(m.clone()),
            }
        }
        t
    }

    /// A page of older messages (ascending) in front of what is held.
    pub fn prepend(&mut self, older: Vec<Message>, more_before: bool) {
        for m in older {
            if self.position(&m.id).is_none() {
                self.insert_sorted(m);
            }
        }
        self.more_before = more_before;
    }

    /// Applies a push for `session_id`; returns whether anything changed.
    pub fn apply(&mut self, session_id: &str, n: &Notification) -> bool {
        match n {
            Notification::MessageAdded(c) | Notification::MessageUpdated(c)
                if c.message.session_id == session_id =>
            {
                match self.position(&c.message.id) {
                    Some(i) if self.messages[i].updated_at > c.message.updated_at => false,
                    Some(i) => {
                        let changed = self.messages[i] != c.message;
                        self.messages[i] = c.message.clone();
                        changed
                    }
                    None => {
                        self.insert_sorted(c.message.clone());
                        true
                    }
                }
            }
            Notification::MessageDeleted(c) if c.message.session_id == session_id => {
                match self.position(&c.message.id) {
                    Some(i) => {
                        self.messages.remove(i);
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::store::fixtures::change;

    #[test]
    fn transcripts_fold_pushes_in_order_and_keep_the_latest_text() {
        let mut t = Transcript::default();
        assert!(t.apply(
            "s",
            &Notification::MessageAdded(change("s", "2", "a", None))
        ));
        assert!(t.apply(
            "s",
            &Notification::MessageAdded(change("s", "1", "a", None))
        ));
        assert!(!t.apply(
            "other",
            &Notification::MessageAdded(change("x", "3", "a", None))
        ));
        assert_eq!(
            t.messages.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
            ["1", "2"]
        );
        assert!(t.apply(
            "s",
            &Notification::MessageUpdated(change("s", "2", "c", None))
        ));
        assert!(
            !t.apply(
                "s",
                &Notification::MessageUpdated(change("s", "2", "b", None))
            ),
            "older text"
        );
        assert_eq!(t.messages[1].content, "c");
        t.prepend(
            vec![
                change("s", "0", "a", None).message,
                change("s", "1", "a", None).message,
            ],
            false,
        );
        assert_eq!(t.messages.len(), 3);
        assert!(t.apply(
            "s",
            &Notification::MessageDeleted(change("s", "1", "a", None))
        ));
        assert_eq!(t.messages.len(), 2);
    }
}
