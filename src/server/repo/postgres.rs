//! PostgreSQL: the same statements as SQLite (see `sql.rs`), the same behaviour.

use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::PgPoolOptions;

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
    pub async fn connect(url: &str) -> RepoResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        Ok(Self {
            writes: pool.clone(),
            pool,
            durability: None,
        })
    }
}
