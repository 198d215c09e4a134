//! Agent profiles: the command a session's agent runs.

use async_trait::async_trait;
use sqlx::{Encode, Executor, FromRow, Type};

use super::sql::{SqlBackend, SqlRepository, json};
use super::{AgentProfileRecord, NewAgentProfile, RepoError, RepoResult, new_id};
use crate::server::time::Micros;

#[async_trait]
pub trait ProfileStore: Send + Sync {
    async fn create_agent_profile(
        &self,
        new: &NewAgentProfile,
        at: Micros,
    ) -> RepoResult<AgentProfileRecord>;

    async fn list_agent_profiles(&self) -> RepoResult<Vec<AgentProfileRecord>>;

    /// Replaces the profile's fields; `None` when it does not exist.
    async fn update_agent_profile(
        &self,
        id: &str,
        profile: &NewAgentProfile,
    ) -> RepoResult<Option<AgentProfileRecord>>;

    async fn get_agent_profile(&self, id: &str) -> RepoResult<Option<AgentProfileRecord>>;

    async fn get_agent_profile_by_name(&self, name: &str)
    -> RepoResult<Option<AgentProfileRecord>>;
}

#[async_trait]
impl<DB> ProfileStore for SqlRepository<DB>
where
    DB: SqlBackend,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'r> AgentProfileRecord: FromRow<'r, DB::Row>,
{
    async fn create_agent_profile(
        &self,
        new: &NewAgentProfile,
        at: Micros,
    ) -> RepoResult<AgentProfileRecord> {
        if new.name.trim().is_empty() || new.command.trim().is_empty() {
            return Err(RepoError::Invalid(
                "an agent profile needs a name and a command".into(),
            ));
        }
        Ok(sqlx::query_as::<DB, AgentProfileRecord>(
            "INSERT INTO agent_profiles (id, name, command, args, env, elicitation, created_at, auth_method) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             RETURNING id, name, command, args, env, elicitation, created_at, auth_method",
        )
        .bind(new_id())
        .bind(&new.name)
        .bind(&new.command)
        .bind(json(&new.args))
        .bind(json(&new.env))
        .bind(new.elicitation)
        .bind(at)
        .bind(&new.auth_method)
        .fetch_one(&mut *self.writer().await?)
        .await?)
    }

    async fn list_agent_profiles(&self) -> RepoResult<Vec<AgentProfileRecord>> {
        Ok(sqlx::query_as::<DB, AgentProfileRecord>(
            "SELECT id, name, command, args, env, elicitation, created_at, auth_method FROM agent_profiles ORDER BY name, id",
        )
        .fetch_all(&mut *self.reader().await?)
        .await?)
    }

    async fn update_agent_profile(
        &self,
        id: &str,
        profile: &NewAgentProfile,
    ) -> RepoResult<Option<AgentProfileRecord>> {
        Ok(sqlx::query_as::<DB, AgentProfileRecord>(
            "UPDATE agent_profiles SET name = $2, command = $3, args = $4, env = $5, \
             elicitation = $6, auth_method = $7 WHERE id = $1 \
             RETURNING id, name, command, args, env, elicitation, created_at, auth_method",
        )
        .bind(id)
        .bind(&profile.name)
        .bind(&profile.command)
        .bind(json(&profile.args))
        .bind(json(&profile.env))
        .bind(profile.elicitation)
        .bind(&profile.auth_method)
        .fetch_optional(&mut *self.writer().await?)
        .await?)
    }

    async fn get_agent_profile(&self, id: &str) -> RepoResult<Option<AgentProfileRecord>> {
        Ok(sqlx::query_as::<DB, AgentProfileRecord>(
            "SELECT id, name, command, args, env, elicitation, created_at, auth_method FROM agent_profiles WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *self.reader().await?)
        .await?)
    }

    async fn get_agent_profile_by_name(
        &self,
        name: &str,
    ) -> RepoResult<Option<AgentProfileRecord>> {
        Ok(sqlx::query_as::<DB, AgentProfileRecord>(
            "SELECT id, name, command, args, env, elicitation, created_at, auth_method FROM agent_profiles WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&mut *self.reader().await?)
        .await?)
    }
}
