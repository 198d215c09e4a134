//! Projections: per-session pending actions, task summaries, reconciliation (P1–P9).

pub mod loader;
pub mod projector;
pub mod reconcile;
pub mod sessions_view;
pub mod task_view;
