//! Asking in the current turn (L6/L7), resume reservations (L19) and the owed-resume outbox
//! (L17/L18).

use async_trait::async_trait;
use sqlx::{ColumnIndex, Decode, Encode, Executor, FromRow, Type};

use super::authority::{BUNDLE_COLUMNS, SQL};
use super::questions::{insert_question_message, insert_questions};
use super::sessions::move_session;
use super::sql::{
    RowsAffected, SESSION_COLUMNS, SqlBackend, SqlRepository, TURN_COLUMNS, owns, still_owner, stmt,
};
use super::transcript::{insert_message_on, update_content_on};
use super::{
    AskWritten, BundleRecord, Fence, MessageRecord, MessageWritten, NewAsk, ReplyWrite, RepoError,
    RepoResult, SessionRecord, TurnRecord, new_id,
};
use crate::model::SessionState;
use crate::server::time::Micros;

/// An answer's delivery is recorded (L18): written in the same transaction as whatever hands the
/// answer on — an owed resume turn, or an accepted hand-over to the agent's server.
const DELIVERY_RECORDED: &str =
    "UPDATE clarification_bundles SET delivery_pending = FALSE WHERE pending_id = $1";

/// L15: a live answer's delivery is recorded only while the question's turn is open — once the
/// agent ended that turn, nobody reads the call's result, whatever a server still thinks
/// waits. One statement for both ways a live answer is handed over (here, and to another
/// server's call).
const LIVE_DELIVERY_RECORDED: &str = "UPDATE clarification_bundles SET delivery_pending = FALSE \
     WHERE pending_id = $1 AND delivery_pending = TRUE \
       AND NOT EXISTS (SELECT 1 FROM turns t \
                       WHERE t.id = clarification_bundles.turn_id \
                         AND t.completed_at IS NOT NULL)";

/// What [`OutboxStore::accept_handoff`] did.
#[derive(Debug, PartialEq)]
pub enum HandoffAccepted {
    /// Recorded: the answered bundle as stored, and its session as moved back to `running`,
    /// if it moved.
    Delivered {
        bundle: Box<BundleRecord>,
        session: Option<SessionRecord>,
    },
    /// Nothing written: the offer was withdrawn first.
    Withdrawn,
    /// Nothing written: the question's turn had ended (L15), so the answer goes the detached
    /// way (the offering server withdraws and owes it).
    TurnEnded,
}

/// What [`OutboxStore::record_live_delivery`] did.
#[derive(Debug)]
pub enum LiveDelivery {
    /// Recorded; the session as moved back to `running`, if it moved.
    Recorded(Option<SessionRecord>),
    /// Nothing written: the question's turn had ended, so it goes the detached way.
    TurnEnded,
}

#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// L19: a resume turn that is not authoritative until attempted or referenced.
    async fn reserve_turn(
        &self,
        session_id: &str,
        pending_id: &str,
        at: Micros,
    ) -> RepoResult<TurnRecord>;

    async fn mark_attempted(&self, turn_id: &str) -> RepoResult<bool>;

    async fn publish_turn(&self, turn_id: &str) -> RepoResult<bool>;

    /// L19 start-up: every resume turn still marked `reserved` or `attempted`.
    async fn unpublished_reservations(&self) -> RepoResult<Vec<TurnRecord>>;

    /// L19 start-up: bundles whose claimed answer was never handed over.
    async fn bundles_pending_delivery(&self) -> RepoResult<Vec<BundleRecord>>;

    /// Deletes a reservation that was never attempted nor referenced (L18/L19).
    async fn delete_reservation(&self, turn_id: &str) -> RepoResult<bool>;

    /// L6/L7 in one transaction; `None` when the session's current turn is closed, an owed
    /// resume, or the session is terminal (the agent's turn was superseded), or when an
    /// identical question (same dedup key) is active in that turn (L8): nothing written.
    async fn ask_in_current_turn(&self, new: &NewAsk, at: Micros)
    -> RepoResult<Option<AskWritten>>;

    /// L15 live delivery, recorded before the waiting call has the answer: the bundle's
    /// delivery marker is cleared and its session (`session_id`, the bundle's) runs again
    /// (L7), in one transaction (the bundle row first, then the session row: decision 0028's
    /// lock order). `Recorded` with the session as moved (`None` when it was already running
    /// or is terminal); `TurnEnded`, writing nothing, when the question's turn has completed
    /// (the agent gave its call up: the answer goes the detached way).
    async fn record_live_delivery(
        &self,
        pending_id: &str,
        session_id: &str,
        at: Micros,
    ) -> RepoResult<LiveDelivery>;

    /// L18 acceptance: the answered bundle's resume becomes owed (a turn marked attempted with
    /// its prompt) and its delivery marker is cleared, in one transaction. `None` when the
    /// session is terminal, the bundle is not answered, or a resume is already owed for it.
    async fn owe_resume(
        &self,
        pending_id: &str,
        prompt: &str,
        at: Micros,
    ) -> RepoResult<Option<TurnRecord>>;

    /// Owed resumes of the session, oldest first.
    async fn owed_resumes(&self, session_id: &str) -> RepoResult<Vec<TurnRecord>>;

    /// Every non-terminal session with an owed resume (start-up delivers them).
    async fn sessions_with_owed_resumes(&self) -> RepoResult<Vec<SessionRecord>>;

    /// Hands an owed resume to the agent: one compare-and-set (exactly once), only while it is
    /// the current turn of a non-terminal session and, with a `fence`, while that server still
    /// owns the session (else `Fenced`); `started_at` becomes `at` (L1).
    async fn dispatch_resume(
        &self,
        turn_id: &str,
        at: Micros,
        fence: Option<&Fence>,
    ) -> RepoResult<bool>;

    /// L18/I4: takes back a dispatch whose prompt never reached the agent (its server began
    /// shutting down in between): the resume is owed again, if it is still the session's
    /// open, current turn. `false` when it no longer is.
    async fn undo_dispatch(&self, turn_id: &str) -> RepoResult<bool>;

    /// Several servers: the answer of `pending_id` is offered to the server holding its waiting call
    /// (again `offered` if an earlier offer was withdrawn).
    async fn offer_handoff(&self, pending_id: &str, at: Micros) -> RepoResult<()>;

    /// The holder takes an offered answer and, in the same transaction, records its delivery
    /// under the same guard as [`OutboxStore::record_live_delivery`] (the question's turn is
    /// open, L15) and moves the bundle's session back to `running` (decision 0032).
    async fn accept_handoff(&self, pending_id: &str, at: Micros) -> RepoResult<HandoffAccepted>;

    /// The offering server takes its offer back: `false` when the holder accepted it first.
    async fn withdraw_handoff(&self, pending_id: &str) -> RepoResult<bool>;
}

#[async_trait]
impl<DB> OutboxStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> BundleRecord: FromRow<'r, DB::Row>,
    for<'r> MessageRecord: FromRow<'r, DB::Row>,
    for<'r> MessageWritten: FromRow<'r, DB::Row>,
    for<'r> SessionRecord: FromRow<'r, DB::Row>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> TurnRecord: FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (String,): FromRow<'r, DB::Row>,
    usize: ColumnIndex<DB::Row>,
{
    async fn reserve_turn(
        &self,
        session_id: &str,
        pending_id: &str,
        at: Micros,
    ) -> RepoResult<TurnRecord> {
        sqlx::query_as::<DB, TurnRecord>(stmt!(
            "INSERT INTO turns (id, session_id, task_id, started_at, completed_at, created_at, \
             reservation, resume_pending_id) \
             SELECT $1, s.id, s.task_id, $3, NULL, $3, 'reserved', $4 FROM sessions s WHERE s.id = $2 \
             RETURNING {TURN_COLUMNS}"
        ))
        .bind(new_id())
        .bind(session_id)
        .bind(at)
        .bind(pending_id)
        .fetch_optional(&mut *self.writer().await?)
        .await?
        .ok_or_else(|| RepoError::NotFound(format!("session {session_id}")))
    }

    async fn mark_attempted(&self, turn_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE turns SET reservation = 'attempted' WHERE id = $1 AND reservation = 'reserved'",
        )
        .bind(turn_id)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn publish_turn(&self, turn_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE turns SET reservation = 'none' WHERE id = $1 AND reservation = 'attempted'",
        )
        .bind(turn_id)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn unpublished_reservations(&self) -> RepoResult<Vec<TurnRecord>> {
        Ok(sqlx::query_as::<DB, TurnRecord>(stmt!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE reservation <> 'none' ORDER BY started_at, created_at, id"
        ))
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn bundles_pending_delivery(&self) -> RepoResult<Vec<BundleRecord>> {
        Ok(sqlx::query_as::<DB, BundleRecord>(stmt!(
            "SELECT {BUNDLE_COLUMNS} FROM clarification_bundles WHERE delivery_pending = TRUE \
             ORDER BY created_at, pending_id"
        ))
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn delete_reservation(&self, turn_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "DELETE FROM turns WHERE id = $1 AND reservation = 'reserved' \
             AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.turn_id = turns.id)",
        )
        .bind(turn_id)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn ask_in_current_turn(
        &self,
        new: &NewAsk,
        at: Micros,
    ) -> RepoResult<Option<AskWritten>> {
        let mut tx = self.write_tx().await?;
        // The agent's output before its question, first: the reply's rows precede the
        // question's in the transcript, and both commit together (one commit less per ask).
        let mut replies = Vec::with_capacity(new.replies.len());
        for reply in &new.replies {
            replies.push(match reply {
                ReplyWrite::Create(m) => Some(insert_message_on(&mut *tx, m, at).await?),
                ReplyWrite::Content { id, content } => {
                    update_content_on(&mut *tx, id, content, at).await?
                }
            });
        }
        let Some(bundle) = sqlx::query_as::<DB, BundleRecord>(SQL.ask_bundle(DB::KIND))
            .bind(&new.session_id)
            .bind(&new.pending_id)
            .bind(&new.context)
            .bind(&new.dedup_key)
            .bind(at)
            .bind(new.source)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(None);
        };
        insert_questions(&mut tx, &new.pending_id, &new.questions).await?;
        let message = insert_question_message(&mut tx, &bundle, &new.message_content, at).await?;
        let Some(session) = sqlx::query_as::<DB, SessionRecord>(stmt!(
            "UPDATE sessions SET state = 'waiting_for_input' \
             WHERE id = $1 AND state NOT IN ('completed', 'failed', 'cancelled') \
             RETURNING {SESSION_COLUMNS}"
        ))
        .bind(&new.session_id)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(None);
        };
        tx.commit().await?;
        Ok(Some(AskWritten {
            bundle,
            message,
            session,
            replies,
        }))
    }

    async fn record_live_delivery(
        &self,
        pending_id: &str,
        session_id: &str,
        at: Micros,
    ) -> RepoResult<LiveDelivery> {
        let mut tx = self.write_tx().await?;
        // Only while the question's turn is open: once the agent ended that turn, nobody
        // reads the call's result, whatever the server still thinks waits.
        let recorded = sqlx::query::<DB>(LIVE_DELIVERY_RECORDED)
            .bind(pending_id)
            .execute(&mut *tx)
            .await?;
        if recorded.rows_affected() == 0 {
            return Ok(LiveDelivery::TurnEnded);
        }
        let session = move_session(&mut *tx, session_id, SessionState::Running, at).await?;
        tx.commit().await?;
        Ok(LiveDelivery::Recorded(session))
    }

    async fn owe_resume(
        &self,
        pending_id: &str,
        prompt: &str,
        at: Micros,
    ) -> RepoResult<Option<TurnRecord>> {
        let mut tx = self.write_tx().await?;
        // Lock order (decision 0028): the bundle row first, then the session row. The session is
        // locked before the turn is inserted, so the insert reads every turn committed for the
        // session so far (a prompt's turn among them).
        let Some((session_id,)) =
            sqlx::query_as::<DB, (String,)>(stmt!("{DELIVERY_RECORDED} RETURNING session_id"))
                .bind(pending_id)
                .fetch_optional(&mut *tx)
                .await?
        else {
            return Ok(None);
        };
        sqlx::query::<DB>(DB::LOCK_SESSION)
            .bind(&session_id)
            .fetch_optional(&mut *tx)
            .await?;
        // L18/I4: the owed resume is the session's newest turn, so it is current (L1) until it
        // is dispatched — a turn started meanwhile with a later clock cannot leave it stranded
        // behind itself (no prompt starts while it is owed: `insert_turn`).
        let turn = sqlx::query_as::<DB, TurnRecord>(stmt!(
            "INSERT INTO turns (id, session_id, task_id, started_at, completed_at, created_at, \
             reservation, resume_pending_id, resume_prompt) \
             SELECT $1, b.session_id, b.task_id, \
                    (SELECT CASE WHEN MAX(t.started_at) >= $3 THEN MAX(t.started_at) + 1 \
                                 ELSE $3 END \
                     FROM turns t WHERE t.session_id = b.session_id), \
                    NULL, $3, 'attempted', b.pending_id, $4 \
             FROM clarification_bundles b JOIN sessions s ON s.id = b.session_id \
             WHERE b.pending_id = $2 AND b.status = 'answered' \
               AND s.state NOT IN ('completed', 'failed', 'cancelled') \
               AND NOT EXISTS (SELECT 1 FROM turns r WHERE r.resume_pending_id = b.pending_id) \
             RETURNING {TURN_COLUMNS}"
        ))
        .bind(new_id())
        .bind(pending_id)
        .bind(at)
        .bind(prompt)
        .fetch_optional(&mut *tx)
        .await?;
        // Nothing owed: the marker's change is rolled back with the transaction.
        if turn.is_some() {
            tx.commit().await?;
        }
        Ok(turn)
    }

    async fn owed_resumes(&self, session_id: &str) -> RepoResult<Vec<TurnRecord>> {
        Ok(sqlx::query_as::<DB, TurnRecord>(stmt!(
            "SELECT {TURN_COLUMNS} FROM turns \
             WHERE session_id = $1 AND reservation = 'attempted' AND resume_prompt IS NOT NULL \
             ORDER BY created_at, id"
        ))
        .bind(session_id)
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn sessions_with_owed_resumes(&self) -> RepoResult<Vec<SessionRecord>> {
        Ok(sqlx::query_as::<DB, SessionRecord>(stmt!(
            "SELECT {SESSION_COLUMNS} FROM sessions s \
             WHERE s.state NOT IN ('completed', 'failed', 'cancelled') \
               AND EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id \
                           AND t.reservation = 'attempted' AND t.resume_prompt IS NOT NULL) \
             ORDER BY s.created_at, s.id"
        ))
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn dispatch_resume(
        &self,
        turn_id: &str,
        at: Micros,
        fence: Option<&Fence>,
    ) -> RepoResult<bool> {
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
        let (server, epoch) = match fence {
            Some(f) => (Some(f.server_id.as_str()), Some(f.epoch)),
            None => (None, None),
        };
        let done = sqlx::query::<DB>(stmt!(
            "{dispatch} AND {owner}",
            dispatch = SQL.dispatch_resume,
            owner = still_owner("turns.session_id", "$3", "$4")
        ))
        .bind(turn_id)
        .bind(at)
        .bind(server)
        .bind(epoch)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            if !owns(&mut tx, &session_id, server, epoch).await? {
                return Err(RepoError::Fenced(session_id));
            }
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn undo_dispatch(&self, turn_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(SQL.undo_dispatch.as_str())
            .bind(turn_id)
            .execute(&mut *self.writer().await?)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn offer_handoff(&self, pending_id: &str, at: Micros) -> RepoResult<()> {
        sqlx::query::<DB>(
            "INSERT INTO answer_handoffs (pending_id, state, created_at) VALUES ($1, 'offered', $2) \
             ON CONFLICT (pending_id) DO UPDATE SET state = 'offered', created_at = $2 \
             WHERE answer_handoffs.state = 'withdrawn'",
        )
        .bind(pending_id)
        .bind(at)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(())
    }

    async fn accept_handoff(&self, pending_id: &str, at: Micros) -> RepoResult<HandoffAccepted> {
        let mut tx = self.write_tx().await?;
        let done = sqlx::query::<DB>(
            "UPDATE answer_handoffs SET state = 'delivered' WHERE pending_id = $1 AND state = 'offered'",
        )
        .bind(pending_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(HandoffAccepted::Withdrawn);
        }
        // The bundle row, then its session's (decision 0028's lock order). Returned as stored:
        // nothing is read back after the commit (a failed read there would leave the waiting
        // call without the answer it was just recorded to have).
        let bundle = sqlx::query_as::<DB, BundleRecord>(stmt!(
            "{LIVE_DELIVERY_RECORDED} RETURNING {BUNDLE_COLUMNS}"
        ))
        .bind(pending_id)
        .fetch_optional(&mut *tx)
        .await?;
        // Nothing committed: the offer stays offered, and its server withdraws it.
        let Some(bundle) = bundle else {
            return Ok(HandoffAccepted::TurnEnded);
        };
        let session = move_session(&mut *tx, &bundle.session_id, SessionState::Running, at).await?;
        tx.commit().await?;
        Ok(HandoffAccepted::Delivered {
            bundle: Box::new(bundle),
            session,
        })
    }

    async fn withdraw_handoff(&self, pending_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE answer_handoffs SET state = 'withdrawn' WHERE pending_id = $1 AND state = 'offered'",
        )
        .bind(pending_id)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }
}
