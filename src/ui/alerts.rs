//! Attention for questions elsewhere (`client::notify` decides): the document title counts
//! them, and after the user opted in each new one shows a browser notification once.

use leptos::prelude::*;

use crate::ui::live::Live;

/// Shows browser notifications for fresh alerts (when allowed); the title is in `App`.
pub fn provide_alerts() {
    let live = expect_context::<Live>();
    Effect::new(move |_| {
        let fresh = live.alerts.with(|a| a.has_fresh());
        if !fresh {
            return;
        }
        let alerts = live
            .alerts
            .try_update(|a| a.take_fresh())
            .unwrap_or_default();
        #[cfg(feature = "hydrate")]
        for alert in alerts {
            let title = live
                .tasks
                .with_untracked(|b| b.tasks.get(&alert.task_id).map(|t| t.title.clone()))
                .unwrap_or_else(|| "A task".into());
            show(&title, alert.permission);
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = alerts;
    });
}

#[cfg(feature = "hydrate")]
fn show(task_title: &str, permission: bool) {
    use web_sys::{Notification, NotificationOptions, NotificationPermission};
    if Notification::permission() != NotificationPermission::Granted {
        return;
    }
    let body = if permission {
        "The agent asks for a permission."
    } else {
        "The agent asks you a question."
    };
    let options = NotificationOptions::new();
    options.set_body(body);
    let _ = Notification::new_with_options(&format!("Turnstile: {task_title}"), &options);
}

/// Opt in to browser notifications (the browser asks once).
#[component]
pub fn EnableNotifications() -> impl IntoView {
    let asked = RwSignal::new(false);
    view! {
        <button
            class="secondary small"
            data-testid="notifications-enable"
            disabled=move || asked.get()
            on:click=move |_| {
                asked.set(true);
                #[cfg(feature = "hydrate")]
                {
                    let _ = web_sys::Notification::request_permission();
                }
            }
        >
            "Enable notifications"
        </button>
    }
}
