//! Sessions, turns, prompts and the prompt queue, the workflow guard, resumes.

pub mod tasks;
