//! Every integration test but the two that count statements through a process-wide log
//! subscriber (`tests/round_trip_statements.rs`, `tests/statement_counts.rs`): one binary, one
//! link of the server (decision 0041). A module per area; `support` holds the fixtures.

#[macro_use]
mod support;

mod access_token;
mod agent_processes;
mod agents;
mod authority_model;
mod authority_plans;
mod convergence;
mod crash_recovery;
mod elicitation;
mod exactly_once;
mod front_door;
mod hostile_inputs;
mod http_api;
mod lifecycle_model;
mod mcp;
mod module_graph;
mod official_sdk;
mod operating;
mod pending_action_locks;
mod profile_check;
mod projections;
mod repo_conformance;
mod respond_concurrency;
mod respond_races;
mod restart;
mod service_model;
mod several_servers;
mod slow_clients;
mod task_list;
mod websocket;
mod workspaces;
