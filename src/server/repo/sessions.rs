//! Sessions: state, the primary session, agent identity and MCP tokens, start-up recovery's work
//! list.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Decode, Encode, Executor, FromRow, Type};

use super::sql::{RowsAffected, SESSION_COLUMNS, SqlBackend, SqlRepository, no_owed_resume, stmt};
use super::{NewSession, RepoResult, SessionRecord, new_id};
use crate::model::SessionState;
use crate::server::time::Micros;

#[async_trait]
pub trait SessionStore: Send + Sync {
    async fn create_session(&self, new: &NewSession, at: Micros) -> RepoResult<SessionRecord>;

    async fn get_session(&self, id: &str) -> RepoResult<Option<SessionRecord>>;

    /// Newest first.
    async fn list_sessions(&self, task_id: &str) -> RepoResult<Vec<SessionRecord>>;

    /// Moves a non-terminal session to `state` if it is in another state; a terminal session
    /// never moves again (`None`, as when it already is in `state`: nothing was written).
    /// Stamps `started_at` on the first start and `completed_at` on a terminal state; a
    /// terminal state revokes the MCP token.
    async fn set_session_state(
        &self,
        id: &str,
        state: SessionState,
        at: Micros,
    ) -> RepoResult<Option<SessionRecord>>;

    async fn set_primary_session(&self, id: &str) -> RepoResult<bool>;

    /// P3: how many prompts wait behind the session's open turn (written only on a change).
    async fn set_queued_prompts(&self, id: &str, n: i64) -> RepoResult<()>;

    /// The session whose MCP bearer token hashes to `hash` (only hashes are stored).
    async fn get_session_by_token_hash(&self, hash: &str) -> RepoResult<Option<SessionRecord>>;

    async fn set_acp_session_id(&self, id: &str, acp_session_id: &str) -> RepoResult<bool>;

    async fn set_mcp_token_hash(&self, id: &str, hash: &str) -> RepoResult<bool>;

    /// Start-up recovery's work list, oldest first: sessions that were starting or running,
    /// and waiting sessions with an open turn (owed resumes aside) or an undetached pending
    /// bundle. An idle session needs nothing, so a boot with 10,000 idle sessions reads one
    /// list instead of writing to each (B5).
    async fn sessions_to_recover(&self) -> RepoResult<Vec<SessionRecord>>;

    /// Completes every open turn of the session except owed resumes; returns their ids.
    async fn complete_open_turns(&self, session_id: &str, at: Micros) -> RepoResult<Vec<String>>;

    /// Revokes the session's MCP token if it is still `hash` (the agent that held it ended).
    async fn revoke_mcp_token(&self, session_id: &str, hash: &str) -> RepoResult<bool>;

    /// Server `server_id` claims the session before it launches its agent (compare-and-set):
    /// granted while nobody owns it, `server_id` does already, or its owner was last heard from
    /// before `alive_since`; the new epoch, or `None` when another live server owns it.
    async fn claim_session(
        &self,
        session_id: &str,
        server_id: &str,
        alive_since: Micros,
    ) -> RepoResult<Option<i64>>;

    /// Several servers: server `server_id` is alive at `at` (its heartbeat).
    async fn beat(&self, server_id: &str, at: Micros) -> RepoResult<()>;

    /// The sessions whose agent runs on another server than `own` that was alive at `since`
    /// or later: start-up recovery leaves them to that server.
    async fn sessions_of_live_servers(&self, own: &str, since: Micros) -> RepoResult<Vec<String>>;

    /// The servers other than `own` that were alive at `since` or later.
    async fn other_live_servers(&self, own: &str, since: Micros) -> RepoResult<Vec<String>>;

    /// The server that runs the session's agent, if it was alive at `since` or later.
    async fn live_owner(&self, session_id: &str, since: Micros) -> RepoResult<Option<String>>;

    /// (session, server) for the sessions whose server, other than `own`, was last heard from
    /// before `dead_before` (or never).
    async fn sessions_of_dead_servers(
        &self,
        own: &str,
        dead_before: Micros,
    ) -> RepoResult<Vec<(String, String)>>;

    /// Takeover: the session passes from `from` to `to` (compare-and-set: only while `from`
    /// owns it and was last heard from before `dead_before`); the new epoch, or `None` when
    /// another server took it first or `from` is back.
    async fn transfer_session(
        &self,
        session_id: &str,
        from: &str,
        to: &str,
        dead_before: Micros,
    ) -> RepoResult<Option<i64>>;
}

#[async_trait]
impl<DB> SessionStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> SessionRecord: FromRow<'r, DB::Row>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    async fn create_session(&self, new: &NewSession, at: Micros) -> RepoResult<SessionRecord> {
        let mut tx = self.write_tx().await?;
        if new.is_primary {
            sqlx::query::<DB>(
                "UPDATE sessions SET is_primary = FALSE WHERE task_id = $1 AND is_primary = TRUE",
            )
            .bind(&new.task_id)
            .execute(&mut *tx)
            .await?;
        }
        let row = sqlx::query_as::<DB, SessionRecord>(stmt!(
            "INSERT INTO sessions (id, task_id, agent_profile_id, name, state, is_primary, \
             mcp_token_hash, acp_session_id, started_at, completed_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, NULL, NULL, $8) RETURNING {SESSION_COLUMNS}"
        ))
        .bind(new_id())
        .bind(&new.task_id)
        .bind(&new.agent_profile_id)
        .bind(&new.name)
        .bind(new.state.as_str())
        .bind(new.is_primary)
        .bind(&new.mcp_token_hash)
        .bind(at)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row)
    }

    async fn get_session(&self, id: &str) -> RepoResult<Option<SessionRecord>> {
        Ok(sqlx::query_as::<DB, SessionRecord>(stmt!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&mut *self.reader().await?)
        .await?)
    }

    async fn list_sessions(&self, task_id: &str) -> RepoResult<Vec<SessionRecord>> {
        Ok(sqlx::query_as::<DB, SessionRecord>(stmt!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE task_id = $1 \
             ORDER BY created_at DESC, id DESC"
        ))
        .bind(task_id)
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn set_session_state(
        &self,
        id: &str,
        state: SessionState,
        at: Micros,
    ) -> RepoResult<Option<SessionRecord>> {
        if state != SessionState::Failed {
            return move_session(&mut *self.writer().await?, id, state, at).await;
        }
        // The session row first: the guard then reads every owed resume committed so far
        // (an owe locks this row before it inserts its turn).
        let mut tx = self.write_tx().await?;
        sqlx::query::<DB>(DB::LOCK_SESSION)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        let moved = move_session(&mut *tx, id, state, at).await?;
        tx.commit().await?;
        Ok(moved)
    }

    async fn set_queued_prompts(&self, id: &str, n: i64) -> RepoResult<()> {
        sqlx::query::<DB>(
            "UPDATE sessions SET queued_prompts = $2 WHERE id = $1 AND queued_prompts <> $2",
        )
        .bind(id)
        .bind(n)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(())
    }

    async fn set_primary_session(&self, id: &str) -> RepoResult<bool> {
        let mut tx = self.write_tx().await?;
        let Some(task_id) =
            sqlx::query_scalar::<DB, String>("SELECT task_id FROM sessions WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
        else {
            return Ok(false);
        };
        sqlx::query::<DB>("UPDATE sessions SET is_primary = FALSE WHERE task_id = $1 AND is_primary = TRUE AND id <> $2")
            .bind(&task_id)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query::<DB>("UPDATE sessions SET is_primary = TRUE WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn get_session_by_token_hash(&self, hash: &str) -> RepoResult<Option<SessionRecord>> {
        Ok(sqlx::query_as::<DB, SessionRecord>(stmt!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE mcp_token_hash = $1"
        ))
        .bind(hash)
        .fetch_optional(&mut *self.reader().await?)
        .await?)
    }

    async fn set_acp_session_id(&self, id: &str, acp_session_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>("UPDATE sessions SET acp_session_id = $2 WHERE id = $1")
            .bind(id)
            .bind(acp_session_id)
            .execute(&mut *self.writer().await?)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn set_mcp_token_hash(&self, id: &str, hash: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>("UPDATE sessions SET mcp_token_hash = $2 WHERE id = $1")
            .bind(id)
            .bind(hash)
            .execute(&mut *self.writer().await?)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn sessions_to_recover(&self) -> RepoResult<Vec<SessionRecord>> {
        Ok(sqlx::query_as::<DB, SessionRecord>(stmt!(
            "SELECT {SESSION_COLUMNS} FROM sessions s \
             WHERE s.state IN ('starting', 'running') \
                OR (s.state = 'waiting_for_input' \
                    AND (EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id \
                                 AND t.completed_at IS NULL AND t.reservation <> 'attempted') \
                         OR EXISTS (SELECT 1 FROM clarification_bundles b WHERE b.session_id = s.id \
                                    AND b.status = 'pending' AND b.detached = FALSE))) \
             ORDER BY s.created_at, s.id"
        ))
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn complete_open_turns(&self, session_id: &str, at: Micros) -> RepoResult<Vec<String>> {
        Ok(sqlx::query_scalar::<DB, String>(
            "UPDATE turns SET completed_at = $2, workflow_due = TRUE \
             WHERE session_id = $1 AND completed_at IS NULL AND reservation <> 'attempted' RETURNING id",
        )
        .bind(session_id)
        .bind(at)
        .fetch_all(&mut *self.writer().await?)
        .await?)
    }

    async fn revoke_mcp_token(&self, session_id: &str, hash: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE sessions SET mcp_token_hash = NULL WHERE id = $1 AND mcp_token_hash = $2",
        )
        .bind(session_id)
        .bind(hash)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn claim_session(
        &self,
        session_id: &str,
        server_id: &str,
        alive_since: Micros,
    ) -> RepoResult<Option<i64>> {
        let mut tx = self.write_tx().await?;
        sqlx::query::<DB>(DB::LOCK_SESSION)
            .bind(session_id)
            .fetch_optional(&mut *tx)
            .await?;
        let epoch = sqlx::query_as::<DB, (i64,)>(
            "INSERT INTO session_owners (session_id, server_id, epoch) VALUES ($1, $2, 1) \
             ON CONFLICT (session_id) DO UPDATE \
             SET server_id = $2, epoch = session_owners.epoch + 1 \
             WHERE session_owners.server_id = $2 \
                OR NOT EXISTS (SELECT 1 FROM servers v \
                               WHERE v.id = session_owners.server_id AND v.seen_at >= $3) \
             RETURNING epoch",
        )
        .bind(session_id)
        .bind(server_id)
        .bind(alive_since)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(epoch.map(|(e,)| e))
    }

    async fn beat(&self, server_id: &str, at: Micros) -> RepoResult<()> {
        sqlx::query::<DB>(
            "INSERT INTO servers (id, seen_at) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET seen_at = $2",
        )
        .bind(server_id)
        .bind(at)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(())
    }

    async fn sessions_of_live_servers(&self, own: &str, since: Micros) -> RepoResult<Vec<String>> {
        Ok(sqlx::query_scalar::<DB, String>(
            "SELECT o.session_id FROM session_owners o JOIN servers v ON v.id = o.server_id \
             WHERE o.server_id <> $1 AND v.seen_at >= $2 ORDER BY o.session_id",
        )
        .bind(own)
        .bind(since)
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn other_live_servers(&self, own: &str, since: Micros) -> RepoResult<Vec<String>> {
        Ok(sqlx::query_scalar::<DB, String>(
            "SELECT id FROM servers WHERE id <> $1 AND seen_at >= $2 ORDER BY id",
        )
        .bind(own)
        .bind(since)
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn live_owner(&self, session_id: &str, since: Micros) -> RepoResult<Option<String>> {
        Ok(sqlx::query_scalar::<DB, String>(
            "SELECT o.server_id FROM session_owners o JOIN servers v ON v.id = o.server_id \
             WHERE o.session_id = $1 AND v.seen_at >= $2",
        )
        .bind(session_id)
        .bind(since)
        .fetch_optional(&mut *self.reader().await?)
        .await?)
    }

    async fn sessions_of_dead_servers(
        &self,
        own: &str,
        dead_before: Micros,
    ) -> RepoResult<Vec<(String, String)>> {
        Ok(sqlx::query_as::<DB, (String, String)>(
            "SELECT o.session_id, o.server_id FROM session_owners o \
             LEFT JOIN servers v ON v.id = o.server_id \
             WHERE o.server_id <> $1 AND (v.seen_at IS NULL OR v.seen_at < $2) \
             ORDER BY o.session_id",
        )
        .bind(own)
        .bind(dead_before)
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn transfer_session(
        &self,
        session_id: &str,
        from: &str,
        to: &str,
        dead_before: Micros,
    ) -> RepoResult<Option<i64>> {
        let mut tx = self.write_tx().await?;
        sqlx::query::<DB>(DB::LOCK_SESSION)
            .bind(session_id)
            .fetch_optional(&mut *tx)
            .await?;
        let epoch = sqlx::query_as::<DB, (i64,)>(
            "UPDATE session_owners SET server_id = $3, epoch = epoch + 1 \
             WHERE session_id = $1 AND server_id = $2 \
               AND NOT EXISTS (SELECT 1 FROM servers v WHERE v.id = $2 AND v.seen_at >= $4) \
             RETURNING epoch",
        )
        .bind(session_id)
        .bind(from)
        .bind(to)
        .bind(dead_before)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(epoch.map(|(e,)| e))
    }
}

/// Moves session `id` to `state` unless it is already there or terminal (a terminal move ends
/// its times and revokes its MCP token); the row as moved. On the pool or inside a transaction
/// (a live answer's delivery record, decision 0032).
pub(super) async fn move_session<'e, DB, E>(
    executor: E,
    id: &str,
    state: SessionState,
    at: Micros,
) -> RepoResult<Option<SessionRecord>>
where
    DB: SqlBackend,
    E: Executor<'e, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> SessionRecord: FromRow<'r, DB::Row>,
{
    let starts = matches!(state, SessionState::Starting | SessionState::Running);
    // L18/I4: a session that owes its agent an answer never fails; it waits for the next
    // launch, which delivers the answer first.
    Ok(sqlx::query_as::<DB, SessionRecord>(stmt!(
        "UPDATE sessions SET state = $2, \
         started_at = CASE WHEN $3 AND started_at IS NULL THEN $5 ELSE started_at END, \
         completed_at = CASE WHEN $4 THEN $5 ELSE completed_at END, \
         mcp_token_hash = CASE WHEN $4 THEN NULL ELSE mcp_token_hash END \
         WHERE id = $1 AND state <> $2 AND state NOT IN ('completed', 'failed', 'cancelled') \
           AND ($6 = FALSE OR {no_owed}) \
         RETURNING {SESSION_COLUMNS}",
        no_owed = no_owed_resume("sessions.id")
    ))
    .bind(id)
    .bind(state.as_str())
    .bind(starts)
    .bind(state.is_terminal())
    .bind(at)
    .bind(state == SessionState::Failed)
    .fetch_optional(executor)
    .await?)
}
