use leptos::prelude::*;
use leptos_router::NavigateOptions;
use leptos_router::hooks::{use_navigate, use_params_map, use_query_map};

use crate::api::tasks::list_tasks;
use crate::api::transcript::task_sessions;
use crate::client::selection::resolve_session;
use crate::model::{PendingAction, Session};
use crate::ui::chat::ChatPanel;
use crate::ui::drawer::Drawer;
use crate::ui::live::Live;

/// A task: its session tabs and the chat of the active session (`?session=`). Without one,
/// the session is resolved from a fresh session list (N1) and put in the URL.
#[component]
pub fn TaskPage() -> impl IntoView {
    let live = expect_context::<Live>();
    let drawer = expect_context::<Drawer>();
    let params = use_params_map();
    let query = use_query_map();
    let task_id = Memo::new(move |_| params.read().get("task_id").unwrap_or_default());
    let selected = Memo::new(move |_| query.read().get("session").filter(|s| !s.is_empty()));
    let sessions = Resource::new(
        move || (task_id.get(), live.tasks.get(), live.session.get()),
        |(id, _, _)| task_sessions(id),
    );
    let tasks = Resource::new(move || live.tasks.get(), |_| list_tasks());
    let navigate = use_navigate();
    Effect::new(move |_| {
        let id = task_id.get();
        if selected.get().is_some() {
            drawer.resolved.set(Some(id));
            return;
        }
        let (Some(Ok(list)), Some(Ok(all))) = (sessions.get(), tasks.get()) else {
            return;
        };
        let pending: Option<PendingAction> = all
            .iter()
            .find(|t| t.id == id)
            .and_then(|t| t.task_pending_action);
        match resolve_session(pending, &list, remembered(&id).as_deref()) {
            Some(session) => navigate(
                &format!("/t/{id}?session={session}"),
                NavigateOptions {
                    replace: true,
                    ..Default::default()
                },
            ),
            // N1: nothing matches: the task opens with no session selected.
            None => drawer.resolved.set(Some(id)),
        }
    });
    Effect::new(move |_| {
        let session = selected.get();
        if let Some(s) = &session {
            remember(&task_id.get_untracked(), s);
        }
        live.watched.set(session);
    });
    view! {
        <section class="task-page" data-task-id=move || task_id.get()>
            <Suspense fallback=|| view! { <p class="muted">"Loading sessions…"</p> }>
                {move || Suspend::new(async move {
                    match sessions.await {
                        Ok(list) => view! { <SessionTabs list task_id=task_id.get_untracked() selected /> }.into_any(),
                        Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
            <ChatPanel session=selected />
        </section>
    }
}

#[component]
fn SessionTabs(
    list: Vec<Session>,
    task_id: String,
    selected: Memo<Option<String>>,
) -> impl IntoView {
    view! {
        <nav class="session-tabs" role="tablist" aria-label="Sessions">
            {list
                .into_iter()
                .map(|s| {
                    let id = s.id.clone();
                    let href = format!("/t/{task_id}?session={}", s.id);
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
                        >
                            {s.name.clone()}
                            <span class="session-state">{s.state.as_str()}</span>
                        </a>
                    }
                })
                .collect_view()}
        </nav>
    }
}

/// N1 "remembered": the session last viewed for a task, kept in the browser.
fn remembered(task_id: &str) -> Option<String> {
    #[cfg(feature = "hydrate")]
    {
        let storage = window().local_storage().ok().flatten()?;
        storage
            .get_item(&format!("turnstile.session.{task_id}"))
            .ok()
            .flatten()
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = task_id;
        None
    }
}

fn remember(task_id: &str, session_id: &str) {
    #[cfg(feature = "hydrate")]
    if let Some(storage) = window().local_storage().ok().flatten() {
        let _ = storage.set_item(&format!("turnstile.session.{task_id}"), session_id);
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (task_id, session_id);
}
