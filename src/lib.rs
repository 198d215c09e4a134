#![recursion_limit = "256"]
//! Turnstile: a workspace for people who run AI coding agents.
//!
//! Module map (see docs/decisions and shared/design/architecture.md): `model` holds the wire
//! types shared by server and browser; `api` is every inbound edge; `ui` the components;
//! `client` pure browser-side logic; `server` (ssr only) config, repository and services.

pub mod api;
pub mod app;
pub mod client;
#[cfg(feature = "ssr")]
pub mod mock_agent;
pub mod model;
#[cfg(feature = "ssr")]
pub mod server;
pub mod ui;

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    // `leptos::mount::hydrate_lazy`, and then: the whole page is interactive, the chunks of
    // lazy routes included. Only now may the live channel connect (P10: the pages' snapshots
    // refetch on connect, so they must exist by then).
    wasm_bindgen_futures::spawn_local(async {
        let body = leptos::prelude::document()
            .body()
            .expect("the page has a body");
        leptos::mount::hydrate_from_async(body, app::App)
            .await
            .forget();
        ui::live::hydration_done();
    });
}
