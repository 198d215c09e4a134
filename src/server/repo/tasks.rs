//! Tasks and the paged task list.

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, Type};

use super::sql::{RowsAffected, SqlBackend, SqlRepository, TASK_PAGE_FILTER, TASK_SELECT, stmt};
use super::{NewTask, RepoError, RepoResult, TaskFilter, TaskPatch, TaskRecord, new_id};
use crate::server::time::Micros;

#[async_trait]
pub trait TaskStore: Send + Sync {
    async fn create_task(&self, new: &NewTask, at: Micros) -> RepoResult<TaskRecord>;

    async fn get_task(&self, id: &str) -> RepoResult<Option<TaskRecord>>;

    /// Every task, newest first (start-up reconciliation).
    async fn list_tasks(&self) -> RepoResult<Vec<TaskRecord>>;

    /// One page of the task list (most recently updated first).
    async fn list_tasks_page(&self, filter: &TaskFilter) -> RepoResult<Vec<TaskRecord>>;

    async fn update_task(
        &self,
        id: &str,
        patch: &TaskPatch,
        at: Micros,
    ) -> RepoResult<Option<TaskRecord>>;

    async fn delete_task(&self, id: &str) -> RepoResult<bool>;
}

#[async_trait]
impl<DB> TaskStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'r> TaskRecord: FromRow<'r, DB::Row>,
{
    async fn create_task(&self, new: &NewTask, at: Micros) -> RepoResult<TaskRecord> {
        if new.title.trim().is_empty() {
            return Err(RepoError::Invalid("a task needs a non-empty title".into()));
        }
        let id = new_id();
        sqlx::query::<DB>(
            "INSERT INTO tasks (id, title, description, state, workflow_id, step_id, \
             archived_at, created_at, updated_at) VALUES ($1, $2, $3, 'open', $4, $5, NULL, $6, $6)",
        )
        .bind(&id)
        .bind(&new.title)
        .bind(&new.description)
        .bind(&new.workflow_id)
        .bind(&new.step_id)
        .bind(at)
        .execute(&self.pool)
        .await?;
        self.get_task(&id)
            .await?
            .ok_or_else(|| RepoError::NotFound(format!("task {id}")))
    }

    async fn get_task(&self, id: &str) -> RepoResult<Option<TaskRecord>> {
        Ok(
            sqlx::query_as::<DB, TaskRecord>(stmt!("{TASK_SELECT} WHERE t.id = $1"))
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn list_tasks(&self) -> RepoResult<Vec<TaskRecord>> {
        Ok(sqlx::query_as::<DB, TaskRecord>(stmt!(
            "{TASK_SELECT} ORDER BY t.created_at DESC, t.id DESC"
        ))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn list_tasks_page(&self, filter: &TaskFilter) -> RepoResult<Vec<TaskRecord>> {
        // Two statements so each planner sees the literal predicate of its partial index.
        let sql = if filter.archived {
            stmt!("{TASK_SELECT} WHERE t.archived_at IS NOT NULL AND {TASK_PAGE_FILTER}")
        } else {
            stmt!("{TASK_SELECT} WHERE t.archived_at IS NULL AND {TASK_PAGE_FILTER}")
        };
        let (after_at, after_id) = match &filter.after {
            Some((at, id)) => (Some(*at), Some(id.as_str())),
            None => (None, None),
        };
        Ok(sqlx::query_as::<DB, TaskRecord>(sql)
            .bind(filter.title_like.as_deref())
            .bind(filter.pending_only)
            .bind(after_at)
            .bind(after_id)
            .bind(filter.limit)
            .fetch_all(&self.pool)
            .await?)
    }

    async fn update_task(
        &self,
        id: &str,
        patch: &TaskPatch,
        at: Micros,
    ) -> RepoResult<Option<TaskRecord>> {
        if matches!(&patch.title, Some(t) if t.trim().is_empty()) {
            return Err(RepoError::Invalid("a task needs a non-empty title".into()));
        }
        let archived_at: Option<Option<Micros>> = patch.archived.map(|a| a.then_some(at));
        let done = sqlx::query::<DB>(
            "UPDATE tasks SET title = COALESCE($2, title), step_id = COALESCE($3, step_id), \
             archived_at = CASE WHEN $4 THEN $5 ELSE archived_at END, updated_at = $6 WHERE id = $1",
        )
        .bind(id)
        .bind(&patch.title)
        .bind(&patch.step_id)
        .bind(archived_at.is_some())
        .bind(archived_at.flatten())
        .bind(at)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        self.get_task(id).await
    }

    async fn delete_task(&self, id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>("DELETE FROM tasks WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}
