use serde::{Deserialize, Serialize};

use super::{PendingAction, Summary};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: String,
    pub title: String,
    pub description: String,
    pub state: String,
    pub workflow_id: Option<String>,
    pub step_id: Option<String>,
    pub primary_session_id: Option<String>,
    pub session_count: u32,
    pub status_summary: Option<Summary>,
    pub status_summary_invalidated: bool,
    pub task_pending_action: Option<PendingAction>,
    pub archived: bool,
    pub created_at: String,
    pub updated_at: String,
}
