//! W4: what a task's agents changed — the changed files with their counts and, for the file
//! chosen, its diff with added and removed lines coloured. Closed until opened; loaded
//! again when a session of the task changes state (a turn ended). On a phone the list comes
//! first, the diff under it.

use leptos::prelude::*;

use crate::api::tasks::{task_changes, task_file_diff};
use crate::model::{FileDiff, Session};

#[component]
pub fn Changes(task_id: Memo<String>, sessions: Signal<Vec<Session>>) -> impl IntoView {
    let open = RwSignal::new(false);
    let chosen = RwSignal::new(None::<String>);
    // A turn that ends moves its session's state: the changes are read again then.
    let states =
        Memo::new(move |_| sessions.with(|list| list.iter().map(|s| s.state).collect::<Vec<_>>()));
    let changes = Resource::new(
        move || (task_id.get(), open.get(), states.get()),
        |(id, open, _)| async move {
            if open {
                Some(task_changes(id).await)
            } else {
                None
            }
        },
    );
    let diff = Resource::new(
        move || (task_id.get(), chosen.get(), states.get()),
        |(id, path, _)| async move {
            match path {
                Some(path) => Some(task_file_diff(id, path).await),
                None => None,
            }
        },
    );
    view! {
        <section class="changes" data-testid="changes" aria-label="Changes">
            <button
                class="secondary"
                data-testid="changes-open"
                aria-expanded=move || open.get().to_string()
                on:click=move |_| open.update(|o| *o = !*o)
            >
                "Changes"
            </button>
            <Suspense fallback=|| view! { <p class="muted">"Reading the worktree…"</p> }>
                {move || Suspend::new(async move {
                    match changes.await {
                        None => ().into_any(),
                        Some(Err(e)) => view! { <p class="muted" data-testid="changes-none">{e.to_string()}</p> }.into_any(),
                        Some(Ok(c)) if c.files.is_empty() => view! { <p class="muted" data-testid="changes-none">"No changes yet."</p> }.into_any(),
                        Some(Ok(c)) => view! {
                            <ul class="changed-files">
                                {c.files
                                    .into_iter()
                                    .map(|f| {
                                        let path = f.path.clone();
                                        let here = f.path.clone();
                                        view! {
                                            <li>
                                                <button
                                                    class="changed-file"
                                                    class:active=move || chosen.get().as_deref() == Some(here.as_str())
                                                    data-testid="changed-file"
                                                    data-path=f.path.clone()
                                                    data-status=f.status.clone()
                                                    on:click=move |_| chosen.set(Some(path.clone()))
                                                >
                                                    <span class="path">{f.path.clone()}</span>
                                                    <span class="status muted">{f.status.clone()}</span>
                                                    {if f.binary {
                                                        view! { <span class="muted">"binary"</span> }.into_any()
                                                    } else {
                                                        view! {
                                                            <span class="adds">"+" {f.additions}</span>
                                                            <span class="dels">"−" {f.deletions}</span>
                                                        }
                                                        .into_any()
                                                    }}
                                                </button>
                                            </li>
                                        }
                                    })
                                    .collect_view()}
                            </ul>
                        }
                        .into_any(),
                    }
                })}
            </Suspense>
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    match diff.await {
                        None => ().into_any(),
                        Some(Err(e)) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                        Some(Ok(d)) => view! { <Diff d /> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

/// One file's hunks; every line is text (never markup).
#[component]
fn Diff(d: FileDiff) -> impl IntoView {
    view! {
        <pre class="diff" data-testid="file-diff" data-path=d.file.path.clone()>
            {d.hunks
                .into_iter()
                .map(|h| view! {
                    <span class="line hunk-header">{h.header}</span>
                    {h.lines
                        .into_iter()
                        .map(|l| {
                            let (class, mark) = match l.kind.as_str() {
                                "add" => ("line add", "+"),
                                "del" => ("line del", "-"),
                                _ => ("line ctx", " "),
                            };
                            view! { <span class=class data-testid="diff-line" data-kind=l.kind.clone()>{mark} {l.text}</span> }
                        })
                        .collect_view()}
                })
                .collect_view()}
            {d.truncated.then(|| view! { <span class="line muted">"… cut: the diff is longer than the limit"</span> })}
        </pre>
    }
}
