use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    pub id: String,
    pub session_id: String,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub created_at: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageAuthor {
    User,
    Agent,
    System,
}

super::wire_enum!(MessageAuthor { User => "user", Agent => "agent", System => "system" });

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    Text,
    Thinking,
    ToolCall,
    ClarificationRequest,
    PermissionRequest,
    Status,
    Error,
}

super::wire_enum!(MessageKind {
    Text => "text",
    Thinking => "thinking",
    ToolCall => "tool_call",
    ClarificationRequest => "clarification_request",
    PermissionRequest => "permission_request",
    Status => "status",
    Error => "error",
});

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub id: String,
    pub session_id: String,
    pub task_id: String,
    pub turn_id: String,
    pub author: MessageAuthor,
    pub kind: MessageKind,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_id: Option<String>,
    /// Agent text and thoughts rendered from Markdown and sanitized by the server (the UI's
    /// `agent-markdown`); absent for everything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// A question's row: how the agent asked, `mcp` or `elicitation` (E2); absent on others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// One page of a transcript, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessagePage {
    pub messages: Vec<Message>,
    /// Whether older messages exist before the first one.
    pub more_before: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BundleStatus {
    Pending,
    Answered,
    Rejected,
    Expired,
    Cancelled,
}

super::wire_enum!(BundleStatus {
    Pending => "pending",
    Answered => "answered",
    Rejected => "rejected",
    Expired => "expired",
    Cancelled => "cancelled",
});

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuestionOption {
    pub id: String,
    pub label: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub prompt: String,
    /// The choices; empty for a question that takes a typed value (`form.input`).
    pub options: Vec<QuestionOption>,
    /// What the question asks beyond one option or "Other" text (E3); absent fields are the
    /// plain question's.
    #[serde(flatten)]
    pub form: super::form::Form,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub question_id: String,
    pub selected_options: Vec<String>,
    #[serde(default)]
    pub custom_text: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub pending_id: String,
    pub answers: Vec<Answer>,
    pub rejected: bool,
    pub reject_reason: Option<String>,
    pub responded_at: String,
}

/// A clarification request: 1–4 questions asked in one tool call. `active` is L2 evaluated at
/// read time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    pub pending_id: String,
    pub session_id: String,
    pub task_id: String,
    pub turn_id: String,
    pub status: BundleStatus,
    pub detached: bool,
    pub active: bool,
    pub context: Option<String>,
    pub questions: Vec<Question>,
    pub response: Option<Response>,
    pub created_at: String,
    pub resolved_at: Option<String>,
    /// E2: how the agent asked: `mcp` (our tool) or `elicitation` (ACP).
    #[serde(default = "mcp")]
    pub source: String,
}

fn mcp() -> String {
    "mcp".into()
}

/// A permission request of an agent (N6): pending while its agent waits, then `selected` or
/// `cancelled` (its turn ended, its agent exited, or the server restarted).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Permission {
    pub id: String,
    pub session_id: String,
    pub task_id: String,
    pub turn_id: String,
    pub title: String,
    pub options: Vec<PermissionOption>,
    /// `pending` | `selected` | `cancelled`
    pub status: String,
    pub option_id: Option<String>,
    pub created_at: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PermissionOption {
    pub id: String,
    pub label: String,
    /// ACP's option kind (`AllowOnce`, `RejectOnce`, …).
    pub kind: String,
}

/// The first line of a resume prompt (L17): the prompt that carries a detached question's
/// answer to the agent in a new turn. The bundled mock agent recognises it.
pub const RESUME_MARKER: &str = "[turnstile:clarification-answer]";
