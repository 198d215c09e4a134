use leptos::prelude::*;

use crate::api::tasks::list_tasks;
use crate::model::{PendingAction, Task};

/// The task list with pending-question icons (P2 via `task_pending_action`).
#[component]
pub fn Sidebar() -> impl IntoView {
    let tasks = Resource::new(|| (), |_| list_tasks());
    view! {
        <nav class="sidebar" aria-label="Tasks">
            <h1 class="brand">"Turnstile"</h1>
            <Suspense fallback=|| view! { <p class="muted">"Loading tasks…"</p> }>
                {move || Suspend::new(async move {
                    match tasks.await {
                        Ok(tasks) if tasks.is_empty() => {
                            view! { <p class="muted">"No tasks yet."</p> }.into_any()
                        }
                        Ok(tasks) => {
                            view! {
                                <ul class="task-list">
                                    {tasks.into_iter().map(|task| view! { <TaskRow task /> }).collect_view()}
                                </ul>
                            }
                                .into_any()
                        }
                        Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
        </nav>
    }
}

#[component]
fn TaskRow(task: Task) -> impl IntoView {
    let href = format!("/t/{}", task.id);
    let icon = match task.task_pending_action {
        Some(PendingAction::Clarification) => Some(view! {
            <span class="pending-icon" data-testid="task-state-waiting-for-input" title="Waiting for your answer" aria-label="Waiting for your answer">"?"</span>
        }.into_any()),
        Some(PendingAction::Permission) => Some(view! {
            <span class="pending-icon permission" data-testid="task-state-pending-permission" title="Waiting for a permission" aria-label="Waiting for a permission">"!"</span>
        }.into_any()),
        None => None,
    };
    view! {
        <li>
            <a class="task-item" href=href data-testid="sidebar-task-item" data-task-id=task.id.clone()>
                <span class="task-title">{task.title}</span>
                {icon}
            </a>
        </li>
    }
}
