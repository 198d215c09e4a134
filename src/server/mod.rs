//! Everything that only exists on the server (`ssr`): configuration, state, the repository,
//! services and the agent runtime. Nothing in here is compiled to wasm.

pub mod agents;
pub mod auth;
pub mod clarification;
pub mod config;
pub mod events;
pub mod hooks;
pub mod mailbox;
pub mod markdown;
pub mod mcp_stdio;
pub mod metrics;
pub mod orchestrator;
pub mod repo;
pub mod runtime;
pub mod startup;
pub mod state;
pub mod summary;
pub mod telemetry;
pub mod time;
pub mod workspace;
