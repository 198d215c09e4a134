//! The repository: every read and write of durable state goes through [`Repository`], one
//! object-safe trait with a SQLite and a PostgreSQL implementation that share their SQL text
//! (`sql.rs`). The current-turn authority (L1–L3) lives in `authority.rs` and nowhere else.

pub mod authority;
mod authority_store;
mod connections;
mod logins;
mod outbox;
mod postgres;
mod profiles;
mod questions;
mod records;
mod repositories;
mod sessions;
mod sql;
mod sqlite;
mod summaries;
mod tasks;
mod transcript;
mod wal_sync;
mod workflows;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use authority_store::{AuthorityStore, TaskSession};
pub use connections::{ConnectionUsage, PoolUsage};
pub use logins::LoginStore;
pub use outbox::{HandoffAccepted, LiveDelivery, OutboxStore};
pub use postgres::PostgresRepository;
pub use profiles::ProfileStore;
pub use questions::QuestionStore;
pub use records::*;
pub use repositories::{
    Deleted, NewRepository, NewTaskWorkspace, RepositoryRecord, RepositoryStore,
    TaskWorkspaceRecord,
};
pub use sessions::SessionStore;
pub use sql::{SqlBackend, SqlRepository};
pub use sqlite::SqliteRepository;
pub use summaries::SummaryStore;
pub use tasks::TaskStore;
/// The task-list page statement, public so the plan tests can `EXPLAIN` it.
pub use tasks::page_statement;
pub use transcript::TranscriptStore;
pub use workflows::{StepMove, WorkflowStore};

use crate::model::{BundleStatus, MessageAuthor, MessageKind, Question, SessionState};
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
    /// Making commits durable failed (`Repository::durable`).
    #[error("syncing the database to disk failed: {0}")]
    Sync(#[from] std::io::Error),
    /// A failure a test injected at a named point (`server::hooks`, `test-hooks` builds only).
    #[cfg(feature = "test-hooks")]
    #[error("injected failure at {0}")]
    Injected(&'static str),
    /// Nothing written: the session owes its agent an answer, which goes first (L18).
    #[error("session {0} owes its agent an answer, which goes first")]
    ResumeOwed(String),
    /// Nothing written: another server claimed the session since this server's claim.
    #[error("another server runs session {0} now")]
    Fenced(String),
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
            e @ (RepoError::ResumeOwed(_) | RepoError::Fenced(_)) => {
                crate::model::AppError::Unavailable(format!("{e}; send again"))
            }
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
    /// E1: advertise ACP elicitation to the agent.
    pub elicitation: bool,
    /// A4: `authenticate` with this method after `initialize`.
    pub auth_method: Option<String>,
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
    /// Written only while this server still owns the session at this epoch (several servers).
    pub fence: Option<Fence>,
}

/// A server's claim on a session (several servers on PostgreSQL): its id and the epoch its
/// claim returned. A write carrying it is refused once another server claimed the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub server_id: String,
    pub epoch: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NewMessage {
    pub session_id: String,
    pub turn_id: String,
    pub author: MessageAuthor,
    pub kind: MessageKind,
    pub content: String,
    pub pending_id: Option<String>,
}

/// Agent output the session worker still owed when a question arrived (`stream.rs`): written in
/// the ask's own transaction, before the question, so reply and question commit together.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplyWrite {
    /// A reply's first write: its message is created.
    Create(NewMessage),
    /// A reply whose message exists: its whole content so far.
    Content { id: String, content: String },
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
    /// E2: `mcp` or `elicitation`.
    pub source: &'static str,
    /// The agent's owed output, written first (nothing when the ask writes nothing).
    pub replies: Vec<ReplyWrite>,
}

/// What an accepted ask wrote.
#[derive(Clone, Debug)]
pub struct AskWritten {
    pub bundle: BundleRecord,
    pub message: MessageRecord,
    /// The session after its move to `waiting_for_input` (L7).
    pub session: SessionRecord,
    /// [`NewAsk::replies`] as written, in their order (`None`: an updated message was gone).
    pub replies: Vec<Option<MessageWritten>>,
}

#[derive(Clone, Debug)]
pub struct NewPermissionRequest {
    /// Chosen by the caller when it must be known before the write (the worker registers the
    /// agent's reply slot first); `None`: a new id.
    pub id: Option<String>,
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
    /// The server whose request claims (`claimed_by`): until it accepts or undoes the claim,
    /// no other server settles it (L19 across servers, decision 0036).
    pub by: String,
}

// ---- outcomes -------------------------------------------------------------------------------

/// A claim whose request is gone with its server (decision 0036): `delivery_pending` set by
/// a server that restarted since, or that stopped beating.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct AbandonedClaim {
    pub pending_id: String,
    pub task_id: String,
    /// NULL for a claim made before claimers were recorded.
    pub claimed_by: Option<String>,
}

/// What settling an [`AbandonedClaim`] did (L19).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimSettled {
    /// Still current: the question is pending again.
    Restored,
    /// No longer current: its delivery marker was cleared, its outcome stays.
    Finalized,
    /// Settled already, or claimed anew, or its answer reached the agent: nothing changed.
    Untouched,
}

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

impl CasOutcome {
    /// A compare-and-set that wrote nothing, classified by what is stored now (`current`):
    /// unchanged when that is still the expected revision holding `body`, else a conflict.
    pub fn unwritten(
        current: Option<SummaryRecord>,
        expected: Option<i64>,
        body: &crate::model::SummaryBody,
    ) -> Self {
        match current {
            Some(c) if Some(c.revision) == expected && !c.invalidated && c.body == *body => {
                CasOutcome::Unchanged {
                    revision: c.revision,
                }
            }
            current => CasOutcome::Conflict { current },
        }
    }
}

/// The repository: every area's store, one trait per area (its file holds the trait and its
/// SQL). Object safe: the server holds an `Arc<dyn Repository>`, on which every area's
/// methods are callable without importing the area traits. Every write takes its timestamp
/// from the caller (services read a [`crate::server::time::Clock`]).
#[async_trait::async_trait]
pub trait Repository:
    WorkflowStore
    + ProfileStore
    + TaskStore
    + SessionStore
    + TranscriptStore
    + QuestionStore
    + SummaryStore
    + AuthorityStore
    + OutboxStore
    + LoginStore
    + RepositoryStore
    + Send
    + Sync
    + 'static
{
    fn backend(&self) -> Backend;
    /// How to reach this database when it is PostgreSQL (for the event bridge).
    fn postgres_options(&self) -> Option<sqlx::postgres::PgConnectOptions>;
    /// Returns once every write committed before the call is on disk (I8). On SQLite writes
    /// commit without waiting for the disk and this is where they are synced, one sync for
    /// all callers waiting together (group commit, decision 0024); the server calls it before
    /// it acknowledges a request or hands anything to an agent. PostgreSQL commits durably.
    async fn durable(&self) -> RepoResult<()>;
    /// SQLite: commits made by the write connection and commits known to be on disk (tests).
    fn commit_counts(&self) -> Option<(u64, u64)>;
    /// SQLite (a database file): how the one write connection has been used — lent, waited
    /// for, held (`GET /metrics`). `None` on PostgreSQL and in-memory SQLite (pools).
    fn write_connection_usage(&self) -> Option<ConnectionUsage>;
    /// PostgreSQL and in-memory SQLite: how the sqlx pool's connections have been used —
    /// lent, waited for, held — and its size now (`GET /metrics`). `None` for a database file.
    fn pool_usage(&self) -> Option<PoolUsage>;
}
