//! The ACP client runtime: one agent process per session, spoken to over stdio with the
//! `agent-client-protocol` crate. Outbound only: what the agent says comes back as
//! [`AgentEvent`]s on a channel the session worker owns (docs/decisions/0006-agents.md).

mod acp_client;
pub mod check;
mod elicitation_request;
mod handshake;
pub mod presets;
pub mod process;
mod relay;
mod runner;

/// Why an agent could not be started or reached. The text is written for the user (it is
/// shown in the transcript and answered as 503); it never carries database text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct AgentError {
    pub reason: String,
    /// A4: the agent refused to work until its user logs in; after the login a retry can
    /// succeed.
    pub needs_login: bool,
}

impl From<&str> for AgentError {
    fn from(reason: &str) -> Self {
        reason.to_string().into()
    }
}

impl From<String> for AgentError {
    fn from(reason: String) -> Self {
        AgentError {
            reason,
            needs_login: false,
        }
    }
}

pub use acp_client::{
    AgentConnection, AgentEvent, ElicitationAsk, LaunchSpec, PermissionAsk, PromptFailure, launch,
};
