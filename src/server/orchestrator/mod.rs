//! Sessions, turns, prompts and the prompt queue, the workflow guard, resumes; what `/metrics` reads.

pub mod changes;
pub mod forward;
pub mod gauges;
pub mod lease;
pub mod permissions;
pub mod profiles;
pub mod publish;
pub mod repositories;
pub mod sessions;
pub mod stream;
pub mod superseded;
pub mod tasks;
pub mod transcript;
pub mod worker;
pub mod workflow;
