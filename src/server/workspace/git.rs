//! The git side of workspaces through libgit2 (`git2`, W8): what a registered directory is
//! (W1) and the task's worktree (W3). Every function blocks: callers run them on the blocking
//! pool, under the repository's lock (`workspace::Workspaces`, W7).

use std::path::Path;

use git2::{BranchType, Repository, WorktreeAddOptions, WorktreePruneOptions};

/// What a directory offered as a repository is (W1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// The top directory of a git repository with a working tree; its default branch is the
    /// one `HEAD` names (`None` when `HEAD` is detached).
    Git { default_branch: Option<String> },
    /// A directory outside any git repository.
    Plain,
}

/// A directory a repository cannot be registered at, in words for the person (422).
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub String);

/// libgit2's message, for the person (the code and class add nothing for them).
pub(super) fn said(e: git2::Error) -> String {
    e.message().to_string()
}

/// The main checkout of a registered repository.
fn open(repo_dir: &Path) -> Result<Repository, String> {
    Repository::open(repo_dir).map_err(|e| {
        format!(
            "cannot open the repository {}: {}",
            repo_dir.display(),
            said(e)
        )
    })
}

/// W1: whether `dir` (canonical) is a git repository's top directory, a plain directory, or
/// neither (inside a repository, a bare one, a linked worktree).
pub fn inspect(dir: &Path) -> Result<Found, Refused> {
    let repo = match Repository::discover(dir) {
        Ok(repo) => repo,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(Found::Plain),
        Err(e) => return Err(Refused(format!("cannot read the repository: {}", said(e)))),
    };
    if repo.is_bare() {
        return Err(Refused("a bare repository has no working tree".into()));
    }
    if repo.is_worktree() {
        return Err(Refused(
            "this is a linked worktree: register the repository's main checkout".into(),
        ));
    }
    let top = repo
        .workdir()
        .and_then(|w| w.canonicalize().ok())
        .ok_or_else(|| Refused("the repository has no working tree".into()))?;
    if top != dir {
        return Err(Refused(format!(
            "the directory is inside the git repository at {}: register that directory",
            top.display()
        )));
    }
    let head = repo
        .find_reference("HEAD")
        .map_err(|e| Refused(format!("cannot read HEAD: {}", said(e))))?;
    let default_branch = head
        .symbolic_target()
        .ok()
        .flatten()
        .and_then(|t| t.strip_prefix("refs/heads/"))
        .map(str::to_string);
    Ok(Found::Git { default_branch })
}

/// W1: `branch` names a local branch of the repository at `dir`.
pub fn has_branch(dir: &Path, branch: &str) -> Result<bool, String> {
    let repo = Repository::open(dir).map_err(said)?;
    Ok(repo.find_branch(branch, BranchType::Local).is_ok())
}

/// W3: the task's worktree at `path` on its branch `branch`, made from `base` when the branch
/// does not exist yet. Idempotent and safe after a crash at any point: a whole worktree is
/// kept as it is; a half-made one (metadata without its directory, a directory without
/// metadata) is removed and made again; a branch left by an earlier attempt is used, never a
/// second one made. The main checkout is never touched. `name` names the worktree inside the
/// repository (the task's id).
pub fn ensure_worktree(
    repo_dir: &Path,
    base: &str,
    branch: &str,
    name: &str,
    path: &Path,
) -> Result<(), String> {
    let repo = open(repo_dir)?;
    if let Ok(existing) = repo.find_worktree(name) {
        let whole = existing.validate().is_ok()
            && same_dir(existing.path(), path)
            && Repository::open(path).is_ok_and(|wt| {
                wt.head()
                    .ok()
                    .and_then(|h| h.shorthand().map(str::to_string).ok())
                    .as_deref()
                    == Some(branch)
            });
        if whole {
            return Ok(());
        }
        prune(&existing)
            .map_err(|e| format!("cannot clear the task's unfinished worktree: {}", said(e)))?;
    }
    if path.exists() {
        std::fs::remove_dir_all(path)
            .map_err(|e| format!("cannot clear {}: {e}", path.display()))?;
    }
    let reference = match repo.find_branch(branch, BranchType::Local) {
        Ok(b) => b.into_reference(),
        Err(_) => {
            let base_ref = repo
                .find_branch(base, BranchType::Local)
                .map_err(|e| format!("the base branch {base:?}: {}", said(e)))?;
            let commit = base_ref
                .get()
                .peel_to_commit()
                .map_err(|e| format!("the base branch {base:?} has no commit: {}", said(e)))?;
            repo.branch(branch, &commit, false)
                .map_err(|e| format!("cannot create the branch {branch:?}: {}", said(e)))?
                .into_reference()
        }
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let mut options = WorktreeAddOptions::new();
    options.reference(Some(&reference));
    repo.worktree(name, path, Some(&options))
        .map_err(|e| format!("cannot create the task's worktree: {}", said(e)))?;
    Ok(())
}

/// W6: the task's worktree gone (its uncommitted changes with it) and, with `delete_branch`,
/// its branch; the main checkout untouched. Nothing there is not an error.
pub fn remove_worktree(
    repo_dir: &Path,
    name: &str,
    path: &Path,
    branch: &str,
    delete_branch: bool,
) -> Result<(), String> {
    let repo = open(repo_dir)?;
    if let Ok(worktree) = repo.find_worktree(name) {
        prune(&worktree).map_err(|e| format!("cannot remove the task's worktree: {}", said(e)))?;
    }
    if path.exists() {
        std::fs::remove_dir_all(path)
            .map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
    }
    if delete_branch && let Ok(mut b) = repo.find_branch(branch, BranchType::Local) {
        b.delete()
            .map_err(|e| format!("cannot delete the branch {branch:?}: {}", said(e)))?;
    }
    Ok(())
}

/// A worktree gone from the repository's metadata and from disk, whatever its state.
fn prune(worktree: &git2::Worktree) -> Result<(), git2::Error> {
    worktree.prune(Some(
        WorktreePruneOptions::new()
            .valid(true)
            .locked(true)
            .working_tree(true),
    ))
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// W3/W9: the branch a task's worktree is on: `turnstile/<slug>-<short id>`, made from the
/// title and the task's id only (never from a client's branch name). The slug keeps ASCII
/// letters and digits (lower case), one `-` for each run of anything else, at most 40 long;
/// the short id is the id's last 8 letters and digits (its random part).
pub fn task_branch(title: &str, task_id: &str) -> String {
    let mut slug = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
        if slug.len() >= 40 {
            break;
        }
    }
    let slug = slug.trim_end_matches('-');
    let alnum: Vec<char> = task_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let tail: String = alnum[alnum.len().saturating_sub(8)..].iter().collect();
    if slug.is_empty() {
        format!("turnstile/task-{tail}")
    } else {
        format!("turnstile/{slug}-{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_branch_is_made_from_the_title_and_the_ids_random_tail_only() {
        let id = "01938f2e-7c1a-7b3d-9e4f-a1b2c3d4e5f6";
        assert_eq!(
            task_branch("Fix the login page!", id),
            "turnstile/fix-the-login-page-c3d4e5f6"
        );
        assert_eq!(
            task_branch("../../etc ~^:?*[", id),
            "turnstile/etc-c3d4e5f6"
        );
        assert_eq!(task_branch("日本語", id), "turnstile/task-c3d4e5f6");
        let long = task_branch(&"a".repeat(200), id);
        assert!(long.len() <= "turnstile/".len() + 40 + 1 + 8, "{long}");
        for title in [
            "Fix the login page!",
            "../../etc ~^:?*[",
            "日本語",
            "-a-",
            "",
        ] {
            let b = task_branch(title, id);
            assert!(git2::Branch::name_is_valid(&b).unwrap(), "{b}");
        }
    }
}
