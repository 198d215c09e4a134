//! The repository: every read and write of durable state goes through [`Repository`], one
//! object-safe trait with a SQLite and a PostgreSQL implementation that share their SQL text
//! (`sql.rs`). The current-turn authority (L1–L3) lives in `authority.rs` and nowhere else.

pub mod authority;
mod postgres;
mod records;
mod sql;
mod sqlite;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;

pub use postgres::PostgresRepository;
pub use records::*;
pub use sqlite::SqliteRepository;

use crate::model::{
    BundleStatus, MessageAuthor, MessageKind, PendingAction, Question, SessionState, SummaryBody,
};
use crate::server::time::Micros;

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Invalid(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// A failure a test injected at a named point (`server::hooks`).
    #[error("injected failure at {0}")]
    Injected(&'static str),
}

pub type RepoResult<T> = Result<T, RepoError>;

/// Repository failures on the wire: bad input and missing rows keep their message; anything
/// else is logged with the request id and answered with a generic message (never raw database
/// text).
impl From<RepoError> for crate::model::AppError {
    fn from(e: RepoError) -> Self {
        match e {
            RepoError::Invalid(m) => crate::model::AppError::BadRequest(m),
            RepoError::NotFound(m) => crate::model::AppError::NotFound(m),
            other => crate::server::telemetry::internal(&other),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Connects to the database named by `url` (`sqlite:…` or `postgres://…`) and runs migrations.
pub async fn connect(url: &str) -> RepoResult<Arc<dyn Repository>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresRepository::connect(url).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteRepository::connect(url).await?))
    } else {
        Err(RepoError::Invalid(format!(
            "unsupported database url {url:?}: expected sqlite:<path> or postgres://…"
        )))
    }
}

pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

// ---- inputs ---------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct NewWorkflowStep {
    pub name: String,
    pub on_turn_complete: Option<String>,
}

#[derive(Clone, Debug)]
pub struct NewWorkflow {
    pub name: String,
    pub is_default: bool,
    pub steps: Vec<NewWorkflowStep>,
}

#[derive(Clone, Debug)]
pub struct NewAgentProfile {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default)]
pub struct NewTask {
    pub title: String,
    pub description: String,
    pub workflow_id: Option<String>,
    pub step_id: Option<String>,
}

/// One page of the task list, newest update first.
#[derive(Clone, Debug)]
pub struct TaskFilter {
    pub archived: bool,
    /// A LIKE pattern over the lower-cased title (`%` and `_` in user text escaped with `\`).
    pub title_like: Option<String>,
    /// Only tasks whose summary shows a pending action.
    pub pending_only: bool,
    /// Strictly after this `(updated_at, id)` in list order.
    pub after: Option<(Micros, String)>,
    pub limit: i64,
}

#[derive(Clone, Debug, Default)]
pub struct TaskPatch {
    pub title: Option<String>,
    pub step_id: Option<String>,
    pub archived: Option<bool>,
}

#[derive(Clone, Debug)]
pub struct NewSession {
    pub task_id: String,
    pub agent_profile_id: Option<String>,
    pub name: String,
    pub state: SessionState,
    pub is_primary: bool,
    pub mcp_token_hash: Option<String>,
}

/// A turn row. `id` is chosen by the caller only where a test needs to force the final `id`
/// tie-breaker of L1; services leave it `None`.
#[derive(Clone, Debug)]
pub struct NewTurn {
    pub id: Option<String>,
    pub session_id: String,
    pub started_at: Micros,
    pub created_at: Micros,
}

#[derive(Clone, Debug)]
pub struct NewMessage {
    pub session_id: String,
    pub turn_id: String,
    pub author: MessageAuthor,
    pub kind: MessageKind,
    pub content: String,
    pub pending_id: Option<String>,
}

/// L6: a bundle, its questions and its transcript message are written in one transaction.
#[derive(Clone, Debug)]
pub struct NewBundle {
    pub pending_id: Option<String>,
    pub session_id: String,
    pub turn_id: String,
    pub context: Option<String>,
    pub dedup_key: String,
    pub questions: Vec<Question>,
    pub message_content: String,
}

/// L6/L7: an agent's question, written into the session's current turn only if that turn is
/// open and not an owed resume, together with its questions, its transcript row and the
/// session's move to `waiting_for_input` (one transaction).
#[derive(Clone, Debug)]
pub struct NewAsk {
    pub pending_id: String,
    pub session_id: String,
    pub context: Option<String>,
    pub dedup_key: String,
    pub questions: Vec<Question>,
    pub message_content: String,
}

/// What an accepted ask wrote.
#[derive(Clone, Debug)]
pub struct AskWritten {
    pub bundle: BundleRecord,
    pub message: MessageRecord,
    /// The session after its move to `waiting_for_input` (L7).
    pub session: SessionRecord,
}

#[derive(Clone, Debug)]
pub struct NewPermissionRequest {
    pub session_id: String,
    pub turn_id: String,
    pub tool_call: String,
    pub options: String,
    /// The content of its `permission_request` transcript row.
    pub message_content: String,
}

/// The outcome a responder tries to claim (L13).
#[derive(Clone, Debug)]
pub struct Claim {
    pub status: BundleStatus,
    /// The `Response` as JSON.
    pub response: String,
    pub reject_reason: Option<String>,
}

// ---- outcomes -------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
pub enum ClaimOutcome {
    /// This call won the compare-and-set; the bundle now carries `delivery_pending`.
    Claimed(BundleRecord),
    /// Someone else answered or rejected it first (L14: 200 `claimed:false`).
    AlreadyResolved(BundleRecord),
    /// Superseded, expired, cancelled or in a terminal session (L14: 409, nothing written).
    NotActive(BundleRecord),
    NotFound,
}

#[derive(Clone, Debug, PartialEq)]
pub enum CasOutcome {
    Written {
        revision: i64,
    },
    /// Same content as stored: nothing rewritten.
    Unchanged {
        revision: i64,
    },
    /// The expected revision is stale; here is what is stored now.
    Conflict {
        current: Option<SummaryRecord>,
    },
}

/// The repository. Object safe: the server holds an `Arc<dyn Repository>`. Every write takes
/// its timestamp from the caller (services read a [`crate::server::time::Clock`]).
#[async_trait]
pub trait Repository: Send + Sync + 'static {
    fn backend(&self) -> Backend;

    // -- meta (P9) --
    /// Atomically increments the projection epoch and returns the new value.
    async fn bump_epoch(&self) -> RepoResult<i64>;
    async fn current_epoch(&self) -> RepoResult<i64>;

    // -- workflows and agent profiles --
    async fn create_workflow(&self, new: &NewWorkflow, at: Micros) -> RepoResult<WorkflowView>;
    async fn list_workflows(&self) -> RepoResult<Vec<WorkflowView>>;
    async fn default_workflow(&self) -> RepoResult<Option<WorkflowView>>;
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

    // -- tasks --
    async fn create_task(&self, new: &NewTask, at: Micros) -> RepoResult<TaskRecord>;
    async fn get_task(&self, id: &str) -> RepoResult<Option<TaskRecord>>;
    /// Every task, newest first (start-up reconciliation).
    async fn list_tasks(&self) -> RepoResult<Vec<TaskRecord>>;
    /// One page of the task list (most recently updated first).
    async fn list_tasks_page(&self, filter: &TaskFilter) -> RepoResult<Vec<TaskRecord>>;
    async fn update_task(
        &self,
        id: &str,
        patch: &TaskPatch,
        at: Micros,
    ) -> RepoResult<Option<TaskRecord>>;
    async fn delete_task(&self, id: &str) -> RepoResult<bool>;

    // -- sessions --
    async fn create_session(&self, new: &NewSession, at: Micros) -> RepoResult<SessionRecord>;
    async fn get_session(&self, id: &str) -> RepoResult<Option<SessionRecord>>;
    /// Newest first.
    async fn list_sessions(&self, task_id: &str) -> RepoResult<Vec<SessionRecord>>;
    /// Every session of the given tasks, newest first within a task.
    async fn sessions_for_tasks(&self, task_ids: &[String]) -> RepoResult<Vec<SessionRecord>>;
    /// Moves a non-terminal session to `state`; a terminal session never moves again (returns
    /// `None`). Stamps `started_at` on the first start and `completed_at` on a terminal state;
    /// a terminal state revokes the MCP token.
    async fn set_session_state(
        &self,
        id: &str,
        state: SessionState,
        at: Micros,
    ) -> RepoResult<Option<SessionRecord>>;
    async fn set_primary_session(&self, id: &str) -> RepoResult<bool>;
    /// The session whose MCP bearer token hashes to `hash` (only hashes are stored).
    async fn get_session_by_token_hash(&self, hash: &str) -> RepoResult<Option<SessionRecord>>;
    async fn set_acp_session_id(&self, id: &str, acp_session_id: &str) -> RepoResult<bool>;
    async fn set_mcp_token_hash(&self, id: &str, hash: &str) -> RepoResult<bool>;
    /// Start-up recovery's work list, oldest first: sessions that were starting or running,
    /// and waiting sessions with an open turn (owed resumes aside) or an undetached pending
    /// bundle. An idle session needs nothing, so a boot with 10,000 idle sessions reads one
    /// list instead of writing to each (B5).
    async fn sessions_to_recover(&self) -> RepoResult<Vec<SessionRecord>>;
    /// Completes every open turn of the session except owed resumes; returns their ids.
    async fn complete_open_turns(&self, session_id: &str, at: Micros) -> RepoResult<Vec<String>>;

    // -- turns and messages --
    async fn insert_turn(&self, new: &NewTurn) -> RepoResult<TurnRecord>;
    async fn complete_turn(&self, turn_id: &str, at: Micros) -> RepoResult<bool>;
    async fn get_turn(&self, id: &str) -> RepoResult<Option<TurnRecord>>;
    /// Ascending (L1 order); unreferenced reservations are hidden.
    async fn list_turns(&self, session_id: &str) -> RepoResult<Vec<TurnRecord>>;
    async fn insert_message(&self, new: &NewMessage, at: Micros) -> RepoResult<MessageRecord>;
    async fn list_messages(
        &self,
        session_id: &str,
        after: Option<&str>,
        limit: i64,
    ) -> RepoResult<Vec<MessageRecord>>;
    /// The newest `limit` messages before message `before` (or the newest overall), ascending.
    async fn list_messages_before(
        &self,
        session_id: &str,
        before: Option<&str>,
        limit: i64,
    ) -> RepoResult<Vec<MessageRecord>>;
    async fn delete_message(&self, id: &str) -> RepoResult<Option<MessageRecord>>;
    /// Replaces a message's content (coalescing streamed text into one message per reply).
    async fn update_message_content(
        &self,
        id: &str,
        content: &str,
        at: Micros,
    ) -> RepoResult<Option<MessageRecord>>;

    // -- clarifications and permissions --
    async fn insert_bundle(
        &self,
        new: &NewBundle,
        at: Micros,
    ) -> RepoResult<(BundleRecord, MessageRecord)>;
    async fn get_bundle(&self, pending_id: &str) -> RepoResult<Option<BundleView>>;
    /// Every bundle of the session (any status), oldest first, without questions.
    async fn session_bundles(&self, session_id: &str) -> RepoResult<Vec<BundleRecord>>;
    /// The request and its transcript row, in one transaction: a reader never sees a
    /// pending permission (P1) without the row that shows it.
    async fn insert_permission_request(
        &self,
        new: &NewPermissionRequest,
        at: Micros,
    ) -> RepoResult<(PermissionRecord, MessageRecord)>;
    async fn get_permission_request(&self, id: &str) -> RepoResult<Option<PermissionRecord>>;
    /// P1: the newest permission request of `turn_id` (by `created_at`, then `id`).
    async fn latest_permission_request(
        &self,
        session_id: &str,
        turn_id: &str,
    ) -> RepoResult<Option<PermissionRecord>>;
    /// The session's pending permission requests, oldest first.
    async fn pending_permission_requests(
        &self,
        session_id: &str,
    ) -> RepoResult<Vec<PermissionRecord>>;
    /// Guarded: only a pending request is resolved.
    async fn resolve_permission_request(
        &self,
        id: &str,
        status: &str,
        outcome: Option<&str>,
        at: Micros,
    ) -> RepoResult<bool>;

    // -- summaries (P3) --
    async fn get_summary(&self, task_id: &str) -> RepoResult<Option<SummaryRecord>>;
    async fn get_summaries(
        &self,
        task_ids: &[String],
    ) -> RepoResult<HashMap<String, SummaryRecord>>;
    /// Compare-and-set on `revision`: `expected = None` creates the row only if absent. Equal
    /// content is not rewritten.
    async fn cas_summary(
        &self,
        task_id: &str,
        expected: Option<i64>,
        body: &SummaryBody,
        at: Micros,
    ) -> RepoResult<CasOutcome>;
    /// Many [`Repository::cas_summary`] writes in one transaction (one sync instead of one
    /// per task: boot and list reconciliation, B5). Per write: the new revision, or `None`
    /// when it lost or had nothing to change — the caller retries that one alone.
    async fn cas_summaries(
        &self,
        writes: &[SummaryWrite],
        at: Micros,
    ) -> RepoResult<Vec<Option<i64>>>;

    /// P6: marks the stored summary stale so readers fall back to the authoritative value.
    async fn invalidate_summary(&self, task_id: &str, at: Micros) -> RepoResult<bool>;

    // -- the current-turn authority (L1–L3, L9–L11, L13, L18, L19); SQL in authority.rs --
    async fn current_turn_id(&self, session_id: &str) -> RepoResult<Option<String>>;
    /// L2 over every session (for `/metrics`).
    async fn count_active_bundles(&self) -> RepoResult<i64>;
    async fn active_bundles(&self, session_id: &str) -> RepoResult<Vec<BundleView>>;
    /// P1 for each id (unknown ids map to `None`); one query, same answer as the scalar forms.
    async fn pending_actions_for_sessions(
        &self,
        session_ids: &[String],
    ) -> RepoResult<HashMap<String, Option<PendingAction>>>;
    /// L9 for every active, attached bundle of the session's current turn; returns what changed.
    async fn detach_session(&self, session_id: &str) -> RepoResult<Vec<String>>;
    /// L9/L10 on turn completion: only if `turn_id` is still the session's current turn.
    async fn detach_turn(&self, turn_id: &str) -> RepoResult<Vec<String>>;
    /// L9 for one bundle (its tool call was cancelled or timed out).
    async fn detach_bundle(&self, pending_id: &str) -> RepoResult<bool>;
    /// L11: pending bundles of the current turn become `expired`; returns what changed.
    async fn expire_session(&self, session_id: &str, at: Micros) -> RepoResult<Vec<String>>;
    /// L13: one compare-and-set from active to answered/rejected with `delivery_pending`.
    async fn claim_bundle(
        &self,
        pending_id: &str,
        claim: &Claim,
        at: Micros,
    ) -> RepoResult<ClaimOutcome>;
    /// L18: undo a claim that was not accepted (only while still current and undelivered).
    async fn restore_bundle(&self, pending_id: &str) -> RepoResult<bool>;
    async fn finalize_delivery(&self, pending_id: &str) -> RepoResult<bool>;
    /// L19: a resume turn that is not authoritative until attempted or referenced.
    async fn reserve_turn(
        &self,
        session_id: &str,
        pending_id: &str,
        at: Micros,
    ) -> RepoResult<TurnRecord>;
    async fn mark_attempted(&self, turn_id: &str) -> RepoResult<bool>;
    async fn publish_turn(&self, turn_id: &str) -> RepoResult<bool>;
    /// L19 start-up: every resume turn still marked `reserved` or `attempted`.
    async fn unpublished_reservations(&self) -> RepoResult<Vec<TurnRecord>>;
    /// L19 start-up: bundles whose claimed answer was never handed over.
    async fn bundles_pending_delivery(&self) -> RepoResult<Vec<BundleRecord>>;
    /// Deletes a reservation that was never attempted nor referenced (L18/L19).
    async fn delete_reservation(&self, turn_id: &str) -> RepoResult<bool>;

    // -- the owed-resume outbox (L17/L18) --
    /// L6/L7 in one transaction; `None` when the session's current turn is closed, an owed
    /// resume, or the session is terminal (the agent's turn was superseded: nothing written).
    async fn ask_in_current_turn(&self, new: &NewAsk, at: Micros)
    -> RepoResult<Option<AskWritten>>;
    /// L18 acceptance: the answered bundle's resume becomes owed (a turn marked attempted with
    /// its prompt) and its delivery marker is cleared, in one transaction. `None` when the
    /// session is terminal, the bundle is not answered, or a resume is already owed for it.
    async fn owe_resume(
        &self,
        pending_id: &str,
        prompt: &str,
        at: Micros,
    ) -> RepoResult<Option<TurnRecord>>;
    /// Owed resumes of the session, oldest first.
    async fn owed_resumes(&self, session_id: &str) -> RepoResult<Vec<TurnRecord>>;
    /// Every non-terminal session with an owed resume (start-up delivers them).
    async fn sessions_with_owed_resumes(&self) -> RepoResult<Vec<SessionRecord>>;
    /// Hands an owed resume to the agent: one compare-and-set (exactly once), only while it is
    /// the current turn of a non-terminal session; `started_at` becomes `at` (L1).
    async fn dispatch_resume(&self, turn_id: &str, at: Micros) -> RepoResult<bool>;

    // -- workflow (N3) --
    /// The completion of `turn_id` found an active question: its step action waits.
    async fn defer_workflow(&self, turn_id: &str) -> RepoResult<bool>;
    /// Takes the deferred step action of `turn_id` (compare-and-set: at most once).
    async fn take_deferred_workflow(&self, turn_id: &str) -> RepoResult<bool>;
    /// Moves the task from step `from` to step `to`; false when it is no longer on `from`.
    async fn move_task_step(
        &self,
        task_id: &str,
        from: &str,
        to: &str,
        at: Micros,
    ) -> RepoResult<bool>;

    // -- agent lifetime (N6, MCP tokens) --
    /// Cancels pending permission requests (of one session, or all); returns what changed.
    async fn cancel_permissions(
        &self,
        session_id: Option<&str>,
        at: Micros,
    ) -> RepoResult<Vec<PermissionRecord>>;
    /// Revokes the session's MCP token if it is still `hash` (the agent that held it ended).
    async fn revoke_mcp_token(&self, session_id: &str, hash: &str) -> RepoResult<bool>;
}
