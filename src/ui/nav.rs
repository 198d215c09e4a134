//! Task navigation (N1/N2): every click on a task — sidebar, board or phone drawer — takes a
//! ticket; the task page resolves the session with `client::selection::decide` once it has
//! freshly loaded the task's sessions. A newer click, a route change, an unmounted drawer or a
//! deleted task makes an older ticket inert.

use leptos::prelude::*;
use leptos_router::hooks::use_location;

use crate::client::selection::{Choice, Generation, Ticket, decide};
use crate::model::{PendingAction, Session, Task};
use crate::ui::live::Live;

/// A click on a task, waiting for its sessions to load.
#[derive(Clone, Debug, PartialEq)]
pub struct Intent {
    pub task_id: String,
    pub ticket: Ticket,
    /// The task's summary revision when it was clicked (N2: changed meanwhile → task only).
    pub summary_revision: Option<i64>,
}

#[derive(Clone, Copy)]
pub struct Navigator {
    generation: StoredValue<Generation>,
    pub intent: RwSignal<Option<Intent>>,
    live: Live,
}

fn summary_revision(task: &Task) -> Option<i64> {
    task.status_summary.as_ref().map(|s| s.revision)
}

impl Navigator {
    /// A click on `task` (before the router navigates to it). The revision compared later is
    /// the one the user saw: the row's snapshot with every push since applied.
    pub fn click(&self, task: &Task) {
        let seen = self
            .live
            .tasks
            .with_untracked(|b| b.one(Some(task.clone())))
            .unwrap_or_else(|| task.clone());
        self.issue(&seen);
    }

    fn issue(&self, task: &Task) {
        let ticket = self
            .generation
            .try_update_value(Generation::issue)
            .unwrap_or_default();
        self.intent.set(Some(Intent {
            task_id: task.id.clone(),
            ticket,
            summary_revision: summary_revision(task),
        }));
    }

    /// The pending intent for `task_id`, or a fresh one (a page opened by its URL).
    pub fn intent_for(&self, task: &Task) -> Intent {
        match self.intent.get_untracked() {
            Some(i) if i.task_id == task.id => i,
            _ => {
                self.issue(task);
                self.intent.get_untracked().expect("just set")
            }
        }
    }

    /// A route change, an unmounted drawer or a deleted task: every ticket goes inert.
    pub fn invalidate(&self) {
        self.generation.update_value(Generation::invalidate);
        self.intent.set(None);
    }

    /// Applies N1/N2 for `intent` now that `sessions` were loaded fresh.
    pub fn decide(
        &self,
        intent: &Intent,
        task: &Task,
        sessions: &[Session],
        remembered: Option<&str>,
    ) -> Choice {
        let pending: Option<PendingAction> = task.task_pending_action;
        self.generation.with_value(|g| {
            decide(
                g,
                intent.ticket,
                intent.summary_revision,
                summary_revision(task),
                pending,
                sessions,
                remembered,
            )
        })
    }

    /// The intent is done (a session or the task alone was opened).
    pub fn settled(&self, intent: &Intent) {
        if self.intent.get_untracked().as_ref() == Some(intent) {
            self.intent.set(None);
        }
    }
}

/// Provides the navigator; leaving a task's page for another route invalidates its tickets.
pub fn provide_navigator() -> Navigator {
    let nav = Navigator {
        generation: StoredValue::new(Generation::default()),
        intent: RwSignal::new(None),
        live: expect_context::<Live>(),
    };
    provide_context(nav);
    let location = use_location();
    Effect::new(move |_| {
        let path = location.pathname.get();
        if let Some(intent) = nav.intent.get_untracked()
            && path != format!("/t/{}", intent.task_id)
        {
            nav.invalidate();
        }
    });
    nav
}
