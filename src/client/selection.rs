//! N1/N2: the one resolver that decides which session a task click opens.

use crate::model::{PendingAction, Session};

/// N1. For a task advertising a pending action: the first (newest; `sessions` is newest first)
/// input-capable session whose own pending action matches; if none matches, no session (the
/// task opens alone, never a guess). For a clean task: remembered → primary → first.
pub fn resolve_session(
    task_pending: Option<PendingAction>,
    sessions: &[Session],
    remembered: Option<&str>,
) -> Option<String> {
    if let Some(wanted) = task_pending {
        return sessions
            .iter()
            .find(|s| s.state.is_input_capable() && s.pending_action == Some(wanted))
            .map(|s| s.id.clone());
    }
    remembered
        .and_then(|id| sessions.iter().find(|s| s.id == id))
        .or_else(|| sessions.iter().find(|s| s.is_primary))
        .or_else(|| sessions.first())
        .map(|s| s.id.clone())
}

/// What a click on a task resolves to once its session list is loaded (N1/N2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Open this session.
    Session(String),
    /// Open the task with no session selected (nothing matches, or the task changed meanwhile).
    TaskOnly,
    /// A newer click, a route change, an unmounted drawer or a deleted task made this inert.
    Stale,
}

/// N1/N2 in one place, shared by the sidebar, the board and the phone drawer. `clicked` and
/// `now` are the task's summary revisions at the click and after the sessions loaded: if the
/// summary changed meanwhile, the task opens alone.
pub fn decide(
    generation: &Generation,
    ticket: Ticket,
    clicked: Option<i64>,
    now: Option<i64>,
    task_pending: Option<PendingAction>,
    sessions: &[Session],
    remembered: Option<&str>,
) -> Choice {
    if !generation.is_current(ticket) {
        return Choice::Stale;
    }
    if clicked != now {
        return Choice::TaskOnly;
    }
    match resolve_session(task_pending, sessions, remembered) {
        Some(s) => Choice::Session(s),
        None => Choice::TaskOnly,
    }
}

/// N2: each click takes a ticket; only the newest ticket may apply its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticket(pub u64);

#[derive(Debug, Default)]
pub struct Generation {
    current: u64,
}

impl Generation {
    pub fn issue(&mut self) -> Ticket {
        self.current += 1;
        Ticket(self.current)
    }

    /// A route change, an unmounted drawer or a deleted task makes every ticket inert.
    pub fn invalidate(&mut self) {
        self.current += 1;
    }

    pub fn is_current(&self, t: Ticket) -> bool {
        t.0 == self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SessionState;

    fn s(id: &str, state: SessionState, pending: Option<PendingAction>, primary: bool) -> Session {
        Session {
            id: id.into(),
            task_id: "t".into(),
            name: id.into(),
            agent_profile_id: None,
            state,
            is_primary: primary,
            started_at: None,
            completed_at: None,
            created_at: String::new(),
            pending_action: pending,
            pending_action_revision: None,
        }
    }

    use PendingAction::*;
    use SessionState::*;

    #[test]
    fn n1_opens_the_newest_session_owning_the_tasks_question() {
        let sessions = [
            s("new", Running, None, false),
            s("owner", WaitingForInput, Some(Clarification), false),
            s("older-owner", WaitingForInput, Some(Clarification), true),
        ];
        assert_eq!(
            resolve_session(Some(Clarification), &sessions, Some("new")).as_deref(),
            Some("owner")
        );
    }

    #[test]
    fn n1_no_match_opens_no_session_never_a_guess() {
        let sessions = [
            s("p", WaitingForInput, None, true),
            s("q", Completed, Some(Clarification), false),
        ];
        assert_eq!(
            resolve_session(Some(Clarification), &sessions, Some("p")),
            None
        );
        assert_eq!(
            resolve_session(
                Some(Permission),
                &[s("a", Running, Some(Clarification), true)],
                None
            ),
            None
        );
    }

    #[test]
    fn n6_permission_uses_the_same_rule() {
        let sessions = [
            s("c", Running, Some(Clarification), false),
            s("p", Running, Some(Permission), false),
        ];
        assert_eq!(
            resolve_session(Some(Permission), &sessions, None).as_deref(),
            Some("p")
        );
    }

    #[test]
    fn clean_tasks_prefer_remembered_then_primary_then_first() {
        let sessions = [s("a", Running, None, false), s("b", Running, None, true)];
        assert_eq!(
            resolve_session(None, &sessions, Some("a")).as_deref(),
            Some("a")
        );
        assert_eq!(
            resolve_session(None, &sessions, Some("gone")).as_deref(),
            Some("b")
        );
        assert_eq!(
            resolve_session(None, &[s("x", Running, None, false)], None).as_deref(),
            Some("x")
        );
        assert_eq!(resolve_session(None, &[], None), None);
    }

    #[test]
    fn n2_a_superseded_or_changed_selection_is_inert_or_task_only() {
        let sessions = [s("owner", WaitingForInput, Some(Clarification), false)];
        let mut g = Generation::default();
        let first = g.issue();
        let second = g.issue();
        assert_eq!(
            decide(
                &g,
                first,
                Some(3),
                Some(3),
                Some(Clarification),
                &sessions,
                None
            ),
            Choice::Stale,
            "a newer click wins"
        );
        assert_eq!(
            decide(
                &g,
                second,
                Some(3),
                Some(3),
                Some(Clarification),
                &sessions,
                None
            ),
            Choice::Session("owner".into())
        );
        assert_eq!(
            decide(
                &g,
                second,
                Some(3),
                Some(4),
                Some(Clarification),
                &sessions,
                None
            ),
            Choice::TaskOnly,
            "the summary changed while loading"
        );
        assert_eq!(
            decide(
                &g,
                second,
                Some(3),
                Some(3),
                Some(Permission),
                &sessions,
                None
            ),
            Choice::TaskOnly,
            "nothing matches: never a guess"
        );
        g.invalidate();
        assert_eq!(
            decide(
                &g,
                second,
                Some(3),
                Some(3),
                Some(Clarification),
                &sessions,
                None
            ),
            Choice::Stale,
            "route change, unmount or delete"
        );
    }

    #[test]
    fn n2_only_the_newest_click_applies() {
        let mut g = Generation::default();
        let first = g.issue();
        let second = g.issue();
        assert!(!g.is_current(first) && g.is_current(second));
        g.invalidate();
        assert!(!g.is_current(second));
    }
}
