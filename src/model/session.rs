use serde::{Deserialize, Serialize};

use super::{PendingAction, PendingActionRevision};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Created,
    Starting,
    Running,
    WaitingForInput,
    Completed,
    Failed,
    Cancelled,
}

super::wire_enum!(SessionState {
    Created => "created",
    Starting => "starting",
    Running => "running",
    WaitingForInput => "waiting_for_input",
    Completed => "completed",
    Failed => "failed",
    Cancelled => "cancelled",
});

impl SessionState {
    pub const TERMINAL: [SessionState; 3] = [
        SessionState::Completed,
        SessionState::Failed,
        SessionState::Cancelled,
    ];

    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }

    /// Only input-capable sessions can have a pending action (P1).
    pub fn is_input_capable(self) -> bool {
        matches!(self, SessionState::Running | SessionState::WaitingForInput)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub id: String,
    pub task_id: String,
    pub name: String,
    pub agent_profile_id: Option<String>,
    pub state: SessionState,
    pub is_primary: bool,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
    pub created_at: String,
    pub pending_action: Option<PendingAction>,
    pub pending_action_revision: Option<PendingActionRevision>,
}
