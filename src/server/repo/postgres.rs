//! PostgreSQL: the same statements as SQLite (see `sql.rs`), the same behaviour.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::{Pool, Postgres, Transaction};

use super::{Backend, RepoResult};

pub struct PostgresRepository {
    pool: Pool<Postgres>,
}

impl PostgresRepository {
    pub const BACKEND: Backend = Backend::Postgres;

    pub async fn connect(url: &str) -> RepoResult<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        Ok(Self { pool })
    }

    async fn write_tx(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.pool.begin().await
    }
}

super::sql::impl_repository!(PostgresRepository, Postgres);
