//! Every inbound edge, thin: REST handlers and server functions per resource. Handlers parse,
//! call a service, and map errors; no rule lives here.

pub mod settings;
pub mod tasks;
pub mod transcript;

#[cfg(feature = "ssr")]
mod changes;
#[cfg(feature = "ssr")]
mod clarifications;
#[cfg(feature = "ssr")]
pub mod front_door;
#[cfg(feature = "ssr")]
mod health;
#[cfg(feature = "ssr")]
mod login;
#[cfg(feature = "ssr")]
mod mcp;
#[cfg(feature = "ssr")]
mod repositories;
#[cfg(feature = "ssr")]
mod rest;
#[cfg(feature = "ssr")]
mod router;
#[cfg(feature = "ssr")]
pub mod serve;
#[cfg(feature = "ssr")]
mod sessions;
#[cfg(feature = "ssr")]
pub mod site;
#[cfg(feature = "ssr")]
mod workflows;
#[cfg(feature = "ssr")]
pub mod ws;

#[cfg(feature = "ssr")]
pub use rest::{ApiError, ApiJson};

/// MCP sessions one agent token holds at once (tests).
#[cfg(feature = "ssr")]
pub fn mcp_sessions_per_token() -> usize {
    mcp::SESSIONS_PER_TOKEN
}
#[cfg(feature = "ssr")]
pub use router::{route_list, router};
#[cfg(feature = "ssr")]
pub use serve::{Limits, MAX_CONNECTIONS, serve};

/// The server state behind a server function (provided by the router to every request), for
/// an authenticated request only: the front door checked the token already, and every server
/// function checks it again here (defence in depth), so a route that skipped the door by
/// mistake still shows nothing.
#[cfg(feature = "ssr")]
pub fn state() -> Result<crate::server::state::AppState, crate::model::AppError> {
    use leptos::prelude::use_context;
    let authenticated = use_context::<http::request::Parts>().is_some_and(|parts| {
        parts
            .extensions
            .get::<crate::server::auth::Authenticated>()
            .is_some()
    });
    if !authenticated {
        return Err(crate::model::AppError::Unauthorized(
            "this server needs its access token (log in)".into(),
        ));
    }
    use_context::<crate::server::state::AppState>().ok_or_else(|| {
        crate::model::AppError::Internal("the server state is missing from this request".into())
    })
}

/// The REST API (`/api/v1`), the WebSocket (`/ws`) and `/healthz`.
#[cfg(feature = "ssr")]
pub fn rest_routes(
    state: &crate::server::state::AppState,
) -> axum::Router<crate::server::state::AppState> {
    use axum::extract::DefaultBodyLimit;
    use axum::routing::{delete, get, post};

    let v1 = axum::Router::new()
        .route("/tasks", get(tasks::rest::list).post(tasks::rest::create))
        .route(
            "/tasks/{id}",
            get(tasks::rest::get)
                .patch(tasks::rest::patch)
                .delete(tasks::rest::delete),
        )
        .route(
            "/tasks/{id}/sessions",
            get(sessions::list_for_task).post(sessions::create),
        )
        .route("/tasks/{id}/changes", get(changes::list))
        .route("/tasks/{id}/diff", get(changes::diff))
        .route("/sessions/{id}/primary", post(sessions::make_primary))
        .route("/sessions/{id}/prompt", post(sessions::prompt))
        .route("/sessions/{id}/cancel", post(sessions::cancel))
        .route("/sessions/{id}/retry", post(sessions::retry))
        .route("/sessions/{id}/messages", get(sessions::messages))
        .route("/sessions/{id}/turns", get(sessions::turns))
        .route("/messages/{id}", delete(sessions::delete_message))
        .route("/clarifications/{id}", get(clarifications::get))
        .route(
            "/clarifications/{id}/respond",
            post(clarifications::respond),
        )
        .route("/permissions/{id}", get(clarifications::get_permission))
        .route(
            "/permissions/{id}/respond",
            post(clarifications::respond_permission),
        )
        .route("/workflows", get(workflows::list).post(workflows::create))
        .route(
            "/agent-profiles",
            get(workflows::list_agent_profiles).post(workflows::create_agent_profile),
        )
        .route(
            "/agent-profiles/{id}",
            axum::routing::patch(workflows::update_agent_profile),
        )
        .route("/agent-presets", get(workflows::list_agent_presets))
        .route(
            "/repositories",
            get(repositories::list).post(repositories::create),
        )
        .route(
            "/repositories/{id}",
            get(repositories::get)
                .patch(repositories::patch)
                .delete(repositories::delete),
        )
        .route(
            "/agent-profiles/{id}/check",
            post(workflows::check_agent_profile),
        )
        .fallback(rest::not_found)
        .layer(DefaultBodyLimit::max(rest::MAX_BODY_BYTES));
    axum::Router::new()
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
        .route("/ws", get(ws::upgrade))
        .nest("/api/v1", v1)
        .merge(mcp::routes(state))
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use leptos::prelude::{Owner, provide_context};

    fn parts(authenticated: bool) -> http::request::Parts {
        let mut request = http::Request::new(());
        if authenticated {
            request
                .extensions_mut()
                .insert(crate::server::auth::Authenticated);
        }
        request.into_parts().0
    }

    /// Defence in depth: a server function run for a request the front door did not mark as
    /// authenticated (a route that skipped the door by mistake) gets 401, never the state.
    #[test]
    fn server_functions_refuse_requests_the_door_did_not_authenticate() {
        Owner::new().with(|| {
            let e = super::state().err().expect("no request at all");
            assert_eq!(e.status(), 401);
            provide_context(parts(false));
            let e = super::state().err().expect("not authenticated");
            assert_eq!(e.status(), 401);
        });
        Owner::new().with(|| {
            provide_context(parts(true));
            // Authenticated: it goes on to look for the state (none in this test).
            let e = super::state().err().expect("no state here");
            assert_eq!(e.status(), 500);
        });
    }
}
