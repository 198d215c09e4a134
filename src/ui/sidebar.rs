//! The task list: the first page of open tasks (most recently updated first), every task with
//! a pending action (always listed), "load more" for the rest, a title filter, archive; pending
//! icons by P2 (`task_pending_action`). Pushes update it live (`Live::tasks`). On phones the
//! same list is the Tasks drawer.

use leptos::prelude::*;
use leptos_router::hooks::use_navigate;

use crate::api::settings::{list_agent_profiles, list_repositories};
use crate::api::tasks::{CreateTask, archive_task, list_tasks};
use crate::model::{AgentProfile, AppError, PendingAction, Repository, Task, TaskQuery};
use crate::ui::agent_options::AgentOptions;
use crate::ui::drawer::Drawer;
use crate::ui::live::Live;
use crate::ui::nav::Navigator;
use crate::ui::pages::{LoadMore, TaskPages};
use crate::ui::repositories::RepositoryOptions;

/// Where the browser keeps the agent last chosen for a new task (A5).
const LAST_AGENT: &str = "turnstile.new-task.agent";

#[component]
pub fn Sidebar() -> impl IntoView {
    let drawer = expect_context::<Drawer>();
    let create = ServerAction::<CreateTask>::new();
    let navigate = use_navigate();
    // A5: the agent of a new task; the one last chosen here is the default. Loaded in the
    // browser: before hydration the form posts without it (the bundled mock).
    let profiles = RwSignal::new(Vec::<AgentProfile>::new());
    let chosen = RwSignal::new(String::new());
    // W2: the repository a new task works in (none: a directory of its own).
    let repositories = RwSignal::new(Vec::<Repository>::new());
    Effect::new(move |_| {
        leptos::task::spawn_local(async move {
            if let Ok(list) = list_agent_profiles().await {
                let last = crate::ui::storage::get(LAST_AGENT)
                    .filter(|id| list.iter().any(|p| &p.id == id));
                profiles.try_set(list);
                chosen.try_set(last.unwrap_or_default());
            }
            if let Ok(list) = list_repositories().await {
                repositories.try_set(list);
            }
        });
    });
    Effect::new(move |_| {
        if let Some(Ok(task)) = create.value().get() {
            // On a phone the drawer closes on the new task once its session is settled, as
            // on a task picked in it (N2).
            if drawer.open.get_untracked() {
                drawer.picked.set(Some(task.id.clone()));
            }
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
            on:keydown=move |e| {
                if e.key() == "Escape" && drawer.open.get_untracked() {
                    drawer.close();
                }
            }
        >
            <header class="sidebar-head">
                <a class="brand" href="/">"Turnstile"</a>
            </header>
            <form
                class="new-task"
                method="post"
                action={<CreateTask as leptos::server_fn::ServerFn>::url()}
                on:submit=move |e| {
                    let field = crate::ui::form::take_submission(&e);
                    let agent = field("agent_profile_id");
                    crate::ui::storage::set(LAST_AGENT, &agent);
                    let repository = field("repository_id");
                    create.dispatch(CreateTask {
                        title: field("title"),
                        prompt: field("prompt"),
                        agent_profile_id: Some(agent),
                        repository_id: (!repository.is_empty()).then_some(repository),
                    });
                }
            >
                <input name="title" placeholder="New task title" aria-label="Task title" required maxlength=crate::model::limits::TITLE_CHARS />
                <input name="prompt" placeholder="First prompt for the agent (optional)" aria-label="First prompt" />
                <select name="agent_profile_id" aria-label="Agent" data-testid="new-task-agent" on:change=move |e| chosen.set(event_target_value(&e))>
                    <AgentOptions profiles=profiles.into() chosen=chosen.into() />
                </select>
                <select name="repository_id" aria-label="Repository" data-testid="new-task-repository">
                    <RepositoryOptions repositories=repositories.into() />
                </select>
                <button type="submit" data-testid="new-task-submit">"Create task"</button>
            </form>
            {move || create.value().get().and_then(Result::err).map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })}
            <TaskList />
            <footer class="sidebar-foot">
                <a href="/settings">"Settings"</a>
                <crate::ui::alerts::EnableNotifications />
            </footer>
        </nav>
    }
}

#[component]
fn TaskList() -> impl IntoView {
    let live = expect_context::<Live>();
    let search = RwSignal::new(String::new());
    let query = Signal::derive(move || search.get().trim().to_string());
    let pages = TaskPages::new(query);
    // One action for every row: rows are rebuilt when a page reloads, the action is not.
    let archive = Action::new(move |id: &String| {
        let id = id.clone();
        async move {
            let archived = archive_task(id, true).await;
            if let Ok(t) = &archived {
                live.tasks.update(|b| b.merge([t.clone()]));
            }
            archived
        }
    });
    // Every task with a pending action is listed whatever page it is on (P2).
    let pending = Resource::new(
        move || live.resync.get(),
        |_| {
            list_tasks(TaskQuery {
                limit: Some(500),
                pending: Some(true),
                ..Default::default()
            })
        },
    );
    let rows = move || {
        let q = crate::client::text::fold_case(&query.get());
        let mut base = pages.loaded();
        if let Some(Ok(p)) = pending.get() {
            base.extend(p.tasks);
        }
        live.tasks.with(|book| {
            book.view(&base, |t| {
                !t.archived
                    && (q.is_empty() || crate::client::text::fold_case(&t.title).contains(&q))
            })
        })
    };
    view! {
        <input
            class="search"
            type="search"
            data-testid="sidebar-search"
            aria-label="Filter tasks by title"
            placeholder="Filter tasks"
            maxlength=crate::model::limits::QUERY_CHARS
            prop:value=move || search.get()
            on:input=move |e| search.set(event_target_value(&e))
        />
        <Suspense fallback=|| view! { <p class="muted">"Loading tasks…"</p> }>
            {move || Suspend::new(async move {
                // Both snapshots before the rows render: the browser must hydrate exactly what
                // the server drew (a resource read but not awaited may not be ready yet there).
                let _ = pending.await;
                match pages.first.await {
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    Ok(_) => view! {
                        <Show when=move || !rows().is_empty() fallback=|| view! { <p class="muted">"No tasks."</p> }>
                            <ul class="task-list">
                                <For each=rows key=|t| (t.id.clone(), t.updated_at.clone(), t.task_pending_action, t.title.clone()) let:task>
                                    <TaskRow task archive />
                                </For>
                            </ul>
                        </Show>
                    }
                    .into_any(),
                }
            })}
        </Suspense>
        <LoadMore pages testid="sidebar-load-more" />
    }
}

/// The P2 icon of a task (permission outranks clarification).
#[component]
pub fn PendingIcon(pending: Option<PendingAction>) -> impl IntoView {
    match pending {
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
    }
}

#[component]
fn TaskRow(task: Task, archive: Action<String, Result<Task, AppError>>) -> impl IntoView {
    let drawer = expect_context::<Drawer>();
    let nav = expect_context::<Navigator>();
    let href = format!("/t/{}", task.id);
    let id = task.id.clone();
    let clicked = task.clone();
    view! {
        <li class="task-row">
            <a
                class="task-item"
                href=href
                data-testid="sidebar-task-item"
                data-task-id=task.id.clone()
                on:click=move |_| {
                    nav.click(&clicked);
                    if drawer.open.get_untracked() {
                        drawer.picked.set(Some(clicked.id.clone()));
                    }
                }
            >
                <span class="task-title">{task.title.clone()}</span>
                <PendingIcon pending=task.task_pending_action />
            </a>
            <button
                class="icon archive"
                title="Archive this task"
                aria-label=format!("Archive {}", task.title)
                data-testid="task-archive"
                on:click=move |_| {
                    archive.dispatch(id.clone());
                }
            >
                "⌫"
            </button>
        </li>
    }
}
