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
