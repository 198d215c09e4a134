//! What `GET /metrics` reads from the repository besides the process counters.

use crate::server::repo::ConnectionUsage;
use crate::server::state::AppState;

/// L2 over every session (the active-bundles gauge); `None` when it cannot be read.
pub async fn active_bundles(state: &AppState) -> Option<i64> {
    state.repo.count_active_bundles().await.ok()
}

/// How SQLite's one write connection has been used (`None` on PostgreSQL).
pub fn write_connection_usage(state: &AppState) -> Option<ConnectionUsage> {
    state.repo.write_connection_usage()
}
