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

/// `GET /tasks` parameters (and the sidebar's server function): one page of the task list,
/// most recently updated first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskQuery {
    /// 1–500 (default 100).
    #[serde(default)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Archived tasks instead of open ones.
    #[serde(default)]
    pub archived: Option<bool>,
    /// Only tasks with a pending action (P2).
    #[serde(default)]
    pub pending: Option<bool>,
    /// Title contains (case-insensitive).
    #[serde(default)]
    pub q: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    /// P9: this server's projection epoch.
    pub epoch: String,
    /// Null on the last page.
    pub next_cursor: Option<String>,
}
