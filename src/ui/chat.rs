//! The chat of the active session: the transcript newest-last (paged upward for long
//! sessions), agent text as sanitized Markdown, tool calls and thoughts as collapsed rows, the
//! active question (N4/N5), the pending permission request (N6) and the composer.

use leptos::prelude::*;

use crate::api::transcript::{SendPrompt, active_question, pending_permission, session_messages};
use crate::client::store::Transcript;
use crate::model::{Message, MessageAuthor, MessageKind, MessagePage};
use crate::ui::clarification::overlay_chunk;
use crate::ui::live::Live;
use crate::ui::load::load_latest;
use crate::ui::permission::permission_chunk;

#[component]
pub fn ChatPanel(session: Memo<Option<String>>) -> impl IntoView {
    let live = expect_context::<Live>();
    let send = ServerAction::<SendPrompt>::new();
    // The composer empties once its message was accepted.
    let composer = NodeRef::<leptos::html::Textarea>::new();
    Effect::new(move |_| {
        if let Some(Ok(_)) = send.value().get()
            && let Some(t) = composer.get_untracked()
        {
            t.set_value("");
        }
    });
    let page = Resource::new(
        move || (session.get(), live.resync.get(), live.subscribed.get()),
        |(s, ..)| async move {
            match s {
                Some(s) => session_messages(s.clone(), None)
                    .await
                    .map(|p| Some((s, p))),
                None => Ok(None),
            }
        },
    );
    // The snapshot becomes the store for this session; pushes fold into it from then on.
    Effect::new(move |_| {
        if let Some(Ok(Some((id, p)))) = page.get() {
            live.transcript.update(|(held, t)| {
                let base = if held.as_deref() == Some(id.as_str()) {
                    t.with_snapshot(&p.messages, p.more_before)
                } else {
                    Transcript::default().with_snapshot(&p.messages, p.more_before)
                };
                *held = Some(id);
                *t = base;
            });
        }
    });
    // The shown session's transcript: the live store once it holds this session, before that
    // (hydration, before the effect ran) the snapshot the Suspense body was rendered with —
    // never another session's.
    let messages = move |snapshot: &Option<(String, MessagePage)>| {
        let id = session.get();
        let held = live
            .transcript
            .with(|(held, t)| (held == &id).then(|| t.clone()));
        match (held, snapshot) {
            (Some(t), _) => t,
            (None, Some((s, p))) if id.as_ref() == Some(s) => {
                Transcript::default().with_snapshot(&p.messages, p.more_before)
            }
            _ => Transcript::default(),
        }
    };
    let earlier = Action::new(move |(session, before): &(String, String)| {
        let (session, before) = (session.clone(), before.clone());
        async move {
            let older = session_messages(session.clone(), Some(before)).await;
            if let Ok(p) = &older {
                live.transcript.update(|(held, t)| {
                    if held.as_deref() == Some(session.as_str()) {
                        t.prepend(p.messages.clone(), p.more_before);
                    }
                });
            }
            older
        }
    });
    // The question and the permission request load in the browser only (the overlay is an
    // interactive control; the server renders the transcript). Memos keep the overlay and its
    // draft when a refetch returns the same bundle.
    let shown_question =
        shown_session_load(session, live.questions, active_question, |b| &b.session_id);
    let shown_permission = shown_session_load(session, live.permissions, pending_permission, |p| {
        &p.session_id
    });
    view! {
        <div class="chat" data-testid="chat-panel" data-active-session-id=move || session.get().unwrap_or_default()>
            <Show when=move || session.get().is_some() fallback=|| view! { <p class="muted">"No session selected."</p> }>
                <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                    {move || Suspend::new(async move {
                        match page.await {
                            Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                            Ok(snapshot) => {
                                let (a, b, c) = (snapshot.clone(), snapshot.clone(), snapshot);
                                view! {
                                    // Newest last, anchored at the bottom by CSS (`column-reverse`
                                    // scroller): it opens at the newest row and follows new rows
                                    // while the reader is there, with no script.
                                    <div class="transcript-scroll">
                                    <ol class="transcript" aria-label="Transcript">
                                        <Show when=move || messages(&a).more_before>
                                            <li class="load-earlier">
                                                <button
                                                    class="secondary"
                                                    data-testid="transcript-load-earlier"
                                                    disabled=move || earlier.pending().get()
                                                    on:click={
                                                        let b = b.clone();
                                                        move |_| {
                                                            let first = messages(&b).messages.first().map(|m| m.id.clone());
                                                            if let (Some(s), Some(first)) = (session.get_untracked(), first) {
                                                                earlier.dispatch((s, first));
                                                            }
                                                        }
                                                    }
                                                >
                                                    "Load earlier messages"
                                                </button>
                                            </li>
                                        </Show>
                                        <For each=move || messages(&c).messages key=|m| (m.id.clone(), m.updated_at.clone()) let:m>
                                            <Row m />
                                        </For>
                                    </ol>
                                    </div>
                                }
                                .into_any()
                            }
                        }
                    })}
                </Suspense>
                {move || shown_permission.get().map(|p| Suspend::new(permission_chunk(p)))}
                {move || shown_question.get().map(|bundle| Suspend::new(overlay_chunk(bundle)))}
                {move || live.expired.get().map(|_| view! {
                    <p class="notice" data-testid="clarification-expired-notice" role="status">
                        "The agent's question expired: its session ended."
                    </p>
                })}
                <form
                    class="composer"
                    method="post"
                    action={<SendPrompt as leptos::server_fn::ServerFn>::url()}
                    on:submit=move |e| {
                        let field = crate::ui::form::take_submission(&e);
                        send.dispatch(SendPrompt { session_id: field("session_id"), content: field("content") });
                    }
                >
                    <input type="hidden" name="session_id" prop:value=move || session.get().unwrap_or_default() />
                    <textarea
                        name="content"
                        node_ref=composer
                        data-testid="prompt-input"
                        aria-label="Message to the agent"
                        placeholder="Message the agent… (Enter sends, Shift+Enter for a new line)"
                        maxlength=crate::model::limits::PROMPT_CHARS
                        required
                        on:keydown=move |e| {
                            if e.key() == "Enter" && !e.shift_key() && !e.is_composing() {
                                e.prevent_default();
                                #[cfg(feature = "hydrate")]
                                if let Some(form) = composer.get_untracked().and_then(|t| t.form()) {
                                    let _ = form.request_submit();
                                }
                            }
                        }
                    ></textarea>
                    <button type="submit" data-testid="prompt-send">"Send"</button>
                </form>
                {move || send.value().get().and_then(Result::err).map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })}
            </Show>
        </div>
    }
}

/// What the shown session has pending, loaded in the browser whenever the session, `changed`
/// or a resync moves; only the shown session's item (N4): never another session's while one
/// loads. A failed load keeps what was shown.
fn shown_session_load<T, Fut>(
    session: Memo<Option<String>>,
    changed: RwSignal<u64>,
    fetch: fn(String) -> Fut,
    session_of: fn(&T) -> &String,
) -> Memo<Option<T>>
where
    T: Clone + PartialEq + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Option<T>, crate::model::AppError>> + 'static,
{
    let live = expect_context::<Live>();
    let loaded = load_latest(
        move || {
            live.resync.track();
            changed.track();
            session.get()
        },
        move |s: Option<String>| async move {
            match s {
                Some(s) => fetch(s).await,
                None => Ok(None),
            }
        },
    );
    Memo::new(move |shown: Option<&Option<T>>| {
        let id = session.get();
        let ours = |item: &T| Some(session_of(item)) == id.as_ref();
        match loaded.get() {
            Some(Ok(item)) => item.filter(ours),
            // A refetch that failed (a network blip, a server at its limit) tells nothing new:
            // what was shown stays, still answerable (a gone one answers 409), until the next
            // push or reconnect refetches.
            Some(Err(_)) => shown.cloned().flatten().filter(ours),
            None => None,
        }
    })
}

/// One transcript row: agent text as the server's sanitized Markdown, tool calls and thoughts
/// collapsed, everything else as plain text.
#[component]
fn Row(m: Message) -> impl IntoView {
    let class = format!("chat-message {} {}", m.author.as_str(), m.kind.as_str());
    let body = match (m.author, m.kind, m.html.clone()) {
        (MessageAuthor::Agent, MessageKind::Thinking, html) => view! {
            <details class="collapsed">
                <summary>"Thinking"</summary>
                <Markdown html=html text=m.content.clone() />
            </details>
        }
        .into_any(),
        (_, MessageKind::ToolCall, _) => view! {
            <details class="collapsed">
                <summary>"Tool call: " {m.content.clone()}</summary>
            </details>
        }
        .into_any(),
        (MessageAuthor::Agent, MessageKind::Text, html) => {
            view! { <Markdown html=html text=m.content.clone() /> }.into_any()
        }
        _ => view! { <div class="plain">{m.content.clone()}</div> }.into_any(),
    };
    view! {
        <li class=class data-testid="chat-message" data-kind=m.kind.as_str() data-message-id=m.id.clone()>
            {body}
        </li>
    }
}

/// HTML the server rendered and sanitized (ammonia); plain text when it sent none.
#[component]
fn Markdown(html: Option<String>, text: String) -> impl IntoView {
    match html {
        Some(html) => {
            view! { <div class="markdown" data-testid="agent-markdown" inner_html=html></div> }
                .into_any()
        }
        None => view! { <div class="plain">{text}</div> }.into_any(),
    }
}
