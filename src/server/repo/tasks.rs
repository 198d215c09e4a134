//! Tasks and the paged task list.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Decode, Encode, Executor, FromRow, Type};

use super::sql::{
    JsonBool, RowsAffected, SqlBackend, SqlRepository, TASK_PAGE_FILTER, TASK_SELECT, json_rows,
    rows_from_json, stmt,
};
use super::{
    Backend, NewTask, NewTaskWorkspace, RepoError, RepoResult, SummaryRecord, SummaryRow,
    TaskFilter, TaskPatch, TaskRecord, new_id,
};
use crate::server::time::Micros;

/// A task-list page as one JSON array ([`json_rows`]) of `[[id, title, description, state,
/// workflow_id, step_id, archived_at, created_at, updated_at], revision, summary, invalidated,
/// summary_updated_at]`: the task (the fields of [`TaskRecord`] in order, read by position) and
/// its stored summary (nulls without one), newest first. The page is cut first, then each
/// listed task's summary is looked up by its key. PostgreSQL is told so with a `LATERAL`
/// subquery: given a plain join it hashed every summary of the database for each page once
/// its statistics said the table was large, and joined every task before the `LIMIT` when it
/// had none (test `b2_postgres_page_reads_only_the_pages_rows`). Two texts per backend, so each
/// planner sees the literal predicate of its partial index (archived or not).
pub fn page_statement(backend: Backend, archived: bool) -> &'static str {
    static S: std::sync::LazyLock<[String; 4]> = std::sync::LazyLock::new(|| {
        let task = "p.id, p.title, p.description, p.state, p.workflow_id, p.step_id, \
                    p.archived_at, p.created_at, p.updated_at";
        let summary = "s.revision, s.summary, s.invalidated, s.updated_at";
        // Both databases nest an array built by a JSON function as JSON, not as text.
        let nested = |backend| match backend {
            Backend::Sqlite => format!("json_array({task})"),
            Backend::Postgres => format!("json_build_array({task})"),
        };
        let join = |backend| match backend {
            Backend::Sqlite => "LEFT JOIN task_status_summaries s ON s.task_id = p.id".to_string(),
            Backend::Postgres => format!(
                "LEFT JOIN LATERAL (SELECT {summary} FROM task_status_summaries s \
                 WHERE s.task_id = p.id LIMIT 1) AS s ON TRUE"
            ),
        };
        let order = "ORDER BY p.updated_at DESC, p.id DESC";
        let page = |archived: bool| {
            let archived = if archived { "IS NOT NULL" } else { "IS NULL" };
            format!("{TASK_SELECT} WHERE t.archived_at {archived} AND {TASK_PAGE_FILTER}")
        };
        [
            (Backend::Sqlite, false),
            (Backend::Sqlite, true),
            (Backend::Postgres, false),
            (Backend::Postgres, true),
        ]
        .map(|(b, archived)| {
            format!(
                "SELECT {} FROM ({}) AS p {}",
                json_rows(b, &format!("{}, {summary}", nested(b)), order),
                page(archived),
                join(b)
            )
        })
    });
    let backend = match backend {
        Backend::Sqlite => 0,
        Backend::Postgres => 2,
    };
    S[backend + usize::from(archived)].as_str()
}

/// The new task's row (`create_task`, `create_task_in`).
fn insert_task<DB>(
    id: &str,
    new: &NewTask,
    at: Micros,
) -> sqlx::query::Query<'static, DB, <DB as sqlx::Database>::Arguments>
where
    DB: SqlBackend,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    sqlx::query::<DB>(
        "INSERT INTO tasks (id, title, description, state, workflow_id, step_id, \
         archived_at, created_at, updated_at) VALUES ($1, $2, $3, 'open', $4, $5, NULL, $6, $6)",
    )
    .bind(id)
    .bind(&new.title)
    .bind(&new.description)
    .bind(&new.workflow_id)
    .bind(&new.step_id)
    .bind(at)
}

#[async_trait]
pub trait TaskStore: Send + Sync {
    async fn create_task(&self, new: &NewTask, at: Micros) -> RepoResult<TaskRecord>;

    /// W2: a task with the id `id` working in a repository, written with its workspace row in
    /// one transaction; `None` (nothing written) when the repository is gone.
    async fn create_task_in(
        &self,
        id: &str,
        new: &NewTask,
        workspace: &NewTaskWorkspace,
        at: Micros,
    ) -> RepoResult<Option<TaskRecord>>;

    async fn get_task(&self, id: &str) -> RepoResult<Option<TaskRecord>>;

    /// Every task, newest first (start-up reconciliation).
    async fn list_tasks(&self) -> RepoResult<Vec<TaskRecord>>;

    /// One page of the task list (most recently updated first), each task with its stored
    /// summary, read in one statement (B2).
    async fn list_tasks_page(
        &self,
        filter: &TaskFilter,
    ) -> RepoResult<Vec<(TaskRecord, Option<SummaryRecord>)>>;

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
    for<'r> String: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    async fn create_task(&self, new: &NewTask, at: Micros) -> RepoResult<TaskRecord> {
        if new.title.trim().is_empty() {
            return Err(RepoError::Invalid("a task needs a non-empty title".into()));
        }
        let id = new_id();
        insert_task::<DB>(&id, new, at)
            .execute(&mut *self.writer().await?)
            .await?;
        self.get_task(&id)
            .await?
            .ok_or_else(|| RepoError::NotFound(format!("task {id}")))
    }

    async fn create_task_in(
        &self,
        id: &str,
        new: &NewTask,
        workspace: &NewTaskWorkspace,
        at: Micros,
    ) -> RepoResult<Option<TaskRecord>> {
        if new.title.trim().is_empty() {
            return Err(RepoError::Invalid("a task needs a non-empty title".into()));
        }
        let mut tx = self.write_tx().await?;
        insert_task::<DB>(id, new, at).execute(&mut *tx).await?;
        let linked = sqlx::query::<DB>(
            "INSERT INTO task_workspaces (task_id, repository_id, base_branch, branch) \
             SELECT $1, id, $3, $4 FROM repositories WHERE id = $2",
        )
        .bind(id)
        .bind(&workspace.repository_id)
        .bind(&workspace.base_branch)
        .bind(&workspace.branch)
        .execute(&mut *tx)
        .await?;
        if linked.rows_affected() == 0 {
            return Ok(None);
        }
        tx.commit().await?;
        self.get_task(id).await
    }

    async fn get_task(&self, id: &str) -> RepoResult<Option<TaskRecord>> {
        Ok(
            sqlx::query_as::<DB, TaskRecord>(stmt!("{TASK_SELECT} WHERE t.id = $1"))
                .bind(id)
                .fetch_optional(&mut *self.reader().await?)
                .await?,
        )
    }

    async fn list_tasks(&self) -> RepoResult<Vec<TaskRecord>> {
        Ok(sqlx::query_as::<DB, TaskRecord>(stmt!(
            "{TASK_SELECT} ORDER BY t.created_at DESC, t.id DESC"
        ))
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn list_tasks_page(
        &self,
        filter: &TaskFilter,
    ) -> RepoResult<Vec<(TaskRecord, Option<SummaryRecord>)>> {
        let (after_at, after_id) = match &filter.after {
            Some((at, id)) => (Some(*at), Some(id.as_str())),
            None => (None, None),
        };
        let rows: String =
            sqlx::query_scalar::<DB, String>(page_statement(DB::KIND, filter.archived))
                .bind(filter.title_like.as_deref())
                .bind(filter.pending_only)
                .bind(after_at)
                .bind(after_id)
                .bind(filter.limit)
                .fetch_one(&mut *self.reader().await?)
                .await?;
        type Row = (
            TaskRecord,
            Option<i64>,
            Option<String>,
            Option<JsonBool>,
            Option<Micros>,
        );
        let rows: Vec<Row> = rows_from_json(&rows, "task page")?;
        rows.into_iter()
            .map(|(task, revision, summary, invalidated, at)| {
                let summary = match (revision, summary, invalidated, at) {
                    (Some(revision), Some(summary), Some(invalidated), Some(at)) => Some(
                        SummaryRow {
                            task_id: task.id.clone(),
                            revision,
                            summary,
                            invalidated: invalidated.0,
                            updated_at: at,
                        }
                        .into_record()?,
                    ),
                    _ => None,
                };
                Ok((task, summary))
            })
            .collect()
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
        .execute(&mut *self.writer().await?)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        self.get_task(id).await
    }

    async fn delete_task(&self, id: &str) -> RepoResult<bool> {
        // Lock order (decision 0028): a statement that writes a bundle or a permission request
        // holds that row, then its session's row (the `current_turn_pending` triggers). The
        // cascade from `tasks` would take the session rows first and the bundles after, so the
        // task's bundles and requests go first, each statement taking their session rows last.
        let mut tx = self.write_tx().await?;
        for statement in [
            "DELETE FROM clarification_bundles WHERE task_id = $1",
            "DELETE FROM permission_requests WHERE task_id = $1",
        ] {
            sqlx::query::<DB>(statement)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        let done = sqlx::query::<DB>("DELETE FROM tasks WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }
}
