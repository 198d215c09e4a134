//! The whole HTTP surface, assembled at the top (start-axum style): REST, `/ws`, `/mcp`, the
//! login page, server functions and the Leptos pages, behind the front door's layers.

use std::sync::Arc;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::IntoResponse;
use axum::routing::get;
use leptos::prelude::*;
use leptos_axum::{AxumRouteListing, LeptosRoutes, generate_route_list};
use tower::ServiceBuilder;
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;

use super::{front_door, login, rest};
use crate::app::{App, shell};
use crate::model::AppError;
use crate::server::auth::FrontDoor;
use crate::server::state::AppState;

/// Requests served at once; beyond it the server answers 503 at once instead of queueing.
/// A request counts until its response starts: a streamed response (an MCP tool call's SSE)
/// and an upgraded socket count against the listener's connection cap instead
/// (`api/listener.rs`), and sockets against their own (`api/ws.rs`).
pub const MAX_IN_FLIGHT: usize = 2048;

/// The pages' routes, generated once per process. Generating them renders the app with a
/// process-wide "suppress resource loads" flag set (leptos_server), and a page whose resource
/// is first polled inside that window never finishes (leptos-rs/leptos#4773): a second server
/// in the same process (the tests start many) stalled another's `/` about one run in 25.
pub fn route_list() -> &'static [AxumRouteListing] {
    static ROUTES: std::sync::OnceLock<Vec<AxumRouteListing>> = std::sync::OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(App))
}

pub fn router(state: AppState, door: Arc<FrontDoor>) -> Router {
    let routes = route_list().to_vec();
    let gate = front_door::Gate {
        door: door.clone(),
        logins: crate::server::auth::Logins::of(&state),
    };
    let files = super::site::SiteFiles::of(&state.leptos_options.site_root);
    let app = Router::new()
        .merge(super::rest_routes(&state))
        .route(
            "/login",
            get(login::show)
                .post(login::submit)
                .with_state(gate.clone()),
        )
        .route(
            "/logout",
            axum::routing::post(login::logout).with_state(gate.clone()),
        )
        .merge(files.routes())
        .leptos_routes(&state, routes, {
            let options = state.leptos_options.clone();
            move || shell(options.clone())
        })
        // Any other path is a page of the app's that does not exist: rendered (behind the
        // token like every page) with the same context as the routes, answered 404.
        .fallback({
            let render = leptos_axum::render_app_to_stream_with_context(
                {
                    let state = state.clone();
                    move || provide_context(state.clone())
                },
                {
                    let options = state.leptos_options.clone();
                    move || shell(options.clone())
                },
            );
            move |req: axum::extract::Request| {
                let render = render.clone();
                async move {
                    let mut response = render(req).await;
                    if response.status() == axum::http::StatusCode::OK {
                        *response.status_mut() = axum::http::StatusCode::NOT_FOUND;
                    }
                    response
                }
            }
        })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            durable_before_answer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            count_request,
        ))
        .with_state(state);
    let x_request_id = HeaderName::from_static("x-request-id");
    // Outermost first: a request id, the Host check, headers on every answer, then Origin,
    // token, server-function body rules and the in-flight cap.
    app.layer(
        ServiceBuilder::new()
            // The request id is always this server's own: a client's would let it forge the
            // id an error answer points the log at.
            .layer(axum::middleware::map_request(
                |mut req: axum::extract::Request| async move {
                    req.headers_mut().remove("x-request-id");
                    req
                },
            ))
            .layer(SetRequestIdLayer::new(
                x_request_id.clone(),
                MakeRequestUuid,
            ))
            .layer(PropagateRequestIdLayer::new(x_request_id))
            .layer(crate::server::telemetry::access_log())
            .layer(compression())
            .layer(axum::middleware::from_fn(
                crate::server::telemetry::scope_request_id,
            ))
            .layer(axum::middleware::from_fn(rest::json_errors))
            .layer(axum::middleware::from_fn_with_state(
                door.clone(),
                front_door::check_host,
            ))
            .layer(SetResponseHeaderLayer::overriding(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ))
            .layer(SetResponseHeaderLayer::overriding(
                header::X_FRAME_OPTIONS,
                HeaderValue::from_static("DENY"),
            ))
            .layer(SetResponseHeaderLayer::overriding(
                header::REFERRER_POLICY,
                HeaderValue::from_static("same-origin"),
            ))
            // No other site may embed what this server answers (Spectre-style reads).
            .layer(SetResponseHeaderLayer::overriding(
                HeaderName::from_static("cross-origin-resource-policy"),
                HeaderValue::from_static("same-origin"),
            ))
            // Every answer revalidates before reuse (files answer 304 when unchanged), so the
            // main wasm module and its page chunks always come from one build (B7; split
            // builds are not interchangeable, docs/decisions/0013-browser-bundle-size.md).
            .layer(SetResponseHeaderLayer::if_not_present(
                header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache"),
            ))
            .layer(axum::middleware::from_fn(front_door::default_csp))
            .layer(axum::middleware::from_fn(front_door::check_origin))
            .layer(axum::middleware::from_fn_with_state(
                gate,
                front_door::require_token,
            ))
            .layer(axum::middleware::from_fn(
                front_door::server_fn_content_type,
            ))
            .layer(HandleErrorLayer::new(|_: tower::BoxError| async {
                rest::ApiError(AppError::Unavailable(
                    "the server is at its limit of open requests; try again".into(),
                ))
                .into_response()
            }))
            .load_shed()
            .concurrency_limit(MAX_IN_FLIGHT)
            .layer(axum::middleware::from_fn(
                front_door::refuse_oversized_bodies,
            ))
            .layer(RequestBodyLimitLayer::new(rest::MAX_BODY_BYTES)),
    )
}

/// Responses compressed (gzip or brotli, as the client asks; decision 0048): text, JSON and
/// wasm above a kilobyte. Never the pages, whose streamed HTML would wait in the encoder
/// instead of reaching the browser as it renders, nor event streams, sockets or images.
fn compression() -> CompressionLayer<impl Predicate> {
    let predicate = SizeAbove::new(COMPRESS_ABOVE)
        .and(NotForContentType::GRPC)
        .and(NotForContentType::IMAGES)
        .and(NotForContentType::SSE)
        .and(NotForContentType::const_new("text/html"));
    CompressionLayer::new().compress_when(predicate)
}

/// Bodies at most this long are sent as they are: compressing them saves less than it costs.
pub const COMPRESS_ABOVE: u16 = 1024;

/// I8 (decision 0024): a request that may have written is answered only once what was
/// committed before its answer is on disk, so an acknowledged answer, prompt or task survives
/// a power loss. On SQLite concurrent requests share one sync (group commit). Safe methods
/// acknowledge nothing.
async fn durable_before_answer(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let safe = req.method().is_safe();
    let response = next.run(req).await;
    if !safe && let Err(e) = state.durable().await {
        return rest::ApiError(AppError::from(e)).into_response();
    }
    response
}

/// A route template as a metrics label: `/tasks/{id}` becomes `/tasks/:id` (braces inside a
/// label value trip up simple exposition parsers).
fn route_label(template: &str) -> String {
    template.replace('{', ":").replace('}', "")
}

async fn count_request(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let started = std::time::Instant::now();
    let method = req.method().clone();
    // The route's template, never the path: the label set stays small.
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "other".to_string(), |m| route_label(m.as_str()));
    let response = next.run(req).await;
    state.metrics.record_request(
        method.as_str(),
        &route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}
