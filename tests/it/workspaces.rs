//! Workspaces (spec/workspace.md W1–W4, W6, W9): repositories registered from the workspace
//! roots, a directory of its own for a task without one, a git worktree per task on a git
//! repository, what its agents changed, and its removal with the task.
//! Every repository here is a temporary one the test makes, never the project's checkout.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use turnstile::server::workspace::git::ensure_worktree;

use crate::support::*;

/// A git repository with one commit on `main` (README.md = "hello\n") and a branch `feature`.
fn git_repo(prefix: &str) -> PathBuf {
    let dir = temp_dir(prefix);
    let mut options = git2::RepositoryInitOptions::new();
    options.initial_head("main");
    let repo = git2::Repository::init_opts(&dir, &options).unwrap();
    std::fs::write(dir.join("README.md"), "hello\n").unwrap();
    let mut index = repo.index().unwrap();
    index.add_path(Path::new("README.md")).unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let me = git2::Signature::now("Test", "test@example.com").unwrap();
    let commit = repo
        .commit(Some("HEAD"), &me, &me, "initial", &tree, &[])
        .unwrap();
    repo.branch("feature", &repo.find_commit(commit).unwrap(), false)
        .unwrap();
    dir.canonicalize().unwrap()
}

async fn register(api: &Api, body: Value) -> (u16, Value) {
    let (status, v) = api.post("/api/v1/repositories", body).await;
    (status.as_u16(), v)
}

async fn repositories(api: &Api) -> Vec<Value> {
    api.get("/api/v1/repositories").await.1["repositories"]
        .as_array()
        .unwrap()
        .clone()
}

/// A task created with `body` (a title is added); its id and primary session (if any).
async fn task(api: &Api, mut body: Value) -> (String, Option<String>) {
    body["title"] = json!("Write the notes");
    let (status, task) = api.post("/api/v1/tasks", body).await;
    assert_eq!(status, 200, "{task}");
    (
        task["id"].as_str().unwrap().to_string(),
        task["primary_session_id"].as_str().map(str::to_string),
    )
}

/// The agent's reply to its first turn, once that turn is done.
async fn reply(api: &Api, session: &str) -> String {
    api.wait_turns_done(session, 1).await;
    api.messages(session)
        .await
        .iter()
        .filter(|m| m["author"] == "agent")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

both_http!(
    w1_a_git_repository_registers_at_its_canonical_path_with_its_default_branch,
    w1_bad_directories_and_branches_are_refused_and_nothing_is_written,
    w1_a_repository_that_tasks_use_is_not_deleted,
    w2_a_task_without_a_repository_runs_in_a_directory_of_its_own,
    w2_a_task_names_an_existing_repository_and_branch,
    w3_two_tasks_on_one_repository_each_work_in_a_worktree_of_their_own,
    w3_a_base_branch_gone_fails_the_session_with_gits_message,
    w6_deleting_a_task_removes_its_directory_or_worktree_and_its_branch_when_asked,
);

async fn w1_a_git_repository_registers_at_its_canonical_path_with_its_default_branch(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let repo = git_repo("w1-repo");
    // Named through a symlink: stored as the directory it resolves to.
    let link = temp_dir("w1-link").join("repo");
    std::os::unix::fs::symlink(&repo, &link).unwrap();
    let (status, r) = register(&api, json!({ "path": link, "name": "Project" })).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["path"], repo.to_str().unwrap());
    assert_eq!(r["git"], true);
    assert_eq!(r["base_branch"], "main");
    assert_eq!(r["name"], "Project");
    let id = r["id"].as_str().unwrap();
    assert_eq!(repositories(&api).await, vec![r.clone()]);
    assert_eq!(api.get(&format!("/api/v1/repositories/{id}")).await.1, r);

    let (status, edited) = api
        .patch(
            &format!("/api/v1/repositories/{id}"),
            json!({ "name": "Renamed", "base_branch": "feature" }),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(
        (&edited["name"], &edited["base_branch"]),
        (&json!("Renamed"), &json!("feature"))
    );

    // A plain directory registers too, marked as such, with no branch; its name is the
    // directory's when none is given.
    let plain = temp_dir("w1-plain");
    let (status, p) = register(&api, json!({ "path": plain })).await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["git"], false);
    assert!(p.get("base_branch").is_none(), "{p}");
    assert_eq!(p["name"], plain.file_name().unwrap().to_str().unwrap());
    server.stop().await;
}

async fn w1_bad_directories_and_branches_are_refused_and_nothing_is_written(url: String) {
    let root = temp_dir("w1-root");
    let inside = root.clone();
    let server = TestServer::start_with(&url, move |r| {
        r.workspace_roots = vec![inside.clone()];
    })
    .await;
    let api = Api::new(&server.base);
    let repo = {
        let made = git_repo("w1-source");
        let moved = root.join("repo");
        std::fs::rename(&made, &moved).unwrap();
        moved.canonicalize().unwrap()
    };
    let (status, r) = register(&api, json!({ "path": repo })).await;
    assert_eq!(status, 200, "{r}");
    let before = repositories(&api).await;

    let outside = temp_dir("w1-outside");
    let escape = root.join("escape");
    std::os::unix::fs::symlink(&outside, &escape).unwrap();
    let file = root.join("a-file");
    std::fs::write(&file, "x").unwrap();
    std::fs::create_dir(repo.join("sub")).unwrap();
    let plain = root.join("plain");
    std::fs::create_dir(&plain).unwrap();
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({ "path": "relative/dir" }), 422, "not absolute"),
        (json!({ "path": root.join("missing") }), 422, "No such file"),
        (json!({ "path": file }), 422, "not a directory"),
        (
            json!({ "path": outside }),
            422,
            "not under a workspace root",
        ),
        (json!({ "path": escape }), 422, "not under a workspace root"),
        (
            json!({ "path": repo.join("sub") }),
            422,
            "inside the git repository",
        ),
        (
            json!({ "path": format!("{}/../repo/", repo.display()) }),
            409,
            "registered already",
        ),
        (
            json!({ "path": plain, "base_branch": "main" }),
            422,
            "no branches",
        ),
        (json!({ "path": "/tmp/a\u{0}b" }), 400, "NUL"),
        (json!({ "path": "" }), 400, "non-empty"),
        (json!({ "path": 7 }), 400, ""),
        (json!({ "path": plain, "name": "  " }), 400, "name"),
    ];
    for (body, want, says) in cases {
        let (status, v) = register(&api, body.clone()).await;
        assert_eq!(status, want, "{body}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(says), "{body}: {message}");
    }
    // A branch that does not exist, on a repository not registered yet.
    let other = root.join("other");
    std::fs::rename(git_repo("w1-other"), &other).unwrap();
    let (status, v) = register(&api, json!({ "path": other, "base_branch": "nope" })).await;
    assert_eq!(status, 422, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("nope"),
        "{v}"
    );
    let id = r["id"].as_str().unwrap();
    let (status, v) = api
        .patch(
            &format!("/api/v1/repositories/{id}"),
            json!({ "base_branch": "nope" }),
        )
        .await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(repositories(&api).await, before, "nothing written");
    server.stop().await;
}

async fn w1_a_repository_that_tasks_use_is_not_deleted(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (_, r) = register(&api, json!({ "path": git_repo("w1-used") })).await;
    let id = r["id"].as_str().unwrap();
    let (task_id, _) = task(&api, json!({ "repository_id": id })).await;
    let path = format!("/api/v1/repositories/{id}");
    assert_eq!(api.delete(&path).await, 409);
    assert_eq!(api.get(&path).await.0, 200, "still there");
    assert_eq!(api.delete(&format!("/api/v1/tasks/{task_id}")).await, 204);
    assert_eq!(api.delete(&path).await, 204);
    assert_eq!(api.get(&path).await.0, 404);
    assert_eq!(api.delete(&path).await, 404);
    server.stop().await;
}

async fn w2_a_task_without_a_repository_runs_in_a_directory_of_its_own(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let own = server.state.runtime.config.workdir.clone();
    let mut tasks = Vec::new();
    for who in ["A", "B"] {
        let prompt = format!("e2e:write(\"notes.txt\", \"from {who}\")");
        let (id, session) = task(&api, json!({ "prompt": prompt })).await;
        tasks.push((id, session.unwrap(), who));
    }
    for (id, session, who) in &tasks {
        assert!(reply(&api, session).await.contains("Wrote notes.txt"));
        let written = std::fs::read_to_string(own.join(id).join("notes.txt")).unwrap();
        assert_eq!(written, format!("from {who}"));
    }
    assert!(
        !own.join("notes.txt").exists(),
        "nothing in a shared directory"
    );
    server.stop().await;
}

async fn w2_a_task_names_an_existing_repository_and_branch(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (_, git) = register(&api, json!({ "path": git_repo("w2-git") })).await;
    let (_, plain) = register(&api, json!({ "path": temp_dir("w2-plain") })).await;
    let count = async || {
        api.get("/api/v1/tasks?limit=100").await.1["tasks"]
            .as_array()
            .unwrap()
            .len()
    };
    let before = count().await;
    for (body, says) in [
        (
            json!({ "repository_id": "no-such-repository" }),
            "unknown repository_id",
        ),
        (
            json!({ "base_branch": "main" }),
            "base_branch needs a repository_id",
        ),
        (
            json!({ "repository_id": git["id"], "base_branch": "nope" }),
            "nope",
        ),
        (
            json!({ "repository_id": plain["id"], "base_branch": "main" }),
            "no branches",
        ),
    ] {
        let mut body = body;
        body["title"] = json!("t");
        let (status, v) = api.post("/api/v1/tasks", body.clone()).await;
        assert!(status == 400 || status == 422, "{body}: {status} {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    }
    assert_eq!(count().await, before, "nothing written");
    server.stop().await;
}

async fn w3_two_tasks_on_one_repository_each_work_in_a_worktree_of_their_own(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let repo = git_repo("w3-repo");
    let (_, r) = register(&api, json!({ "path": repo })).await;
    let worktrees = server.state.runtime.config.worktrees.clone();
    let mut tasks = Vec::new();
    for who in ["A", "B"] {
        let prompt = format!("e2e:write(\"README.md\", \"from {who}\")");
        let (id, session) = task(&api, json!({ "prompt": prompt, "repository_id": r["id"] })).await;
        tasks.push((id, session.unwrap(), who));
    }
    let git = git2::Repository::open(&repo).unwrap();
    for (id, session, who) in &tasks {
        assert!(reply(&api, session).await.contains("Wrote README.md"));
        let tree = worktrees.join(id);
        assert_eq!(
            std::fs::read_to_string(tree.join("README.md")).unwrap(),
            format!("from {who}"),
            "each task sees its own change only"
        );
        // On a branch of its own, started at the base branch.
        let wt = git2::Repository::open(&tree).unwrap();
        let head = wt.head().unwrap();
        let branch = head.shorthand().unwrap();
        assert!(branch.starts_with("turnstile/write-the-notes-"), "{branch}");
        assert_eq!(
            head.peel_to_commit().unwrap().id(),
            git.find_branch("main", git2::BranchType::Local)
                .unwrap()
                .get()
                .peel_to_commit()
                .unwrap()
                .id()
        );
    }
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "hello\n",
        "the main checkout is untouched"
    );
    assert!(git.statuses(None).unwrap().is_empty(), "and clean");

    // Another session of task A runs in A's worktree.
    let (id, _, _) = &tasks[0];
    let (status, s) = api
        .post(
            &format!("/api/v1/tasks/{id}/sessions"),
            json!({ "prompt": "e2e:read(\"README.md\")" }),
        )
        .await;
    assert_eq!(status, 200, "{s}");
    let second = s["id"].as_str().unwrap();
    assert!(
        reply(&api, second).await.contains("Read README.md: from A"),
        "{:?}",
        api.messages(second).await
    );
    server.stop().await;
}

async fn w3_a_base_branch_gone_fails_the_session_with_gits_message(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let repo = git_repo("w3-gone");
    let (_, r) = register(&api, json!({ "path": repo, "base_branch": "feature" })).await;
    git2::Repository::open(&repo)
        .unwrap()
        .find_branch("feature", git2::BranchType::Local)
        .unwrap()
        .delete()
        .unwrap();
    let (id, session) = task(&api, json!({ "prompt": "hello", "repository_id": r["id"] })).await;
    let sessions = api
        .wait_for(&format!("/api/v1/tasks/{id}/sessions"), "failed", |v| {
            v["sessions"][0]["state"] == "failed"
        })
        .await;
    assert_eq!(sessions["sessions"][0]["id"], session.unwrap().as_str());
    let summary = api.get(&format!("/api/v1/tasks/{id}")).await.1;
    let error = summary["status_summary"]["last_error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("feature"), "{error}");
    server.stop().await;
}

async fn w6_deleting_a_task_removes_its_directory_or_worktree_and_its_branch_when_asked(
    url: String,
) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let config = &server.state.runtime.config;
    let repo = git_repo("w6-repo");
    let (_, r) = register(&api, json!({ "path": repo })).await;
    let git = git2::Repository::open(&repo).unwrap();
    let branches = || {
        git.branches(Some(git2::BranchType::Local))
            .unwrap()
            .map(|b| b.unwrap().0.name().unwrap().unwrap().to_string())
            .filter(|n| n.starts_with("turnstile/"))
            .count()
    };

    let (own, session) = task(&api, json!({ "prompt": "e2e:write(\"a.txt\", \"x\")" })).await;
    reply(&api, &session.unwrap()).await;
    let mut trees = Vec::new();
    for _ in 0..2 {
        let prompt = "e2e:write(\"a.txt\", \"x\")";
        let (id, session) = task(&api, json!({ "prompt": prompt, "repository_id": r["id"] })).await;
        reply(&api, &session.unwrap()).await;
        assert!(config.worktrees.join(&id).join("a.txt").is_file());
        trees.push(id);
    }
    assert_eq!(branches(), 2);

    assert_eq!(api.delete(&format!("/api/v1/tasks/{own}")).await, 204);
    assert!(
        !config.workdir.join(&own).exists(),
        "its own directory is gone"
    );

    assert_eq!(
        api.delete(&format!("/api/v1/tasks/{}", trees[0])).await,
        204
    );
    assert!(
        !config.worktrees.join(&trees[0]).exists(),
        "its worktree is gone"
    );
    assert_eq!(branches(), 2, "its branch is kept");
    let path = format!("/api/v1/tasks/{}?delete_branch=true", trees[1]);
    assert_eq!(api.delete(&path).await, 204);
    assert!(!config.worktrees.join(&trees[1]).exists());
    assert_eq!(branches(), 1, "asked, its branch goes too");
    assert_eq!(
        git.worktrees().unwrap().len(),
        0,
        "no worktree metadata is left"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "hello\n"
    );
    server.stop().await;
}

/// What a crash between making the branch and making the worktree leaves: the branch only.
fn crashed_before_the_worktree(git: &git2::Repository, name: &str) {
    git.find_worktree(name)
        .unwrap()
        .prune(Some(
            git2::WorktreePruneOptions::new()
                .valid(true)
                .working_tree(true),
        ))
        .unwrap();
}

/// W3 after a crash at each step of making a worktree: what is left is reused or repaired,
/// never doubled, and the main checkout is never touched.
#[test]
fn w3_making_a_worktree_again_after_a_crash_at_any_step_repairs_or_reuses_what_is_left() {
    let repo = git_repo("w3-crash");
    let trees = temp_dir("w3-crash-trees");
    let (branch, name) = ("turnstile/crash-0000abcd", "task-1");
    let path = trees.join(name);
    let make = || ensure_worktree(&repo, "main", branch, name, &path);
    let git = git2::Repository::open(&repo).unwrap();
    let head_of = |p: &Path| {
        git2::Repository::open(p)
            .unwrap()
            .head()
            .unwrap()
            .shorthand()
            .unwrap()
            .to_string()
    };

    // Made, then made again: the same worktree, its work kept.
    make().unwrap();
    std::fs::write(path.join("work.txt"), "kept").unwrap();
    make().unwrap();
    assert_eq!(
        std::fs::read_to_string(path.join("work.txt")).unwrap(),
        "kept"
    );
    assert_eq!(head_of(&path), branch);

    // A crash after the branch was made and before the worktree: the branch is used (a
    // commit on it survives), not a second one made.
    crashed_before_the_worktree(&git, name);
    assert!(!path.exists());
    let tip = {
        let b = git.find_branch(branch, git2::BranchType::Local).unwrap();
        let parent = b.get().peel_to_commit().unwrap();
        let me = git2::Signature::now("Test", "test@example.com").unwrap();
        git.commit(
            Some(&format!("refs/heads/{branch}")),
            &me,
            &me,
            "agent work",
            &parent.tree().unwrap(),
            &[&parent],
        )
        .unwrap()
    };
    make().unwrap();
    let wt = git2::Repository::open(&path).unwrap();
    assert_eq!(wt.head().unwrap().peel_to_commit().unwrap().id(), tip);

    // A crash that left the metadata but not the directory.
    std::fs::remove_dir_all(&path).unwrap();
    make().unwrap();
    assert_eq!(head_of(&path), branch);

    // A crash that left a directory without metadata (a half-written checkout).
    crashed_before_the_worktree(&git, name);
    std::fs::create_dir_all(path.join("half")).unwrap();
    make().unwrap();
    assert_eq!(head_of(&path), branch);
    assert!(!path.join("half").exists());

    assert_eq!(git.worktrees().unwrap().len(), 1, "one worktree");
    let branches = git
        .branches(Some(git2::BranchType::Local))
        .unwrap()
        .filter(|b| {
            b.as_ref()
                .unwrap()
                .0
                .name()
                .unwrap()
                .unwrap()
                .starts_with("turnstile/")
        })
        .count();
    assert_eq!(branches, 1, "one branch");
    assert_eq!(git.head().unwrap().shorthand().unwrap(), "main");
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "hello\n"
    );
}

/// Commits everything in the worktree at `dir` (as an agent asked to commit would).
fn commit_all(dir: &Path, message: &str) {
    let repo = git2::Repository::open(dir).unwrap();
    let mut index = repo.index().unwrap();
    index
        .add_all(["*"].iter(), git2::IndexAddOption::DEFAULT, None)
        .unwrap();
    index.update_all(["*"].iter(), None).unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let parent = repo.head().unwrap().peel_to_commit().unwrap();
    let me = git2::Signature::now("Test", "test@example.com").unwrap();
    repo.commit(Some("HEAD"), &me, &me, message, &tree, &[&parent])
        .unwrap();
}

/// A task on a fresh repository whose agent wrote README.md; its id and worktree.
async fn task_with_changes(api: &Api, server: &TestServer, prefix: &str) -> (String, PathBuf) {
    let repo = git_repo(prefix);
    std::fs::write(repo.join(".gitignore"), "*.log\n").unwrap();
    commit_all(&repo, "ignore logs");
    let (_, r) = register(api, json!({ "path": repo })).await;
    let prompt = "e2e:write(\"README.md\", \"from the agent\\n\")";
    let (id, session) = task(api, json!({ "prompt": prompt, "repository_id": r["id"] })).await;
    reply(api, &session.unwrap()).await;
    let tree = server.state.runtime.config.worktrees.join(&id);
    (id, tree)
}

both_http!(
    w4_changes_list_committed_uncommitted_and_untracked_work_against_the_merge_base,
    w4_w9_a_files_diff_is_its_hunks_and_hostile_paths_get_400,
);

async fn w4_changes_list_committed_uncommitted_and_untracked_work_against_the_merge_base(
    url: String,
) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (id, tree) = task_with_changes(&api, &server, "w4-list").await;
    // Committed on the task branch, uncommitted, untracked, deleted, ignored.
    std::fs::write(tree.join("committed.txt"), "one\ntwo\n").unwrap();
    commit_all(&tree, "agent work");
    std::fs::create_dir_all(tree.join("src")).unwrap();
    std::fs::write(tree.join("src/new.rs"), "fn main() {}\n").unwrap();
    std::fs::remove_file(tree.join(".gitignore")).unwrap();
    std::fs::write(tree.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(tree.join("debug.log"), "noise\n").unwrap();
    std::fs::write(tree.join("image.bin"), [0u8, 159, 146, 150, 0, 1, 2]).unwrap();
    let (status, changes) = api.get(&format!("/api/v1/tasks/{id}/changes")).await;
    assert_eq!(status, 200, "{changes}");
    let files: Vec<(String, String, u64, u64, bool)> = changes["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["status"].as_str().unwrap().to_string(),
                f["additions"].as_u64().unwrap(),
                f["deletions"].as_u64().unwrap(),
                f["binary"].as_bool().unwrap(),
            )
        })
        .collect();
    let s = |p: &str, st: &str, a, d, b| (p.to_string(), st.to_string(), a, d, b);
    assert_eq!(
        files,
        vec![
            s("README.md", "modified", 1, 1, false),
            s("committed.txt", "added", 2, 0, false),
            s("image.bin", "added", 0, 0, true),
            s("src/new.rs", "added", 1, 0, false),
        ],
        "{changes}"
    );
    let git = git2::Repository::open(&tree).unwrap();
    assert_eq!(
        changes["head"],
        git.head()
            .unwrap()
            .peel_to_commit()
            .unwrap()
            .id()
            .to_string()
    );
    assert_ne!(
        changes["base"], changes["head"],
        "the merge base is the base branch's"
    );

    // A task without a git repository has nothing to show (409), an unknown task is 404.
    let (own, _) = task(&api, json!({})).await;
    assert_eq!(
        api.get(&format!("/api/v1/tasks/{own}/changes")).await.0,
        409
    );
    assert_eq!(api.get("/api/v1/tasks/no-such-task/changes").await.0, 404);
    server.stop().await;
}

async fn w4_w9_a_files_diff_is_its_hunks_and_hostile_paths_get_400(url: String) {
    let server = TestServer::start(&url).await;
    let api = Api::new(&server.base);
    let (id, tree) = task_with_changes(&api, &server, "w4-diff").await;
    let (status, diff) = api
        .get(&format!("/api/v1/tasks/{id}/diff?path=README.md"))
        .await;
    assert_eq!(status, 200, "{diff}");
    assert_eq!(diff["file"]["status"], "modified");
    assert_eq!(diff["truncated"], false);
    let lines: Vec<(String, String)> = diff["hunks"][0]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["kind"].as_str().unwrap().to_string(),
                l["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            ("del".to_string(), "hello".to_string()),
            ("add".to_string(), "from the agent".to_string())
        ]
    );
    assert!(
        diff["hunks"][0]["header"]
            .as_str()
            .unwrap()
            .starts_with("@@ -1 +1 @@"),
        "{diff}"
    );

    // A diff over the limit is cut and says so.
    let line = "x".repeat(1000);
    let big: String = (0..1000).map(|_| format!("{line}\n")).collect();
    std::fs::write(tree.join("big.txt"), big).unwrap();
    let (status, cut) = api
        .get(&format!("/api/v1/tasks/{id}/diff?path=big.txt"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(cut["truncated"], true);
    let sent: usize = cut["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|h| h["lines"].as_array().unwrap())
        .map(|l| l["text"].as_str().unwrap().len())
        .sum();
    assert!(
        sent <= turnstile::server::workspace::changes::MAX_DIFF_BYTES,
        "{sent}"
    );
    assert_eq!(cut["file"]["additions"], 1000, "the counts are whole");

    // W9: paths outside the worktree, or not plain, are refused before git runs.
    std::os::unix::fs::symlink("/etc", tree.join("etc-link")).unwrap();
    for bad in [
        "../README.md",
        "/etc/passwd",
        "a%00b",
        "./README.md",
        "src/",
        "",
    ] {
        let (status, v) = api
            .get(&format!("/api/v1/tasks/{id}/diff?path={bad}"))
            .await;
        assert_eq!(status, 400, "{bad}: {v}");
    }
    // A link out of the worktree is a change like any other: its text, never what it names.
    let (status, link) = api
        .get(&format!("/api/v1/tasks/{id}/diff?path=etc-link"))
        .await;
    assert_eq!(status, 200, "{link}");
    assert_eq!(link["hunks"][0]["lines"][0]["text"], "/etc");
    let (status, _) = api
        .get(&format!("/api/v1/tasks/{id}/diff?path=unchanged.txt"))
        .await;
    assert_eq!(status, 404);
    server.stop().await;
}
