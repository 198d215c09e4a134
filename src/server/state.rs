use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;

use crate::model::PendingActionRevision;
use crate::server::events::EventHub;
use crate::server::hooks::Hooks;
use crate::server::repo::Repository;
use crate::server::runtime::Runtime;
use crate::server::time::Clock;

/// Everything a request handler or service needs; cheap to clone: one reference count (axum's
/// `from_fn_with_state` layers clone it for every request, several times).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The pages' renderer takes the options from the state (leptos_axum).
impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// What [`AppState`] shares.
pub struct Shared {
    pub leptos_options: LeptosOptions,
    pub repo: Arc<dyn Repository>,
    pub hub: Arc<dyn EventHub>,
    pub clock: Clock,
    /// P9: this process's projection epoch, bumped once at start.
    pub epoch: i64,
    pub pending_sequence: Arc<AtomicU64>,
    pub hooks: Arc<Hooks>,
    pub runtime: Arc<Runtime>,
    pub metrics: Arc<crate::server::metrics::Metrics>,
    /// Cancelled when the server shuts down: open MCP streams end, workers stop their agents.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl Shared {
    /// I8: returns once everything committed before the call is on disk (group commit on
    /// SQLite, decision 0024); call it before acknowledging anything.
    pub async fn durable(&self) -> crate::server::repo::RepoResult<()> {
        self.hooks.check(crate::server::hooks::Point::Durable)?;
        self.repo.durable().await
    }

    /// P9: reserves the next revision; call before the authoritative read it labels. On
    /// PostgreSQL the revision comes from the database, so the snapshots of several servers
    /// order among each other; on SQLite (one server) from this server's epoch and counter.
    pub async fn next_pending_revision(&self) -> PendingActionRevision {
        match self.repo.reserve_pending_revision().await {
            Ok(Some((epoch, sequence))) => {
                return PendingActionRevision {
                    epoch: epoch.to_string(),
                    sequence: u64::try_from(sequence).unwrap_or_default(),
                };
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot reserve a pending revision"),
        }
        PendingActionRevision {
            epoch: self.epoch.to_string(),
            sequence: self.pending_sequence.fetch_add(1, Ordering::SeqCst) + 1,
        }
    }
}
