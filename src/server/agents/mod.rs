//! The ACP client runtime: one agent process per session, spoken to over stdio with the
//! `agent-client-protocol` crate. Outbound only: what the agent says comes back as
//! [`AgentEvent`]s on a channel the session worker owns (docs/decisions/0006-agents.md).

mod acp_client;
pub mod process;

pub use acp_client::{
    AgentConnection, AgentEvent, LaunchSpec, PermissionAsk, PromptFailure, launch,
};
