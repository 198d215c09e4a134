//! W4 through libgit2: a task's worktree — committed, staged, unstaged and untracked work,
//! `.gitignore` honoured — against the merge base of its branch and the base branch. Blocking,
//! like everything in `git.rs`.

use std::path::Path;

use git2::{Delta, DiffFindOptions, DiffOptions, Patch, Repository};

use super::git::said;
use crate::model::{ChangedFile, Changes, DiffLine, FileDiff, Hunk};

/// The most bytes of diff lines one file's diff carries (W4): a longer one is cut there and
/// says `truncated`.
pub const MAX_DIFF_BYTES: usize = 512 * 1024;

/// The worktree's diff against the merge base, with renames found; the merge base and head.
fn diff<'r>(
    repo: &'r Repository,
    base_branch: &str,
) -> Result<(git2::Diff<'r>, git2::Oid, git2::Oid), String> {
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(|e| format!("the worktree has no commit: {}", said(e)))?;
    let base = repo
        .find_branch(base_branch, git2::BranchType::Local)
        .and_then(|b| b.get().peel_to_commit())
        .map_err(|e| format!("the base branch {base_branch:?}: {}", said(e)))?;
    let merge_base = repo
        .merge_base(head.id(), base.id())
        .map_err(|e| format!("no merge base with {base_branch:?}: {}", said(e)))?;
    let tree = repo
        .find_commit(merge_base)
        .and_then(|c| c.tree())
        .map_err(said)?;
    let mut options = DiffOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .include_typechange(true);
    let mut diff = repo
        .diff_tree_to_workdir_with_index(Some(&tree), Some(&mut options))
        .map_err(said)?;
    diff.find_similar(Some(
        DiffFindOptions::new().renames(true).for_untracked(true),
    ))
    .map_err(said)?;
    Ok((diff, merge_base, head.id()))
}

fn path_text(p: Option<&Path>) -> String {
    p.map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// One delta as a file of the list; with its patch (none for a binary file).
fn file_of<'d>(
    diff: &git2::Diff<'d>,
    index: usize,
) -> Result<Option<(ChangedFile, Option<Patch<'d>>)>, String> {
    let Some(delta) = diff.get_delta(index) else {
        return Ok(None);
    };
    let status = match delta.status() {
        Delta::Added | Delta::Untracked | Delta::Copied => "added",
        Delta::Deleted => "deleted",
        Delta::Renamed => "renamed",
        Delta::Modified | Delta::Typechange => "modified",
        _ => return Ok(None),
    };
    let path = path_text(delta.new_file().path().or(delta.old_file().path()));
    let old_path = (status == "renamed").then(|| path_text(delta.old_file().path()));
    let patch = Patch::from_diff(diff, index).map_err(said)?;
    let (additions, deletions) = match &patch {
        Some(p) => {
            let (_, added, deleted) = p.line_stats().map_err(said)?;
            (added, deleted)
        }
        None => (0, 0),
    };
    let binary = patch.is_none() || delta.flags().is_binary();
    let file = ChangedFile {
        path,
        status: status.to_string(),
        old_path,
        additions,
        deletions,
        binary,
    };
    Ok(Some((file, patch)))
}

/// W4: the changed files of the worktree at `worktree`, sorted by path.
pub fn changes(worktree: &Path, base_branch: &str) -> Result<Changes, String> {
    let repo = Repository::open(worktree).map_err(said)?;
    let (diff, base, head) = diff(&repo, base_branch)?;
    let mut files = Vec::new();
    for index in 0..diff.deltas().len() {
        if let Some((file, _)) = file_of(&diff, index)? {
            files.push(file);
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Changes {
        base: base.to_string(),
        head: head.to_string(),
        files,
    })
}

/// W4: the unified diff of the changed file `path` (relative, checked by the caller); `None`
/// when it has no change. Lines stop at [`MAX_DIFF_BYTES`].
pub fn file_diff(
    worktree: &Path,
    base_branch: &str,
    path: &str,
) -> Result<Option<FileDiff>, String> {
    let repo = Repository::open(worktree).map_err(said)?;
    let (diff, _, _) = diff(&repo, base_branch)?;
    // Only the named file's patch is computed: the others' contents are never read.
    let named = diff
        .deltas()
        .position(|d| d.new_file().path().or(d.old_file().path()) == Some(Path::new(path)));
    let Some((file, patch)) = named.map(|i| file_of(&diff, i)).transpose()?.flatten() else {
        return Ok(None);
    };
    let (hunks, truncated) = match patch {
        Some(patch) => hunks_of(&patch)?,
        None => (Vec::new(), false),
    };
    Ok(Some(FileDiff {
        file,
        hunks,
        truncated,
    }))
}

/// A patch's hunks, their lines stopping at [`MAX_DIFF_BYTES`] (then `true`).
fn hunks_of(patch: &Patch<'_>) -> Result<(Vec<Hunk>, bool), String> {
    let mut hunks = Vec::new();
    let mut bytes = 0;
    for h in 0..patch.num_hunks() {
        let (hunk, count) = patch.hunk(h).map_err(said)?;
        let mut lines = Vec::new();
        for l in 0..count {
            let line = patch.line_in_hunk(h, l).map_err(said)?;
            let kind = match line.origin() {
                '+' => "add",
                '-' => "del",
                ' ' => "ctx",
                _ => continue,
            };
            let text = String::from_utf8_lossy(line.content());
            let text = text.trim_end_matches(['\n', '\r']).to_string();
            bytes += text.len();
            if bytes > MAX_DIFF_BYTES {
                hunks.push(Hunk {
                    header: header_of(&hunk),
                    lines,
                });
                return Ok((hunks, true));
            }
            lines.push(DiffLine {
                kind: kind.to_string(),
                old: line.old_lineno(),
                new: line.new_lineno(),
                text,
            });
        }
        hunks.push(Hunk {
            header: header_of(&hunk),
            lines,
        });
    }
    Ok((hunks, false))
}

fn header_of(hunk: &git2::DiffHunk<'_>) -> String {
    String::from_utf8_lossy(hunk.header())
        .trim_end_matches(['\n', '\r'])
        .to_string()
}
