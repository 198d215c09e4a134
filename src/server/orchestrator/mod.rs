//! Sessions, turns, prompts and the prompt queue, the workflow guard, resumes.

pub mod publish;
pub mod sessions;
pub mod tasks;
pub mod worker;
pub mod workflow;
