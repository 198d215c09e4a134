//! Where a task's agents work (spec/workspace.md): the directories a repository may be
//! registered from (W1), and the working directory of a task's sessions (W2, W3) — its own
//! directory, a plain repository's directory, or its own git worktree. Git runs on the
//! blocking pool, one operation at a time per repository (W7).

pub mod changes;
pub mod git;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::model::AppError;
use crate::server::repo::TaskWorkspaceRecord;

/// The server's workspace directories and its git locks.
pub struct Workspaces {
    /// `<data-dir>/workspace`: `<task id>/` for each task without a repository (W2).
    own: PathBuf,
    /// `<data-dir>/worktrees`: `<task id>/` for each task on a git repository (W3).
    worktrees: PathBuf,
    /// W1: repositories lie under one of these (canonical).
    roots: Vec<PathBuf>,
    /// W7: one lock per repository (by its id) for its git operations.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Workspaces {
    /// `roots` that do not exist are left out (nothing can lie under them).
    pub fn new(own: PathBuf, worktrees: PathBuf, roots: &[PathBuf]) -> Workspaces {
        Workspaces {
            own,
            worktrees,
            roots: roots.iter().filter_map(|r| r.canonicalize().ok()).collect(),
            locks: Mutex::default(),
        }
    }

    /// The canonical roots repositories may lie under.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// W1: the directory a client named, checked: absolute, existing, a directory, with
    /// symlinks resolved, under a workspace root. NUL or an empty path is 400; the rest 422.
    pub fn directory(&self, raw: &str) -> Result<PathBuf, AppError> {
        if raw.is_empty() || raw.contains('\0') {
            return Err(AppError::BadRequest(
                "path must be a non-empty path without NUL".into(),
            ));
        }
        let unprocessable = AppError::Unprocessable;
        let path = Path::new(raw);
        if !path.is_absolute() {
            return Err(unprocessable(format!("path {raw:?} is not absolute")));
        }
        let dir = path
            .canonicalize()
            .map_err(|e| unprocessable(format!("path {raw:?}: {e}")))?;
        if !dir.is_dir() {
            return Err(unprocessable(format!("path {raw:?} is not a directory")));
        }
        if !self.roots.iter().any(|root| dir.starts_with(root)) {
            return Err(unprocessable(format!(
                "{} is not under a workspace root (--workspace-root: {})",
                dir.display(),
                self.roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(dir)
    }

    /// W2/W3: the directory a session of `task_id` runs in, made ready: the task's own
    /// directory, a plain repository's directory, or the task's worktree (created the first
    /// time, repaired after a crash). An error is git's or the file system's, in words.
    pub async fn working_directory(
        &self,
        task_id: &str,
        workspace: Option<TaskWorkspaceRecord>,
    ) -> Result<PathBuf, String> {
        let Some(ws) = workspace else {
            let dir = self.own.join(safe_name(task_id)?);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create the task's directory: {e}"))?;
            return Ok(dir);
        };
        let (Some(base), Some(branch)) = (ws.base_branch, ws.branch) else {
            // A plain directory: the agent works in it, not isolated (W3).
            return Ok(PathBuf::from(ws.path));
        };
        let path = self.worktree_of(task_id)?;
        let (repo, name, at) = (PathBuf::from(ws.path), task_id.to_string(), path.clone());
        self.git(&ws.repository_id, move || {
            git::ensure_worktree(&repo, &base, &branch, &name, &at)
        })
        .await?;
        Ok(path)
    }

    /// W3: where the worktree of a task on a git repository is (or will be).
    pub fn worktree_of(&self, task_id: &str) -> Result<PathBuf, String> {
        Ok(self.worktrees.join(safe_name(task_id)?))
    }

    /// W7: runs the git operation `f` on the blocking pool while holding the repository's
    /// lock, so operations on one repository never overlap.
    pub async fn git<T: Send + 'static>(
        &self,
        repository_id: &str,
        f: impl FnOnce() -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        let lock = self.lock(repository_id);
        let _held = lock.lock().await;
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| format!("git stopped: {e}"))?
    }

    /// W6: a deleted task's directory gone: its own directory, or its worktree (forced) and,
    /// with `delete_branch`, its branch. A plain repository's directory is left alone.
    pub async fn remove(
        &self,
        task_id: &str,
        workspace: Option<TaskWorkspaceRecord>,
        delete_branch: bool,
    ) -> Result<(), String> {
        let Some(ws) = workspace else {
            let dir = self.own.join(safe_name(task_id)?);
            return match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(format!("cannot remove {}: {e}", dir.display()))
                }
                _ => Ok(()),
            };
        };
        let Some(branch) = ws.branch else {
            return Ok(());
        };
        let path = self.worktree_of(task_id)?;
        let (repo, name) = (PathBuf::from(ws.path), task_id.to_string());
        self.git(&ws.repository_id, move || {
            git::remove_worktree(&repo, &name, &path, &branch, delete_branch)
        })
        .await
    }

    fn lock(&self, repository_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .expect("workspace locks")
            .entry(repository_id.to_string())
            .or_default()
            .clone()
    }
}

/// W9: a path a client names inside a worktree: relative, plain (no `..`, `.` or root), no
/// NUL; 400 otherwise. Only ever compared with the paths git reports, never opened as given.
pub fn relative_path(raw: &str) -> Result<String, AppError> {
    let plain = !raw.starts_with('/')
        && raw
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..");
    if raw.contains('\0') || !plain {
        return Err(AppError::BadRequest(format!(
            "path {raw:?} must be a plain path relative to the task's worktree"
        )));
    }
    Ok(raw.to_string())
}

/// A task id as one path component (ids are generated, but a path is never built from
/// anything that could leave its directory).
fn safe_name(id: &str) -> Result<&str, String> {
    if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        Ok(id)
    } else {
        Err(format!("{id:?} cannot name a directory"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn w9_a_client_path_is_plain_and_relative() {
        for good in ["README.md", "src/main.rs", "a b/c.txt"] {
            assert_eq!(relative_path(good).unwrap(), good);
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "./a",
            "a/./b",
            "a\0b",
            "a/",
        ] {
            assert!(relative_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_plain_ids_name_a_directory() {
        assert!(safe_name("01938f2e-7c1a-7b3d-9e4f-a1b2c3d4e5f6").is_ok());
        for bad in ["", "..", "a/b", "a\0b", "/abs", "a.b"] {
            assert!(safe_name(bad).is_err(), "{bad:?}");
        }
    }
}
