//! Logins a browser ended (`POST /logout`): the front door refuses their cookies on every
//! server on this database.

use async_trait::async_trait;
use sqlx::{Encode, Executor, Type};

use super::RepoResult;
use super::sql::{SqlBackend, SqlRepository};
use crate::server::time::Micros;

#[async_trait]
pub trait LoginStore: Send + Sync {
    /// Revokes `login_id` at `at`, and forgets revocations made before `forget_before` (their
    /// cookies have expired).
    async fn revoke_login(
        &self,
        login_id: &str,
        at: Micros,
        forget_before: Micros,
    ) -> RepoResult<()>;

    async fn login_revoked(&self, login_id: &str) -> RepoResult<bool>;
}

#[async_trait]
impl<DB> LoginStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> (i64,): sqlx::FromRow<'r, DB::Row>,
{
    async fn revoke_login(
        &self,
        login_id: &str,
        at: Micros,
        forget_before: Micros,
    ) -> RepoResult<()> {
        let mut tx = self.write_tx().await?;
        sqlx::query::<DB>("DELETE FROM revoked_logins WHERE revoked_at < $1")
            .bind(forget_before)
            .execute(&mut *tx)
            .await?;
        sqlx::query::<DB>(
            "INSERT INTO revoked_logins (login_id, revoked_at) VALUES ($1, $2) \
             ON CONFLICT (login_id) DO NOTHING",
        )
        .bind(login_id)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn login_revoked(&self, login_id: &str) -> RepoResult<bool> {
        Ok(
            sqlx::query_as::<DB, (i64,)>("SELECT COUNT(*) FROM revoked_logins WHERE login_id = $1")
                .bind(login_id)
                .fetch_one(&mut *self.reader().await?)
                .await?
                .0
                > 0,
        )
    }
}
