use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    pub id: String,
    pub name: String,
    pub is_default: bool,
    pub steps: Vec<WorkflowStep>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkflowStep {
    pub id: String,
    pub name: String,
    pub position: i64,
    /// `"move_to_next"` or null.
    pub on_turn_complete: Option<String>,
}

/// An agent profile as clients see it: environment variable *names* only. Values may hold
/// secrets (API keys); they are write-only (spec "Server process").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentProfile {
    pub id: String,
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<String>,
    /// E1: `false` leaves the elicitation capability out of `initialize`, for agents that
    /// misbehave with it (their questions then come only through the MCP tool).
    #[serde(default = "yes")]
    pub elicitation: bool,
    /// A4: the `authMethods` id the agent is asked to `authenticate` with after
    /// `initialize`; none: it is not asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_method: Option<String>,
}

fn yes() -> bool {
    true
}
