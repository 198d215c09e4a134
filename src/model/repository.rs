//! A repository as clients see it (W1).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Repository {
    pub id: String,
    pub name: String,
    /// The canonical directory.
    pub path: String,
    /// A git repository (each task gets a worktree); `false`: a plain directory its tasks run
    /// in, not isolated.
    pub git: bool,
    /// The branch new tasks start from (git repositories only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_branch: Option<String>,
}
