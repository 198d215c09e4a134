//! Clarification bundles with their questions, and permission requests (P1).

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, Type};

use super::authority::{BUNDLE_COLUMNS, SQL};
use super::sql::{
    MESSAGE_COLUMNS, PERMISSION_COLUMNS, RowsAffected, SqlBackend, SqlRepository, json,
    questions_from_json, stmt, stmt_with_ids,
};
use super::{
    BundleRecord, BundleView, MessageRecord, NewBundle, NewPermissionRequest, PermissionRecord,
    RepoError, RepoResult, new_id,
};
use crate::server::time::Micros;

#[async_trait]
pub trait QuestionStore: Send + Sync {
    async fn insert_bundle(
        &self,
        new: &NewBundle,
        at: Micros,
    ) -> RepoResult<(BundleRecord, MessageRecord)>;

    async fn get_bundle(&self, pending_id: &str) -> RepoResult<Option<BundleView>>;

    /// Every bundle of the session (any status), oldest first, without questions.
    async fn session_bundles(&self, session_id: &str) -> RepoResult<Vec<BundleRecord>>;

    /// The request and its transcript row, in one transaction: a reader never sees a
    /// pending permission (P1) without the row that shows it.
    /// A permission request and its transcript row in `new.turn_id` (`NotFound` when that
    /// turn is not the session's).
    async fn insert_permission_request(
        &self,
        new: &NewPermissionRequest,
        at: Micros,
    ) -> RepoResult<(PermissionRecord, MessageRecord)>;

    /// N6, P1: an agent's permission request, written only when `new.turn_id` is its session's
    /// current, open turn and the session is live (an owed resume supersedes the turn the
    /// agent asked in); `None`: nothing written.
    async fn permission_in_current_turn(
        &self,
        new: &NewPermissionRequest,
        at: Micros,
    ) -> RepoResult<Option<(PermissionRecord, MessageRecord)>>;

    async fn get_permission_request(&self, id: &str) -> RepoResult<Option<PermissionRecord>>;

    /// P1: the newest permission request of `turn_id` (by `created_at`, then `id`).
    async fn latest_permission_request(
        &self,
        session_id: &str,
        turn_id: &str,
    ) -> RepoResult<Option<PermissionRecord>>;

    /// The session's pending permission requests, oldest first.
    async fn pending_permission_requests(
        &self,
        session_id: &str,
    ) -> RepoResult<Vec<PermissionRecord>>;

    /// Guarded: only a pending request is resolved.
    async fn resolve_permission_request(
        &self,
        id: &str,
        status: &str,
        outcome: Option<&str>,
        at: Micros,
    ) -> RepoResult<bool>;

    /// Cancels pending permission requests (of one session, or all); returns what changed.
    async fn cancel_permissions(
        &self,
        session_id: Option<&str>,
        at: Micros,
    ) -> RepoResult<Vec<PermissionRecord>>;

    /// Start-up: cancels every pending permission request except those of `keep` (sessions
    /// whose agent runs on another live server); returns what changed (N6).
    async fn cancel_permissions_except(
        &self,
        keep: &[String],
        at: Micros,
    ) -> RepoResult<Vec<PermissionRecord>>;
}

#[async_trait]
impl<DB> QuestionStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'r> BundleActivityRow: FromRow<'r, DB::Row>,
    for<'r> BundleRecord: FromRow<'r, DB::Row>,
    for<'r> MessageRecord: FromRow<'r, DB::Row>,
    for<'r> PermissionRecord: FromRow<'r, DB::Row>,
{
    async fn insert_bundle(
        &self,
        new: &NewBundle,
        at: Micros,
    ) -> RepoResult<(BundleRecord, MessageRecord)> {
        let pending_id = new.pending_id.clone().unwrap_or_else(new_id);
        let mut tx = self.write_tx().await?;
        let bundle = sqlx::query_as::<DB, BundleRecord>(stmt!(
            "INSERT INTO clarification_bundles ({BUNDLE_COLUMNS}) \
             SELECT $1, t.session_id, t.task_id, t.id, 'pending', FALSE, FALSE, $4, $5, NULL, NULL, $6, NULL, 'mcp' \
             FROM turns t WHERE t.id = $3 AND t.session_id = $2 \
             RETURNING {BUNDLE_COLUMNS}"
        ))
        .bind(&pending_id)
        .bind(&new.session_id)
        .bind(&new.turn_id)
        .bind(&new.context)
        .bind(&new.dedup_key)
        .bind(at)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| {
            RepoError::NotFound(format!(
                "open current turn {} of session {}",
                new.turn_id, new.session_id
            ))
        })?;
        insert_questions(&mut tx, &pending_id, &new.questions).await?;
        let message = insert_question_message(&mut tx, &bundle, &new.message_content, at).await?;
        tx.commit().await?;
        Ok((bundle, message))
    }

    async fn get_bundle(&self, pending_id: &str) -> RepoResult<Option<BundleView>> {
        let row = sqlx::query_as::<DB, BundleActivityRow>(SQL.bundle_with_activity(DB::KIND))
            .bind(pending_id)
            .fetch_optional(&mut *self.reader().await?)
            .await?;
        row.map(|r| {
            Ok(BundleView {
                questions: questions_from_json(&r.questions)?,
                record: r.record,
                active: r.active,
            })
        })
        .transpose()
    }

    async fn session_bundles(&self, session_id: &str) -> RepoResult<Vec<BundleRecord>> {
        Ok(sqlx::query_as::<DB, BundleRecord>(stmt!(
            "SELECT {BUNDLE_COLUMNS} FROM clarification_bundles WHERE session_id = $1 \
             ORDER BY created_at, pending_id"
        ))
        .bind(session_id)
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn insert_permission_request(
        &self,
        new: &NewPermissionRequest,
        at: Micros,
    ) -> RepoResult<(PermissionRecord, MessageRecord)> {
        self.write_permission(new, at, false).await?.ok_or_else(|| {
            RepoError::NotFound(format!(
                "turn {} of session {}",
                new.turn_id, new.session_id
            ))
        })
    }

    async fn permission_in_current_turn(
        &self,
        new: &NewPermissionRequest,
        at: Micros,
    ) -> RepoResult<Option<(PermissionRecord, MessageRecord)>> {
        self.write_permission(new, at, true).await
    }

    async fn get_permission_request(&self, id: &str) -> RepoResult<Option<PermissionRecord>> {
        Ok(sqlx::query_as::<DB, PermissionRecord>(stmt!(
            "SELECT {PERMISSION_COLUMNS} \
             FROM permission_requests WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&mut *self.reader().await?)
        .await?)
    }

    async fn latest_permission_request(
        &self,
        session_id: &str,
        turn_id: &str,
    ) -> RepoResult<Option<PermissionRecord>> {
        Ok(sqlx::query_as::<DB, PermissionRecord>(stmt!(
            "SELECT {PERMISSION_COLUMNS} \
             FROM permission_requests WHERE session_id = $1 AND turn_id = $2 \
             ORDER BY created_at DESC, id DESC LIMIT 1"
        ))
        .bind(session_id)
        .bind(turn_id)
        .fetch_optional(&mut *self.reader().await?)
        .await?)
    }

    async fn pending_permission_requests(
        &self,
        session_id: &str,
    ) -> RepoResult<Vec<PermissionRecord>> {
        Ok(sqlx::query_as::<DB, PermissionRecord>(stmt!(
            "SELECT {PERMISSION_COLUMNS} \
             FROM permission_requests WHERE session_id = $1 AND status = 'pending' ORDER BY created_at, id"
        ))
        .bind(session_id)
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn resolve_permission_request(
        &self,
        id: &str,
        status: &str,
        outcome: Option<&str>,
        at: Micros,
    ) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE permission_requests SET status = $2, outcome = $3, resolved_at = $4 \
             WHERE id = $1 AND status = 'pending'",
        )
        .bind(id)
        .bind(status)
        .bind(outcome)
        .bind(at)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn cancel_permissions(
        &self,
        session_id: Option<&str>,
        at: Micros,
    ) -> RepoResult<Vec<PermissionRecord>> {
        Ok(sqlx::query_as::<DB, PermissionRecord>(stmt!(
            "UPDATE permission_requests SET status = 'cancelled', resolved_at = $2 \
             WHERE status = 'pending' AND ($1 IS NULL OR session_id = $1) \
             RETURNING {PERMISSION_COLUMNS}"
        ))
        .bind(session_id)
        .bind(at)
        .fetch_all(&mut *self.writer().await?)
        .await?)
    }

    async fn cancel_permissions_except(
        &self,
        keep: &[String],
        at: Micros,
    ) -> RepoResult<Vec<PermissionRecord>> {
        Ok(sqlx::query_as::<DB, PermissionRecord>(stmt_with_ids!(
            DB::KIND,
            "UPDATE permission_requests SET status = 'cancelled', resolved_at = $2 \
             WHERE status = 'pending' AND session_id NOT IN ({}) \
             RETURNING {PERMISSION_COLUMNS}"
        ))
        .bind(json(keep))
        .bind(at)
        .fetch_all(&mut *self.writer().await?)
        .await?)
    }
}

impl<DB> SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'r> BundleActivityRow: FromRow<'r, DB::Row>,
    for<'r> BundleRecord: FromRow<'r, DB::Row>,
    for<'r> MessageRecord: FromRow<'r, DB::Row>,
    for<'r> PermissionRecord: FromRow<'r, DB::Row>,
{
    /// [`QuestionStore::insert_permission_request`], guarded by N6 when `current_only`.
    async fn write_permission(
        &self,
        new: &NewPermissionRequest,
        at: Micros,
        current_only: bool,
    ) -> RepoResult<Option<(PermissionRecord, MessageRecord)>> {
        let mut tx = self.write_tx().await?;
        // N6, P1: when guarded, only into the session's current, open turn (a newer turn — an
        // owed resume — supersedes it), in the statement that writes, after the session lock.
        sqlx::query::<DB>(DB::LOCK_SESSION)
            .bind(&new.session_id)
            .fetch_optional(&mut *tx)
            .await?;
        let request = sqlx::query_as::<DB, PermissionRecord>(stmt!(
            "INSERT INTO permission_requests (id, session_id, task_id, turn_id, tool_call, options, \
             status, outcome, created_at, resolved_at) \
             SELECT $1, t.session_id, t.task_id, t.id, $4, $5, 'pending', NULL, $6, NULL \
             FROM turns t WHERE t.id = $3 AND t.session_id = $2 \
               AND ($7 = FALSE OR (t.completed_at IS NULL \
                    AND t.id = (SELECT ls.current_turn_id FROM sessions ls \
                                WHERE ls.id = $2 \
                                  AND ls.state NOT IN ('completed', 'failed', 'cancelled')))) \
             RETURNING {PERMISSION_COLUMNS}"
        ))
        .bind(new.id.clone().unwrap_or_else(new_id))
        .bind(&new.session_id)
        .bind(&new.turn_id)
        .bind(&new.tool_call)
        .bind(&new.options)
        .bind(at)
        .bind(current_only)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(request) = request else {
            return Ok(None);
        };
        let message = sqlx::query_as::<DB, MessageRecord>(stmt!(
            "INSERT INTO messages ({MESSAGE_COLUMNS}) \
             VALUES ($1, $2, $3, $4, 'agent', 'permission_request', $5, $6, $7, $7, NULL) \
             RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(new_id())
        .bind(&request.session_id)
        .bind(&request.task_id)
        .bind(&request.turn_id)
        .bind(&new.message_content)
        .bind(&request.id)
        .bind(at)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some((request, message)))
    }
}

pub(super) async fn insert_questions<DB>(
    tx: &mut super::sql::WriteTx<'_, DB>,
    pending_id: &str,
    questions: &[crate::model::Question],
) -> RepoResult<()>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
{
    for (position, q) in questions.iter().enumerate() {
        sqlx::query::<DB>(
            "INSERT INTO clarification_questions \
             (pending_id, position, question_id, title, prompt, options, form) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(pending_id)
        .bind(position as i64)
        .bind(&q.id)
        .bind(&q.title)
        .bind(&q.prompt)
        .bind(json(&q.options))
        .bind((!q.form.is_plain()).then(|| json(&q.form)))
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// L6: the bundle's one transcript row, in the bundle's turn.
pub(super) async fn insert_question_message<DB>(
    tx: &mut super::sql::WriteTx<'_, DB>,
    bundle: &BundleRecord,
    content: &str,
    at: Micros,
) -> RepoResult<MessageRecord>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> MessageRecord: FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_as::<DB, MessageRecord>(stmt!(
        "INSERT INTO messages ({MESSAGE_COLUMNS}) \
         VALUES ($1, $2, $3, $4, 'agent', 'clarification_request', $5, $6, $7, $7, $8) \
         RETURNING {MESSAGE_COLUMNS}"
    ))
    .bind(new_id())
    .bind(&bundle.session_id)
    .bind(&bundle.task_id)
    .bind(&bundle.turn_id)
    .bind(content)
    .bind(&bundle.pending_id)
    .bind(at)
    .bind(&bundle.source)
    .fetch_one(&mut **tx)
    .await?)
}

/// A bundle row with L2 evaluated and its questions, in the same statement.
#[derive(sqlx::FromRow)]
pub struct BundleActivityRow {
    #[sqlx(flatten)]
    record: BundleRecord,
    active: bool,
    /// `sql::questions_of`.
    questions: String,
}

/// A bundle row with its questions (`sql::questions_of`).
#[derive(sqlx::FromRow)]
pub struct BundleQuestionsRow {
    #[sqlx(flatten)]
    pub(super) record: BundleRecord,
    pub(super) questions: String,
}
