use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;

use crate::server::repo::Repository;
use crate::server::time::Clock;

/// Everything a request handler or service needs; cheap to clone.
#[derive(Clone, FromRef)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub repo: Arc<dyn Repository>,
    pub clock: Clock,
    /// P9: this process's projection epoch, bumped once at start.
    pub epoch: i64,
}
