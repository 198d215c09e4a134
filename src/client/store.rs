//! The browser's live state, as plain data: tasks and sessions keyed by id, fed by snapshots
//! (server functions) and pushes (the socket) and merged by revision, so an older value never
//! overwrites a newer one — P3's summary `revision` for tasks, P9's `{epoch, sequence}` for
//! sessions, across server restarts too. No `view!` here: unit-tested natively.

use std::collections::BTreeMap;

use crate::model::{Message, Notification, PendingActionRevision, Session, Summary, Task};

/// `a` is strictly newer than `b` (P9); a missing revision is older than any.
pub fn newer(a: Option<&PendingActionRevision>, b: Option<&PendingActionRevision>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.is_newer_than(b),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn summary_revision(t: &Task) -> i64 {
    t.status_summary.as_ref().map_or(-1, |s| s.revision)
}

/// A task as the newest of two views of it: the task's own fields from the later update, the
/// summary (and the pending icon that goes with it) from the higher summary revision.
pub fn merge_task(old: &Task, new: Task) -> Task {
    let mut merged = if new.updated_at >= old.updated_at {
        new.clone()
    } else {
        old.clone()
    };
    let summary_from = if summary_revision(&new) >= summary_revision(old) {
        &new
    } else {
        old
    };
    merged.status_summary = summary_from.status_summary.clone();
    merged.status_summary_invalidated = summary_from.status_summary_invalidated;
    merged.task_pending_action = summary_from.task_pending_action;
    merged
}

/// Applies a pushed summary if it is newer than the one held (P3). Returns whether it changed.
pub fn apply_summary(task: &mut Task, summary: Summary) -> bool {
    if summary.revision <= summary_revision(task) {
        return false;
    }
    task.task_pending_action = summary.body.pending_action;
    task.status_summary = Some(summary);
    task.status_summary_invalidated = false;
    true
}

/// Tasks by id, the newest summary pushed per task (it may arrive for a task the book only
/// knows from a page snapshot), and the ids deleted meanwhile (so a stale snapshot cannot
/// bring one back).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskBook {
    pub tasks: BTreeMap<String, Task>,
    pub summaries: BTreeMap<String, Summary>,
    pub deleted: std::collections::BTreeSet<String>,
}

impl TaskBook {
    /// Merges a snapshot (a page of the task list, or one task).
    pub fn merge(&mut self, tasks: impl IntoIterator<Item = Task>) {
        for t in tasks {
            let merged = match self.tasks.get(&t.id) {
                Some(old) => merge_task(old, t),
                None => t,
            };
            self.tasks.insert(merged.id.clone(), merged);
        }
    }

    /// Applies a push; returns whether anything changed.
    pub fn apply(&mut self, n: &Notification) -> bool {
        match n {
            Notification::TaskCreated { task } | Notification::TaskUpdated { task } => {
                let before = self.tasks.get(&task.id).cloned();
                self.merge([task.clone()]);
                before.as_ref() != self.tasks.get(&task.id)
            }
            Notification::TaskDeleted { task_id } => {
                self.deleted.insert(task_id.clone());
                self.summaries.remove(task_id);
                self.tasks.remove(task_id).is_some()
            }
            Notification::SummaryUpdated {
                task_id,
                status_summary,
            } => {
                let held = self.summaries.get(task_id).map_or(-1, |s| s.revision);
                if status_summary.revision <= held {
                    return false;
                }
                self.summaries
                    .insert(task_id.clone(), status_summary.clone());
                match self.tasks.get_mut(task_id) {
                    Some(t) => apply_summary(t, status_summary.clone()),
                    None => true,
                }
            }
            _ => false,
        }
    }

    /// `base` with everything pushed for it on top: the task, then the newest summary.
    fn with_pushes(&self, base: Task) -> Task {
        let mut t = match self.tasks.get(&base.id) {
            Some(pushed) => merge_task(pushed, base),
            None => base,
        };
        if let Some(summary) = self.summaries.get(&t.id) {
            apply_summary(&mut t, summary.clone());
        }
        t
    }

    /// Snapshot tasks with every push applied on top (the newer of each wins), deleted ones
    /// dropped, most recently updated first (the sidebar's order), ties by id. Tasks known
    /// only from pushes are included when `keep` accepts them.
    pub fn view(&self, base: &[Task], keep: impl Fn(&Task) -> bool) -> Vec<Task> {
        let mut merged: BTreeMap<String, Task> = BTreeMap::new();
        for t in base.iter().filter(|t| !self.deleted.contains(&t.id)) {
            let t = match merged.remove(&t.id) {
                // The same task on two snapshots (a page and the pending list): the newer.
                Some(seen) => merge_task(&seen, t.clone()),
                None => t.clone(),
            };
            merged.insert(t.id.clone(), t);
        }
        let mut merged: BTreeMap<String, Task> = merged
            .into_iter()
            .map(|(id, t)| (id, self.with_pushes(t)))
            .collect();
        for (id, t) in &self.tasks {
            if !merged.contains_key(id) && keep(t) {
                merged.insert(id.clone(), t.clone());
            }
        }
        let mut v: Vec<Task> = merged.into_values().filter(|t| keep(t)).collect();
        v.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
        v
    }

    /// One task as its snapshot with pushes on top; `None` once deleted.
    pub fn one(&self, base: Option<Task>) -> Option<Task> {
        let base = base?;
        if self.deleted.contains(&base.id) {
            return None;
        }
        Some(self.with_pushes(base))
    }
}

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
    pub sessions: BTreeMap<String, Session>,
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
        let mut merged: BTreeMap<String, Session> = base
            .iter()
            .map(|s| {
                let s = match self.sessions.get(&s.id) {
                    Some(pushed) => merge_session(pushed, s.clone()),
                    None => s.clone(),
                };
                (s.id.clone(), s)
            })
            .collect();
        for (id, s) in &self.sessions {
            if s.task_id == task_id && !merged.contains_key(id) {
                merged.insert(id.clone(), s.clone());
            }
        }
        let mut v: Vec<Session> = merged.into_values().collect();
        v.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        v
    }
}

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
    use crate::model::{
        MessageAuthor, MessageChange, MessageKind, PendingAction, PendingSnapshot, SessionState,
        SummaryBody,
    };

    fn rev(epoch: &str, sequence: u64) -> PendingActionRevision {
        PendingActionRevision {
            epoch: epoch.into(),
            sequence,
        }
    }

    fn task(
        id: &str,
        updated_at: &str,
        summary_rev: Option<i64>,
        pending: Option<PendingAction>,
    ) -> Task {
        Task {
            id: id.into(),
            title: id.into(),
            description: String::new(),
            state: "open".into(),
            workflow_id: None,
            step_id: None,
            primary_session_id: None,
            session_count: 0,
            status_summary: summary_rev.map(|revision| Summary {
                revision,
                updated_at: updated_at.into(),
                body: SummaryBody {
                    pending_action: pending,
                    ..Default::default()
                },
            }),
            status_summary_invalidated: false,
            task_pending_action: pending,
            archived: false,
            created_at: "2026-01-01T00:00:00.000000Z".into(),
            updated_at: updated_at.into(),
        }
    }

    fn session(
        id: &str,
        pending: Option<PendingAction>,
        r: Option<PendingActionRevision>,
    ) -> Session {
        Session {
            id: id.into(),
            task_id: "t".into(),
            name: id.into(),
            agent_profile_id: None,
            state: SessionState::WaitingForInput,
            is_primary: false,
            started_at: None,
            completed_at: None,
            created_at: "2026-01-01T00:00:00.000000Z".into(),
            pending_action: pending,
            pending_action_revision: r,
        }
    }

    #[test]
    fn p3_an_older_summary_never_overwrites_a_newer_one() {
        let mut book = TaskBook::default();
        book.merge([task(
            "t",
            "2026-01-01T00:00:02.000000Z",
            Some(5),
            Some(PendingAction::Clarification),
        )]);
        // A snapshot read before the push arrives after it.
        book.merge([task("t", "2026-01-01T00:00:01.000000Z", Some(4), None)]);
        assert_eq!(
            book.tasks["t"].task_pending_action,
            Some(PendingAction::Clarification)
        );
        assert_eq!(book.tasks["t"].status_summary.as_ref().unwrap().revision, 5);
        let stale = task("t", "x", Some(3), None).status_summary.unwrap();
        assert!(!book.apply(&Notification::SummaryUpdated {
            task_id: "t".into(),
            status_summary: stale
        }));
        let fresh = task("t", "x", Some(6), None).status_summary.unwrap();
        assert!(book.apply(&Notification::SummaryUpdated {
            task_id: "t".into(),
            status_summary: fresh
        }));
        assert_eq!(book.tasks["t"].task_pending_action, None);
    }

    #[test]
    fn p3_a_summary_pushed_for_a_task_known_only_from_a_snapshot_still_applies() {
        // The page loaded the task (pending) before any task push; the answer's summary push
        // must clear its icon, and a snapshot older than the push must not bring it back.
        let mut book = TaskBook::default();
        let snapshot = task(
            "t",
            "2026-01-01T00:00:01.000000Z",
            Some(4),
            Some(PendingAction::Clarification),
        );
        let cleared = task("t", "x", Some(5), None).status_summary.unwrap();
        assert!(book.apply(&Notification::SummaryUpdated {
            task_id: "t".into(),
            status_summary: cleared
        }));
        let shown = book.view(std::slice::from_ref(&snapshot), |_| true);
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].task_pending_action, None);
        assert_eq!(
            book.one(Some(snapshot.clone()))
                .unwrap()
                .task_pending_action,
            None
        );
        // A newer snapshot wins over the held push.
        let newer = task(
            "t",
            "2026-01-01T00:00:03.000000Z",
            Some(6),
            Some(PendingAction::Permission),
        );
        let shown = book.view(&[newer], |_| true);
        assert_eq!(
            shown[0].task_pending_action,
            Some(PendingAction::Permission)
        );
        // An older push is ignored.
        let stale = task("t", "x", Some(2), None).status_summary.unwrap();
        assert!(!book.apply(&Notification::SummaryUpdated {
            task_id: "t".into(),
            status_summary: stale
        }));
    }

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

    fn change(
        session_id: &str,
        id: &str,
        updated_at: &str,
        pending: Option<PendingSnapshot>,
    ) -> MessageChange {
        MessageChange {
            message: Message {
                id: id.into(),
                session_id: session_id.into(),
                task_id: "t".into(),
                turn_id: "u".into(),
                author: MessageAuthor::Agent,
                kind: MessageKind::Text,
                content: updated_at.into(),
                pending_id: None,
                html: None,
                created_at: id.into(),
                updated_at: updated_at.into(),
            },
            pending,
        }
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
