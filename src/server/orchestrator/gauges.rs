//! What `GET /metrics` reads from the repository besides the process counters.

use crate::server::repo::{ConnectionUsage, PoolUsage};
use crate::server::state::AppState;

/// L2 over every session (the active-bundles gauge); `None` when it cannot be read.
pub async fn active_bundles(state: &AppState) -> Option<i64> {
    state.repo.count_active_bundles().await.ok()
}

/// How SQLite's one write connection has been used (`None` on PostgreSQL).
pub fn write_connection_usage(state: &AppState) -> Option<ConnectionUsage> {
    state.repo.write_connection_usage()
}

/// How the database pool's connections have been used (`None` for a SQLite database file).
pub fn pool_usage(state: &AppState) -> Option<PoolUsage> {
    state.repo.pool_usage()
}
