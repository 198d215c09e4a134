//! Projections: per-session pending actions, task summaries, reconciliation (P1–P9).

pub mod task_view;
