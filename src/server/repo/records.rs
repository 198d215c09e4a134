//! What the repository returns. Naming, one suffix per role:
//! - `…Record`: one table row as stored (`TaskRecord`, `BundleRecord`);
//! - `…View`: a record with what belongs to it, evaluated when read (`BundleView`: questions
//!   and L2 activity; `WorkflowView`: the steps);
//! - `…Row`: a decode shape the repository reads rows into before making a record or view
//!   (`QuestionRow`, `SummaryRow`; public only because the generic SQL names them in bounds);
//! - `New…`, `…Patch`, `…Write`: inputs (insert, update, compare-and-set).
//!
//! Services turn records into wire types (`crate::model`) with `to_dto`.

use crate::model::{
    AgentProfile, Bundle, BundleStatus, Message, MessageAuthor, MessageKind, PendingAction,
    PendingActionRevision, Permission, PermissionOption, Question, Response, Session, SessionState,
    Summary, SummaryBody, Turn, Workflow, WorkflowStep,
};
use crate::server::time::{Micros, format_micros};

#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct WorkflowRecord {
    pub id: String,
    pub name: String,
    pub is_default: bool,
    pub created_at: Micros,
}

#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct WorkflowStepRecord {
    pub id: String,
    pub workflow_id: String,
    pub position: i64,
    pub name: String,
    pub on_turn_complete: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowView {
    pub workflow: WorkflowRecord,
    pub steps: Vec<WorkflowStepRecord>,
}

impl WorkflowView {
    pub fn to_dto(&self) -> Workflow {
        Workflow {
            id: self.workflow.id.clone(),
            name: self.workflow.name.clone(),
            is_default: self.workflow.is_default,
            steps: self
                .steps
                .iter()
                .map(|s| WorkflowStep {
                    id: s.id.clone(),
                    name: s.name.clone(),
                    position: s.position,
                    on_turn_complete: s.on_turn_complete.clone(),
                })
                .collect(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct AgentProfileRecord {
    pub id: String,
    pub name: String,
    pub command: String,
    /// JSON array of strings.
    pub args: String,
    /// JSON object of strings.
    pub env: String,
    /// E1: the agent is told it may ask through ACP elicitation.
    pub elicitation: bool,
    pub created_at: Micros,
    /// A4: the auth method the agent is asked to `authenticate` with.
    pub auth_method: Option<String>,
}

impl AgentProfileRecord {
    /// For clients: env names, never values.
    pub fn to_dto(&self) -> AgentProfile {
        AgentProfile {
            id: self.id.clone(),
            name: self.name.clone(),
            command: self.command.clone(),
            args: self.args_list(),
            env: self.env_values().into_keys().collect(),
            elicitation: self.elicitation,
            auth_method: self.auth_method.clone(),
        }
    }

    pub fn args_list(&self) -> Vec<String> {
        serde_json::from_str(&self.args).unwrap_or_default()
    }

    /// The environment the profile sets for its agent process (server-side only).
    pub fn env_values(&self) -> std::collections::BTreeMap<String, String> {
        serde_json::from_str(&self.env).unwrap_or_default()
    }
}

/// Also read by position from a JSON array (the task-list page, `tasks.rs`): keep the field
/// order of the page statement's inner array. The primary session and the session count are
/// not stored on the task: the views take them from the sessions the loader reads anyway
/// (`summary::loader::Projection`), so no task read runs a subquery per row (B2).
#[derive(Clone, Debug, PartialEq, sqlx::FromRow, serde::Deserialize)]
pub struct TaskRecord {
    pub id: String,
    pub title: String,
    pub description: String,
    pub state: String,
    pub workflow_id: Option<String>,
    pub step_id: Option<String>,
    pub archived_at: Option<Micros>,
    pub created_at: Micros,
    pub updated_at: Micros,
}

#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct SessionRecord {
    pub id: String,
    pub task_id: String,
    pub agent_profile_id: Option<String>,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub state: SessionState,
    pub is_primary: bool,
    pub mcp_token_hash: Option<String>,
    pub acp_session_id: Option<String>,
    pub started_at: Option<Micros>,
    pub completed_at: Option<Micros>,
    pub created_at: Micros,
    /// P1 as of the statement that read or wrote this row (`SESSION_COLUMNS` computes it with
    /// the authority's expression): an event about a session write carries it without a
    /// second read (B3).
    pub pending_action: Option<PendingAction>,
}

/// A P1 value as the authority's statements return it: text (`clarification`, `permission`).
impl<DB: sqlx::Database> sqlx::Type<DB> for PendingAction
where
    str: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <str as sqlx::Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <str as sqlx::Type<DB>>::compatible(ty)
    }
}

impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for PendingAction
where
    &'r str: sqlx::Decode<'r, DB>,
{
    fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        Ok(<&str as sqlx::Decode<DB>>::decode(value)?.parse::<PendingAction>()?)
    }
}

impl SessionRecord {
    pub fn to_dto(
        &self,
        pending_action: Option<PendingAction>,
        revision: Option<PendingActionRevision>,
    ) -> Session {
        Session {
            id: self.id.clone(),
            task_id: self.task_id.clone(),
            name: self.name.clone(),
            agent_profile_id: self.agent_profile_id.clone(),
            state: self.state,
            is_primary: self.is_primary,
            started_at: self.started_at.map(format_micros),
            completed_at: self.completed_at.map(format_micros),
            created_at: format_micros(self.created_at),
            pending_action,
            pending_action_revision: revision,
        }
    }
}

#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct TurnRecord {
    pub id: String,
    pub session_id: String,
    pub task_id: String,
    pub started_at: Micros,
    pub completed_at: Option<Micros>,
    pub created_at: Micros,
    /// `none` | `reserved` | `attempted` (L19). `attempted` = an owed resume (L18).
    pub reservation: String,
    pub resume_pending_id: Option<String>,
    /// The prompt an owed resume delivers.
    pub resume_prompt: Option<String>,
    /// N3: the completion found an active question; the step action waits for the barrier.
    pub workflow_deferred: bool,
}

impl TurnRecord {
    /// L18: accepted and not yet handed to the agent.
    pub fn is_owed(&self) -> bool {
        self.reservation == "attempted"
    }
}

impl TurnRecord {
    pub fn to_dto(&self) -> Turn {
        Turn {
            id: self.id.clone(),
            session_id: self.session_id.clone(),
            started_at: format_micros(self.started_at),
            completed_at: self.completed_at.map(format_micros),
            created_at: format_micros(self.created_at),
        }
    }
}

/// A message as its write returned it, with its session's P1 pending action as read by the
/// same statement: the message's event carries it without a second read (B3).
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct MessageWritten {
    #[sqlx(flatten)]
    pub message: MessageRecord,
    pub pending_action: Option<PendingAction>,
    /// The message's turn is a reservation the message may have made current (L19,
    /// [`super::authority::message_can_move_current_turn`]): only then can its event change
    /// the task's projection (P4, decision 0037).
    pub can_move_turn: bool,
}

#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct MessageRecord {
    pub id: String,
    pub session_id: String,
    pub task_id: String,
    pub turn_id: String,
    #[sqlx(try_from = "String")]
    pub author: MessageAuthor,
    #[sqlx(try_from = "String")]
    pub kind: MessageKind,
    pub content: String,
    pub pending_id: Option<String>,
    pub created_at: Micros,
    pub updated_at: Micros,
    /// A question's row: how the agent asked (E2).
    pub source: Option<String>,
}

impl MessageRecord {
    pub fn to_dto(&self) -> Message {
        Message {
            id: self.id.clone(),
            session_id: self.session_id.clone(),
            task_id: self.task_id.clone(),
            turn_id: self.turn_id.clone(),
            author: self.author,
            kind: self.kind,
            content: self.content.clone(),
            pending_id: self.pending_id.clone(),
            html: (self.author == MessageAuthor::Agent
                && matches!(self.kind, MessageKind::Text | MessageKind::Thinking))
            .then(|| crate::server::markdown::render(&self.content)),
            source: self.source.clone(),
            created_at: format_micros(self.created_at),
            updated_at: format_micros(self.updated_at),
        }
    }
}

#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct BundleRecord {
    pub pending_id: String,
    pub session_id: String,
    pub task_id: String,
    pub turn_id: String,
    #[sqlx(try_from = "String")]
    pub status: BundleStatus,
    pub detached: bool,
    pub delivery_pending: bool,
    pub context: Option<String>,
    pub dedup_key: String,
    /// The `Response` as JSON once claimed.
    pub response: Option<String>,
    pub reject_reason: Option<String>,
    pub created_at: Micros,
    pub resolved_at: Option<Micros>,
    /// E2: how the agent asked (`mcp`, `elicitation`).
    pub source: String,
}

#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct QuestionRow {
    pub pending_id: String,
    pub position: i64,
    pub question_id: String,
    pub title: Option<String>,
    pub prompt: String,
    /// JSON array of `QuestionOption`.
    pub options: String,
    /// JSON of the question's `Form`; NULL for a plain question.
    pub form: Option<String>,
}

/// A bundle with its questions and L2 evaluated when it was read.
#[derive(Clone, Debug, PartialEq)]
pub struct BundleView {
    pub record: BundleRecord,
    pub questions: Vec<Question>,
    pub active: bool,
}

impl BundleView {
    /// L5: pending but no longer active (a newer turn exists): nobody can answer it.
    pub fn is_superseded(&self) -> bool {
        self.record.status == BundleStatus::Pending && !self.active
    }

    pub fn to_dto(&self) -> Bundle {
        let r = &self.record;
        Bundle {
            pending_id: r.pending_id.clone(),
            session_id: r.session_id.clone(),
            task_id: r.task_id.clone(),
            turn_id: r.turn_id.clone(),
            status: r.status,
            detached: r.detached,
            active: self.active,
            context: r.context.clone(),
            questions: self.questions.clone(),
            response: r
                .response
                .as_deref()
                .and_then(|j| serde_json::from_str::<Response>(j).ok()),
            created_at: format_micros(r.created_at),
            resolved_at: r.resolved_at.map(format_micros),
            source: r.source.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct PermissionRecord {
    pub id: String,
    pub session_id: String,
    pub task_id: String,
    pub turn_id: String,
    pub tool_call: String,
    pub options: String,
    /// `pending` | `selected` | `cancelled`
    pub status: String,
    pub outcome: Option<String>,
    pub created_at: Micros,
    pub resolved_at: Option<Micros>,
}

impl PermissionRecord {
    pub fn to_dto(&self) -> Permission {
        let tool_call: serde_json::Value =
            serde_json::from_str(&self.tool_call).unwrap_or_default();
        let options: Vec<serde_json::Value> =
            serde_json::from_str(&self.options).unwrap_or_default();
        let text = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
        Permission {
            id: self.id.clone(),
            session_id: self.session_id.clone(),
            task_id: self.task_id.clone(),
            turn_id: self.turn_id.clone(),
            title: tool_call["title"]
                .as_str()
                .unwrap_or("a tool call")
                .to_string(),
            options: options
                .iter()
                .map(|o| PermissionOption {
                    id: text(o, "id"),
                    label: text(o, "name"),
                    kind: text(o, "kind"),
                })
                .collect(),
            status: self.status.clone(),
            option_id: self.outcome.clone(),
            created_at: format_micros(self.created_at),
        }
    }
}

/// One compare-and-set of a batch ([`super::Repository::cas_summaries`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryWrite {
    pub task_id: String,
    /// The revision read; `None` creates the row only if absent.
    pub expected: Option<i64>,
    pub body: SummaryBody,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SummaryRecord {
    pub task_id: String,
    pub revision: i64,
    pub body: SummaryBody,
    pub invalidated: bool,
    pub updated_at: Micros,
}

impl SummaryRecord {
    pub fn to_dto(&self) -> Summary {
        Summary {
            revision: self.revision,
            updated_at: format_micros(self.updated_at),
            body: self.body.clone(),
        }
    }
}

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct SummaryRow {
    pub task_id: String,
    pub revision: i64,
    pub summary: String,
    pub invalidated: bool,
    pub updated_at: Micros,
}

impl SummaryRow {
    pub fn into_record(self) -> Result<SummaryRecord, super::RepoError> {
        let body = serde_json::from_str(&self.summary).map_err(|e| {
            super::RepoError::Corrupt(format!("summary of task {}: {e}", self.task_id))
        })?;
        Ok(SummaryRecord {
            task_id: self.task_id,
            revision: self.revision,
            body,
            invalidated: self.invalidated,
            updated_at: self.updated_at,
        })
    }
}
