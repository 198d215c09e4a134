//! A task: its title and step, session tabs with human labels and pending markers, starting
//! another session, cancelling the open turn, and the chat of the active session
//! (`?session=`). Without one, the session is resolved by N1/N2 from a freshly loaded session
//! list and put in the URL.

use leptos::prelude::*;
use leptos_router::NavigateOptions;
use leptos_router::hooks::{use_navigate, use_params_map, use_query_map};

use crate::api::settings::list_agent_profiles;
use crate::api::tasks::get_task;
use crate::api::transcript::{cancel_session, create_session, retry_session, task_sessions};
use crate::client::selection::Choice;
use crate::model::{AgentProfile, PendingAction, Session, SessionState, Task};
use crate::ui::agent_options::AgentOptions;
use crate::ui::chat::ChatPanel;
use crate::ui::client_only::ClientOnly;
use crate::ui::drawer::Drawer;
use crate::ui::live::Live;
use crate::ui::load::load_latest;
use crate::ui::nav::Navigator;

/// What a tab says about its session.
pub fn session_label(s: &Session) -> &'static str {
    match (s.state, s.pending_action) {
        (_, Some(PendingAction::Clarification)) => "Waiting for your answer",
        (_, Some(PendingAction::Permission)) => "Waiting for a permission",
        (SessionState::Created, _) => "New",
        (SessionState::Starting, _) => "Starting…",
        (SessionState::Running, _) => "Working…",
        (SessionState::WaitingForInput, _) => "Idle",
        (SessionState::Completed, _) => "Done",
        (SessionState::Failed, _) => "Failed",
        (SessionState::Cancelled, _) => "Cancelled",
    }
}

#[component]
pub fn TaskPage() -> impl IntoView {
    let live = expect_context::<Live>();
    let drawer = expect_context::<Drawer>();
    let nav = expect_context::<Navigator>();
    let params = use_params_map();
    let query = use_query_map();
    let task_id = Memo::new(move |_| params.read().get("task_id").unwrap_or_default());
    let selected = Memo::new(move |_| query.read().get("session").filter(|s| !s.is_empty()));
    // A fresh load per click (N1: a pending task always reloads its sessions before choosing).
    let ticket = move || nav.intent.get().map(|i| i.ticket);
    // Loaded in the browser (N1 decides there), afresh on every click, resync and session
    // change. Each result names its task, so a list of another task is never decided on.
    let sessions = load_latest(
        move || {
            live.resync.track();
            live.session_list.track();
            ticket();
            task_id.get()
        },
        |id: String| async move { task_sessions(id.clone()).await.map(|list| (id, list)) },
    );
    let task = Resource::new(
        move || (task_id.get(), live.resync.get()),
        |(id, _)| get_task(id),
    );
    let loaded_sessions = move || match sessions.get() {
        Some(Ok((id, list))) if id == task_id.get() => Some(list),
        _ => None,
    };
    let loaded_task = move || match task.get() {
        Some(Ok(t)) if t.id == task_id.get() => Some(t),
        _ => None,
    };
    let current_task = move || live.tasks.with(|b| b.one(loaded_task()));
    let session_list = move || {
        let base = loaded_sessions().unwrap_or_default();
        live.sessions.with(|b| b.view(&task_id.get(), &base))
    };
    Effect::new(move |_| {
        let id = task_id.get();
        live.shown_task.set(Some(id.clone()));
        live.alerts.update(|a| a.viewing(&id));
    });
    on_cleanup(move || live.shown_task.set(None));
    let navigate = use_navigate();
    Effect::new(move |_| {
        let id = task_id.get();
        if selected.get().is_some() {
            drawer.resolved.set(Some(id));
            return;
        }
        let (Some(list), Some(task)) = (
            loaded_sessions(),
            live.tasks.with_untracked(|b| b.one(loaded_task())),
        ) else {
            return;
        };
        let intent = nav.intent_for(&task);
        match nav.decide(&intent, &task, &list, remembered(&id).as_deref()) {
            Choice::Session(session) => {
                nav.settled(&intent);
                navigate(
                    &format!("/t/{id}?session={session}"),
                    NavigateOptions {
                        replace: true,
                        ..Default::default()
                    },
                );
            }
            // N1: nothing matches (or the task changed meanwhile): the task opens alone.
            Choice::TaskOnly => {
                nav.settled(&intent);
                drawer.resolved.set(Some(id));
            }
            Choice::Stale => {}
        }
    });
    Effect::new(move |_| {
        let session = selected.get();
        if let Some(s) = &session {
            remember(&task_id.get_untracked(), s);
        }
        live.watched.set(session);
    });
    // Created here, not inside the Suspense body: it re-runs on every refetch and would
    // dispose what the previous body's closures still read.
    let header = Signal::derive(current_task);
    let tabs = Signal::derive(session_list);
    view! {
        <section class="task-page" data-task-id=move || task_id.get()>
            <Suspense fallback=|| view! { <p class="muted">"Loading the task…"</p> }>
                {move || Suspend::new(async move {
                    match task.await {
                        Ok(_) => view! { <TaskHeader task=header selected /> }.into_any(),
                        Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
            {move || sessions.get().and_then(Result::err).map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })}
            <SessionTabs list=tabs task_id selected />
            <crate::ui::changes::Changes task_id sessions=tabs />
            <ChatPanel session=selected />
        </section>
    }
}

/// The task's title and its last error (P3), with Retry: it relaunches the shown session's
/// agent (L18: what is owed goes first; A4: the prompt a needed login held back).
#[component]
fn TaskHeader(task: Signal<Option<Task>>, selected: Memo<Option<String>>) -> impl IntoView {
    let retry = Action::new(move |session: &String| {
        let session = session.clone();
        async move { retry_session(session).await }
    });
    view! {
        <header class="task-header">
            <h1 class="task-heading">{move || task.get().map(|t| t.title).unwrap_or_default()}</h1>
            {move || {
                task.get()
                    .and_then(|t| t.status_summary)
                    .and_then(|s| s.body.last_error)
                    .map(|e| view! {
                        <div class="last-error-row">
                            <p class="error last-error" role="status">{e.message}</p>
                            <button
                                class="secondary"
                                data-testid="session-retry"
                                disabled=move || selected.get().is_none() || retry.pending().get()
                                on:click=move |_| {
                                    if let Some(s) = selected.get_untracked() {
                                        retry.dispatch(s);
                                    }
                                }
                            >
                                "Retry"
                            </button>
                        </div>
                    })
            }}
            {move || retry.value().get().and_then(Result::err).map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })}
        </header>
    }
}

#[component]
fn SessionTabs(
    list: Signal<Vec<Session>>,
    task_id: Memo<String>,
    selected: Memo<Option<String>>,
) -> impl IntoView {
    let adding = RwSignal::new(false);
    let cancel = Action::new(move |session: &String| {
        let session = session.clone();
        async move { cancel_session(session).await }
    });
    let active_running = move || {
        let sel = selected.get();
        list.get().iter().any(|s| {
            Some(&s.id) == sel.as_ref()
                && matches!(s.state, SessionState::Running | SessionState::Starting)
        })
    };
    view! {
        <div class="session-bar">
            <nav class="session-tabs" role="tablist" aria-label="Sessions">
                <For each=move || list.get() key=|s| (s.id.clone(), s.state, s.pending_action) let:s>
                    <SessionTab s task_id selected />
                </For>
            </nav>
            <div class="session-actions">
                <button
                    class="secondary"
                    data-testid="session-new"
                    aria-expanded=move || adding.get().to_string()
                    on:click=move |_| adding.update(|a| *a = !*a)
                >
                    "New session"
                </button>
                <button
                    class="secondary"
                    data-testid="session-cancel"
                    disabled=move || !active_running() || cancel.pending().get()
                    on:click=move |_| {
                        if let Some(s) = selected.get_untracked() {
                            cancel.dispatch(s);
                        }
                    }
                >
                    "Cancel turn"
                </button>
            </div>
            {move || adding.get().then(|| Suspend::new(new_session_chunk(task_id, adding)))}
        </div>
    }
}

#[component]
fn SessionTab(s: Session, task_id: Memo<String>, selected: Memo<Option<String>>) -> impl IntoView {
    let id = s.id.clone();
    let href = format!("/t/{}?session={}", task_id.get_untracked(), s.id);
    let active = move || selected.get().as_deref() == Some(id.as_str());
    let pending = s.pending_action.map(|p| p.as_str()).unwrap_or("");
    view! {
        <a
            class="session-tab"
            class:active=active.clone()
            role="tab"
            aria-selected=move || active().to_string()
            href=href
            data-testid="session-tab"
            data-session-id=s.id.clone()
            data-pending=pending
            data-state=s.state.as_str()
        >
            <span class="session-name">{s.name.clone()}</span>
            <span class="session-state">{session_label(&s)}</span>
        </a>
    }
}

/// The new-session form's code is its own wasm chunk, fetched when it is first opened (B7).
/// It is built only in the browser, after a click: [`ClientOnly`] keeps its hydration code out.
#[lazy]
fn new_session_chunk(task_id: Memo<String>, adding: RwSignal<bool>) -> AnyView {
    ClientOnly(new_session(task_id, adding)).into_any()
}

/// A plain function rather than a component, with signals and `spawn_local` rather than a
/// resource, `Suspense` and an action: each of those erases its view and compiles hydration
/// code again (decision 0013).
fn new_session(task_id: Memo<String>, adding: RwSignal<bool>) -> impl IntoView {
    let profiles = RwSignal::new(Vec::<AgentProfile>::new());
    leptos::task::spawn_local(async move {
        if let Ok(list) = list_agent_profiles().await {
            profiles.try_set(list);
        }
    });
    let profile = RwSignal::new(String::new());
    let prompt = RwSignal::new(String::new());
    let sending = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let navigate = use_navigate();
    let start = move || {
        if sending.get_untracked() {
            return;
        }
        sending.set(true);
        error.set(None);
        let task = task_id.get_untracked();
        let (chosen, text) = (profile.get_untracked(), prompt.get_untracked());
        let navigate = navigate.clone();
        leptos::task::spawn_local(async move {
            let started = create_session(task.clone(), Some(chosen), text).await;
            sending.try_set(false);
            match started {
                Ok(session) => {
                    adding.try_set(false);
                    navigate(&format!("/t/{task}?session={session}"), Default::default());
                }
                Err(e) => {
                    error.try_set(Some(e.to_string()));
                }
            }
        });
    };
    view! {
        <form
            class="new-session"
            aria-label="Start another session"
            on:submit=move |e| {
                e.prevent_default();
                start();
            }
        >
            <label>
                "Agent "
                <select aria-label="Agent profile" on:change=move |e| profile.set(event_target_value(&e))>
                    <AgentOptions profiles=profiles.into() chosen=profile.into() />
                </select>
            </label>
            <textarea
                aria-label="First prompt of the new session"
                placeholder="What should this session do?"
                required
                prop:value=move || prompt.get()
                on:input=move |e| prompt.set(event_target_value(&e))
            ></textarea>
            <button type="submit" data-testid="session-new-start" disabled=move || sending.get()>"Start"</button>
            {move || error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
        </form>
    }
}

/// N1 "remembered": the session last viewed for a task, kept in the browser.
fn remembered(task_id: &str) -> Option<String> {
    crate::ui::storage::get(&format!("turnstile.session.{task_id}"))
}

fn remember(task_id: &str, session_id: &str) {
    crate::ui::storage::set(&format!("turnstile.session.{task_id}"), session_id);
}
