use leptos::prelude::*;
use leptos_router::hooks::use_navigate;

use crate::api::tasks::{CreateTask, list_tasks};
use crate::model::{PendingAction, Task};
use crate::ui::drawer::Drawer;
use crate::ui::live::Live;

/// The task list with pending icons (P2 via `task_pending_action`), kept live by the socket.
#[component]
pub fn Sidebar() -> impl IntoView {
    let live = expect_context::<Live>();
    let drawer = expect_context::<Drawer>();
    let create = ServerAction::<CreateTask>::new();
    let tasks = Resource::new(
        move || (live.tasks.get(), create.version().get()),
        |_| list_tasks(),
    );
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(task)) = create.value().get() {
            navigate(&format!("/t/{}", task.id), Default::default());
        }
    });
    view! {
        <nav
            class="sidebar"
            class:drawer-open=move || drawer.open.get()
            role=move || drawer.open.get().then_some("dialog")
            aria-modal=move || drawer.open.get().then_some("true")
            aria-label="Tasks"
        >
            <h1 class="brand">"Turnstile"</h1>
            <ActionForm action=create attr:class="new-task">
                <input name="title" placeholder="New task title" aria-label="Task title" required />
                <input name="prompt" placeholder="First prompt for the agent (optional)" aria-label="First prompt" />
                <button type="submit" data-testid="new-task-submit">"Create task"</button>
            </ActionForm>
            {move || create.value().get().and_then(Result::err).map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })}
            <Suspense fallback=|| view! { <p class="muted">"Loading tasks…"</p> }>
                {move || Suspend::new(async move {
                    match tasks.await {
                        Ok(tasks) if tasks.is_empty() => view! { <p class="muted">"No tasks yet."</p> }.into_any(),
                        Ok(tasks) => view! {
                            <ul class="task-list">
                                {tasks.into_iter().map(|task| view! { <TaskRow task /> }).collect_view()}
                            </ul>
                        }
                        .into_any(),
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
        Some(PendingAction::Clarification) => Some(
            view! {
                <span class="pending-icon" data-testid="task-state-waiting-for-input" title="Waiting for your answer" aria-label="Waiting for your answer">"?"</span>
            }
            .into_any(),
        ),
        Some(PendingAction::Permission) => Some(
            view! {
                <span class="pending-icon permission" data-testid="task-state-pending-permission" title="Waiting for a permission" aria-label="Waiting for a permission">"!"</span>
            }
            .into_any(),
        ),
        None => None,
    };
    let drawer = expect_context::<Drawer>();
    let id = task.id.clone();
    view! {
        <li>
            <a
                class="task-item"
                href=href
                data-testid="sidebar-task-item"
                data-task-id=task.id.clone()
                on:click=move |_| {
                    if drawer.open.get_untracked() {
                        drawer.picked.set(Some(id.clone()));
                    }
                }
            >
                <span class="task-title">{task.title}</span>
                {icon}
            </a>
        </li>
    }
}
