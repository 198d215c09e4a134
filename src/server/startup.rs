//! Start-up: connect, migrate, bump the epoch, seed the bundled data, build the router.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use leptos::prelude::*;
use leptos_axum::{LeptosRoutes, generate_route_list};

use crate::app::{App, shell};
use crate::server::repo::{NewAgentProfile, NewWorkflow, NewWorkflowStep, RepoResult, Repository};
use crate::server::state::AppState;
use crate::server::time::Clock;

/// The bundled mock agent profile (spec/api.md); its command is resolved next to the server
/// binary when launched.
pub const MOCK_PROFILE: &str = "mock";

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

/// Builds the application state: bumps the projection epoch (P9) and seeds.
pub async fn build_state(
    repo: Arc<dyn Repository>,
    leptos_options: LeptosOptions,
    clock: Clock,
) -> RepoResult<AppState> {
    let epoch = repo.bump_epoch().await?;
    seed(repo.as_ref(), clock.now()).await?;
    Ok(AppState {
        leptos_options,
        repo,
        clock,
        epoch,
    })
}

pub fn router(state: AppState) -> Router {
    let routes = generate_route_list(App);
    Router::new()
        .merge(crate::api::rest_routes())
        .leptos_routes(&state, routes, {
            let options = state.leptos_options.clone();
            move || shell(options.clone())
        })
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(shell))
        .with_state(state)
}
