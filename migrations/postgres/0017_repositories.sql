-- W1: the directories tasks work in. `git`: a git repository, whose `base_branch` new tasks
-- start from; otherwise a plain directory (no branch).
CREATE TABLE repositories (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    path        TEXT NOT NULL UNIQUE,
    git         BOOLEAN NOT NULL,
    base_branch TEXT,
    created_at  BIGINT NOT NULL
);

-- W2/W3: the repository of a task (none: the task has a directory of its own), the branch its
-- worktree starts from and the task's own branch (both NULL for a plain directory). Goes with
-- its task; a repository with tasks cannot be deleted.
CREATE TABLE task_workspaces (
    task_id       TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    repository_id TEXT NOT NULL REFERENCES repositories(id),
    base_branch   TEXT,
    branch        TEXT
);
CREATE INDEX task_workspaces_repository ON task_workspaces (repository_id);
