//! Workflows and their steps, and the N3 step actions of a task.

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, Type};

use super::authority::bundle_is_active_in;
use super::sql::{RowsAffected, SqlBackend, SqlRepository, stmt};
use super::{
    NewWorkflow, RepoError, RepoResult, WorkflowRecord, WorkflowStepRecord, WorkflowView, new_id,
};
use crate::server::time::Micros;

#[async_trait]
pub trait WorkflowStore: Send + Sync {
    async fn create_workflow(&self, new: &NewWorkflow, at: Micros) -> RepoResult<WorkflowView>;

    async fn list_workflows(&self) -> RepoResult<Vec<WorkflowView>>;

    async fn default_workflow(&self) -> RepoResult<Option<WorkflowView>>;

    /// The completion of `turn_id` could not decide its step action: it waits as deferred
    /// (if it is still due).
    async fn defer_workflow(&self, turn_id: &str) -> RepoResult<bool>;

    /// Takes the deferred step action of `turn_id` (compare-and-set: at most once) and makes
    /// it due again.
    async fn take_deferred_workflow(&self, turn_id: &str) -> RepoResult<bool>;

    /// The due step action of `turn_id` has nothing to do (compare-and-set); false when it
    /// was not due.
    async fn settle_workflow(&self, turn_id: &str) -> RepoResult<bool>;

    /// The completed turns whose step action is still due (`(turn, session, task)`), of one
    /// session or of all: a server that stopped between a completion and its action left them.
    async fn due_workflows(
        &self,
        session_id: Option<&str>,
    ) -> RepoResult<Vec<(String, String, String)>>;

    /// Moves the task from step `from` to step `to`; false when it is no longer on `from`.
    async fn move_task_step(
        &self,
        task_id: &str,
        from: &str,
        to: &str,
        at: Micros,
    ) -> RepoResult<bool>;

    /// N3/I6: the step action of `turn_id` — the task from `from` to `to` — only while it is
    /// due (taken in the same transaction: at most once) and session `session_id` has no
    /// active question (guarded in the statement that moves it, after the session lock).
    /// Blocked and Stale leave it due.
    async fn advance_step(
        &self,
        turn_id: &str,
        task_id: &str,
        session_id: &str,
        from: &str,
        to: &str,
        at: Micros,
    ) -> RepoResult<StepMove>;

    /// N3: defers the due step action of `turn_id` only while its session has an active
    /// question (guarded in the statement, after the session lock); false when none is active
    /// any more (the action can run now) or it is not due (deferred or run already).
    async fn defer_while_active(&self, turn_id: &str) -> RepoResult<bool>;
}

/// N3: takes the due step action of turn `$1` (compare-and-set: at most once).
const TAKE_DUE: &str =
    "UPDATE turns SET workflow_due = FALSE WHERE id = $1 AND workflow_due = TRUE";

/// What [`WorkflowStore::advance_step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepMove {
    Moved,
    /// The session has an active question: the action waits (N3).
    Blocked,
    /// Nothing to do: the action was run, deferred or settled already.
    NotThere,
    /// The task is no longer on the step read before (another turn's action moved it, or the
    /// user did): the action stays due, to be run from the step the task is on now (I6: each
    /// turn's action moves once, so two racing completions move the task twice).
    Stale,
}

#[async_trait]
impl<DB> WorkflowStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'r> WorkflowRecord: FromRow<'r, DB::Row>,
    for<'r> WorkflowStepRecord: FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    for<'r> (String, String, String): FromRow<'r, DB::Row>,
{
    async fn create_workflow(&self, new: &NewWorkflow, at: Micros) -> RepoResult<WorkflowView> {
        if new.name.trim().is_empty() {
            return Err(RepoError::Invalid("workflow name must not be empty".into()));
        }
        if new.steps.is_empty() {
            return Err(RepoError::Invalid(
                "a workflow needs at least one step".into(),
            ));
        }
        let mut tx = self.write_tx().await?;
        let workflow = sqlx::query_as::<DB, WorkflowRecord>(
            "INSERT INTO workflows (id, name, is_default, created_at) VALUES ($1, $2, $3, $4) \
             RETURNING id, name, is_default, created_at",
        )
        .bind(new_id())
        .bind(&new.name)
        .bind(new.is_default)
        .bind(at)
        .fetch_one(&mut *tx)
        .await?;
        let mut steps = Vec::with_capacity(new.steps.len());
        for (position, step) in new.steps.iter().enumerate() {
            steps.push(
                sqlx::query_as::<DB, WorkflowStepRecord>(
                    "INSERT INTO workflow_steps (id, workflow_id, position, name, on_turn_complete) \
                     VALUES ($1, $2, $3, $4, $5) \
                     RETURNING id, workflow_id, position, name, on_turn_complete",
                )
                .bind(new_id())
                .bind(&workflow.id)
                .bind(position as i64)
                .bind(&step.name)
                .bind(&step.on_turn_complete)
                .fetch_one(&mut *tx)
                .await?,
            );
        }
        tx.commit().await?;
        Ok(WorkflowView { workflow, steps })
    }

    async fn list_workflows(&self) -> RepoResult<Vec<WorkflowView>> {
        let rows = sqlx::query_as::<DB, WorkflowRecord>(
            "SELECT id, name, is_default, created_at FROM workflows ORDER BY created_at, id",
        )
        .fetch_all(&mut *self.reader().await?)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.push(self.load_steps(row).await?);
        }
        Ok(out)
    }

    async fn default_workflow(&self) -> RepoResult<Option<WorkflowView>> {
        let row = sqlx::query_as::<DB, WorkflowRecord>(
            "SELECT id, name, is_default, created_at FROM workflows WHERE is_default = TRUE",
        )
        .fetch_optional(&mut *self.reader().await?)
        .await?;
        match row {
            Some(row) => Ok(Some(self.load_steps(row).await?)),
            None => Ok(None),
        }
    }

    async fn defer_workflow(&self, turn_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE turns SET workflow_deferred = TRUE, workflow_due = FALSE \
             WHERE id = $1 AND workflow_due = TRUE",
        )
        .bind(turn_id)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn take_deferred_workflow(&self, turn_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE turns SET workflow_deferred = FALSE, workflow_due = TRUE \
             WHERE id = $1 AND workflow_deferred = TRUE",
        )
        .bind(turn_id)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn settle_workflow(&self, turn_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(TAKE_DUE)
            .bind(turn_id)
            .execute(&mut *self.writer().await?)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn due_workflows(
        &self,
        session_id: Option<&str>,
    ) -> RepoResult<Vec<(String, String, String)>> {
        const DUE: &str = "SELECT id, session_id, task_id FROM turns WHERE workflow_due = TRUE";
        let mut reader = self.reader().await?;
        Ok(match session_id {
            Some(session_id) => {
                sqlx::query_as::<DB, (String, String, String)>(stmt!(
                    "{DUE} AND session_id = $1 ORDER BY started_at, id"
                ))
                .bind(session_id)
                .fetch_all(&mut *reader)
                .await?
            }
            None => {
                sqlx::query_as::<DB, (String, String, String)>(stmt!(
                    "{DUE} ORDER BY session_id, started_at, id"
                ))
                .fetch_all(&mut *reader)
                .await?
            }
        })
    }

    async fn move_task_step(
        &self,
        task_id: &str,
        from: &str,
        to: &str,
        at: Micros,
    ) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE tasks SET step_id = $3, updated_at = $4 WHERE id = $1 AND step_id = $2",
        )
        .bind(task_id)
        .bind(from)
        .bind(to)
        .bind(at)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn advance_step(
        &self,
        turn_id: &str,
        task_id: &str,
        session_id: &str,
        from: &str,
        to: &str,
        at: Micros,
    ) -> RepoResult<StepMove> {
        let mut tx = self.write_tx().await?;
        sqlx::query::<DB>(DB::LOCK_SESSION)
            .bind(session_id)
            .fetch_optional(&mut *tx)
            .await?;
        let taken = sqlx::query::<DB>(TAKE_DUE)
            .bind(turn_id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        if !taken {
            // Run, deferred or settled already (another server, or start-up, took it).
            return Ok(StepMove::NotThere);
        }
        let moved = sqlx::query::<DB>(stmt!(
            "UPDATE tasks SET step_id = $3, updated_at = $4 WHERE id = $1 AND step_id = $2 \
             AND NOT EXISTS (SELECT 1 FROM clarification_bundles b \
                             WHERE b.session_id = $5 AND {active})",
            active = bundle_is_active_in("b", "$5")
        ))
        .bind(task_id)
        .bind(from)
        .bind(to)
        .bind(at)
        .bind(session_id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        if moved {
            tx.commit().await?;
            return Ok(StepMove::Moved);
        }
        // Why not, read under the same lock: nothing can change it before the transaction ends.
        let blocked = sqlx::query_as::<DB, (i64,)>(stmt!(
            "SELECT COUNT(*) FROM clarification_bundles b WHERE b.session_id = $1 AND {active}",
            active = bundle_is_active_in("b", "$1")
        ))
        .bind(session_id)
        .fetch_one(&mut *tx)
        .await?
        .0 > 0;
        // Rolled back either way: the action stays due, to be deferred, or run again from the
        // step the task is on now.
        Ok(if blocked {
            StepMove::Blocked
        } else {
            StepMove::Stale
        })
    }

    async fn defer_while_active(&self, turn_id: &str) -> RepoResult<bool> {
        let mut tx = self.write_tx().await?;
        let Some((session_id,)) =
            sqlx::query_as::<DB, (String,)>("SELECT session_id FROM turns WHERE id = $1")
                .bind(turn_id)
                .fetch_optional(&mut *tx)
                .await?
        else {
            return Ok(false);
        };
        sqlx::query::<DB>(DB::LOCK_SESSION)
            .bind(&session_id)
            .fetch_optional(&mut *tx)
            .await?;
        let deferred = sqlx::query::<DB>(stmt!(
            "UPDATE turns SET workflow_deferred = TRUE, workflow_due = FALSE \
             WHERE id = $1 AND workflow_due = TRUE \
               AND EXISTS (SELECT 1 FROM clarification_bundles b \
                           WHERE b.session_id = $2 AND {active})",
            active = bundle_is_active_in("b", "$2")
        ))
        .bind(turn_id)
        .bind(&session_id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        tx.commit().await?;
        Ok(deferred)
    }
}

impl<DB> SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'r> WorkflowStepRecord: FromRow<'r, DB::Row>,
{
    pub(super) async fn load_steps(&self, workflow: WorkflowRecord) -> RepoResult<WorkflowView> {
        let steps = sqlx::query_as::<DB, WorkflowStepRecord>(
            "SELECT id, workflow_id, position, name, on_turn_complete FROM workflow_steps \
             WHERE workflow_id = $1 ORDER BY position, id",
        )
        .bind(&workflow.id)
        .fetch_all(&mut *self.reader().await?)
        .await?;
        Ok(WorkflowView { workflow, steps })
    }
}
