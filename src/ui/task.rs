use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

/// A task with its sessions (session tabs and the transcript arrive with the agents issue).
#[component]
pub fn TaskPage() -> impl IntoView {
    let params = use_params_map();
    let task_id = move || params.read().get("task_id").unwrap_or_default();
    view! {
        <section class="task-page" data-task-id=task_id>
            <div class="chat" data-testid="chat-panel" data-active-session-id=""></div>
        </section>
    }
}
