//! The board at `/`: one column per step of a workflow, one card per open task of the loaded
//! pages (the first page, then "load more", like the sidebar), with the
//! task's pending icon (P2) and what its primary session is doing. A card moves to another step
//! by choosing it (`PATCH /tasks/{id}` with `step_id`). With several workflows a switcher picks
//! one. On phones the columns stack into a list.

use leptos::prelude::*;

use crate::api::tasks::{list_workflows, move_task};
use crate::model::{AppError, SessionState, Task, Workflow};
use crate::ui::live::Live;
use crate::ui::nav::Navigator;
use crate::ui::pages::{LoadMore, TaskPages};
use crate::ui::sidebar::PendingIcon;

/// Moves a task to a step (`PATCH /tasks/{id}` with `step_id`).
type Mover = Action<(String, String), Result<Task, AppError>>;

#[component]
pub fn Board() -> impl IntoView {
    let live = expect_context::<Live>();
    let workflows = Resource::new(move || live.resync.get(), |_| list_workflows());
    let pages = TaskPages::new(Signal::derive(String::new));
    // One action for every card: cards are rebuilt when the board reloads, the action is not.
    let moving: Mover = Action::new(move |(task, step): &(String, String)| {
        let (task, step) = (task.clone(), step.clone());
        async move {
            let moved = move_task(task, step).await;
            if let Ok(t) = &moved {
                live.tasks.update(|b| b.merge([t.clone()]));
            }
            moved
        }
    });
    let chosen = RwSignal::new(None::<String>);
    view! {
        <section class="board" aria-label="Board">
            <Suspense fallback=|| view! { <p class="muted">"Loading the board…"</p> }>
                {move || Suspend::new(async move {
                    let workflows = match workflows.await {
                        Ok(w) => w,
                        Err(e) => return view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    };
                    // The first page is in the snapshot before the board renders (SSR).
                    let _ = pages.first.await;
                    let default = workflows
                        .iter()
                        .find(|w| w.is_default)
                        .or(workflows.first())
                        .map(|w| w.id.clone());
                    let current = {
                        let workflows = workflows.clone();
                        move || {
                            let id = chosen.get().or(default.clone());
                            workflows.iter().find(|w| Some(&w.id) == id.as_ref()).cloned()
                        }
                    };
                    let switcher = (workflows.len() > 1).then(|| {
                        let options = workflows.clone();
                        view! {
                            <label class="workflow-switcher">
                                "Workflow "
                                <select
                                    data-testid="board-workflow"
                                    on:change=move |e| chosen.set(Some(event_target_value(&e)))
                                >
                                    {options
                                        .into_iter()
                                        .map(|w| view! { <option value=w.id.clone()>{w.name.clone()}</option> })
                                        .collect_view()}
                                </select>
                            </label>
                        }
                    });
                    view! {
                        {switcher}
                        {move || moving.value().get().and_then(Result::err).map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })}
                        {move || current().map(|w| view! { <Columns workflow=w pages moving /> })}
                        <LoadMore pages testid="board-load-more" />
                    }
                    .into_any()
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn Columns(workflow: Workflow, pages: TaskPages, moving: Mover) -> impl IntoView {
    let live = expect_context::<Live>();
    let workflow_id = workflow.id.clone();
    let cards = move || {
        let id = workflow_id.clone();
        let base = pages.loaded();
        live.tasks.with(|book| {
            book.view(&base, |t| {
                !t.archived && t.workflow_id.as_ref() == Some(&id)
            })
        })
    };
    let steps = workflow.steps.clone();
    view! {
        <div class="board-columns">
            {workflow
                .steps
                .iter()
                .map(|step| {
                    let step_id = step.id.clone();
                    let in_step = {
                        let step_id = step_id.clone();
                        let cards = cards.clone();
                        move || {
                            cards()
                                .into_iter()
                                .filter(|t| t.step_id.as_deref() == Some(step_id.as_str()))
                                .collect::<Vec<_>>()
                        }
                    };
                    let count = {
                        let in_step = in_step.clone();
                        move || in_step().len()
                    };
                    let steps = steps.clone();
                    view! {
                        <section class="board-column" data-testid="board-column" data-step-id=step_id.clone() aria-label=step.name.clone()>
                            <h2>{step.name.clone()} " " <span class="muted">{count}</span></h2>
                            <ul>
                                <For
                                    each=in_step
                                    key=|t| (t.id.clone(), t.updated_at.clone(), t.task_pending_action, t.status_summary.as_ref().map(|s| s.revision))
                                    let:task
                                >
                                    <Card task steps=steps.clone() moving />
                                </For>
                            </ul>
                        </section>
                    }
                })
                .collect_view()}
        </div>
    }
}

fn activity(task: &Task) -> &'static str {
    let state = task
        .status_summary
        .as_ref()
        .and_then(|s| s.body.primary_session.as_ref())
        .map(|p| p.state);
    match (task.task_pending_action, state) {
        (Some(_), _) => "Waiting for you",
        (None, Some(SessionState::Running | SessionState::Starting)) => "Working…",
        (None, Some(SessionState::WaitingForInput | SessionState::Created)) => "Idle",
        (None, Some(SessionState::Failed)) => "Failed",
        (None, Some(SessionState::Completed)) => "Done",
        (None, Some(SessionState::Cancelled)) => "Cancelled",
        (None, None) => "No session yet",
    }
}

#[component]
fn Card(task: Task, steps: Vec<crate::model::WorkflowStep>, moving: Mover) -> impl IntoView {
    let nav = expect_context::<Navigator>();
    let id = task.id.clone();
    let clicked = task.clone();
    let current = task.step_id.clone().unwrap_or_default();
    view! {
        <li class="board-card" data-testid="board-card" data-task-id=task.id.clone()>
            <a class="card-title" href=format!("/t/{}", task.id) on:click=move |_| nav.click(&clicked)>
                {task.title.clone()}
            </a>
            <div class="card-meta">
                <PendingIcon pending=task.task_pending_action />
                <span class="muted activity">{activity(&task)}</span>
            </div>
            <label class="card-move">
                <span class="visually-hidden">"Move to step"</span>
                <select
                    aria-label=format!("Move {} to step", task.title)
                    data-testid="board-card-move"
                    disabled=move || moving.pending().get()
                    on:change=move |e| {
                        moving.dispatch((id.clone(), event_target_value(&e)));
                    }
                >
                    {steps
                        .into_iter()
                        .map(|s| {
                            let selected = s.id == current;
                            view! { <option value=s.id.clone() selected=selected>{s.name.clone()}</option> }
                        })
                        .collect_view()}
                </select>
            </label>
        </li>
    }
}
