//! The SQL shared by both backends. SQLite and PostgreSQL run the same statements (portable
//! SQL: `$n` placeholders, `RETURNING`, `ON CONFLICT`, BIGINT microsecond timestamps, TEXT
//! JSON); `impl_repository!` instantiates one implementation per backend so that behaviour
//! cannot drift. Per-backend differences (connecting, write transactions, JSON id lists) live
//! in `sqlite.rs` / `postgres.rs` and `authority::ids_from_json`.

use crate::model::Question;

use super::{QuestionRow, RepoError};

pub(super) const TASK_SELECT: &str = "SELECT t.id, t.title, t.description, t.state, t.workflow_id, \
    t.step_id, t.archived_at, t.created_at, t.updated_at, \
    (SELECT s.id FROM sessions s WHERE s.task_id = t.id AND s.is_primary = TRUE) AS primary_session_id, \
    (SELECT COUNT(*) FROM sessions s WHERE s.task_id = t.id) AS session_count \
    FROM tasks t";

/// The rest of a task-list page (after the archived predicate): title filter (`$1`, a LIKE
/// pattern on the lower-cased title), pending only (`$2`, from the summary's P3 column), the
/// cursor (`$3`, `$4`: before this `updated_at`, `id`), newest first, `$5` rows.
pub(super) const TASK_PAGE_FILTER: &str = "($1 IS NULL OR lower(t.title) LIKE $1 ESCAPE '\\') \
    AND ($2 = FALSE OR EXISTS (SELECT 1 FROM task_status_summaries ps \
                               WHERE ps.task_id = t.id AND ps.pending_action IS NOT NULL)) \
    AND ($3 IS NULL OR t.updated_at < $3 OR (t.updated_at = $3 AND t.id < $4)) \
    ORDER BY t.updated_at DESC, t.id DESC LIMIT $5";

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

pub(super) const SESSION_COLUMNS: &str = "id, task_id, agent_profile_id, name, state, is_primary, \
    mcp_token_hash, acp_session_id, started_at, completed_at, created_at";

pub(super) const TURN_COLUMNS: &str = "id, session_id, task_id, started_at, completed_at, \
    created_at, reservation, resume_pending_id, resume_prompt, workflow_deferred";

pub(super) const MESSAGE_COLUMNS: &str = "id, session_id, task_id, turn_id, author, kind, content, \
    pending_id, created_at, updated_at";

pub(super) fn questions_from_rows(rows: Vec<QuestionRow>) -> Result<Vec<Question>, RepoError> {
    rows.into_iter()
        .map(|q| {
            let options = serde_json::from_str(&q.options).map_err(|e| {
                RepoError::Corrupt(format!(
                    "options of question {} in {}: {e}",
                    q.question_id, q.pending_id
                ))
            })?;
            Ok(Question {
                id: q.question_id,
                title: q.title,
                prompt: q.prompt,
                options,
            })
        })
        .collect()
}

pub(super) fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("serializing plain data cannot fail")
}

/// Builds a `'static` statement once per call site (sqlx only takes `&'static str` or audited
/// strings). Every piece is a compile-time constant of this module or `authority`.
macro_rules! stmt {
    ($($arg:tt)*) => {{
        static S: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| format!($($arg)*));
        S.as_str()
    }};
}
pub(super) use stmt;

/// Implements [`super::Repository`] for `$repo` (which has `pool: sqlx::Pool<$db>`,
/// `BACKEND` and `async fn write_tx(&self)`), with the shared SQL above.
macro_rules! impl_repository {
    ($repo:ty, $db:ty) => {
        use std::collections::HashMap;

        use async_trait::async_trait;
        use sqlx::Row;

        use crate::model::{BundleStatus, PendingAction, SessionState, SummaryBody};
        use crate::server::repo::authority::{self, BUNDLE_COLUMNS, SQL};
        use crate::server::repo::sql::{
            CAS_SUMMARY_INSERT, CAS_SUMMARY_UPDATE, MESSAGE_COLUMNS, SESSION_COLUMNS, TASK_PAGE_FILTER, TASK_SELECT, TURN_COLUMNS, json, questions_from_rows, stmt,
        };
        use crate::server::repo::*;
        use crate::server::time::Micros;

        #[derive(sqlx::FromRow)]
        struct BundleWithActivity {
            #[sqlx(flatten)]
            record: BundleRecord,
            active: bool,
        }

        /// One summary compare-and-set (P6) on the pool or inside a transaction: the new
        /// revision, or `None` when nothing was written.
        async fn cas_statement<'e, E: sqlx::Executor<'e, Database = $db>>(
            executor: E,
            task_id: &str,
            expected: Option<i64>,
            body: &SummaryBody,
            at: Micros,
        ) -> Result<Option<i64>, sqlx::Error> {
            let text = json(body);
            let pending = body.pending_action.map(|p| p.as_str());
            match expected {
                None => sqlx::query_scalar::<$db, i64>(CAS_SUMMARY_INSERT)
                    .bind(task_id)
                    .bind(text)
                    .bind(at)
                    .bind(pending)
                    .fetch_optional(executor)
                    .await,
                Some(rev) => sqlx::query_scalar::<$db, i64>(CAS_SUMMARY_UPDATE)
                    .bind(task_id)
                    .bind(rev)
                    .bind(text)
                    .bind(at)
                    .bind(pending)
                    .fetch_optional(executor)
                    .await,
            }
        }

        impl $repo {
            async fn load_steps(&self, workflow: WorkflowRecord) -> RepoResult<WorkflowView> {
                let steps = sqlx::query_as::<$db, WorkflowStepRecord>(
                    "SELECT id, workflow_id, position, name, on_turn_complete FROM workflow_steps \
                     WHERE workflow_id = $1 ORDER BY position, id",
                )
                .bind(&workflow.id)
                .fetch_all(&self.pool)
                .await?;
                Ok(WorkflowView { workflow, steps })
            }

            async fn load_questions(&self, pending_id: &str) -> RepoResult<Vec<crate::model::Question>> {
                let rows = sqlx::query_as::<$db, QuestionRow>(
                    "SELECT pending_id, position, question_id, title, prompt, options \
                     FROM clarification_questions WHERE pending_id = $1 ORDER BY position, question_id",
                )
                .bind(pending_id)
                .fetch_all(&self.pool)
                .await?;
                questions_from_rows(rows)
            }

            async fn stored_bundle(&self, record: BundleRecord, active: bool) -> RepoResult<BundleView> {
                let questions = self.load_questions(&record.pending_id).await?;
                Ok(BundleView { record, questions, active })
            }

            async fn insert_questions(
                tx: &mut sqlx::Transaction<'static, $db>,
                pending_id: &str,
                questions: &[crate::model::Question],
            ) -> RepoResult<()> {
                for (position, q) in questions.iter().enumerate() {
                    sqlx::query::<$db>(
                        "INSERT INTO clarification_questions (pending_id, position, question_id, title, prompt, options) \
                         VALUES ($1, $2, $3, $4, $5, $6)",
                    )
                    .bind(pending_id)
                    .bind(position as i64)
                    .bind(&q.id)
                    .bind(&q.title)
                    .bind(&q.prompt)
                    .bind(json(&q.options))
                    .execute(&mut **tx)
                    .await?;
                }
                Ok(())
            }

            /// L6: the bundle's one transcript row, in the bundle's turn.
            async fn insert_question_message(
                tx: &mut sqlx::Transaction<'static, $db>,
                bundle: &BundleRecord,
                content: &str,
                at: Micros,
            ) -> RepoResult<MessageRecord> {
                Ok(sqlx::query_as::<$db, MessageRecord>(stmt!(
                    "INSERT INTO messages ({MESSAGE_COLUMNS}) \
                     VALUES ($1, $2, $3, $4, 'agent', 'clarification_request', $5, $6, $7, $7) \
                     RETURNING {MESSAGE_COLUMNS}"
                ))
                .bind(new_id())
                .bind(&bundle.session_id)
                .bind(&bundle.task_id)
                .bind(&bundle.turn_id)
                .bind(content)
                .bind(&bundle.pending_id)
                .bind(at)
                .fetch_one(&mut **tx)
                .await?)
            }

            async fn fetch_summary(&self, task_id: &str) -> RepoResult<Option<SummaryRecord>> {
                sqlx::query_as::<$db, SummaryRow>(
                    "SELECT task_id, revision, summary, invalidated, updated_at \
                     FROM task_status_summaries WHERE task_id = $1",
                )
                .bind(task_id)
                .fetch_optional(&self.pool)
                .await?
                .map(SummaryRow::into_record)
                .transpose()
            }
        }

        #[async_trait]
        impl Repository for $repo {
            fn backend(&self) -> Backend {
                Self::BACKEND
            }

            async fn bump_epoch(&self) -> RepoResult<i64> {
                Ok(sqlx::query_scalar::<$db, i64>(
                    "INSERT INTO meta (key, value) VALUES ('epoch', 1) \
                     ON CONFLICT (key) DO UPDATE SET value = meta.value + 1 RETURNING value",
                )
                .fetch_one(&self.pool)
                .await?)
            }

            async fn current_epoch(&self) -> RepoResult<i64> {
                Ok(sqlx::query_scalar::<$db, i64>("SELECT value FROM meta WHERE key = 'epoch'")
                    .fetch_optional(&self.pool)
                    .await?
                    .unwrap_or(0))
            }

            async fn create_workflow(&self, new: &NewWorkflow, at: Micros) -> RepoResult<WorkflowView> {
                if new.name.trim().is_empty() {
                    return Err(RepoError::Invalid("workflow name must not be empty".into()));
                }
                if new.steps.is_empty() {
                    return Err(RepoError::Invalid("a workflow needs at least one step".into()));
                }
                let mut tx = self.write_tx().await?;
                let workflow = sqlx::query_as::<$db, WorkflowRecord>(
                    "INSERT INTO workflows (id, name, is_default, created_at) VALUES ($1, $2, $3, $4) \
                     RETURNING id, name, is_default, created_at",
                )
                .bind(new_id())
                .bind(&new.name)
                .bind(new.is_default)
                .bind(at)
                .fetch_one(&mut *tx)
                .await?;
                let mut steps = Vec::with_capacity(new.steps.len());
                for (position, step) in new.steps.iter().enumerate() {
                    steps.push(
                        sqlx::query_as::<$db, WorkflowStepRecord>(
                            "INSERT INTO workflow_steps (id, workflow_id, position, name, on_turn_complete) \
                             VALUES ($1, $2, $3, $4, $5) \
                             RETURNING id, workflow_id, position, name, on_turn_complete",
                        )
                        .bind(new_id())
                        .bind(&workflow.id)
                        .bind(position as i64)
                        .bind(&step.name)
                        .bind(&step.on_turn_complete)
                        .fetch_one(&mut *tx)
                        .await?,
                    );
                }
                tx.commit().await?;
                Ok(WorkflowView { workflow, steps })
            }

            async fn list_workflows(&self) -> RepoResult<Vec<WorkflowView>> {
                let rows = sqlx::query_as::<$db, WorkflowRecord>(
                    "SELECT id, name, is_default, created_at FROM workflows ORDER BY created_at, id",
                )
                .fetch_all(&self.pool)
                .await?;
                let mut out = Vec::with_capacity(rows.len());
                for row in rows {
                    out.push(self.load_steps(row).await?);
                }
                Ok(out)
            }

            async fn default_workflow(&self) -> RepoResult<Option<WorkflowView>> {
                let row = sqlx::query_as::<$db, WorkflowRecord>(
                    "SELECT id, name, is_default, created_at FROM workflows WHERE is_default = TRUE",
                )
                .fetch_optional(&self.pool)
                .await?;
                match row {
                    Some(row) => Ok(Some(self.load_steps(row).await?)),
                    None => Ok(None),
                }
            }

            async fn create_agent_profile(&self, new: &NewAgentProfile, at: Micros) -> RepoResult<AgentProfileRecord> {
                if new.name.trim().is_empty() || new.command.trim().is_empty() {
                    return Err(RepoError::Invalid("an agent profile needs a name and a command".into()));
                }
                Ok(sqlx::query_as::<$db, AgentProfileRecord>(
                    "INSERT INTO agent_profiles (id, name, command, args, env, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6) \
                     RETURNING id, name, command, args, env, created_at",
                )
                .bind(new_id())
                .bind(&new.name)
                .bind(&new.command)
                .bind(json(&new.args))
                .bind(json(&new.env))
                .bind(at)
                .fetch_one(&self.pool)
                .await?)
            }

            async fn list_agent_profiles(&self) -> RepoResult<Vec<AgentProfileRecord>> {
                Ok(sqlx::query_as::<$db, AgentProfileRecord>(
                    "SELECT id, name, command, args, env, created_at FROM agent_profiles ORDER BY name, id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn update_agent_profile(&self, id: &str, profile: &NewAgentProfile) -> RepoResult<Option<AgentProfileRecord>> {
                Ok(sqlx::query_as::<$db, AgentProfileRecord>(
                    "UPDATE agent_profiles SET name = $2, command = $3, args = $4, env = $5 WHERE id = $1 \
                     RETURNING id, name, command, args, env, created_at",
                )
                .bind(id)
                .bind(&profile.name)
                .bind(&profile.command)
                .bind(json(&profile.args))
                .bind(json(&profile.env))
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn get_agent_profile(&self, id: &str) -> RepoResult<Option<AgentProfileRecord>> {
                Ok(sqlx::query_as::<$db, AgentProfileRecord>(
                    "SELECT id, name, command, args, env, created_at FROM agent_profiles WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn get_agent_profile_by_name(&self, name: &str) -> RepoResult<Option<AgentProfileRecord>> {
                Ok(sqlx::query_as::<$db, AgentProfileRecord>(
                    "SELECT id, name, command, args, env, created_at FROM agent_profiles WHERE name = $1",
                )
                .bind(name)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn create_task(&self, new: &NewTask, at: Micros) -> RepoResult<TaskRecord> {
                if new.title.trim().is_empty() {
                    return Err(RepoError::Invalid("a task needs a non-empty title".into()));
                }
                let id = new_id();
                sqlx::query::<$db>(
                    "INSERT INTO tasks (id, title, description, state, workflow_id, step_id, \
                     archived_at, created_at, updated_at) VALUES ($1, $2, $3, 'open', $4, $5, NULL, $6, $6)",
                )
                .bind(&id)
                .bind(&new.title)
                .bind(&new.description)
                .bind(&new.workflow_id)
                .bind(&new.step_id)
                .bind(at)
                .execute(&self.pool)
                .await?;
                self.get_task(&id).await?.ok_or_else(|| RepoError::NotFound(format!("task {id}")))
            }

            async fn get_task(&self, id: &str) -> RepoResult<Option<TaskRecord>> {
                Ok(sqlx::query_as::<$db, TaskRecord>(stmt!("{TASK_SELECT} WHERE t.id = $1"))
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn list_tasks(&self) -> RepoResult<Vec<TaskRecord>> {
                Ok(sqlx::query_as::<$db, TaskRecord>(stmt!(
                    "{TASK_SELECT} ORDER BY t.created_at DESC, t.id DESC"
                ))
                .fetch_all(&self.pool)
                .await?)
            }

            async fn list_tasks_page(&self, filter: &TaskFilter) -> RepoResult<Vec<TaskRecord>> {
                // Two statements so each planner sees the literal predicate of its partial index.
                let sql = if filter.archived {
                    stmt!("{TASK_SELECT} WHERE t.archived_at IS NOT NULL AND {TASK_PAGE_FILTER}")
                } else {
                    stmt!("{TASK_SELECT} WHERE t.archived_at IS NULL AND {TASK_PAGE_FILTER}")
                };
                let (after_at, after_id) = match &filter.after {
                    Some((at, id)) => (Some(*at), Some(id.as_str())),
                    None => (None, None),
                };
                Ok(sqlx::query_as::<$db, TaskRecord>(sql)
                    .bind(filter.title_like.as_deref())
                    .bind(filter.pending_only)
                    .bind(after_at)
                    .bind(after_id)
                    .bind(filter.limit)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn update_task(&self, id: &str, patch: &TaskPatch, at: Micros) -> RepoResult<Option<TaskRecord>> {
                if matches!(&patch.title, Some(t) if t.trim().is_empty()) {
                    return Err(RepoError::Invalid("a task needs a non-empty title".into()));
                }
                let archived_at: Option<Option<Micros>> = patch.archived.map(|a| a.then_some(at));
                let done = sqlx::query::<$db>(
                    "UPDATE tasks SET title = COALESCE($2, title), step_id = COALESCE($3, step_id), \
                     archived_at = CASE WHEN $4 THEN $5 ELSE archived_at END, updated_at = $6 WHERE id = $1",
                )
                .bind(id)
                .bind(&patch.title)
                .bind(&patch.step_id)
                .bind(archived_at.is_some())
                .bind(archived_at.flatten())
                .bind(at)
                .execute(&self.pool)
                .await?;
                if done.rows_affected() == 0 {
                    return Ok(None);
                }
                self.get_task(id).await
            }

            async fn delete_task(&self, id: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>("DELETE FROM tasks WHERE id = $1").bind(id).execute(&self.pool).await?;
                Ok(done.rows_affected() > 0)
            }

            async fn create_session(&self, new: &NewSession, at: Micros) -> RepoResult<SessionRecord> {
                let mut tx = self.write_tx().await?;
                if new.is_primary {
                    sqlx::query::<$db>("UPDATE sessions SET is_primary = FALSE WHERE task_id = $1 AND is_primary = TRUE")
                        .bind(&new.task_id)
                        .execute(&mut *tx)
                        .await?;
                }
                let row = sqlx::query_as::<$db, SessionRecord>(stmt!(
                    "INSERT INTO sessions (id, task_id, agent_profile_id, name, state, is_primary, \
                     mcp_token_hash, acp_session_id, started_at, completed_at, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, NULL, NULL, $8) RETURNING {SESSION_COLUMNS}"
                ))
                .bind(new_id())
                .bind(&new.task_id)
                .bind(&new.agent_profile_id)
                .bind(&new.name)
                .bind(new.state.as_str())
                .bind(new.is_primary)
                .bind(&new.mcp_token_hash)
                .bind(at)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(row)
            }

            async fn get_session(&self, id: &str) -> RepoResult<Option<SessionRecord>> {
                Ok(sqlx::query_as::<$db, SessionRecord>(stmt!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"))
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn list_sessions(&self, task_id: &str) -> RepoResult<Vec<SessionRecord>> {
                Ok(sqlx::query_as::<$db, SessionRecord>(stmt!(
                    "SELECT {SESSION_COLUMNS} FROM sessions WHERE task_id = $1 \
                     ORDER BY created_at DESC, id DESC"
                ))
                .bind(task_id)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn sessions_for_tasks(&self, task_ids: &[String]) -> RepoResult<Vec<SessionRecord>> {
                if task_ids.is_empty() {
                    return Ok(Vec::new());
                }
                Ok(sqlx::query_as::<$db, SessionRecord>(stmt!(
                    "SELECT {SESSION_COLUMNS} FROM sessions WHERE task_id IN ({}) \
                     ORDER BY task_id, created_at DESC, id DESC",
                    authority::ids_from_json(<$repo>::BACKEND)
                ))
                .bind(json(task_ids))
                .fetch_all(&self.pool)
                .await?)
            }

            async fn set_session_state(&self, id: &str, state: SessionState, at: Micros) -> RepoResult<Option<SessionRecord>> {
                let starts = matches!(state, SessionState::Starting | SessionState::Running);
                Ok(sqlx::query_as::<$db, SessionRecord>(stmt!(
                    "UPDATE sessions SET state = $2, \
                     started_at = CASE WHEN $3 AND started_at IS NULL THEN $5 ELSE started_at END, \
                     completed_at = CASE WHEN $4 THEN $5 ELSE completed_at END, \
                     mcp_token_hash = CASE WHEN $4 THEN NULL ELSE mcp_token_hash END \
                     WHERE id = $1 AND state NOT IN ('completed', 'failed', 'cancelled') \
                     RETURNING {SESSION_COLUMNS}"
                ))
                .bind(id)
                .bind(state.as_str())
                .bind(starts)
                .bind(state.is_terminal())
                .bind(at)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn set_primary_session(&self, id: &str) -> RepoResult<bool> {
                let mut tx = self.write_tx().await?;
                let Some(task_id) = sqlx::query_scalar::<$db, String>("SELECT task_id FROM sessions WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?
                else {
                    return Ok(false);
                };
                sqlx::query::<$db>("UPDATE sessions SET is_primary = FALSE WHERE task_id = $1 AND is_primary = TRUE AND id <> $2")
                    .bind(&task_id)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query::<$db>("UPDATE sessions SET is_primary = TRUE WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn get_session_by_token_hash(&self, hash: &str) -> RepoResult<Option<SessionRecord>> {
                Ok(sqlx::query_as::<$db, SessionRecord>(stmt!("SELECT {SESSION_COLUMNS} FROM sessions WHERE mcp_token_hash = $1"))
                    .bind(hash)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn set_acp_session_id(&self, id: &str, acp_session_id: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>("UPDATE sessions SET acp_session_id = $2 WHERE id = $1")
                    .bind(id)
                    .bind(acp_session_id)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn set_mcp_token_hash(&self, id: &str, hash: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>("UPDATE sessions SET mcp_token_hash = $2 WHERE id = $1")
                    .bind(id)
                    .bind(hash)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn sessions_to_recover(&self) -> RepoResult<Vec<SessionRecord>> {
                Ok(sqlx::query_as::<$db, SessionRecord>(stmt!(
                    "SELECT {SESSION_COLUMNS} FROM sessions s \
                     WHERE s.state IN ('starting', 'running') \
                        OR (s.state = 'waiting_for_input' \
                            AND (EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id \
                                         AND t.completed_at IS NULL AND t.reservation <> 'attempted') \
                                 OR EXISTS (SELECT 1 FROM clarification_bundles b WHERE b.session_id = s.id \
                                            AND b.status = 'pending' AND b.detached = FALSE))) \
                     ORDER BY s.created_at, s.id"
                ))
                .fetch_all(&self.pool)
                .await?)
            }

            async fn complete_open_turns(&self, session_id: &str, at: Micros) -> RepoResult<Vec<String>> {
                Ok(sqlx::query_scalar::<$db, String>(
                    "UPDATE turns SET completed_at = $2 \
                     WHERE session_id = $1 AND completed_at IS NULL AND reservation <> 'attempted' RETURNING id",
                )
                .bind(session_id)
                .bind(at)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn insert_turn(&self, new: &NewTurn) -> RepoResult<TurnRecord> {
                let id = new.id.clone().unwrap_or_else(new_id);
                sqlx::query_as::<$db, TurnRecord>(stmt!(
                    "INSERT INTO turns (id, session_id, task_id, started_at, completed_at, created_at, \
                     reservation, resume_pending_id) \
                     SELECT $1, s.id, s.task_id, $3, NULL, $4, 'none', NULL FROM sessions s WHERE s.id = $2 \
                     RETURNING {TURN_COLUMNS}"
                ))
                .bind(&id)
                .bind(&new.session_id)
                .bind(new.started_at)
                .bind(new.created_at)
                .fetch_optional(&self.pool)
                .await?
                .ok_or_else(|| RepoError::NotFound(format!("session {}", new.session_id)))
            }

            async fn complete_turn(&self, turn_id: &str, at: Micros) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "UPDATE turns SET completed_at = $2 WHERE id = $1 AND completed_at IS NULL",
                )
                .bind(turn_id)
                .bind(at)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn get_turn(&self, id: &str) -> RepoResult<Option<TurnRecord>> {
                Ok(sqlx::query_as::<$db, TurnRecord>(stmt!("SELECT {TURN_COLUMNS} FROM turns WHERE id = $1"))
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn list_turns(&self, session_id: &str) -> RepoResult<Vec<TurnRecord>> {
                Ok(sqlx::query_as::<$db, TurnRecord>(stmt!(
                    "SELECT {TURN_COLUMNS} FROM turns t WHERE t.session_id = $1 \
                     AND (t.reservation <> 'reserved' OR EXISTS (SELECT 1 FROM messages m WHERE m.turn_id = t.id)) \
                     ORDER BY t.started_at, t.created_at, t.id"
                ))
                .bind(session_id)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn insert_message(&self, new: &NewMessage, at: Micros) -> RepoResult<MessageRecord> {
                sqlx::query_as::<$db, MessageRecord>(stmt!(
                    "INSERT INTO messages ({MESSAGE_COLUMNS}) \
                     SELECT $1, t.session_id, t.task_id, t.id, $4, $5, $6, $7, $8, $8 \
                     FROM turns t WHERE t.id = $3 AND t.session_id = $2 \
                     RETURNING {MESSAGE_COLUMNS}"
                ))
                .bind(new_id())
                .bind(&new.session_id)
                .bind(&new.turn_id)
                .bind(new.author.as_str())
                .bind(new.kind.as_str())
                .bind(&new.content)
                .bind(&new.pending_id)
                .bind(at)
                .fetch_optional(&self.pool)
                .await?
                .ok_or_else(|| RepoError::NotFound(format!("turn {} of session {}", new.turn_id, new.session_id)))
            }

            async fn list_messages(&self, session_id: &str, after: Option<&str>, limit: i64) -> RepoResult<Vec<MessageRecord>> {
                Ok(sqlx::query_as::<$db, MessageRecord>(stmt!(
                    "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = $1 \
                     AND ($2 IS NULL OR (m.created_at, m.id) > \
                          (SELECT a.created_at, a.id FROM messages a WHERE a.id = $2)) \
                     ORDER BY m.created_at, m.id LIMIT $3"
                ))
                .bind(session_id)
                .bind(after)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn list_messages_before(&self, session_id: &str, before: Option<&str>, limit: i64) -> RepoResult<Vec<MessageRecord>> {
                let mut rows = sqlx::query_as::<$db, MessageRecord>(stmt!(
                    "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = $1 \
                     AND ($2 IS NULL OR (m.created_at, m.id) < \
                          (SELECT a.created_at, a.id FROM messages a WHERE a.id = $2)) \
                     ORDER BY m.created_at DESC, m.id DESC LIMIT $3"
                ))
                .bind(session_id)
                .bind(before)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
                rows.reverse();
                Ok(rows)
            }

            async fn delete_message(&self, id: &str) -> RepoResult<Option<MessageRecord>> {
                // L4: authority comes from turn rows; deleting messages never touches turns.
                Ok(sqlx::query_as::<$db, MessageRecord>(stmt!(
                    "DELETE FROM messages WHERE id = $1 RETURNING {MESSAGE_COLUMNS}"
                ))
                .bind(id)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn update_message_content(&self, id: &str, content: &str, at: Micros) -> RepoResult<Option<MessageRecord>> {
                Ok(sqlx::query_as::<$db, MessageRecord>(stmt!(
                    "UPDATE messages SET content = $2, updated_at = $3 WHERE id = $1 RETURNING {MESSAGE_COLUMNS}"
                ))
                .bind(id)
                .bind(content)
                .bind(at)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn insert_bundle(&self, new: &NewBundle, at: Micros) -> RepoResult<(BundleRecord, MessageRecord)> {
                let pending_id = new.pending_id.clone().unwrap_or_else(new_id);
                let mut tx = self.write_tx().await?;
                let bundle = sqlx::query_as::<$db, BundleRecord>(stmt!(
                    "INSERT INTO clarification_bundles ({BUNDLE_COLUMNS}) \
                     SELECT $1, t.session_id, t.task_id, t.id, 'pending', FALSE, FALSE, $4, $5, NULL, NULL, $6, NULL \
                     FROM turns t WHERE t.id = $3 AND t.session_id = $2 \
                     RETURNING {BUNDLE_COLUMNS}"
                ))
                .bind(&pending_id)
                .bind(&new.session_id)
                .bind(&new.turn_id)
                .bind(&new.context)
                .bind(&new.dedup_key)
                .bind(at)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| RepoError::NotFound(format!("turn {} of session {}", new.turn_id, new.session_id)))?;
                Self::insert_questions(&mut tx, &pending_id, &new.questions).await?;
                let message = Self::insert_question_message(&mut tx, &bundle, &new.message_content, at).await?;
                tx.commit().await?;
                Ok((bundle, message))
            }

            async fn get_bundle(&self, pending_id: &str) -> RepoResult<Option<BundleView>> {
                let row = sqlx::query_as::<$db, BundleWithActivity>(SQL.bundle_with_activity.as_str())
                    .bind(pending_id)
                    .fetch_optional(&self.pool)
                    .await?;
                match row {
                    Some(r) => Ok(Some(self.stored_bundle(r.record, r.active).await?)),
                    None => Ok(None),
                }
            }

            async fn session_bundles(&self, session_id: &str) -> RepoResult<Vec<BundleRecord>> {
                Ok(sqlx::query_as::<$db, BundleRecord>(stmt!(
                    "SELECT {BUNDLE_COLUMNS} FROM clarification_bundles WHERE session_id = $1 \
                     ORDER BY created_at, pending_id"
                ))
                .bind(session_id)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn insert_permission_request(&self, new: &NewPermissionRequest, at: Micros) -> RepoResult<(PermissionRecord, MessageRecord)> {
                let mut tx = self.write_tx().await?;
                let request = sqlx::query_as::<$db, PermissionRecord>(
                    "INSERT INTO permission_requests (id, session_id, task_id, turn_id, tool_call, options, \
                     status, outcome, created_at, resolved_at) \
                     SELECT $1, t.session_id, t.task_id, t.id, $4, $5, 'pending', NULL, $6, NULL \
                     FROM turns t WHERE t.id = $3 AND t.session_id = $2 \
                     RETURNING id, session_id, task_id, turn_id, tool_call, options, status, outcome, created_at, resolved_at",
                )
                .bind(new_id())
                .bind(&new.session_id)
                .bind(&new.turn_id)
                .bind(&new.tool_call)
                .bind(&new.options)
                .bind(at)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| RepoError::NotFound(format!("turn {} of session {}", new.turn_id, new.session_id)))?;
                let message = sqlx::query_as::<$db, MessageRecord>(stmt!(
                    "INSERT INTO messages ({MESSAGE_COLUMNS}) \
                     VALUES ($1, $2, $3, $4, 'agent', 'permission_request', $5, $6, $7, $7) \
                     RETURNING {MESSAGE_COLUMNS}"
                ))
                .bind(new_id())
                .bind(&request.session_id)
                .bind(&request.task_id)
                .bind(&request.turn_id)
                .bind(&new.message_content)
                .bind(&request.id)
                .bind(at)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok((request, message))
            }

            async fn get_permission_request(&self, id: &str) -> RepoResult<Option<PermissionRecord>> {
                Ok(sqlx::query_as::<$db, PermissionRecord>(
                    "SELECT id, session_id, task_id, turn_id, tool_call, options, status, outcome, created_at, resolved_at \
                     FROM permission_requests WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn latest_permission_request(&self, session_id: &str, turn_id: &str) -> RepoResult<Option<PermissionRecord>> {
                Ok(sqlx::query_as::<$db, PermissionRecord>(
                    "SELECT id, session_id, task_id, turn_id, tool_call, options, status, outcome, created_at, resolved_at \
                     FROM permission_requests WHERE session_id = $1 AND turn_id = $2 \
                     ORDER BY created_at DESC, id DESC LIMIT 1",
                )
                .bind(session_id)
                .bind(turn_id)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn pending_permission_requests(&self, session_id: &str) -> RepoResult<Vec<PermissionRecord>> {
                Ok(sqlx::query_as::<$db, PermissionRecord>(
                    "SELECT id, session_id, task_id, turn_id, tool_call, options, status, outcome, created_at, resolved_at \
                     FROM permission_requests WHERE session_id = $1 AND status = 'pending' ORDER BY created_at, id",
                )
                .bind(session_id)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn resolve_permission_request(&self, id: &str, status: &str, outcome: Option<&str>, at: Micros) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "UPDATE permission_requests SET status = $2, outcome = $3, resolved_at = $4 \
                     WHERE id = $1 AND status = 'pending'",
                )
                .bind(id)
                .bind(status)
                .bind(outcome)
                .bind(at)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn get_summary(&self, task_id: &str) -> RepoResult<Option<SummaryRecord>> {
                self.fetch_summary(task_id).await
            }

            async fn get_summaries(&self, task_ids: &[String]) -> RepoResult<HashMap<String, SummaryRecord>> {
                let rows = sqlx::query_as::<$db, SummaryRow>(stmt!(
                    "SELECT task_id, revision, summary, invalidated, updated_at FROM task_status_summaries \
                     WHERE task_id IN ({})",
                    authority::ids_from_json(<$repo>::BACKEND)
                ))
                .bind(json(task_ids))
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter().map(|r| r.into_record().map(|s| (s.task_id.clone(), s))).collect()
            }

            async fn cas_summary(&self, task_id: &str, expected: Option<i64>, body: &SummaryBody, at: Micros) -> RepoResult<CasOutcome> {
                let written = cas_statement(&self.pool, task_id, expected, body, at).await?;
                if let Some(revision) = written {
                    return Ok(CasOutcome::Written { revision });
                }
                let current = self.fetch_summary(task_id).await?;
                Ok(match current {
                    Some(c) if Some(c.revision) == expected && !c.invalidated && c.body == *body => {
                        CasOutcome::Unchanged { revision: c.revision }
                    }
                    current => CasOutcome::Conflict { current },
                })
            }

            async fn cas_summaries(&self, writes: &[SummaryWrite], at: Micros) -> RepoResult<Vec<Option<i64>>> {
                let mut out = Vec::with_capacity(writes.len());
                if writes.is_empty() {
                    return Ok(out);
                }
                let mut tx = self.write_tx().await?;
                for w in writes {
                    out.push(cas_statement(&mut *tx, &w.task_id, w.expected, &w.body, at).await?);
                }
                tx.commit().await?;
                Ok(out)
            }

            async fn invalidate_summary(&self, task_id: &str, at: Micros) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "UPDATE task_status_summaries SET invalidated = TRUE, updated_at = $2 \
                     WHERE task_id = $1 AND invalidated = FALSE",
                )
                .bind(task_id)
                .bind(at)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn current_turn_id(&self, session_id: &str) -> RepoResult<Option<String>> {
                Ok(sqlx::query_scalar::<$db, Option<String>>(SQL.current_turn_id.as_str())
                    .bind(session_id)
                    .fetch_one(&self.pool)
                    .await?)
            }

            async fn count_active_bundles(&self) -> RepoResult<i64> {
                Ok(sqlx::query_scalar::<$db, i64>(SQL.count_active.as_str()).fetch_one(&self.pool).await?)
            }

            async fn active_bundles(&self, session_id: &str) -> RepoResult<Vec<BundleView>> {
                let rows = sqlx::query_as::<$db, BundleRecord>(SQL.active_bundles.as_str())
                    .bind(session_id)
                    .fetch_all(&self.pool)
                    .await?;
                let mut out = Vec::with_capacity(rows.len());
                for r in rows {
                    out.push(self.stored_bundle(r, true).await?);
                }
                Ok(out)
            }

            async fn pending_actions_for_sessions(&self, session_ids: &[String]) -> RepoResult<HashMap<String, Option<PendingAction>>> {
                let mut out: HashMap<String, Option<PendingAction>> =
                    session_ids.iter().map(|id| (id.clone(), None)).collect();
                if session_ids.is_empty() {
                    return Ok(out);
                }
                let rows = sqlx::query::<$db>(SQL.pending_actions(Self::BACKEND))
                    .bind(json(session_ids))
                    .fetch_all(&self.pool)
                    .await?;
                for row in rows {
                    let id: String = row.try_get("session_id")?;
                    let action: Option<String> = row.try_get("pending_action")?;
                    let action = action.map(|a| a.parse::<PendingAction>()).transpose().map_err(RepoError::Corrupt)?;
                    out.insert(id, action);
                }
                Ok(out)
            }

            async fn detach_session(&self, session_id: &str) -> RepoResult<Vec<String>> {
                Ok(sqlx::query_scalar::<$db, String>(SQL.detach_session.as_str())
                    .bind(session_id)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn detach_turn(&self, turn_id: &str) -> RepoResult<Vec<String>> {
                Ok(sqlx::query_scalar::<$db, String>(SQL.detach_turn.as_str())
                    .bind(turn_id)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn detach_bundle(&self, pending_id: &str) -> RepoResult<bool> {
                Ok(sqlx::query_scalar::<$db, String>(SQL.detach_bundle.as_str())
                    .bind(pending_id)
                    .fetch_optional(&self.pool)
                    .await?
                    .is_some())
            }

            async fn expire_session(&self, session_id: &str, at: Micros) -> RepoResult<Vec<String>> {
                Ok(sqlx::query_scalar::<$db, String>(SQL.expire_session.as_str())
                    .bind(session_id)
                    .bind(at)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn claim_bundle(&self, pending_id: &str, claim: &Claim, at: Micros) -> RepoResult<ClaimOutcome> {
                if !matches!(claim.status, BundleStatus::Answered | BundleStatus::Rejected) {
                    return Err(RepoError::Invalid(format!("a claim answers or rejects, not {}", claim.status)));
                }
                let won = sqlx::query_as::<$db, BundleRecord>(SQL.claim_bundle.as_str())
                    .bind(pending_id)
                    .bind(claim.status.as_str())
                    .bind(&claim.response)
                    .bind(&claim.reject_reason)
                    .bind(at)
                    .fetch_optional(&self.pool)
                    .await?;
                if let Some(record) = won {
                    return Ok(ClaimOutcome::Claimed(record));
                }
                let current = sqlx::query_as::<$db, BundleRecord>(stmt!(
                    "SELECT {BUNDLE_COLUMNS} FROM clarification_bundles WHERE pending_id = $1"
                ))
                .bind(pending_id)
                .fetch_optional(&self.pool)
                .await?;
                Ok(match current {
                    None => ClaimOutcome::NotFound,
                    Some(r) if matches!(r.status, BundleStatus::Answered | BundleStatus::Rejected) => {
                        ClaimOutcome::AlreadyResolved(r)
                    }
                    Some(r) => ClaimOutcome::NotActive(r),
                })
            }

            async fn restore_bundle(&self, pending_id: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(SQL.restore_bundle.as_str())
                    .bind(pending_id)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn finalize_delivery(&self, pending_id: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "UPDATE clarification_bundles SET delivery_pending = FALSE \
                     WHERE pending_id = $1 AND delivery_pending = TRUE",
                )
                .bind(pending_id)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn reserve_turn(&self, session_id: &str, pending_id: &str, at: Micros) -> RepoResult<TurnRecord> {
                sqlx::query_as::<$db, TurnRecord>(stmt!(
                    "INSERT INTO turns (id, session_id, task_id, started_at, completed_at, created_at, \
                     reservation, resume_pending_id) \
                     SELECT $1, s.id, s.task_id, $3, NULL, $3, 'reserved', $4 FROM sessions s WHERE s.id = $2 \
                     RETURNING {TURN_COLUMNS}"
                ))
                .bind(new_id())
                .bind(session_id)
                .bind(at)
                .bind(pending_id)
                .fetch_optional(&self.pool)
                .await?
                .ok_or_else(|| RepoError::NotFound(format!("session {session_id}")))
            }

            async fn mark_attempted(&self, turn_id: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "UPDATE turns SET reservation = 'attempted' WHERE id = $1 AND reservation = 'reserved'",
                )
                .bind(turn_id)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn publish_turn(&self, turn_id: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "UPDATE turns SET reservation = 'none' WHERE id = $1 AND reservation = 'attempted'",
                )
                .bind(turn_id)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn unpublished_reservations(&self) -> RepoResult<Vec<TurnRecord>> {
                Ok(sqlx::query_as::<$db, TurnRecord>(stmt!(
                    "SELECT {TURN_COLUMNS} FROM turns WHERE reservation <> 'none' ORDER BY started_at, created_at, id"
                ))
                .fetch_all(&self.pool)
                .await?)
            }

            async fn bundles_pending_delivery(&self) -> RepoResult<Vec<BundleRecord>> {
                Ok(sqlx::query_as::<$db, BundleRecord>(stmt!(
                    "SELECT {BUNDLE_COLUMNS} FROM clarification_bundles WHERE delivery_pending = TRUE \
                     ORDER BY created_at, pending_id"
                ))
                .fetch_all(&self.pool)
                .await?)
            }

            async fn delete_reservation(&self, turn_id: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "DELETE FROM turns WHERE id = $1 AND reservation = 'reserved' \
                     AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.turn_id = turns.id)",
                )
                .bind(turn_id)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn ask_in_current_turn(&self, new: &NewAsk, at: Micros) -> RepoResult<Option<AskWritten>> {
                let mut tx = self.write_tx().await?;
                let Some(turn_id) = sqlx::query_scalar::<$db, String>(SQL.ask_turn.as_str())
                    .bind(&new.session_id)
                    .fetch_optional(&mut *tx)
                    .await?
                else {
                    return Ok(None);
                };
                let bundle = sqlx::query_as::<$db, BundleRecord>(stmt!(
                    "INSERT INTO clarification_bundles ({BUNDLE_COLUMNS}) \
                     SELECT $1, t.session_id, t.task_id, t.id, 'pending', FALSE, FALSE, $3, $4, NULL, NULL, $5, NULL \
                     FROM turns t WHERE t.id = $2 \
                     RETURNING {BUNDLE_COLUMNS}"
                ))
                .bind(&new.pending_id)
                .bind(&turn_id)
                .bind(&new.context)
                .bind(&new.dedup_key)
                .bind(at)
                .fetch_one(&mut *tx)
                .await?;
                Self::insert_questions(&mut tx, &new.pending_id, &new.questions).await?;
                let message = Self::insert_question_message(&mut tx, &bundle, &new.message_content, at).await?;
                let Some(session) = sqlx::query_as::<$db, SessionRecord>(stmt!(
                    "UPDATE sessions SET state = 'waiting_for_input' \
                     WHERE id = $1 AND state NOT IN ('completed', 'failed', 'cancelled') \
                     RETURNING {SESSION_COLUMNS}"
                ))
                .bind(&new.session_id)
                .fetch_optional(&mut *tx)
                .await?
                else {
                    return Ok(None);
                };
                tx.commit().await?;
                Ok(Some(AskWritten { bundle, message, session }))
            }

            async fn owe_resume(&self, pending_id: &str, prompt: &str, at: Micros) -> RepoResult<Option<TurnRecord>> {
                let mut tx = self.write_tx().await?;
                let turn = sqlx::query_as::<$db, TurnRecord>(stmt!(
                    "INSERT INTO turns (id, session_id, task_id, started_at, completed_at, created_at, \
                     reservation, resume_pending_id, resume_prompt) \
                     SELECT $1, b.session_id, b.task_id, $3, NULL, $3, 'attempted', b.pending_id, $4 \
                     FROM clarification_bundles b JOIN sessions s ON s.id = b.session_id \
                     WHERE b.pending_id = $2 AND b.status = 'answered' \
                       AND s.state NOT IN ('completed', 'failed', 'cancelled') \
                       AND NOT EXISTS (SELECT 1 FROM turns r WHERE r.resume_pending_id = b.pending_id) \
                     RETURNING {TURN_COLUMNS}"
                ))
                .bind(new_id())
                .bind(pending_id)
                .bind(at)
                .bind(prompt)
                .fetch_optional(&mut *tx)
                .await?;
                if turn.is_some() {
                    sqlx::query::<$db>(
                        "UPDATE clarification_bundles SET delivery_pending = FALSE WHERE pending_id = $1",
                    )
                    .bind(pending_id)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                }
                Ok(turn)
            }

            async fn owed_resumes(&self, session_id: &str) -> RepoResult<Vec<TurnRecord>> {
                Ok(sqlx::query_as::<$db, TurnRecord>(stmt!(
                    "SELECT {TURN_COLUMNS} FROM turns \
                     WHERE session_id = $1 AND reservation = 'attempted' AND resume_prompt IS NOT NULL \
                     ORDER BY created_at, id"
                ))
                .bind(session_id)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn sessions_with_owed_resumes(&self) -> RepoResult<Vec<SessionRecord>> {
                Ok(sqlx::query_as::<$db, SessionRecord>(stmt!(
                    "SELECT {SESSION_COLUMNS} FROM sessions s \
                     WHERE s.state NOT IN ('completed', 'failed', 'cancelled') \
                       AND EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id \
                                   AND t.reservation = 'attempted' AND t.resume_prompt IS NOT NULL) \
                     ORDER BY s.created_at, s.id"
                ))
                .fetch_all(&self.pool)
                .await?)
            }

            async fn dispatch_resume(&self, turn_id: &str, at: Micros) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(SQL.dispatch_resume.as_str())
                    .bind(turn_id)
                    .bind(at)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn defer_workflow(&self, turn_id: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "UPDATE turns SET workflow_deferred = TRUE WHERE id = $1 AND workflow_deferred = FALSE",
                )
                .bind(turn_id)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn take_deferred_workflow(&self, turn_id: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "UPDATE turns SET workflow_deferred = FALSE WHERE id = $1 AND workflow_deferred = TRUE",
                )
                .bind(turn_id)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn move_task_step(&self, task_id: &str, from: &str, to: &str, at: Micros) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "UPDATE tasks SET step_id = $3, updated_at = $4 WHERE id = $1 AND step_id = $2",
                )
                .bind(task_id)
                .bind(from)
                .bind(to)
                .bind(at)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn cancel_permissions(&self, session_id: Option<&str>, at: Micros) -> RepoResult<Vec<PermissionRecord>> {
                Ok(sqlx::query_as::<$db, PermissionRecord>(
                    "UPDATE permission_requests SET status = 'cancelled', resolved_at = $2 \
                     WHERE status = 'pending' AND ($1 IS NULL OR session_id = $1) \
                     RETURNING id, session_id, task_id, turn_id, tool_call, options, status, outcome, created_at, resolved_at",
                )
                .bind(session_id)
                .bind(at)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn revoke_mcp_token(&self, session_id: &str, hash: &str) -> RepoResult<bool> {
                let done = sqlx::query::<$db>(
                    "UPDATE sessions SET mcp_token_hash = NULL WHERE id = $1 AND mcp_token_hash = $2",
                )
                .bind(session_id)
                .bind(hash)
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() > 0)
            }
        }
    };
}
pub(super) use impl_repository;
