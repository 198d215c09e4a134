//! The phone drawer (N1/N2 on phones): the sidebar itself becomes a bottom sheet with
//! `role="dialog"` named "Tasks". It closes only after the picked task's session and URL are
//! set (or the task resolved to no session); Escape or the menu button close it, and focus goes
//! back to the button. Closing before the pick resolved makes the pick inert (N2).

use leptos::prelude::*;

use crate::ui::nav::Navigator;

/// Shared by the sidebar (which renders the drawer) and the task page (which reports when a
/// task's session is resolved).
#[derive(Clone, Copy)]
pub struct Drawer {
    pub open: RwSignal<bool>,
    /// The task the user picked in the drawer.
    pub picked: RwSignal<Option<String>>,
    /// The task whose session selection is settled (URL set, or no session to open).
    pub resolved: RwSignal<Option<String>>,
}

impl Drawer {
    /// Closes the drawer by hand: a pick still loading becomes inert (N2).
    pub fn close(&self) {
        if self.picked.get_untracked().is_some()
            && let Some(nav) = use_context::<Navigator>()
        {
            nav.invalidate();
        }
        self.open.set(false);
        self.picked.set(None);
        focus_menu_button();
    }
}

fn focus_menu_button() {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        if let Some(button) = document()
            .query_selector("[data-testid=mobile-session-menu]")
            .ok()
            .flatten()
            .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok())
        {
            let _ = button.focus();
        }
    }
}

pub fn provide_drawer() -> Drawer {
    let d = Drawer {
        open: RwSignal::new(false),
        picked: RwSignal::new(None),
        resolved: RwSignal::new(None),
    };
    provide_context(d);
    // N2: close only once the picked task has its session and URL.
    Effect::new(move |_| {
        let (picked, resolved) = (d.picked.get(), d.resolved.get());
        if d.open.get_untracked() && picked.is_some() && picked == resolved {
            d.open.set(false);
            d.picked.set(None);
            focus_menu_button();
        }
    });
    d
}

/// The phone-only bar with the button that opens the drawer.
#[component]
pub fn MobileBar() -> impl IntoView {
    let d = expect_context::<Drawer>();
    view! {
        <div class="mobile-bar">
            <button
                data-testid="mobile-session-menu"
                aria-label="Open tasks"
                aria-expanded=move || d.open.get().to_string()
                on:click=move |_| {
                    if d.open.get_untracked() {
                        d.close();
                    } else {
                        d.resolved.set(None);
                        d.open.set(true);
                    }
                }
            >
                "☰ Tasks"
            </button>
        </div>
    }
}
