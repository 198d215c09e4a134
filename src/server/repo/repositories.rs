//! Repositories (W1) and the repository of each task (W2).

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, Type};

use super::sql::{RowsAffected, SqlBackend, SqlRepository};
use super::{RepoResult, new_id};
use crate::server::time::Micros;

/// W1: a registered repository.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct RepositoryRecord {
    pub id: String,
    pub name: String,
    /// Canonical, under a workspace root when registered.
    pub path: String,
    pub git: bool,
    pub base_branch: Option<String>,
    pub created_at: Micros,
}

impl RepositoryRecord {
    pub fn to_dto(&self) -> crate::model::Repository {
        crate::model::Repository {
            id: self.id.clone(),
            name: self.name.clone(),
            path: self.path.clone(),
            git: self.git,
            base_branch: self.base_branch.clone(),
        }
    }
}

/// W2/W3: the repository a task works in: its directory, and for a git repository the branch
/// the task's worktree starts from and the task's own branch (both `None` for a plain one).
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct TaskWorkspaceRecord {
    pub repository_id: String,
    pub path: String,
    pub base_branch: Option<String>,
    pub branch: Option<String>,
}

/// W2: what a new task records of its repository (the branch name is made by the caller).
#[derive(Clone, Debug, PartialEq)]
pub struct NewTaskWorkspace {
    pub repository_id: String,
    pub base_branch: Option<String>,
    pub branch: Option<String>,
}

/// A repository to register: a canonical directory under a workspace root, checked by the
/// caller (`server::workspace`).
pub struct NewRepository {
    pub name: String,
    pub path: String,
    pub git: bool,
    pub base_branch: Option<String>,
}

/// What deleting a repository did.
#[derive(Debug, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    /// Tasks use it: nothing deleted (409).
    InUse,
    NotFound,
}

#[async_trait]
pub trait RepositoryStore: Send + Sync {
    /// `None` when another repository has the path (nothing written).
    async fn create_repository(
        &self,
        new: &NewRepository,
        at: Micros,
    ) -> RepoResult<Option<RepositoryRecord>>;

    async fn list_repositories(&self) -> RepoResult<Vec<RepositoryRecord>>;

    async fn get_repository(&self, id: &str) -> RepoResult<Option<RepositoryRecord>>;

    /// Sets the name and the base branch; `None` when it does not exist.
    async fn update_repository(
        &self,
        id: &str,
        name: &str,
        base_branch: Option<&str>,
    ) -> RepoResult<Option<RepositoryRecord>>;

    async fn delete_repository(&self, id: &str) -> RepoResult<Deleted>;

    /// The repository a task works in, with the branch its worktree is on; `None` for a task
    /// without one.
    async fn task_workspace(&self, task_id: &str) -> RepoResult<Option<TaskWorkspaceRecord>>;
}

#[async_trait]
impl<DB> RepositoryStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'r> RepositoryRecord: FromRow<'r, DB::Row>,
    for<'r> TaskWorkspaceRecord: FromRow<'r, DB::Row>,
{
    async fn create_repository(
        &self,
        new: &NewRepository,
        at: Micros,
    ) -> RepoResult<Option<RepositoryRecord>> {
        Ok(sqlx::query_as::<DB, RepositoryRecord>(
            "INSERT INTO repositories (id, name, path, git, base_branch, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (path) DO NOTHING \
             RETURNING id, name, path, git, base_branch, created_at",
        )
        .bind(new_id())
        .bind(&new.name)
        .bind(&new.path)
        .bind(new.git)
        .bind(&new.base_branch)
        .bind(at)
        .fetch_optional(&mut *self.writer().await?)
        .await?)
    }

    async fn list_repositories(&self) -> RepoResult<Vec<RepositoryRecord>> {
        Ok(sqlx::query_as::<DB, RepositoryRecord>(
            "SELECT id, name, path, git, base_branch, created_at FROM repositories \
             ORDER BY name, id",
        )
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn get_repository(&self, id: &str) -> RepoResult<Option<RepositoryRecord>> {
        Ok(sqlx::query_as::<DB, RepositoryRecord>(
            "SELECT id, name, path, git, base_branch, created_at FROM repositories \
             WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *self.reader().await?)
        .await?)
    }

    async fn update_repository(
        &self,
        id: &str,
        name: &str,
        base_branch: Option<&str>,
    ) -> RepoResult<Option<RepositoryRecord>> {
        Ok(sqlx::query_as::<DB, RepositoryRecord>(
            "UPDATE repositories SET name = $2, base_branch = $3 WHERE id = $1 \
             RETURNING id, name, path, git, base_branch, created_at",
        )
        .bind(id)
        .bind(name)
        .bind(base_branch)
        .fetch_optional(&mut *self.writer().await?)
        .await?)
    }

    async fn delete_repository(&self, id: &str) -> RepoResult<Deleted> {
        // One statement: a task inserted at the same time either is seen here or fails on its
        // foreign key (PostgreSQL); SQLite runs one write at a time.
        let deleted = sqlx::query::<DB>(
            "DELETE FROM repositories WHERE id = $1 \
             AND NOT EXISTS (SELECT 1 FROM task_workspaces WHERE repository_id = $1)",
        )
        .bind(id)
        .execute(&mut *self.writer().await?)
        .await;
        match deleted {
            Ok(done) if done.rows_affected() > 0 => Ok(Deleted::Deleted),
            Ok(_) if self.get_repository(id).await?.is_some() => Ok(Deleted::InUse),
            Ok(_) => Ok(Deleted::NotFound),
            Err(sqlx::Error::Database(e)) if e.is_foreign_key_violation() => Ok(Deleted::InUse),
            Err(e) => Err(e.into()),
        }
    }

    async fn task_workspace(&self, task_id: &str) -> RepoResult<Option<TaskWorkspaceRecord>> {
        Ok(sqlx::query_as::<DB, TaskWorkspaceRecord>(
            "SELECT w.repository_id, r.path, w.base_branch, w.branch \
             FROM task_workspaces w JOIN repositories r ON r.id = w.repository_id \
             WHERE w.task_id = $1",
        )
        .bind(task_id)
        .fetch_optional(&mut *self.reader().await?)
        .await?)
    }
}
