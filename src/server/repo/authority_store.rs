//! The current-turn authority (L1–L3) and the writes it guards: detach, expiry, claim and its undo
//! (L9–L13, L18). The SQL fragments are defined once in `authority.rs`.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::{ColumnIndex, Decode, Encode, Executor, FromRow, Row, Type};

use super::authority::{BUNDLE_COLUMNS, SQL};
use super::questions::BundleQuestionsRow;
use super::sql::{
    JsonBool, RowsAffected, SqlBackend, SqlRepository, json, questions_from_json, rows_from_json,
    stmt,
};
use super::summaries::summaries_from_json;
use super::{
    AbandonedClaim, BundleRecord, BundleView, Claim, ClaimOutcome, ClaimSettled, RepoError,
    RepoResult, SummaryRecord,
};
use crate::model::{BundleStatus, PendingAction, SessionState};
use crate::server::time::Micros;

/// A session as the loader needs it (P2 aggregates these), with its P1 pending action.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSession {
    pub session_id: String,
    pub task_id: String,
    pub state: SessionState,
    pub is_primary: bool,
    pub pending_action: Option<PendingAction>,
    /// Prompts waiting behind its open turn (P3).
    pub queued_prompts: u32,
}

/// Reads the column the authority's `task_sessions` statement wrote.
fn task_sessions_from_json(text: &str) -> RepoResult<Vec<TaskSession>> {
    type Row = (String, String, String, JsonBool, Option<String>, i64);
    let rows: Vec<Row> = rows_from_json(text, "task sessions")?;
    rows.into_iter()
        .map(|(session_id, task_id, state, is_primary, action, queued)| {
            Ok(TaskSession {
                queued_prompts: u32::try_from(queued.max(0)).unwrap_or(u32::MAX),
                session_id,
                task_id,
                state: state.parse().map_err(RepoError::Corrupt)?,
                is_primary: is_primary.0,
                pending_action: action
                    .map(|a| a.parse::<PendingAction>())
                    .transpose()
                    .map_err(RepoError::Corrupt)?,
            })
        })
        .collect()
}

#[async_trait]
pub trait AuthorityStore: Send + Sync {
    async fn current_turn_id(&self, session_id: &str) -> RepoResult<Option<String>>;

    /// L2 over every session (for `/metrics`).
    async fn count_active_bundles(&self) -> RepoResult<i64>;

    /// L2 for one bundle, without its questions: `None` when it does not exist (an ask's
    /// check, right after its commit, that no newer turn superseded it, L5).
    /// `(active, superseded)` of one bundle (L2, L5); `None` when it does not exist.
    async fn bundle_standing(&self, pending_id: &str) -> RepoResult<Option<(bool, bool)>>;

    async fn active_bundles(&self, session_id: &str) -> RepoResult<Vec<BundleView>>;

    /// Every session of the given tasks with its P1 pending action, in one query (the
    /// loader's read): the same answer as listing the sessions and asking the batch below.
    async fn task_sessions(&self, task_ids: &[String]) -> RepoResult<Vec<TaskSession>>;

    /// [`AuthorityStore::task_sessions`] and the tasks' stored summaries, read in one
    /// statement (one snapshot): the projector's read (P4, P6).
    async fn task_sessions_with_summaries(
        &self,
        task_ids: &[String],
    ) -> RepoResult<(Vec<TaskSession>, HashMap<String, SummaryRecord>)>;

    /// P1 for each id (unknown ids map to `None`); one query, same answer as the scalar forms.
    async fn pending_actions_for_sessions(
        &self,
        session_ids: &[String],
    ) -> RepoResult<HashMap<String, Option<PendingAction>>>;

    /// L9 for every active, attached bundle of the session's current turn; returns what changed.
    async fn detach_session(&self, session_id: &str) -> RepoResult<Vec<String>>;

    /// L9/L10 on turn completion: only if `turn_id` is still the session's current turn.
    async fn detach_turn(&self, turn_id: &str) -> RepoResult<Vec<String>>;

    /// L9 for one bundle (its tool call was cancelled or timed out).
    async fn detach_bundle(&self, pending_id: &str) -> RepoResult<bool>;

    /// L11: pending bundles of the current turn become `expired`; returns what changed.
    async fn expire_session(&self, session_id: &str, at: Micros) -> RepoResult<Vec<String>>;

    /// L13: one compare-and-set from active to answered/rejected with `delivery_pending`.
    async fn claim_bundle(
        &self,
        pending_id: &str,
        claim: &Claim,
        at: Micros,
    ) -> RepoResult<ClaimOutcome>;

    /// L18: undo a claim that was not accepted (only while still current and undelivered).
    async fn restore_bundle(&self, pending_id: &str) -> RepoResult<bool>;

    async fn finalize_delivery(&self, pending_id: &str) -> RepoResult<bool>;

    /// An answer recorded as handed over whose waiting call had ended when it was handed:
    /// nobody has it, so it is marked undelivered again (`delivery_pending`) and goes the
    /// detached way — owed, or its claim undone (L18). Only an answered bundle with no resume
    /// turn yet qualifies.
    async fn reopen_delivery(&self, pending_id: &str) -> RepoResult<bool>;

    /// L19 across servers (decision 0036): claims left `delivery_pending` by a request that is
    /// gone — made by `restarted` (this server, starting: nothing of it is in flight), by a
    /// server not seen beating since `alive_since`, or before claimers were recorded. Oldest
    /// first.
    async fn abandoned_claims(
        &self,
        restarted: &str,
        alive_since: Micros,
    ) -> RepoResult<Vec<AbandonedClaim>>;

    /// Settles one abandoned claim in one transaction, only while it is still that claim: an
    /// offer of it to another server is withdrawn first (the holder then can no longer take
    /// it; one that took it cleared the marker in the same transaction), then it is restored
    /// if still current, else finalized.
    async fn settle_abandoned(&self, claim: &AbandonedClaim) -> RepoResult<ClaimSettled>;
}

#[async_trait]
impl<DB> AuthorityStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'r> BundleRecord: FromRow<'r, DB::Row>,
    for<'r> AbandonedClaim: FromRow<'r, DB::Row>,
    for<'r> BundleQuestionsRow: FromRow<'r, DB::Row>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB> + Type<DB>,
    for<'r> bool: Decode<'r, DB> + Type<DB>,
    for<'r> Option<String>: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
    for<'s> &'s str: ColumnIndex<DB::Row>,
{
    async fn current_turn_id(&self, session_id: &str) -> RepoResult<Option<String>> {
        Ok(
            sqlx::query_scalar::<DB, Option<String>>(SQL.current_turn_id.as_str())
                .bind(session_id)
                .fetch_one(&mut *self.reader().await?)
                .await?,
        )
    }

    async fn count_active_bundles(&self) -> RepoResult<i64> {
        Ok(sqlx::query_scalar::<DB, i64>(SQL.count_active.as_str())
            .fetch_one(&mut *self.reader().await?)
            .await?)
    }

    async fn bundle_standing(&self, pending_id: &str) -> RepoResult<Option<(bool, bool)>> {
        Ok(
            sqlx::query_as::<DB, (bool, bool)>(SQL.bundle_standing.as_str())
                .bind(pending_id)
                .fetch_optional(&mut *self.reader().await?)
                .await?,
        )
    }

    async fn active_bundles(&self, session_id: &str) -> RepoResult<Vec<BundleView>> {
        sqlx::query_as::<DB, BundleQuestionsRow>(SQL.active_bundles(DB::KIND))
            .bind(session_id)
            .fetch_all(&mut *self.reader().await?)
            .await?
            .into_iter()
            .map(|r| {
                Ok(BundleView {
                    questions: questions_from_json(&r.questions)?,
                    record: r.record,
                    active: true,
                })
            })
            .collect()
    }

    async fn task_sessions(&self, task_ids: &[String]) -> RepoResult<Vec<TaskSession>> {
        if task_ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: String = sqlx::query_scalar::<DB, String>(SQL.task_sessions(DB::KIND))
            .bind(json(task_ids))
            .fetch_one(&mut *self.reader().await?)
            .await?;
        task_sessions_from_json(&rows)
    }

    async fn task_sessions_with_summaries(
        &self,
        task_ids: &[String],
    ) -> RepoResult<(Vec<TaskSession>, HashMap<String, SummaryRecord>)> {
        if task_ids.is_empty() {
            return Ok((Vec::new(), HashMap::new()));
        }
        let (sessions, summaries): (String, String) =
            sqlx::query_as::<DB, (String, String)>(SQL.task_sessions_with_summaries(DB::KIND))
                .bind(json(task_ids))
                .fetch_one(&mut *self.reader().await?)
                .await?;
        Ok((
            task_sessions_from_json(&sessions)?,
            summaries_from_json(&summaries)?,
        ))
    }

    async fn pending_actions_for_sessions(
        &self,
        session_ids: &[String],
    ) -> RepoResult<HashMap<String, Option<PendingAction>>> {
        let mut out: HashMap<String, Option<PendingAction>> =
            session_ids.iter().map(|id| (id.clone(), None)).collect();
        if session_ids.is_empty() {
            return Ok(out);
        }
        let rows = sqlx::query::<DB>(SQL.pending_actions(DB::KIND))
            .bind(json(session_ids))
            .fetch_all(&mut *self.reader().await?)
            .await?;
        for row in rows {
            let id: String = row.try_get("session_id")?;
            let action: Option<String> = row.try_get("pending_action")?;
            let action = action
                .map(|a| a.parse::<PendingAction>())
                .transpose()
                .map_err(RepoError::Corrupt)?;
            out.insert(id, action);
        }
        Ok(out)
    }

    async fn detach_session(&self, session_id: &str) -> RepoResult<Vec<String>> {
        Ok(
            sqlx::query_scalar::<DB, String>(SQL.detach_session.as_str())
                .bind(session_id)
                .fetch_all(&mut *self.writer().await?)
                .await?,
        )
    }

    async fn detach_turn(&self, turn_id: &str) -> RepoResult<Vec<String>> {
        Ok(sqlx::query_scalar::<DB, String>(SQL.detach_turn.as_str())
            .bind(turn_id)
            .fetch_all(&mut *self.writer().await?)
            .await?)
    }

    async fn detach_bundle(&self, pending_id: &str) -> RepoResult<bool> {
        Ok(sqlx::query_scalar::<DB, String>(SQL.detach_bundle.as_str())
            .bind(pending_id)
            .fetch_optional(&mut *self.writer().await?)
            .await?
            .is_some())
    }

    async fn expire_session(&self, session_id: &str, at: Micros) -> RepoResult<Vec<String>> {
        Ok(
            sqlx::query_scalar::<DB, String>(SQL.expire_session.as_str())
                .bind(session_id)
                .bind(at)
                .fetch_all(&mut *self.writer().await?)
                .await?,
        )
    }

    async fn claim_bundle(
        &self,
        pending_id: &str,
        claim: &Claim,
        at: Micros,
    ) -> RepoResult<ClaimOutcome> {
        if !matches!(
            claim.status,
            BundleStatus::Answered | BundleStatus::Rejected
        ) {
            return Err(RepoError::Invalid(format!(
                "a claim answers or rejects, not {}",
                claim.status
            )));
        }
        let won = sqlx::query_as::<DB, BundleRecord>(SQL.claim_bundle.as_str())
            .bind(pending_id)
            .bind(claim.status.as_str())
            .bind(&claim.response)
            .bind(&claim.reject_reason)
            .bind(at)
            .bind(&claim.by)
            .fetch_optional(&mut *self.writer().await?)
            .await?;
        if let Some(record) = won {
            return Ok(ClaimOutcome::Claimed(record));
        }
        let current = sqlx::query_as::<DB, BundleRecord>(stmt!(
            "SELECT {BUNDLE_COLUMNS} FROM clarification_bundles WHERE pending_id = $1"
        ))
        .bind(pending_id)
        .fetch_optional(&mut *self.reader().await?)
        .await?;
        Ok(match current {
            None => ClaimOutcome::NotFound,
            Some(r) if matches!(r.status, BundleStatus::Answered | BundleStatus::Rejected) => {
                ClaimOutcome::AlreadyResolved(r)
            }
            Some(r) => ClaimOutcome::NotActive(r),
        })
    }

    async fn restore_bundle(&self, pending_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(SQL.restore_bundle.as_str())
            .bind(pending_id)
            .execute(&mut *self.writer().await?)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn finalize_delivery(&self, pending_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE clarification_bundles SET delivery_pending = FALSE \
             WHERE pending_id = $1 AND delivery_pending = TRUE",
        )
        .bind(pending_id)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn abandoned_claims(
        &self,
        restarted: &str,
        alive_since: Micros,
    ) -> RepoResult<Vec<AbandonedClaim>> {
        Ok(sqlx::query_as::<DB, AbandonedClaim>(
            "SELECT b.pending_id, b.task_id, b.claimed_by FROM clarification_bundles b \
             WHERE b.delivery_pending = TRUE \
               AND (b.claimed_by IS NULL OR b.claimed_by = $1 \
                    OR NOT EXISTS (SELECT 1 FROM servers v \
                                   WHERE v.id = b.claimed_by AND v.seen_at >= $2)) \
             ORDER BY b.created_at, b.pending_id",
        )
        .bind(restarted)
        .bind(alive_since)
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn settle_abandoned(&self, claim: &AbandonedClaim) -> RepoResult<ClaimSettled> {
        let mut tx = self.write_tx().await?;
        // The offer row, then the bundle row: the order `accept_handoff` takes them in.
        sqlx::query::<DB>(
            "UPDATE answer_handoffs SET state = 'withdrawn' \
             WHERE pending_id = $1 AND state = 'offered'",
        )
        .bind(&claim.pending_id)
        .execute(&mut *tx)
        .await?;
        let restored = sqlx::query::<DB>(SQL.restore_abandoned.as_str())
            .bind(&claim.pending_id)
            .bind(&claim.claimed_by)
            .execute(&mut *tx)
            .await?;
        let settled = if restored.rows_affected() > 0 {
            ClaimSettled::Restored
        } else {
            let finalized = sqlx::query::<DB>(
                "UPDATE clarification_bundles SET delivery_pending = FALSE \
                 WHERE pending_id = $1 AND delivery_pending = TRUE \
                   AND claimed_by IS NOT DISTINCT FROM $2",
            )
            .bind(&claim.pending_id)
            .bind(&claim.claimed_by)
            .execute(&mut *tx)
            .await?;
            if finalized.rows_affected() > 0 {
                ClaimSettled::Finalized
            } else {
                ClaimSettled::Untouched
            }
        };
        tx.commit().await?;
        Ok(settled)
    }

    async fn reopen_delivery(&self, pending_id: &str) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE clarification_bundles SET delivery_pending = TRUE \
             WHERE pending_id = $1 AND delivery_pending = FALSE AND status = 'answered' \
               AND NOT EXISTS (SELECT 1 FROM turns r WHERE r.resume_pending_id = $1)",
        )
        .bind(pending_id)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }
}
