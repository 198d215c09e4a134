//! Start-up: connect, migrate, bump the epoch, seed the bundled data, build the router.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::Router;
use leptos::prelude::*;
use leptos_axum::{LeptosRoutes, generate_route_list};

use crate::app::{App, shell};
use crate::server::events::InProcessHub;
use crate::server::hooks::Hooks;
use crate::server::repo::{NewAgentProfile, NewWorkflow, NewWorkflowStep, RepoResult, Repository};
use crate::server::runtime::{Runtime, RuntimeConfig};
use crate::server::state::AppState;
use crate::server::summary::{projector, reconcile};
use crate::server::time::Clock;

/// The bundled mock agent profile (spec/api.md); its command is resolved next to the server
/// binary when launched.
pub const MOCK_PROFILE: &str = "mock";

/// Events a slow subscriber may fall behind before it must resync (P10).
pub const HUB_CAPACITY: usize = 1024;

/// The default workflow seeded at first start.
pub const DEFAULT_STEPS: [&str; 4] = ["Backlog", "In progress", "Review", "Done"];

/// Seeds what every database has: the default workflow and the `mock` profile. Idempotent.
pub async fn seed(repo: &dyn Repository, at: i64) -> RepoResult<()> {
    if repo.default_workflow().await?.is_none() {
        let steps = DEFAULT_STEPS
            .iter()
            .map(|name| NewWorkflowStep {
                name: (*name).to_string(),
                on_turn_complete: None,
            })
            .collect();
        repo.create_workflow(
            &NewWorkflow {
                name: "Default".into(),
                is_default: true,
                steps,
            },
            at,
        )
        .await?;
    }
    if repo
        .get_agent_profile_by_name(MOCK_PROFILE)
        .await?
        .is_none()
    {
        repo.create_agent_profile(
            &NewAgentProfile {
                name: MOCK_PROFILE.into(),
                command: "mock_agent".into(),
                args: vec![],
                env: BTreeMap::new(),
            },
            at,
        )
        .await?;
    }
    Ok(())
}

/// Builds the application state: bumps the projection epoch (P9), seeds, reconciles every
/// task summary (P7) and starts the projector (P4). Fails loudly when any of it fails.
pub async fn build_state(
    repo: Arc<dyn Repository>,
    leptos_options: LeptosOptions,
    clock: Clock,
    runtime: RuntimeConfig,
) -> RepoResult<AppState> {
    let epoch = repo.bump_epoch().await?;
    seed(repo.as_ref(), clock.now()).await?;
    let recovered = crate::server::clarification::recovery::recover(repo.as_ref()).await?;
    if recovered != Default::default() {
        tracing::info!(
            ?recovered,
            "recovered interrupted clarification deliveries (L19)"
        );
    }
    let state = AppState {
        leptos_options,
        repo,
        hub: InProcessHub::new(HUB_CAPACITY),
        clock,
        epoch,
        pending_sequence: Arc::new(AtomicU64::new(0)),
        hooks: Arc::new(Hooks::default()),
        runtime: Arc::new(Runtime::new(runtime)),
        metrics: Arc::default(),
    };
    crate::server::clarification::recovery::recover_sessions(
        state.repo.as_ref(),
        state.clock.now(),
    )
    .await?;
    let failed = reconcile::reconcile_all(&state).await?;
    if failed > 0 {
        tracing::warn!(
            failed,
            "some task summaries could not be repaired at boot; they read as invalidated"
        );
    }
    projector::spawn(state.clone());
    Ok(state)
}

pub fn router(state: AppState) -> Router {
    let routes = generate_route_list(App);
    Router::new()
        .merge(crate::api::rest_routes(&state))
        .leptos_routes(&state, routes, {
            let options = state.leptos_options.clone();
            move || shell(options.clone())
        })
        // Not-found pages render the app too, so they get the same context as routes.
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(
            {
                let state = state.clone();
                move || provide_context(state.clone())
            },
            shell,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            count_request,
        ))
        .with_state(state)
}

async fn count_request(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    state.metrics.record_request(
        started.elapsed().as_micros() as u64,
        response.status().as_u16(),
    );
    response
}
