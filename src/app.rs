use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{Lazy, LazyRoute, SsrMode, lazy_route, path};

use crate::ui::board::Board;
use crate::ui::drawer::MobileBar;
use crate::ui::live::ConnectionStatus;
use crate::ui::settings::Settings;
use crate::ui::sidebar::Sidebar;
use crate::ui::task::TaskPage;

pub fn shell(options: LeptosOptions) -> impl IntoView {
    // Pages allow only our scripts and this response's nonce (spec "Server process": CSP).
    #[cfg(feature = "ssr")]
    if let (Some(nonce), Some(response)) = (
        leptos::nonce::use_nonce(),
        use_context::<leptos_axum::ResponseOptions>(),
    ) && let Ok(csp) = http::HeaderValue::from_str(&crate::api::front_door::page_csp(&nonce))
    {
        response.insert_header(http::header::CONTENT_SECURITY_POLICY, csp);
    }
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body data-hydrated="false" data-ws="closed">
                <App />
            </body>
        </html>
    }
}

/// The title's count: live in the browser; on the server always 0 without touching a signal,
/// because the server reads the title while streaming the head, outside the request's reactive
/// arena (a page under load panicked there: "no Arena is active").
fn alert_count(live: crate::ui::live::Live) -> usize {
    #[cfg(feature = "hydrate")]
    return live.alerts.with(|a| a.count());
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = live;
        0
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let live = crate::ui::live::provide_live();
    crate::ui::drawer::provide_drawer();
    crate::ui::alerts::provide_alerts();

    // SsrMode::Async: the server sends complete HTML (tasks included), so the page works before
    // hydration and without JavaScript.
    view! {
        <Stylesheet id="leptos" href="/pkg/turnstile.css" />
        <Title text=move || crate::client::notify::title(alert_count(live)) />
        <Router>
            <Navigation />
            <div class="layout">
                <Sidebar />
                <main class="main">
                    <div class="topbar">
                        <MobileBar />
                        <ConnectionStatus />
                    </div>
                    <Routes fallback=|| view! { <p class="empty">"Not found."</p> }>
                        <Route path=path!("/") view={Lazy::<BoardPage>::new()} ssr=SsrMode::Async />
                        <Route path=path!("/t/:task_id") view={Lazy::<TaskRoute>::new()} ssr=SsrMode::Async />
                        <Route path=path!("/settings") view={Lazy::<SettingsPage>::new()} ssr=SsrMode::Async />
                    </Routes>
                </main>
            </div>
        </Router>
    }
}

// Each page is its own wasm chunk, fetched the first time its route is shown (before hydration
// when the server rendered it); the shell (sidebar, live channel, drawer) is in the main module
// (B7, docs/decisions/0013-browser-bundle-size.md). The pages load their data themselves.

struct BoardPage;

#[lazy_route]
impl LazyRoute for BoardPage {
    fn data() -> Self {
        Self
    }

    fn view(_this: Self) -> AnyView {
        view! { <Board /> }.into_any()
    }
}

struct TaskRoute;

#[lazy_route]
impl LazyRoute for TaskRoute {
    fn data() -> Self {
        Self
    }

    fn view(_this: Self) -> AnyView {
        view! { <TaskPage /> }.into_any()
    }
}

struct SettingsPage;

#[lazy_route]
impl LazyRoute for SettingsPage {
    fn data() -> Self {
        Self
    }

    fn view(_this: Self) -> AnyView {
        view! { <Settings /> }.into_any()
    }
}

/// N2 needs the router's location: the navigator lives inside the router.
#[component]
fn Navigation() -> impl IntoView {
    crate::ui::nav::provide_navigator();
}
