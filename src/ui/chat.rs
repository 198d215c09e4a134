use leptos::prelude::*;

use crate::api::transcript::{SendPrompt, active_question, session_messages};
use crate::model::Message;
use crate::ui::clarification::Overlay;
use crate::ui::live::Live;

/// The transcript of the active session, its active question (N4) and the composer.
#[component]
pub fn ChatPanel(session: Memo<Option<String>>) -> impl IntoView {
    let live = expect_context::<Live>();
    let send = ServerAction::<SendPrompt>::new();
    let key = move || (session.get(), live.session.get(), send.version().get());
    let messages = Resource::new(key, |(s, _, _)| async move {
        match s {
            Some(s) => session_messages(s).await,
            None => Ok(vec![]),
        }
    });
    let question = Resource::new(key, |(s, _, _)| async move {
        match s {
            Some(s) => active_question(s).await,
            None => Ok(None),
        }
    });
    view! {
        <div class="chat" data-testid="chat-panel" data-active-session-id=move || session.get().unwrap_or_default()>
            <Show when=move || session.get().is_some() fallback=|| view! { <p class="muted">"No session selected."</p> }>
                <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                    {move || Suspend::new(async move {
                        match messages.await {
                            Ok(list) => view! { <Transcript list /> }.into_any(),
                            Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                        }
                    })}
                </Suspense>
                <Suspense>
                    {move || Suspend::new(async move {
                        question.await.ok().flatten().map(|bundle| view! { <Overlay bundle /> })
                    })}
                </Suspense>
                <ActionForm action=send attr:class="composer">
                    <input type="hidden" name="session_id" prop:value=move || session.get().unwrap_or_default() />
                    <textarea name="content" data-testid="prompt-input" aria-label="Message to the agent" placeholder="Message the agent…" required></textarea>
                    <button type="submit" data-testid="prompt-send">"Send"</button>
                </ActionForm>
            </Show>
        </div>
    }
}

#[component]
fn Transcript(list: Vec<Message>) -> impl IntoView {
    view! {
        <ol class="transcript" aria-label="Transcript">
            {list
                .into_iter()
                .map(|m| {
                    let class = format!("chat-message {} {}", m.author.as_str(), m.kind.as_str());
                    view! {
                        <li class=class data-testid="chat-message" data-kind=m.kind.as_str() data-message-id=m.id.clone()>
                            {m.content}
                        </li>
                    }
                })
                .collect_view()}
        </ol>
    }
}
