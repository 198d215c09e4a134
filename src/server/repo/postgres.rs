//! PostgreSQL: the same statements as SQLite (see `sql.rs`), the same behaviour.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::sql::{RowsAffected, SqlBackend, SqlRepository};
use super::{Backend, RepoResult};

pub type PostgresRepository = SqlRepository<Postgres>;

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::postgres::PgQueryResult::rows_affected(self)
    }
}

impl SqlBackend for Postgres {
    const KIND: Backend = Backend::Postgres;
    const BEGIN_WRITE: &'static str = "BEGIN";
    const LOCK_SESSION: &'static str = "SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE";

    fn postgres_options(pool: &sqlx::Pool<Self>) -> Option<sqlx::postgres::PgConnectOptions> {
        Some((*pool.connect_options()).clone())
    }
}

impl PostgresRepository {
    /// Pooled connections plan each statement once (decision 0026). They keep sqlx's ping
    /// before each use: a connection the server ended (a restart, a network cut) is replaced
    /// before a statement fails on it (`tests/it/several_servers.rs`, the cut-off tests).
    pub async fn connect(url: &str) -> RepoResult<Self> {
        let options =
            PgConnectOptions::from_str(url)?.options([("plan_cache_mode", "force_generic_plan")]);
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        let (writes, reads) = super::connections::Connections::one_pool(pool);
        Ok(Self {
            writes,
            reads,
            durability: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Connection;

    use super::PostgresRepository;

    /// A repository on a new database of the test server, and its dropper; without
    /// `TEST_POSTGRES_URL` a failure, or `None` when `TURNSTILE_SKIP_POSTGRES=1` (counted in
    /// `TURNSTILE_SKIPPED_LOG` like the integration tests' skips).
    async fn fresh() -> Option<(PostgresRepository, impl AsyncFnOnce())> {
        let Some(admin) = std::env::var("TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.is_empty())
        else {
            assert!(
                std::env::var("TURNSTILE_SKIP_POSTGRES").is_ok_and(|v| v == "1"),
                "no PostgreSQL: TEST_POSTGRES_URL is not set (TURNSTILE_SKIP_POSTGRES=1 skips)"
            );
            if let Some(log) = std::env::var_os("TURNSTILE_SKIPPED_LOG") {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .unwrap();
                let test = std::thread::current().name().unwrap_or("?").to_string();
                writeln!(f, "{test}").unwrap();
            }
            return None;
        };
        let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
        let name = format!("t_{}", uuid::Uuid::now_v7().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap();
        let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
        let repo = PostgresRepository::connect(&url).await.unwrap();
        let pool = repo.reads.pool().unwrap().clone();
        Some((repo, async move || {
            pool.close().await;
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {name}")))
                .execute(&mut conn)
                .await
                .unwrap();
        }))
    }

    /// Decision 0026: a statement the repository runs again is not planned again (PostgreSQL
    /// kept choosing a fresh custom plan per execution, 0.15–0.4 ms of every B1 query). Needs
    /// `TEST_POSTGRES_URL`.
    #[tokio::test]
    async fn pooled_connections_plan_a_statement_once() {
        let Some((repo, drop_database)) = fresh().await else {
            return;
        };
        let mut pooled = repo.reads.pool().unwrap().acquire().await.unwrap();
        for _ in 0..8 {
            sqlx::query("SELECT id FROM tasks WHERE id = $1")
                .bind("none")
                .fetch_optional(&mut *pooled)
                .await
                .unwrap();
        }
        let (generic, custom): (i64, i64) = sqlx::query_as(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements \
             WHERE statement = 'SELECT id FROM tasks WHERE id = $1'",
        )
        .fetch_one(&mut *pooled)
        .await
        .unwrap();
        assert_eq!((generic, custom), (8, 0));
        drop(pooled);
        drop_database().await;
    }

    /// Decision 0029: a write transaction dropped before its commit (a failed or cancelled
    /// operation) is rolled back before its pooled connection serves anyone else.
    #[tokio::test]
    async fn a_write_transaction_dropped_before_its_commit_writes_nothing() {
        let Some((repo, drop_database)) = fresh().await else {
            return;
        };
        let insert =
            |key: String| sqlx::query("INSERT INTO meta (key, value) VALUES ($1, 1)").bind(key);
        {
            let mut tx = repo.write_tx().await.unwrap();
            insert("dropped".into()).execute(&mut *tx).await.unwrap();
        }
        // More transactions at once than the pool has connections: each one is clean.
        let kept = futures::future::join_all((0..12).map(|i| {
            let repo = &repo;
            async move {
                let mut tx = repo.write_tx().await.unwrap();
                insert(format!("kept {i}")).execute(&mut *tx).await.unwrap();
                tx.commit().await.unwrap();
            }
        }));
        kept.await;
        let (dropped, kept): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE key = 'dropped'), count(*) FILTER (WHERE key LIKE 'kept %') FROM meta",
        )
        .fetch_one(&mut *repo.reader().await.unwrap())
        .await
        .unwrap();
        assert_eq!((dropped, kept), (0, 12));
        drop_database().await;
    }
}
