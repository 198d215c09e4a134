//! The pending permission request of the active session (N6): what the agent wants to run and
//! one button per option. A request whose agent is gone (409) shows as cancelled.

use leptos::prelude::*;

use crate::api::transcript::{PermissionAnswered, answer_permission};
use crate::model::Permission;

/// The prompt's code is its own wasm chunk, fetched the first time a request is shown (B7).
/// Requests load after hydration, so the server never renders it.
#[lazy]
pub fn permission_chunk(permission: Permission) -> AnyView {
    view! { <PermissionPrompt permission /> }.into_any()
}

#[component]
pub fn PermissionPrompt(permission: Permission) -> impl IntoView {
    let id = permission.id.clone();
    let answer = Action::new(move |option: &String| {
        let (id, option) = (id.clone(), option.clone());
        async move { answer_permission(id, option).await }
    });
    let done = move || matches!(answer.value().get(), Some(Ok(PermissionAnswered::Done(_))));
    let gone = move || matches!(answer.value().get(), Some(Ok(PermissionAnswered::Gone)));
    let title = permission.title.clone();
    let options = StoredValue::new(permission.options.clone());
    view! {
        <Show when=move || !done()>
            <div class="permission-prompt" data-testid="permission-prompt" role="dialog" aria-label="Permission request from the agent">
                <p><strong>"The agent asks for permission: "</strong> {title.clone()}</p>
                <Show
                    when=move || !gone()
                    fallback=|| view! { <p class="notice" role="status">"This request was cancelled: its agent is no longer waiting."</p> }
                >
                    <div class="actions">
                        {options
                            .get_value()
                            .iter()
                            .map(|o| {
                                let option = o.id.clone();
                                let reject = o.kind.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("reject"));
                                view! {
                                    <button
                                        class:secondary=reject
                                        data-testid=format!("permission-option-{}", o.id)
                                        disabled=move || answer.pending().get()
                                        on:click=move |_| {
                                            answer.dispatch(option.clone());
                                        }
                                    >
                                        {o.label.clone()}
                                    </button>
                                }
                            })
                            .collect_view()}
                    </div>
                </Show>
                {move || answer.value().get().and_then(Result::err).map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })}
            </div>
        </Show>
    }
}
