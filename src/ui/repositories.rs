//! Repositories (W1, W2): the settings section that lists and adds them, and the options of
//! the new-task form's repository `<select>`.

use leptos::prelude::*;

use crate::api::settings::{add_repository, list_repositories};
use crate::model::Repository;

/// The settings section: every repository with what its tasks get (a worktree of its base
/// branch, or the directory itself), and a form that adds one by its path.
#[component]
pub fn RepositorySettings() -> impl IntoView {
    let version = RwSignal::new(0u64);
    let list = Resource::new(move || version.get(), |_| list_repositories());
    let path = RwSignal::new(String::new());
    let name = RwSignal::new(String::new());
    let add = Action::new(move |(path, name): &(String, String)| {
        let (path, name) = (path.clone(), name.clone());
        async move { add_repository(path, (!name.trim().is_empty()).then_some(name)).await }
    });
    Effect::new(move |_| {
        if let Some(Ok(_)) = add.value().get() {
            path.set(String::new());
            name.set(String::new());
            version.update(|v| *v += 1);
        }
    });
    view! {
        <h1>"Repositories"</h1>
        <p class="muted">"A task on a git repository gets a worktree and a branch of its own, so its agents never touch your checkout or another task's work. A plain directory is shared by its tasks (not isolated)."</p>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match list.await {
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    Ok(list) => view! {
                        <ul class="repositories">
                            {list
                                .into_iter()
                                .map(|r| view! {
                                    <li class="repository" data-testid="repository" data-repository-name=r.name.clone()>
                                        <strong>{r.name.clone()}</strong>
                                        <code>{r.path.clone()}</code>
                                        <span class="muted">{describe(&r)}</span>
                                    </li>
                                })
                                .collect_view()}
                        </ul>
                    }
                    .into_any(),
                }
            })}
        </Suspense>
        <form
            class="repository-form"
            aria-label="Add a repository"
            on:submit=move |e| {
                e.prevent_default();
                add.dispatch((path.get_untracked(), name.get_untracked()));
            }
        >
            <label>"Directory" <input required placeholder="/home/me/src/project" data-testid="repository-path" prop:value=move || path.get() on:input=move |e| path.set(event_target_value(&e)) /></label>
            <label>"Name (optional)" <input data-testid="repository-name" prop:value=move || name.get() on:input=move |e| name.set(event_target_value(&e)) /></label>
            <button type="submit" data-testid="repository-add" disabled=move || add.pending().get()>"Add repository"</button>
            {move || add.value().get().and_then(Result::err).map(|e| view! { <p class="error" role="alert" data-testid="repository-error">{e.to_string()}</p> })}
        </form>
    }
}

/// What a repository's tasks get, in words.
fn describe(r: &Repository) -> String {
    match (&r.git, &r.base_branch) {
        (true, Some(branch)) => format!("git · tasks branch off {branch}"),
        (true, None) => "git".to_string(),
        (false, _) => "plain directory · not isolated".to_string(),
    }
}

/// The options of a new task's repository `<select>`: none (a directory of its own), then
/// every repository.
#[component]
pub fn RepositoryOptions(repositories: Signal<Vec<Repository>>) -> impl IntoView {
    view! {
        <option value="">"No repository"</option>
        {move || {
            repositories
                .get()
                .into_iter()
                .map(|r| {
                    let label = if r.git { r.name.clone() } else { format!("{} (not isolated)", r.name) };
                    view! { <option value=r.id.clone()>{label}</option> }
                })
                .collect_view()
        }}
    }
}
