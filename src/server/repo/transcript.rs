//! Turns and transcript messages.

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, Type};

use super::sql::{
    MESSAGE_COLUMNS, MESSAGE_WRITTEN, NO_OWED_RESUME, RowsAffected, SqlBackend, SqlRepository,
    TURN_COLUMNS, owns, still_owner, stmt,
};
use super::{
    MessageRecord, MessageWritten, NewMessage, NewTurn, RepoError, RepoResult, TurnRecord, new_id,
};
use crate::server::time::Micros;

#[async_trait]
pub trait TranscriptStore: Send + Sync {
    async fn insert_turn(&self, new: &NewTurn) -> RepoResult<TurnRecord>;

    async fn complete_turn(&self, turn_id: &str, at: Micros) -> RepoResult<bool>;

    async fn get_turn(&self, id: &str) -> RepoResult<Option<TurnRecord>>;

    /// Ascending (L1 order); unreferenced reservations are hidden.
    async fn list_turns(&self, session_id: &str) -> RepoResult<Vec<TurnRecord>>;

    /// The message as written, with its session's P1 read by the same statement.
    async fn insert_message(&self, new: &NewMessage, at: Micros) -> RepoResult<MessageWritten>;

    async fn list_messages(
        &self,
        session_id: &str,
        after: Option<&str>,
        limit: i64,
    ) -> RepoResult<Vec<MessageRecord>>;

    /// The newest `limit` messages before message `before` (or the newest overall), ascending.
    async fn list_messages_before(
        &self,
        session_id: &str,
        before: Option<&str>,
        limit: i64,
    ) -> RepoResult<Vec<MessageRecord>>;

    async fn delete_message(&self, id: &str) -> RepoResult<Option<MessageRecord>>;

    /// Replaces a message's content (coalescing streamed text into one message per reply).
    async fn update_message_content(
        &self,
        id: &str,
        content: &str,
        at: Micros,
    ) -> RepoResult<Option<MessageWritten>>;
}

#[async_trait]
impl<DB> TranscriptStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'r> MessageRecord: FromRow<'r, DB::Row>,
    for<'r> MessageWritten: FromRow<'r, DB::Row>,
    for<'r> TurnRecord: FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
{
    async fn insert_turn(&self, new: &NewTurn) -> RepoResult<TurnRecord> {
        let id = new.id.clone().unwrap_or_else(new_id);
        let mut tx = self.write_tx().await?;
        let exists = sqlx::query::<DB>(DB::LOCK_SESSION)
            .bind(&new.session_id)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
        if !exists {
            return Err(RepoError::NotFound(format!("session {}", new.session_id)));
        }
        // L18/I4: a prompt never starts while an answer is owed, nor on a server that no longer
        // owns the session; the guards are in the statement that writes (after the session
        // lock, so an owe or a takeover committed meanwhile is seen).
        let (server, epoch) = match &new.fence {
            Some(f) => (Some(f.server_id.as_str()), Some(f.epoch)),
            None => (None, None),
        };
        let turn = sqlx::query_as::<DB, TurnRecord>(stmt!(
            "INSERT INTO turns (id, session_id, task_id, started_at, completed_at, created_at, \
             reservation, resume_pending_id) \
             SELECT $1, s.id, s.task_id, $3, NULL, $4, 'none', NULL FROM sessions s \
             WHERE s.id = $2 AND {NO_OWED_RESUME} AND {owner} \
             RETURNING {TURN_COLUMNS}",
            owner = still_owner("s.id", "$5", "$6")
        ))
        .bind(&id)
        .bind(&new.session_id)
        .bind(new.started_at)
        .bind(new.created_at)
        .bind(server)
        .bind(epoch)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(turn) = turn else {
            return Err(match new.fence {
                Some(_) if !owns(&mut tx, &new.session_id, server, epoch).await? => {
                    RepoError::Fenced(new.session_id.clone())
                }
                _ => RepoError::ResumeOwed(new.session_id.clone()),
            });
        };
        tx.commit().await?;
        Ok(turn)
    }

    async fn complete_turn(&self, turn_id: &str, at: Micros) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE turns SET completed_at = $2, workflow_due = TRUE \
             WHERE id = $1 AND completed_at IS NULL",
        )
        .bind(turn_id)
        .bind(at)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn get_turn(&self, id: &str) -> RepoResult<Option<TurnRecord>> {
        Ok(sqlx::query_as::<DB, TurnRecord>(stmt!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&mut *self.reader().await?)
        .await?)
    }

    async fn list_turns(&self, session_id: &str) -> RepoResult<Vec<TurnRecord>> {
        Ok(sqlx::query_as::<DB, TurnRecord>(stmt!(
            "SELECT {TURN_COLUMNS} FROM turns t WHERE t.session_id = $1 \
             AND (t.reservation <> 'reserved' OR EXISTS (SELECT 1 FROM messages m WHERE m.turn_id = t.id)) \
             ORDER BY t.started_at, t.created_at, t.id"
        ))
        .bind(session_id)
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn insert_message(&self, new: &NewMessage, at: Micros) -> RepoResult<MessageWritten> {
        insert_message_on(&mut *self.writer().await?, new, at).await
    }

    async fn list_messages(
        &self,
        session_id: &str,
        after: Option<&str>,
        limit: i64,
    ) -> RepoResult<Vec<MessageRecord>> {
        Ok(sqlx::query_as::<DB, MessageRecord>(stmt!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = $1 \
             AND ($2 IS NULL OR (m.created_at, m.id) > \
                  (SELECT a.created_at, a.id FROM messages a WHERE a.id = $2)) \
             ORDER BY m.created_at, m.id LIMIT $3 + 0"
        ))
        .bind(session_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn list_messages_before(
        &self,
        session_id: &str,
        before: Option<&str>,
        limit: i64,
    ) -> RepoResult<Vec<MessageRecord>> {
        let mut rows = sqlx::query_as::<DB, MessageRecord>(stmt!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = $1 \
             AND ($2 IS NULL OR (m.created_at, m.id) < \
                  (SELECT a.created_at, a.id FROM messages a WHERE a.id = $2)) \
             ORDER BY m.created_at DESC, m.id DESC LIMIT $3 + 0"
        ))
        .bind(session_id)
        .bind(before)
        .bind(limit)
        .fetch_all(&mut *self.reader().await?)
        .await?;
        rows.reverse();
        Ok(rows)
    }

    async fn delete_message(&self, id: &str) -> RepoResult<Option<MessageRecord>> {
        // L4: authority comes from turn rows; deleting messages never touches turns.
        Ok(sqlx::query_as::<DB, MessageRecord>(stmt!(
            "DELETE FROM messages WHERE id = $1 RETURNING {MESSAGE_COLUMNS}"
        ))
        .bind(id)
        .fetch_optional(&mut *self.writer().await?)
        .await?)
    }

    async fn update_message_content(
        &self,
        id: &str,
        content: &str,
        at: Micros,
    ) -> RepoResult<Option<MessageWritten>> {
        update_content_on(&mut *self.writer().await?, id, content, at).await
    }
}

/// [`TranscriptStore::insert_message`] on `executor` (the write connection, or inside a
/// transaction: an ask's owed replies).
pub(super) async fn insert_message_on<'e, DB, E>(
    executor: E,
    new: &NewMessage,
    at: Micros,
) -> RepoResult<MessageWritten>
where
    DB: SqlBackend,
    E: Executor<'e, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> MessageWritten: FromRow<'r, DB::Row>,
{
    sqlx::query_as::<DB, MessageWritten>(stmt!(
        "INSERT INTO messages ({MESSAGE_COLUMNS}) \
         SELECT $1, t.session_id, t.task_id, t.id, $4, $5, $6, $7, $8, $8, NULL \
         FROM turns t WHERE t.id = $3 AND t.session_id = $2 \
         RETURNING {MESSAGE_WRITTEN}"
    ))
    .bind(new_id())
    .bind(&new.session_id)
    .bind(&new.turn_id)
    .bind(new.author.as_str())
    .bind(new.kind.as_str())
    .bind(&new.content)
    .bind(&new.pending_id)
    .bind(at)
    .fetch_optional(executor)
    .await?
    .ok_or_else(|| {
        RepoError::NotFound(format!(
            "turn {} of session {}",
            new.turn_id, new.session_id
        ))
    })
}

/// [`TranscriptStore::update_message_content`] on `executor`.
pub(super) async fn update_content_on<'e, DB, E>(
    executor: E,
    id: &str,
    content: &str,
    at: Micros,
) -> RepoResult<Option<MessageWritten>>
where
    DB: SqlBackend,
    E: Executor<'e, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> MessageWritten: FromRow<'r, DB::Row>,
{
    Ok(sqlx::query_as::<DB, MessageWritten>(stmt!(
        "UPDATE messages SET content = $2, updated_at = $3 WHERE id = $1 RETURNING {MESSAGE_WRITTEN}"
    ))
    .bind(id)
    .bind(content)
    .bind(at)
    .fetch_optional(executor)
    .await?)
}
