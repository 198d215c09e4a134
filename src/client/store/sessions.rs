//! The sessions of the task being shown, merged by P9 revision.

use super::{IdMap, newer};
use crate::model::{Notification, Session};

/// A session as the newer of two views (P9): a view without a revision never replaces one with.
pub fn merge_session(old: &Session, new: Session) -> Session {
    if newer(
        old.pending_action_revision.as_ref(),
        new.pending_action_revision.as_ref(),
    ) {
        old.clone()
    } else {
        new
    }
}

/// The sessions of the task being shown.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionBook {
    pub sessions: IdMap<Session>,
}

impl SessionBook {
    pub fn merge(&mut self, sessions: impl IntoIterator<Item = Session>) {
        for s in sessions {
            let merged = match self.sessions.get(&s.id) {
                Some(old) => merge_session(old, s),
                None => s,
            };
            self.sessions.insert(merged.id.clone(), merged);
        }
    }

    /// Applies a push for a session of `task_id`; returns whether anything changed.
    pub fn apply(&mut self, task_id: &str, n: &Notification) -> bool {
        match n {
            Notification::SessionCreated { session }
            | Notification::SessionStateChanged { session }
                if session.task_id == task_id =>
            {
                let before = self.sessions.get(&session.id).cloned();
                self.merge([session.clone()]);
                before.as_ref() != self.sessions.get(&session.id)
            }
            Notification::MessageAdded(change)
            | Notification::MessageUpdated(change)
            | Notification::MessageDeleted(change) => {
                let (Some(snapshot), Some(s)) = (
                    &change.pending,
                    self.sessions.get_mut(&change.message.session_id),
                ) else {
                    return false;
                };
                if !newer(
                    Some(&snapshot.pending_action_revision),
                    s.pending_action_revision.as_ref(),
                ) {
                    return false;
                }
                let changed = s.pending_action != snapshot.pending_action;
                s.pending_action = snapshot.pending_action;
                s.pending_action_revision = Some(snapshot.pending_action_revision.clone());
                changed
            }
            _ => false,
        }
    }

    /// Snapshot sessions with pushes on top (by revision), newest first as the server lists
    /// them; sessions known only from pushes (just created) are included.
    pub fn view(&self, task_id: &str, base: &[Session]) -> Vec<Session> {
        let merged = IdMap::from_pairs(
            base.iter()
                .map(|s| {
                    let s = match self.sessions.get(&s.id) {
                        Some(pushed) => merge_session(pushed, s.clone()),
                        None => s.clone(),
                    };
                    (s.id.clone(), s)
                })
                .collect(),
            |_, later| later,
        );
        let mut v: Vec<Session> = self
            .sessions
            .iter()
            .filter(|(id, s)| s.task_id == task_id && !merged.contains(id))
            .map(|(_, s)| s.clone())
            .collect();
        v.extend(merged.into_values());
        v.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::store::fixtures::{change, rev, session};
    use crate::model::{PendingAction, PendingSnapshot};

    #[test]
    fn p9_sessions_merge_by_epoch_then_sequence_across_restarts() {
        let mut book = SessionBook::default();
        book.merge([session(
            "s",
            Some(PendingAction::Clarification),
            Some(rev("9", 500)),
        )]);
        // Older epoch, higher sequence: still older.
        book.merge([session("s", None, Some(rev("8", 9000)))]);
        assert_eq!(
            book.sessions["s"].pending_action,
            Some(PendingAction::Clarification)
        );
        // After a restart the epoch grows and the sequence restarts: newer ("10" > "9").
        book.merge([session("s", None, Some(rev("10", 1)))]);
        assert_eq!(book.sessions["s"].pending_action, None);
        // A view without a revision never replaces one with.
        book.merge([session("s", Some(PendingAction::Permission), None)]);
        assert_eq!(book.sessions["s"].pending_action, None);
    }

    #[test]
    fn p9_message_pushes_carry_the_pending_action_only_when_newer() {
        let mut book = SessionBook::default();
        book.merge([session(
            "s",
            Some(PendingAction::Clarification),
            Some(rev("2", 10)),
        )]);
        let old = PendingSnapshot {
            pending_action: None,
            pending_action_revision: rev("2", 9),
        };
        assert!(!book.apply(
            "t",
            &Notification::MessageAdded(change("s", "m", "1", Some(old)))
        ));
        let new = PendingSnapshot {
            pending_action: None,
            pending_action_revision: rev("2", 11),
        };
        assert!(book.apply(
            "t",
            &Notification::MessageAdded(change("s", "m", "1", Some(new)))
        ));
        assert_eq!(book.sessions["s"].pending_action, None);
    }
}
