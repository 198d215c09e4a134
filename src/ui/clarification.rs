//! The active question of the session (N4/N5). One question at a time: options show their
//! label and description; a single question answers on one click; several step with Next and
//! Back and submit on the last once each is answered. Custom text: Enter submits, Shift+Enter
//! breaks the line, 2,000 characters at most. Number keys pick options. Escape collapses from
//! anywhere on the page (never rejects) and `clarification-reopen` brings it back; Skip rejects.
//! After answering: closed at once on success, "this question is gone" on 409, the winner's
//! answer when someone else was first.

use leptos::either::EitherOf3;
use leptos::prelude::*;

use crate::api::transcript::{Answered, answer_question};
use crate::client::answer_draft::{Draft, link_host};
use crate::model::form::InputKind;
use crate::model::limits::ANSWER_CHARS;
use crate::model::{Answer, Bundle, Question, Response};

/// How an answer went.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    /// Answered here; the overlay closes at once (the push confirms).
    Sent,
    /// 409: the question no longer exists as asked.
    Gone,
    /// Someone else answered first.
    Lost(String),
}

impl Outcome {
    /// What the overlay leaves behind once answered.
    fn notice(self) -> Option<String> {
        match self {
            Outcome::Sent => None,
            Outcome::Gone => Some(
                "This question is gone: the agent moved on or it was answered elsewhere.".into(),
            ),
            Outcome::Lost(text) => Some(format!("Someone else answered first: {text}")),
        }
    }
}

fn describe(r: &Response) -> String {
    if r.rejected {
        return "skipped".into();
    }
    r.answers
        .iter()
        .map(|a| {
            let mut parts = a.selected_options.clone();
            parts.extend(a.custom_text.clone());
            parts.join(", ")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The overlay's code is its own wasm chunk, fetched the first time a question is shown (B7,
/// docs/decisions/0013-browser-bundle-size.md). Questions load after hydration, so the server
/// never renders it.
#[lazy]
pub fn overlay_chunk(bundle: Bundle) -> AnyView {
    crate::ui::client_only::ClientOnly(overlay(bundle)).into_any()
}

fn overlay(bundle: Bundle) -> impl IntoView {
    let collapsed = RwSignal::new(false);
    let step = RwSignal::new(0usize);
    let draft = RwSignal::new(Draft::new(&bundle.questions));
    let outcome = RwSignal::new(None::<Outcome>);
    let error = RwSignal::new(None::<String>);
    let questions = StoredValue::new(bundle.questions.clone());
    let count = bundle.questions.len();
    let pending_id = StoredValue::new(bundle.pending_id.clone());
    // One answer in flight at a time; its result decides what the overlay leaves behind.
    let sending = RwSignal::new(false);
    let send = move |answers: Vec<Answer>, rejected: bool| {
        if sending.get_untracked() {
            return;
        }
        sending.set(true);
        error.set(None);
        let pending_id = pending_id.get_value();
        leptos::task::spawn_local(async move {
            let answered = answer_question(pending_id, answers, rejected).await;
            sending.try_set(false);
            let done = match answered {
                Ok(Answered::Claimed) => Outcome::Sent,
                Ok(Answered::Gone) => Outcome::Gone,
                Ok(Answered::Lost { response, .. }) => {
                    Outcome::Lost(response.as_ref().map(describe).unwrap_or_default())
                }
                Err(e) => {
                    error.try_set(Some(e.to_string()));
                    return;
                }
            };
            outcome.try_set(Some(done));
        });
    };
    let complete = move || draft.with(|d| questions.with_value(|qs| d.complete(qs)));
    let submit = move || {
        if complete() {
            send(
                draft.with_untracked(|d| questions.with_value(|qs| d.answers(qs))),
                false,
            );
        }
    };
    let pick = move |q: &Question, oid: String| {
        draft.update(|d| d.pick(q, &oid));
        // One question with one choice: a click is the answer.
        if count == 1 && !Draft::multiple(q) {
            submit();
        }
    };
    // Escape collapses from anywhere; number keys pick options (not while typing).
    #[cfg(feature = "hydrate")]
    {
        let handle = window_event_listener(leptos::ev::keydown, move |e| {
            if outcome.get_untracked().is_some() {
                return;
            }
            if e.key() == "Escape" {
                collapsed.set(true);
                return;
            }
            if collapsed.get_untracked() || typing() {
                return;
            }
            if let Some(n) = e.key().parse::<usize>().ok().filter(|n| *n >= 1) {
                let picked = questions.with_value(|qs| {
                    let q = qs.get(step.get_untracked())?;
                    Some((q.clone(), q.options.get(n - 1)?.id.clone()))
                });
                if let Some((q, oid)) = picked {
                    e.prevent_default();
                    pick(&q, oid);
                }
            }
        });
        on_cleanup(move || handle.remove());
    }
    let body = move || {
        let i = step.get().min(count.saturating_sub(1));
        let q = questions.with_value(|qs| qs[i].clone());
        let last = i + 1 == count;
        let link = q.form.input == Some(InputKind::Url);
        // Enter in a text field answers the last question or moves on to the next.
        let enter = move |e: leptos::ev::KeyboardEvent| {
            if e.key() == "Enter" && !e.shift_key() {
                e.prevent_default();
                if last {
                    submit();
                } else {
                    step.update(|s| *s += 1);
                }
            }
        };
        let problem = {
            let q = q.clone();
            move || draft.with(|d| d.problem(&q))
        };
        view! {
            <fieldset class="question">
                <legend>
                    {(count > 1).then(|| view! { <span class="muted">{format!("Question {} of {count} · ", i + 1)}</span> })}
                    {q.title.clone().map(|t| view! { <strong>{t} " "</strong> })}
                    {q.prompt.clone()}
                    {(!q.form.required).then(|| view! { <span class="muted">" (optional)"</span> })}
                </legend>
                {choices(&q, draft, sending, pick)}
                {value_input(&q, draft, enter)}
                {q.form.link.clone().map(link_view)}
                {move || problem().map(|p| view! {
                    <p class="field-error" role="alert" data-testid="clarification-input-error">{p}</p>
                })}
                <div class="actions">
                    {(count > 1).then(|| view! {
                        <button class="secondary" data-testid="clarification-back" disabled=move || step.get() == 0 on:click=move |_| step.update(|s| *s = s.saturating_sub(1))>"Back"</button>
                    })}
                    {(count > 1 && !last).then(|| view! {
                        <button class="secondary" data-testid="clarification-next" on:click=move |_| step.update(|s| *s += 1)>"Next"</button>
                    })}
                    {(count == 1 || last).then(|| view! {
                        <button data-testid="clarification-submit" disabled=move || !complete() || sending.get() on:click=move |_| submit()>
                            {if link && count == 1 { "Done" } else { "Submit" }}
                        </button>
                    })}
                    <button class="secondary" data-testid="clarification-skip" disabled=move || sending.get() on:click=move |_| send(vec![], true)>"Skip"</button>
                </div>
            </fieldset>
        }
    };
    let context = StoredValue::new(bundle.context.clone());
    let detached = bundle.detached;
    let dialog = move || {
        view! {
            <div class="clarification-overlay" data-testid="clarification-overlay" role="dialog" aria-label="Question from the agent">
                {context.get_value().map(|c| view! { <p class="context">{c}</p> })}
                {detached.then(|| view! {
                    <p class="notice" data-testid="clarification-deferred-notice">"The agent stopped waiting. Your answer will be sent as a new message."</p>
                })}
                {body}
                {move || error.get().map(|t| view! { <p class="error" role="alert">{t}</p> })}
            </div>
        }
    };
    let reopen = move || {
        view! {
            <button class="overlay-reopen" data-testid="clarification-reopen" on:click=move |_| collapsed.set(false)>
                "Show the agent's question"
            </button>
        }
    };
    move || match outcome.get() {
        None if collapsed.get() => EitherOf3::A(reopen()),
        None => EitherOf3::B(dialog()),
        Some(outcome) => EitherOf3::C(
            outcome
                .notice()
                .map(|text| view! { <p class="notice" role="status">{text}</p> }),
        ),
    }
}

/// The options of a choice question: buttons for one pick, checkboxes for several (E8).
fn choices<P>(
    q: &Question,
    draft: RwSignal<Draft>,
    sending: RwSignal<bool>,
    pick: P,
) -> Option<impl IntoView + use<P>>
where
    P: Fn(&Question, String) + Copy + Send + Sync + 'static,
{
    if q.form.input.is_some() {
        return None;
    }
    let multiple = Draft::multiple(q);
    let q = StoredValue::new(q.clone());
    let options = q.with_value(|q| q.options.clone());
    Some(view! {
        <div class="options" role=multiple.then_some("group")>
            {options
                .into_iter()
                .enumerate()
                .map(|(n, o)| {
                    let oid = StoredValue::new(o.id.clone());
                    let chosen = move || {
                        draft.with(|d| q.with_value(|q| oid.with_value(|oid| d.is_chosen(&q.id, oid))))
                    };
                    let click = move || q.with_value(|q| pick(q, oid.get_value()));
                    let label = view! {
                        <span class="option-label"><kbd>{n + 1}</kbd> " " {o.label.clone()}</span>
                        {(!o.description.is_empty()).then(|| view! { <span class="option-description">{o.description.clone()}</span> })}
                    };
                    if multiple {
                        leptos::either::Either::Left(view! {
                            <label class="option checkbox" class:selected=chosen>
                                <input
                                    type="checkbox"
                                    data-testid=format!("clarification-option-{}", o.id)
                                    prop:checked=chosen
                                    disabled=move || sending.get()
                                    on:change=move |_| click()
                                />
                                <span class="option-text">{label}</span>
                            </label>
                        })
                    } else {
                        leptos::either::Either::Right(view! {
                            <button
                                class="option"
                                class:selected=chosen
                                aria-pressed=move || chosen().to_string()
                                data-testid=format!("clarification-option-{}", o.id)
                                disabled=move || sending.get()
                                on:click=move |_| click()
                            >
                                {label}
                            </button>
                        })
                    }
                })
                .collect_view()}
        </div>
    })
}

/// The value a question takes in place of (or beside) its options: "Other" text, a typed
/// text, a whole number or a number (E8). A link question has none.
fn value_input<E>(q: &Question, draft: RwSignal<Draft>, enter: E) -> impl IntoView + use<E>
where
    E: Fn(leptos::ev::KeyboardEvent) + Copy + Send + Sync + 'static,
{
    let qid = StoredValue::new(q.id.clone());
    let value = move || draft.with(|d| qid.with_value(|id| d.text(id)));
    let input = move |e: leptos::ev::Event| {
        let v = event_target_value(&e);
        draft.update(|d| qid.with_value(|id| d.set_text(id, v)));
    };
    let form = &q.form;
    match form.input {
        None if !form.other => None,
        None | Some(InputKind::Text) => {
            let other = form.input.is_none();
            let max = form
                .max_length
                .map_or(ANSWER_CHARS, |m| (m as usize).min(ANSWER_CHARS));
            let (testid, label, hint) = if other {
                (
                    "clarification-custom-input",
                    "Your own answer",
                    "Or write your own answer (Enter sends, Shift+Enter for a new line)",
                )
            } else {
                (
                    "clarification-input",
                    "Your answer",
                    "Your answer (Enter sends, Shift+Enter for a new line)",
                )
            };
            Some(leptos::either::Either::Left(view! {
                <label class="custom-label">
                    <span class="visually-hidden">{label}</span>
                    <textarea
                        class="custom"
                        data-testid=testid
                        aria-label=label
                        placeholder=hint
                        maxlength=max
                        rows="2"
                        prop:value=value
                        on:input=input
                        on:keydown=enter
                    ></textarea>
                    <span class="counter muted" aria-live="polite">{move || format!("{} / {max}", value().chars().count())}</span>
                </label>
            }))
        }
        Some(InputKind::Integer | InputKind::Number) => {
            let step = if form.input == Some(InputKind::Integer) {
                "1"
            } else {
                "any"
            };
            let bounds = match (form.minimum, form.maximum) {
                (Some(a), Some(b)) => format!("From {a} to {b}"),
                (Some(a), None) => format!("At least {a}"),
                (None, Some(b)) => format!("At most {b}"),
                (None, None) => String::new(),
            };
            Some(leptos::either::Either::Right(view! {
                <label class="custom-label">
                    <span class="visually-hidden">"Your answer"</span>
                    <input
                        class="custom"
                        type="number"
                        data-testid="clarification-input"
                        aria-label="Your answer"
                        step=step
                        min=form.minimum
                        max=form.maximum
                        prop:value=value
                        on:input=input
                        on:keydown=enter
                    />
                    {(!bounds.is_empty()).then(|| view! { <span class="counter muted">{bounds}</span> })}
                </label>
            }))
        }
        Some(InputKind::Url) => None,
    }
}

/// A link the agent asks the user to open (E7): the host and the full link shown as text, and
/// opened only by the user's click, in a new tab that cannot reach back to this page.
fn link_view(link: String) -> impl IntoView {
    let host = link_host(&link);
    view! {
        <div class="link-question" data-testid="clarification-link-block">
            {host.clone().map(|h| view! { <p>"Opens " <strong data-testid="clarification-link-host">{h}</strong></p> })}
            <p class="link-text"><code data-testid="clarification-link-text">{link.clone()}</code></p>
            {host.map(|h| view! {
                <a class="button" href=link target="_blank" rel="noopener noreferrer" data-testid="clarification-link">
                    {format!("Open {h}")}
                </a>
            })}
        </div>
    }
}

/// Whether the user is typing in a field (number keys then type, they do not pick).
#[cfg(feature = "hydrate")]
fn typing() -> bool {
    document()
        .active_element()
        .map(|e| matches!(e.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT"))
        .unwrap_or(false)
}
