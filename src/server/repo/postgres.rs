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

    fn postgres_options(pool: &sqlx::Pool<Self>) -> Option<sqlx::postgres::PgConnectOptions> {
        Some((*pool.connect_options()).clone())
    }
}

impl PostgresRepository {
    /// Pooled connections plan each statement once (decision 0026). They keep sqlx's ping
    /// before each use: a connection the server ended (a restart, a network cut) is replaced
    /// before a statement fails on it (`tests/several_servers.rs`, the cut-off tests).
    pub async fn connect(url: &str) -> RepoResult<Self> {
        let options =
            PgConnectOptions::from_str(url)?.options([("plan_cache_mode", "force_generic_plan")]);
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        Ok(Self {
            writes: pool.clone(),
            pool,
            durability: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Connection;

    use super::PostgresRepository;

    /// Decision 0026: a statement the repository runs again is not planned again (PostgreSQL
    /// kept choosing a fresh custom plan per execution, 0.15–0.4 ms of every B1 query). Needs
    /// `TEST_POSTGRES_URL`.
    #[tokio::test]
    async fn pooled_connections_plan_a_statement_once() {
        let Some(admin) = std::env::var("TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.is_empty())
        else {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "TEST_POSTGRES_URL is not set under CI=true"
            );
            return;
        };
        let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
        let name = format!("t_{}", uuid::Uuid::now_v7().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap();
        let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
        let repo = PostgresRepository::connect(&url).await.unwrap();
        let mut pooled = repo.pool.acquire().await.unwrap();
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
        repo.pool.close().await;
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap();
    }
}
