//! Task summaries (P3, P6) and the projection epoch (P9).

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::{ColumnIndex, Decode, Encode, Executor, FromRow, Type};

use super::sql::{
    CAS_SUMMARY_INSERT, CAS_SUMMARY_UPDATE, JsonBool, RowsAffected, SqlBackend, SqlRepository,
    json, json_rows, rows_from_json,
};
use super::{Backend, CasOutcome, RepoResult, SummaryRecord, SummaryRow, SummaryWrite};
use crate::model::SummaryBody;
use crate::server::time::Micros;

/// The summaries of the tasks in `$1` (a JSON array of ids) as one JSON array ([`json_rows`])
/// of `[task_id, revision, summary, invalidated, updated_at]`: a task-list page reads one per
/// task (B2).
pub(super) fn summaries_statement(backend: Backend) -> &'static str {
    static S: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
        [Backend::Sqlite, Backend::Postgres].map(|b| {
            format!(
                "SELECT {} FROM task_status_summaries s WHERE {}",
                json_rows(
                    b,
                    "s.task_id, s.revision, s.summary, s.invalidated, s.updated_at",
                    ""
                ),
                super::authority::is_one_of_json_ids(b, "s.task_id")
            )
        })
    });
    match backend {
        Backend::Sqlite => &S[0],
        Backend::Postgres => &S[1],
    }
}

/// Reads the column [`summaries_statement`] wrote, by task id.
pub(super) fn summaries_from_json(text: &str) -> RepoResult<HashMap<String, SummaryRecord>> {
    let rows: Vec<(String, i64, String, JsonBool, Micros)> = rows_from_json(text, "summaries")?;
    rows.into_iter()
        .map(|(task_id, revision, summary, invalidated, updated_at)| {
            let row = SummaryRow {
                task_id,
                revision,
                summary,
                invalidated: invalidated.0,
                updated_at,
            };
            row.into_record().map(|s| (s.task_id.clone(), s))
        })
        .collect()
}

#[async_trait]
pub trait SummaryStore: Send + Sync {
    /// Atomically increments the projection epoch and returns the new value.
    async fn bump_epoch(&self) -> RepoResult<i64>;

    async fn current_epoch(&self) -> RepoResult<i64>;

    /// P9 across servers: the current epoch and the next value of one database-wide sequence,
    /// reserved together; `None` where revisions stay in the server's memory (SQLite, one
    /// server).
    async fn reserve_pending_revision(&self) -> RepoResult<Option<(i64, i64)>>;

    async fn get_summary(&self, task_id: &str) -> RepoResult<Option<SummaryRecord>>;

    async fn get_summaries(
        &self,
        task_ids: &[String],
    ) -> RepoResult<HashMap<String, SummaryRecord>>;

    /// Compare-and-set on `revision`: `expected = None` creates the row only if absent. Equal
    /// content is not rewritten.
    async fn cas_summary(
        &self,
        task_id: &str,
        expected: Option<i64>,
        body: &SummaryBody,
        at: Micros,
    ) -> RepoResult<CasOutcome>;

    /// Many [`Repository::cas_summary`] writes in one transaction (one sync instead of one
    /// per task: boot and list reconciliation, B5). Per write: the new revision, or `None`
    /// when it lost or had nothing to change — the caller retries that one alone.
    async fn cas_summaries(
        &self,
        writes: &[SummaryWrite],
        at: Micros,
    ) -> RepoResult<Vec<Option<i64>>>;

    /// P6: marks the stored summary stale so readers fall back to the authoritative value.
    async fn invalidate_summary(&self, task_id: &str, at: Micros) -> RepoResult<bool>;
}

#[async_trait]
impl<DB> SummaryStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'r> SummaryRow: FromRow<'r, DB::Row>,
    for<'r> i64: Decode<'r, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    async fn bump_epoch(&self) -> RepoResult<i64> {
        Ok(sqlx::query_scalar::<DB, i64>(
            "INSERT INTO meta (key, value) VALUES ('epoch', 1) \
             ON CONFLICT (key) DO UPDATE SET value = meta.value + 1 RETURNING value",
        )
        .fetch_one(&mut *self.writer().await?)
        .await?)
    }

    async fn current_epoch(&self) -> RepoResult<i64> {
        Ok(
            sqlx::query_scalar::<DB, i64>("SELECT value FROM meta WHERE key = 'epoch'")
                .fetch_optional(&mut *self.reader().await?)
                .await?
                .unwrap_or(0),
        )
    }

    async fn reserve_pending_revision(&self) -> RepoResult<Option<(i64, i64)>> {
        if DB::KIND == Backend::Sqlite {
            return Ok(None);
        }
        Ok(Some(
            sqlx::query_as::<DB, (i64, i64)>(
                "SELECT (SELECT value FROM meta WHERE key = 'epoch'), nextval('pending_revisions')",
            )
            .fetch_one(&mut *self.reader().await?)
            .await?,
        ))
    }

    async fn get_summary(&self, task_id: &str) -> RepoResult<Option<SummaryRecord>> {
        self.fetch_summary(task_id).await
    }

    async fn get_summaries(
        &self,
        task_ids: &[String],
    ) -> RepoResult<HashMap<String, SummaryRecord>> {
        if task_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let rows: String = sqlx::query_scalar::<DB, String>(summaries_statement(DB::KIND))
            .bind(json(task_ids))
            .fetch_one(&mut *self.reader().await?)
            .await?;
        summaries_from_json(&rows)
    }

    async fn cas_summary(
        &self,
        task_id: &str,
        expected: Option<i64>,
        body: &SummaryBody,
        at: Micros,
    ) -> RepoResult<CasOutcome> {
        let written =
            cas_statement(&mut *self.writer().await?, task_id, expected, body, at).await?;
        if let Some(revision) = written {
            return Ok(CasOutcome::Written { revision });
        }
        let current = self.fetch_summary(task_id).await?;
        Ok(CasOutcome::unwritten(current, expected, body))
    }

    async fn cas_summaries(
        &self,
        writes: &[SummaryWrite],
        at: Micros,
    ) -> RepoResult<Vec<Option<i64>>> {
        let mut out = Vec::with_capacity(writes.len());
        if writes.is_empty() {
            return Ok(out);
        }
        let mut tx = self.write_tx().await?;
        let named_once = writes
            .iter()
            .map(|w| w.task_id.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len()
            == writes.len();
        if named_once {
            // One statement for the replacements and one for the creations, instead of one per
            // summary (B5: 10,000 round trips to PostgreSQL at start-up). Each row keeps its own
            // compare-and-set; which rows were written comes back with their new revisions.
            let (mut updates, mut inserts) = (Vec::new(), Vec::new());
            for w in writes {
                let pending = w.body.pending_action.map(|p| p.as_str());
                match w.expected {
                    Some(rev) => {
                        updates.push(serde_json::json!([w.task_id, rev, json(&w.body), pending]))
                    }
                    None => inserts.push(serde_json::json!([w.task_id, json(&w.body), pending])),
                }
            }
            let (update, insert) = cas_batch_statements(DB::KIND);
            let mut written: HashMap<String, i64> = HashMap::with_capacity(writes.len());
            for (sql, rows) in [(update, updates), (insert, inserts)] {
                if rows.is_empty() {
                    continue;
                }
                written.extend(
                    sqlx::query_as::<DB, (String, i64)>(sql)
                        .bind(serde_json::Value::from(rows).to_string())
                        .bind(at)
                        .fetch_all(&mut *tx)
                        .await?,
                );
            }
            out.extend(writes.iter().map(|w| written.get(&w.task_id).copied()));
        } else {
            // A task named twice: its writes apply in order, one statement each.
            for w in writes {
                out.push(cas_statement(&mut *tx, &w.task_id, w.expected, &w.body, at).await?);
            }
        }
        tx.commit().await?;
        Ok(out)
    }

    async fn invalidate_summary(&self, task_id: &str, at: Micros) -> RepoResult<bool> {
        let done = sqlx::query::<DB>(
            "UPDATE task_status_summaries SET invalidated = TRUE, updated_at = $2 \
             WHERE task_id = $1 AND invalidated = FALSE",
        )
        .bind(task_id)
        .bind(at)
        .execute(&mut *self.writer().await?)
        .await?;
        Ok(done.rows_affected() > 0)
    }
}

impl<DB> SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'r> SummaryRow: FromRow<'r, DB::Row>,
{
    pub(super) async fn fetch_summary(&self, task_id: &str) -> RepoResult<Option<SummaryRecord>> {
        sqlx::query_as::<DB, SummaryRow>(
            "SELECT task_id, revision, summary, invalidated, updated_at \
             FROM task_status_summaries WHERE task_id = $1",
        )
        .bind(task_id)
        .fetch_optional(&mut *self.reader().await?)
        .await?
        .map(SummaryRow::into_record)
        .transpose()
    }
}

/// [`CAS_SUMMARY_UPDATE`] and [`CAS_SUMMARY_INSERT`] for many summaries at once: `$1` is a JSON
/// array of `[task_id, expected_revision, summary, pending_action]` (replacements) or
/// `[task_id, summary, pending_action]` (creations), `$2` the time; each returns the
/// `(task_id, revision)` of the rows it wrote. The same text on both databases but for where
/// the array's elements come from (`e.value`); `WHERE TRUE` is what SQLite's parser needs
/// before an upsert clause after a `SELECT`.
fn cas_batch_statements(backend: Backend) -> (&'static str, &'static str) {
    static S: std::sync::LazyLock<[(String, String); 2]> = std::sync::LazyLock::new(|| {
        [Backend::Sqlite, Backend::Postgres].map(|b| {
            let elements = match b {
                Backend::Sqlite => "json_each($1) AS e",
                Backend::Postgres => "jsonb_array_elements($1::jsonb) AS e(value)",
            };
            (
                format!(
                    "UPDATE task_status_summaries AS s \
                     SET revision = s.revision + 1, summary = w.body, invalidated = FALSE, \
                         updated_at = $2, pending_action = w.pending \
                     FROM (SELECT e.value ->> 0 AS id, CAST(e.value ->> 1 AS BIGINT) AS expected, \
                                  e.value ->> 2 AS body, e.value ->> 3 AS pending \
                           FROM {elements}) AS w \
                     WHERE s.task_id = w.id AND s.revision = w.expected \
                       AND (s.summary <> w.body OR s.invalidated = TRUE) \
                     RETURNING task_id, revision"
                ),
                format!(
                    "INSERT INTO task_status_summaries \
                     (task_id, revision, summary, invalidated, updated_at, pending_action) \
                     SELECT e.value ->> 0, 1, e.value ->> 1, FALSE, $2, e.value ->> 2 \
                     FROM {elements} WHERE TRUE \
                     ON CONFLICT (task_id) DO NOTHING RETURNING task_id, revision"
                ),
            )
        })
    });
    let (update, insert) = &S[match backend {
        Backend::Sqlite => 0,
        Backend::Postgres => 1,
    }];
    (update, insert)
}

/// One summary compare-and-set (P6) on the pool or inside a transaction: the new
/// revision, or `None` when nothing was written.
async fn cas_statement<'e, DB, E>(
    executor: E,
    task_id: &str,
    expected: Option<i64>,
    body: &SummaryBody,
    at: Micros,
) -> Result<Option<i64>, sqlx::Error>
where
    DB: SqlBackend,
    E: Executor<'e, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'r> i64: Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    let text = json(body);
    let pending = body.pending_action.map(|p| p.as_str());
    match expected {
        None => {
            sqlx::query_scalar::<DB, i64>(CAS_SUMMARY_INSERT)
                .bind(task_id)
                .bind(text)
                .bind(at)
                .bind(pending)
                .fetch_optional(executor)
                .await
        }
        Some(rev) => {
            sqlx::query_scalar::<DB, i64>(CAS_SUMMARY_UPDATE)
                .bind(task_id)
                .bind(rev)
                .bind(text)
                .bind(at)
                .bind(pending)
                .fetch_optional(executor)
                .await
        }
    }
}
