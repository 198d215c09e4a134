//! Tasks: merged by `updated_at` for their own fields and by summary revision (P3) for the
//! summary and the pending icon.

use super::{IdMap, IdSet};
use crate::model::{Notification, Summary, Task};

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
    pub tasks: IdMap<Task>,
    pub summaries: IdMap<Summary>,
    pub deleted: IdSet,
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
                self.deleted.add(task_id.clone());
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
        // The same task on two snapshots (a page and the pending list): the newer.
        let merged = IdMap::from_pairs(
            base.iter()
                .filter(|t| !self.deleted.contains(&t.id))
                .map(|t| (t.id.clone(), t.clone()))
                .collect(),
            |seen, t| merge_task(&seen, t),
        );
        let mut v: Vec<Task> = self
            .tasks
            .iter()
            .filter(|(id, t)| !merged.contains(id) && keep(t))
            .map(|(_, t)| t.clone())
            .collect();
        v.extend(
            merged
                .into_values()
                .map(|t| self.with_pushes(t))
                .filter(|t| keep(t)),
        );
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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::store::fixtures::task;
    use crate::model::PendingAction;

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
}
