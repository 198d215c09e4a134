//! SQLite, the embedded default: a WAL database file with a small pool. Write transactions
//! start with `BEGIN IMMEDIATE` so a read-then-write transaction never fails to upgrade.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::sql::{RowsAffected, SqlBackend, SqlRepository};
use super::{Backend, RepoResult};

pub type SqliteRepository = SqlRepository<Sqlite>;

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::sqlite::SqliteQueryResult::rows_affected(self)
    }
}

impl SqlBackend for Sqlite {
    const KIND: Backend = Backend::Sqlite;
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";

    fn postgres_options(_: &sqlx::Pool<Self>) -> Option<sqlx::postgres::PgConnectOptions> {
        None
    }
}

impl SqliteRepository {
    /// `url` is `sqlite:<path>` (created if missing) or `sqlite::memory:`.
    pub async fn connect(url: &str) -> RepoResult<Self> {
        let memory = url.contains(":memory:");
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10))
            .journal_mode(if memory {
                SqliteJournalMode::Memory
            } else {
                SqliteJournalMode::Wal
            })
            // An answer acknowledged with 200 must survive power loss: in WAL mode NORMAL
            // may lose the last commits; FULL syncs the WAL at every commit
            // (docs/decisions/0010-sqlite-durability.md).
            .synchronous(SqliteSynchronous::Full);
        let pool = SqlitePoolOptions::new()
            // An in-memory database exists per connection: keep exactly one.
            .max_connections(if memory { 1 } else { 8 })
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
        Ok(Self { pool })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::ffi::CStr;

    use super::SqliteRepository;
    use crate::server::repo::{NewTask, TaskFilter, TaskStore, TranscriptStore};

    /// How often each statement this connection has prepared was prepared again, by its SQL.
    async fn re_prepares(repo: &SqliteRepository) -> HashMap<String, i32> {
        use libsqlite3_sys::{
            SQLITE_STMTSTATUS_REPREPARE, sqlite3_next_stmt, sqlite3_sql, sqlite3_stmt_status,
        };
        let mut conn = repo.pool.acquire().await.unwrap();
        let mut handle = conn.lock_handle().await.unwrap();
        let db = handle.as_raw_handle().as_ptr();
        let mut out = HashMap::new();
        // SAFETY: the handle is locked for this scope; `sqlite3_next_stmt` walks the
        // connection's own prepared statements, which stay alive while it is locked, and
        // `sqlite3_sql` returns each one's text, owned by the statement.
        unsafe {
            let mut stmt = sqlite3_next_stmt(db, std::ptr::null_mut());
            while !stmt.is_null() {
                let sql = CStr::from_ptr(sqlite3_sql(stmt))
                    .to_string_lossy()
                    .into_owned();
                let n = sqlite3_stmt_status(stmt, SQLITE_STMTSTATUS_REPREPARE, 0);
                *out.entry(sql).or_default() += n;
                stmt = sqlite3_next_stmt(db, stmt);
            }
        }
        out
    }

    /// B2 (sql.rs, "Bound limits"): reading list pages of different sizes, filters and
    /// cursors prepares each statement once; none is parsed and planned again per read.
    #[tokio::test]
    async fn b2_list_reads_never_re_prepare_a_statement() {
        // In memory: one connection, so every read below runs on the one inspected.
        let repo = SqliteRepository::connect("sqlite::memory:").await.unwrap();
        // The migrations' own statements were prepared again as the schema changed.
        let before = re_prepares(&repo).await;
        for i in 0..5 {
            let new = NewTask {
                title: format!("task {i}"),
                description: String::new(),
                workflow_id: None,
                step_id: None,
            };
            repo.create_task(&new, 1_000 + i).await.unwrap();
        }
        for limit in [2, 3, 101] {
            for title_like in [None, Some("%task%".to_string())] {
                let page = repo
                    .list_tasks_page(&TaskFilter {
                        archived: false,
                        title_like,
                        pending_only: false,
                        after: None,
                        limit,
                    })
                    .await
                    .unwrap();
                assert_eq!(page.len(), limit.min(5) as usize);
            }
            repo.list_messages("no-such-session", None, limit)
                .await
                .unwrap();
            repo.list_messages_before("no-such-session", None, limit)
                .await
                .unwrap();
        }
        let after = re_prepares(&repo).await;
        assert!(
            after.len() >= before.len() + 3,
            "the reads' statements are not cached"
        );
        let again: Vec<_> = after
            .iter()
            .filter(|(sql, n)| **n > before.get(*sql).copied().unwrap_or(0))
            .collect();
        assert!(again.is_empty(), "prepared again: {again:#?}");
    }
}
