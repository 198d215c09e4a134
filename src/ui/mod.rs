//! Components. They render what server functions and the live stores give them; decisions
//! live in `crate::client` (pure, unit-tested).

pub mod agent_options;
pub mod alerts;
pub mod board;
pub mod changes;
pub mod chat;
pub mod clarification;
pub mod client_only;
pub mod drawer;
pub mod form;
pub mod live;
pub mod load;
pub mod nav;
pub mod pages;
pub mod permission;
pub mod repositories;
pub mod settings;
pub mod sidebar;
pub mod storage;
pub mod task;
