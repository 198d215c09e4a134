//! The one SQL implementation of the repository, generic over the backend. SQLite and
//! PostgreSQL run the same statements (portable SQL: `$n` placeholders, `RETURNING`,
//! `ON CONFLICT`, BIGINT microsecond timestamps, TEXT JSON), so behaviour cannot drift
//! (docs/decisions/0017-repository-layout.md). Each area of the repository is one trait with
//! its statements in its own file (`tasks.rs`, `questions.rs`, …); what differs per backend
//! (connecting, how a write transaction begins, JSON id lists) is [`SqlBackend`], implemented
//! in `sqlite.rs` and `postgres.rs`, and `authority::ids_from_json`.
//!
//! Every area implementation repeats a `where` clause: what the statements of that area bind
//! and decode. Rust does not carry such bounds from a trait to its users, so they are stated
//! where they are needed; a missing one is a compile error naming the type.
//!
//! Bound limits: every `LIMIT` taking a parameter is written `LIMIT $n + 0`. SQLite (3.47 and
//! later) reads a bare bound `LIMIT` value while planning, and then re-prepares the statement
//! at every new binding: each list read parsed and planned its statement again (B2: 7% of the
//! server's CPU in a task-list loop). An expression is not read while planning, so the
//! statement is prepared once (`sqlite.rs` test `b2_list_reads_never_re_prepare_a_statement`).

use sqlx::{Database, IntoArguments, Pool};

use super::connections::{Conn, ConnectionUsage, Connections, PoolUsage, Tx};

use super::{
    AuthorityStore, Backend, LoginStore, OutboxStore, ProfileStore, QuestionRow, QuestionStore,
    RepoError, Repository, RepositoryStore, SessionStore, SummaryStore, TaskStore, TranscriptStore,
    WorkflowStore,
};
use crate::model::Question;

pub(super) const TASK_SELECT: &str = "SELECT t.id, t.title, t.description, t.state, t.workflow_id, \
    t.step_id, t.archived_at, t.created_at, t.updated_at FROM tasks t";

/// The rest of a task-list page (after the archived predicate): title filter (`$1`, a LIKE
/// pattern on the lower-cased title), pending only (`$2`, from the summary's P3 column), the
/// cursor (`$3`, `$4`: before this `updated_at`, `id`), newest first, `$5` rows.
/// Its `LIMIT` is written `$5 + 0` (module doc, "Bound limits").
pub(super) const TASK_PAGE_FILTER: &str = "($1 IS NULL OR lower(t.title) LIKE $1 ESCAPE '\\') \
    AND ($2 = FALSE OR EXISTS (SELECT 1 FROM task_status_summaries ps \
                               WHERE ps.task_id = t.id AND ps.pending_action IS NOT NULL)) \
    AND ($3 IS NULL OR t.updated_at < $3 OR (t.updated_at = $3 AND t.id < $4)) \
    ORDER BY t.updated_at DESC, t.id DESC LIMIT $5 + 0";

/// P3/P6: a summary is created only if absent.
pub(super) const CAS_SUMMARY_INSERT: &str = "INSERT INTO task_status_summaries \
     (task_id, revision, summary, invalidated, updated_at, pending_action) \
     VALUES ($1, 1, $2, FALSE, $3, $4) ON CONFLICT (task_id) DO NOTHING RETURNING revision";
/// P6: a summary is replaced only at the revision read, and only when it changes (or was
/// invalidated).
pub(super) const CAS_SUMMARY_UPDATE: &str = "UPDATE task_status_summaries \
     SET revision = revision + 1, summary = $3, invalidated = FALSE, updated_at = $4, \
         pending_action = $5 \
     WHERE task_id = $1 AND revision = $2 AND (summary <> $3 OR invalidated = TRUE) \
     RETURNING revision";

/// The columns of a [`super::SessionRecord`], its P1 pending action included (computed from the
/// row by the authority's expression): `{SESSION_COLUMNS}` in a statement's text.
pub(super) const SESSION_COLUMNS: SessionColumns = SessionColumns;

pub(super) struct SessionColumns;

impl std::fmt::Display for SessionColumns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "id, task_id, agent_profile_id, name, state, is_primary, mcp_token_hash, \
             acp_session_id, started_at, completed_at, created_at, {} AS pending_action",
            super::authority::pending_action_of_session_row()
        )
    }
}

pub(super) const TURN_COLUMNS: &str = "id, session_id, task_id, started_at, completed_at, \
    created_at, reservation, resume_pending_id, resume_prompt, workflow_deferred";

pub(super) const PERMISSION_COLUMNS: &str = "id, session_id, task_id, turn_id, tool_call, options, status, \
    outcome, created_at, resolved_at";

/// What a message write returns: the message, its session's P1 and whether it could move the
/// current turn ([`super::MessageWritten`]),
/// `RETURNING {MESSAGE_WRITTEN}` in a statement on `messages`.
pub(super) const MESSAGE_WRITTEN: MessageWrittenColumns = MessageWrittenColumns;

pub(super) struct MessageWrittenColumns;

impl std::fmt::Display for MessageWrittenColumns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{MESSAGE_COLUMNS}, {} AS pending_action, {} AS can_move_turn",
            super::authority::pending_action_of_session("messages.session_id"),
            super::authority::message_can_move_current_turn("messages")
        )
    }
}

pub(super) const MESSAGE_COLUMNS: &str = "id, session_id, task_id, turn_id, author, kind, content, \
    pending_id, created_at, updated_at, source";

pub(super) fn questions_from_rows(rows: Vec<QuestionRow>) -> Result<Vec<Question>, RepoError> {
    rows.into_iter()
        .map(|q| {
            let options = serde_json::from_str(&q.options).map_err(|e| {
                RepoError::Corrupt(format!(
                    "options of question {} in {}: {e}",
                    q.question_id, q.pending_id
                ))
            })?;
            let form = match &q.form {
                None => Default::default(),
                Some(text) => serde_json::from_str(text).map_err(|e| {
                    RepoError::Corrupt(format!(
                        "form of question {} in {}: {e}",
                        q.question_id, q.pending_id
                    ))
                })?,
            };
            Ok(Question {
                id: q.question_id,
                title: q.title,
                prompt: q.prompt,
                options,
                form,
            })
        })
        .collect()
}

pub(super) fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("serializing plain data cannot fail")
}

/// The rows of a statement as one JSON array of arrays (`row` is the columns, `order` an
/// `ORDER BY …` or ""): one value for the driver to hand over instead of a value per column.
/// sqlx's SQLite driver copies every value and passes each row between threads, which cost
/// more than the queries of a task-list page (B2, decisions 0020 and 0021).
pub(super) fn json_rows(backend: Backend, row: &str, order: &str) -> String {
    match backend {
        Backend::Sqlite => format!("json_group_array(json_array({row}) {order})"),
        Backend::Postgres => {
            format!("COALESCE(json_agg(json_build_array({row}) {order}), '[]')::text")
        }
    }
}

/// The questions of bundle `b` as one JSON text column `questions`, in order (read back with
/// [`questions_from_json`]): a bundle and its questions are one round trip (B3).
pub(super) fn questions_of(backend: Backend, b: &str) -> String {
    format!(
        "(SELECT {} FROM clarification_questions q WHERE q.pending_id = {b}.pending_id) AS questions",
        json_rows(
            backend,
            "q.pending_id, q.position, q.question_id, q.title, q.prompt, q.options, q.form",
            "ORDER BY q.position, q.question_id",
        )
    )
}

/// Reads the column [`questions_of`] wrote.
pub(super) fn questions_from_json(text: &str) -> Result<Vec<Question>, RepoError> {
    type Row = (
        String,
        i64,
        String,
        Option<String>,
        String,
        String,
        Option<String>,
    );
    let rows: Vec<Row> = rows_from_json(text, "bundle questions")?;
    questions_from_rows(
        rows.into_iter()
            .map(
                |(pending_id, position, question_id, title, prompt, options, form)| QuestionRow {
                    pending_id,
                    position,
                    question_id,
                    title,
                    prompt,
                    options,
                    form,
                },
            )
            .collect(),
    )
}

/// Reads what [`json_rows`] wrote; `what` names it in the error.
pub(super) fn rows_from_json<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
) -> Result<Vec<T>, RepoError> {
    serde_json::from_str(text).map_err(|e| RepoError::Corrupt(format!("{what}: {e}")))
}

/// A boolean column read through [`json_rows`]: PostgreSQL writes `true`, SQLite (whose
/// booleans are integers) `1`.
pub(super) struct JsonBool(pub bool);

impl<'de> serde::Deserialize<'de> for JsonBool {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = JsonBool;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a boolean, or 0 or 1")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<JsonBool, E> {
                Ok(JsonBool(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<JsonBool, E> {
                match v {
                    0 | 1 => Ok(JsonBool(v == 1)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<JsonBool, E> {
                match v {
                    0 | 1 => Ok(JsonBool(v == 1)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Signed(v), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Builds a `'static` statement once per call site (sqlx only takes `&'static str` or audited
/// strings). Every piece is a compile-time constant of this module or `authority`; a call site
/// in generic code has one static for both backends (the text is the same).
macro_rules! stmt {
    ($($arg:tt)*) => {{
        static S: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| format!($($arg)*));
        S.as_str()
    }};
}
pub(super) use stmt;

/// Like [`stmt!`] for a statement with a JSON id list: `{}` in the text becomes
/// [`super::authority::ids_from_json`] of the backend `$kind`, one text per backend.
macro_rules! stmt_with_ids {
    ($kind:expr, $text:literal) => {{
        static S: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
            [
                $crate::server::repo::Backend::Sqlite,
                $crate::server::repo::Backend::Postgres,
            ]
            .map(|b| format!($text, $crate::server::repo::authority::ids_from_json(b)))
        });
        match $kind {
            $crate::server::repo::Backend::Sqlite => S[0].as_str(),
            $crate::server::repo::Backend::Postgres => S[1].as_str(),
        }
    }};
}
pub(super) use stmt_with_ids;

/// What differs between the two databases; everything else is shared SQL.
pub trait SqlBackend: Database<Arguments: IntoArguments<Self>, QueryResult: RowsAffected> {
    const KIND: Backend;
    /// The pool's connection options when this is PostgreSQL (the event bridge opens its own
    /// connections to the same database).
    fn postgres_options(pool: &Pool<Self>) -> Option<sqlx::postgres::PgConnectOptions>;
    /// How a write transaction begins. SQLite: `BEGIN IMMEDIATE`, so a read-then-write
    /// transaction never fails to upgrade its lock.
    const BEGIN_WRITE: &'static str;
    /// Locks session `$1`'s row for the rest of a write transaction, so the transaction's next
    /// statements read what every earlier writer of that session committed (PostgreSQL: READ
    /// COMMITTED re-reads at each statement, and a guard in a subquery is not re-checked after
    /// a lock wait). SQLite's write transaction holds the database already: a plain read.
    const LOCK_SESSION: &'static str;
}

/// L18/I4: the session has a resume that is owed (accepted, not yet dispatched). Its answer
/// goes to the agent before any new prompt; guards of statements on `sessions s`.
pub(super) const NO_OWED_RESUME: &str = "NOT EXISTS (SELECT 1 FROM turns ow \
    WHERE ow.session_id = s.id AND ow.reservation = 'attempted' AND ow.resume_prompt IS NOT NULL)";

/// Several servers: the write's server (`server`, NULL on a single server) still owns the
/// session `session_id` (an SQL expression) at its epoch (`epoch`). Read after the session lock
/// (`SqlBackend::LOCK_SESSION`), which a takeover takes too, so a takeover committed meanwhile
/// is seen.
pub(super) fn still_owner(session_id: &str, server: &str, epoch: &str) -> String {
    format!(
        "({server} IS NULL OR EXISTS (SELECT 1 FROM session_owners fo \
          WHERE fo.session_id = {session_id} AND fo.server_id = {server} \
            AND fo.epoch = {epoch}))"
    )
}

/// Whether `server` (at `epoch`) owns session `session_id`, read in `tx` (to tell why a
/// write guarded by [`still_owner`] wrote nothing). No server: yes.
pub(super) async fn owns<DB>(
    tx: &mut super::connections::Tx<'_, DB>,
    session_id: &str,
    server: Option<&str>,
    epoch: Option<i64>,
) -> Result<bool, sqlx::Error>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
{
    let Some(server) = server else {
        return Ok(true);
    };
    Ok(sqlx::query_as::<DB, (i64,)>(
        "SELECT COUNT(*) FROM session_owners WHERE session_id = $1 AND server_id = $2 \
         AND epoch = $3",
    )
    .bind(session_id)
    .bind(server)
    .bind(epoch)
    .fetch_one(&mut **tx)
    .await?
    .0 > 0)
}

/// [`NO_OWED_RESUME`] for the session whose id is the SQL expression `session_id`.
pub(super) fn no_owed_resume(session_id: &str) -> String {
    NO_OWED_RESUME.replace("s.id", session_id)
}

/// `rows_affected` of either backend's query result.
pub trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

/// The repository on one backend's connections.
///
/// Every statement that writes runs on `writes`, every other one on `reads`. On SQLite
/// `writes` is one connection of its own and `reads` are opened read-only: SQLite has one
/// writer at a time, and a second connection that wants to write sleeps in SQLite's busy
/// handler (1, 2, 5, 10 … ms) until the lock is free; writers queued for the one write
/// connection wait in the process instead and start as soon as it is free
/// (docs/decisions/0023-one-sqlite-write-connection.md). A SQLite file's connections are kept
/// outside sqlx's pool (decision 0029, `connections.rs`). On PostgreSQL, and for an
/// in-memory SQLite database (one connection), both are the same pool.
pub struct SqlRepository<DB: Database> {
    pub(super) reads: Connections<DB>,
    pub(super) writes: Connections<DB>,
    /// SQLite database files: group commit of the write connection (decision 0024).
    pub(super) durability: Option<std::sync::Arc<super::wal_sync::WalSync>>,
}

/// A write transaction (see [`SqlRepository::write_tx`]).
pub(super) type WriteTx<'a, DB> = Tx<'a, DB>;

impl<DB: SqlBackend> SqlRepository<DB> {
    /// A read connection, for one statement: `.fetch_all(&mut *self.reader().await?)`.
    pub(super) async fn reader(&self) -> Result<Conn<'_, DB>, sqlx::Error> {
        self.reads.get().await
    }

    /// The write connection, for one statement: `.execute(&mut *self.writer().await?)`.
    pub(super) async fn writer(&self) -> Result<Conn<'_, DB>, sqlx::Error> {
        self.writes.get().await
    }

    /// A transaction on the write connection, begun with [`SqlBackend::BEGIN_WRITE`].
    pub(super) async fn write_tx(&self) -> Result<WriteTx<'_, DB>, sqlx::Error> {
        Tx::begin(self.writer().await?, DB::BEGIN_WRITE).await
    }
}

#[async_trait::async_trait]
impl<DB> Repository for SqlRepository<DB>
where
    DB: SqlBackend,
    Self: WorkflowStore
        + ProfileStore
        + TaskStore
        + SessionStore
        + TranscriptStore
        + QuestionStore
        + SummaryStore
        + AuthorityStore
        + OutboxStore
        + LoginStore
        + RepositoryStore,
{
    fn backend(&self) -> Backend {
        DB::KIND
    }

    fn postgres_options(&self) -> Option<sqlx::postgres::PgConnectOptions> {
        self.reads.pool().and_then(DB::postgres_options)
    }

    async fn durable(&self) -> super::RepoResult<()> {
        match &self.durability {
            Some(wal) => Ok(wal.sync().await?),
            None => Ok(()),
        }
    }

    fn commit_counts(&self) -> Option<(u64, u64)> {
        self.durability.as_ref().map(|wal| wal.counts())
    }

    fn write_connection_usage(&self) -> Option<ConnectionUsage> {
        self.writes.usage()
    }

    fn pool_usage(&self) -> Option<PoolUsage> {
        self.reads.pool_usage()
    }
}

#[cfg(test)]
mod tests {
    use super::JsonBool;

    #[test]
    fn a_json_boolean_is_true_false_1_or_0_and_nothing_else() {
        let read = |t: &str| serde_json::from_str::<JsonBool>(t).map(|b| b.0);
        assert!(read("true").unwrap() && read("1").unwrap());
        assert!(!read("false").unwrap() && !read("0").unwrap());
        for bad in ["2", "-1", "\"true\"", "null", "1.0"] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
