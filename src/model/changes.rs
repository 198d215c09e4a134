//! What a task's agents changed (W4), as clients see it.

use serde::{Deserialize, Serialize};

/// `GET /tasks/{id}/changes`: the task's worktree against the merge base of its branch and the
/// base branch, files sorted by path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Changes {
    /// The merge base's commit id.
    pub base: String,
    /// The task branch's commit id (uncommitted work comes on top).
    pub head: String,
    pub files: Vec<ChangedFile>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChangedFile {
    pub path: String,
    /// `added`, `modified`, `deleted` or `renamed`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    pub additions: usize,
    pub deletions: usize,
    pub binary: bool,
}

/// `GET /tasks/{id}/diff?path=…`: one file's unified diff.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileDiff {
    pub file: ChangedFile,
    pub hunks: Vec<Hunk>,
    /// The diff was longer than the limit: the hunks stop there.
    pub truncated: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hunk {
    /// `@@ -a,b +c,d @@ …`
    pub header: String,
    pub lines: Vec<DiffLine>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffLine {
    /// `add`, `del` or `ctx`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<u32>,
    /// The line without its end.
    pub text: String,
}
