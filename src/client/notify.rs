//! Attention for questions and permission requests on tasks the user is not looking at: a
//! count in the document title and (after the user opted in) a browser notification. Only
//! pushes create alerts — a snapshot fetched on load, reconnect or `resync` never does — and
//! each question or request alerts once, by its id.

use crate::client::store::{IdMap, IdSet};
use crate::model::Notification;

/// One thing to tell the user about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alert {
    /// The pending id of the question, or the permission request's id.
    pub key: String,
    pub task_id: String,
    pub permission: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Alerts {
    seen: IdSet,
    /// Per task, the alerts not yet looked at.
    unread: IdMap<IdSet>,
    /// Alerts not yet shown as browser notifications.
    fresh: Vec<Alert>,
}

impl Alerts {
    /// Takes note of a push; `shown_task` is the task on screen (its questions need no alert).
    pub fn on_push(&mut self, n: &Notification, shown_task: Option<&str>) {
        let (key, task_id, permission, opened) = match n {
            Notification::ClarificationRequested { bundle } => {
                (&bundle.pending_id, &bundle.task_id, false, true)
            }
            Notification::PermissionRequested { permission } => {
                (&permission.id, &permission.task_id, true, true)
            }
            Notification::ClarificationAnswered { bundle }
            | Notification::ClarificationRejected { bundle }
            | Notification::ClarificationExpired { bundle }
            | Notification::ClarificationStaleDismissed { bundle } => {
                (&bundle.pending_id, &bundle.task_id, false, false)
            }
            Notification::PermissionResolved { permission } => {
                (&permission.id, &permission.task_id, true, false)
            }
            _ => return,
        };
        if !opened {
            self.forget(task_id, key);
            return;
        }
        if !self.seen.add(key.clone()) || shown_task == Some(task_id.as_str()) {
            return;
        }
        self.unread
            .get_or_insert_with(task_id, IdSet::default)
            .add(key.clone());
        self.fresh.push(Alert {
            key: key.clone(),
            task_id: task_id.clone(),
            permission,
        });
    }

    fn forget(&mut self, task_id: &str, key: &str) {
        if let Some(keys) = self.unread.get_mut(task_id) {
            keys.remove(key);
            if keys.is_empty() {
                self.unread.remove(task_id);
            }
        }
        self.fresh.retain(|a| a.key != key);
    }

    /// The user opened this task: its alerts are read.
    pub fn viewing(&mut self, task_id: &str) {
        self.unread.remove(task_id);
        self.fresh.retain(|a| a.task_id != task_id);
    }

    /// What the document title counts.
    pub fn count(&self) -> usize {
        self.unread.values().map(IdSet::len).sum()
    }

    /// Whether alerts wait to be shown as browser notifications.
    pub fn has_fresh(&self) -> bool {
        !self.fresh.is_empty()
    }

    /// Alerts to show as browser notifications (each once).
    pub fn take_fresh(&mut self) -> Vec<Alert> {
        std::mem::take(&mut self.fresh)
    }
}

/// The document title with the number of unread alerts.
pub fn title(count: usize) -> String {
    if count == 0 {
        "Turnstile".into()
    } else {
        format!("({count}) Turnstile")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Bundle, BundleStatus};

    fn bundle(pending_id: &str, task_id: &str) -> Bundle {
        Bundle {
            pending_id: pending_id.into(),
            session_id: "s".into(),
            task_id: task_id.into(),
            turn_id: "u".into(),
            status: BundleStatus::Pending,
            detached: false,
            active: true,
            context: None,
            questions: vec![],
            response: None,
            created_at: String::new(),
            resolved_at: None,
            source: "mcp".into(),
        }
    }

    #[test]
    fn a_new_question_elsewhere_alerts_once() {
        let mut a = Alerts::default();
        let asked = Notification::ClarificationRequested {
            bundle: bundle("p1", "t1"),
        };
        a.on_push(&asked, Some("t2"));
        a.on_push(&asked, Some("t2"));
        assert_eq!(a.count(), 1, "deduplicated by pending id");
        assert_eq!(a.take_fresh().len(), 1);
        assert!(a.take_fresh().is_empty(), "shown once");
        assert_eq!(title(a.count()), "(1) Turnstile");
    }

    #[test]
    fn questions_on_screen_and_answered_ones_do_not_count() {
        let mut a = Alerts::default();
        a.on_push(
            &Notification::ClarificationRequested {
                bundle: bundle("p1", "t1"),
            },
            Some("t1"),
        );
        assert_eq!(a.count(), 0);
        a.on_push(
            &Notification::ClarificationRequested {
                bundle: bundle("p2", "t2"),
            },
            Some("t1"),
        );
        a.on_push(
            &Notification::ClarificationAnswered {
                bundle: bundle("p2", "t2"),
            },
            Some("t1"),
        );
        assert_eq!(a.count(), 0);
        assert!(a.take_fresh().is_empty());
        a.on_push(
            &Notification::ClarificationRequested {
                bundle: bundle("p3", "t3"),
            },
            None,
        );
        a.viewing("t3");
        assert_eq!(title(a.count()), "Turnstile");
    }
}
