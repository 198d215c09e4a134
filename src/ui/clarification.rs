//! The active question of the session (N4/N5). One question at a time: options show their
//! label and description; a single question answers on one click; several step with Next and
//! Back and submit on the last once each is answered. Custom text: Enter submits, Shift+Enter
//! breaks the line, 2,000 characters at most. Number keys pick options. Escape collapses from
//! anywhere on the page (never rejects) and `clarification-reopen` brings it back; Skip rejects.
//! After answering: closed at once on success, "this question is gone" on 409, the winner's
//! answer when someone else was first.

use std::collections::BTreeMap;

use leptos::prelude::*;

use crate::api::transcript::{Answered, answer_question};
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

/// The answers the overlay holds, per question id.
#[derive(Clone, Debug, Default, PartialEq)]
struct Draft {
    chosen: BTreeMap<String, String>,
    text: BTreeMap<String, String>,
}

impl Draft {
    fn answered(&self, q: &Question) -> bool {
        self.chosen.contains_key(&q.id)
            || self.text.get(&q.id).is_some_and(|t| !t.trim().is_empty())
    }

    fn answers(&self, questions: &[Question]) -> Vec<Answer> {
        questions
            .iter()
            .map(|q| Answer {
                question_id: q.id.clone(),
                selected_options: self.chosen.get(&q.id).cloned().into_iter().collect(),
                custom_text: self
                    .text
                    .get(&q.id)
                    .filter(|t| !t.trim().is_empty())
                    .cloned(),
            })
            .collect()
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
    view! { <Overlay bundle /> }.into_any()
}

#[component]
pub fn Overlay(bundle: Bundle) -> impl IntoView {
    let collapsed = RwSignal::new(false);
    let step = RwSignal::new(0usize);
    let draft = RwSignal::new(Draft::default());
    let outcome = RwSignal::new(None::<Outcome>);
    let error = RwSignal::new(None::<String>);
    let questions = StoredValue::new(bundle.questions.clone());
    let count = bundle.questions.len();
    let pending_id = bundle.pending_id.clone();
    let answer = Action::new(move |(answers, rejected): &(Vec<Answer>, bool)| {
        let (pending_id, answers, rejected) = (pending_id.clone(), answers.clone(), *rejected);
        async move { answer_question(pending_id, answers, rejected).await }
    });
    Effect::new(move |_| match answer.value().get() {
        Some(Ok(Answered::Claimed)) => outcome.set(Some(Outcome::Sent)),
        Some(Ok(Answered::Gone)) => outcome.set(Some(Outcome::Gone)),
        Some(Ok(Answered::Lost { response, .. })) => outcome.set(Some(Outcome::Lost(
            response.as_ref().map(describe).unwrap_or_default(),
        ))),
        Some(Err(e)) => error.set(Some(e.to_string())),
        None => {}
    });
    let all_answered =
        move || draft.with(|d| questions.with_value(|qs| qs.iter().all(|q| d.answered(q))));
    let submit = move || {
        if !all_answered() || answer.pending().get_untracked() {
            return;
        }
        error.set(None);
        let answers = draft.with_untracked(|d| questions.with_value(|qs| d.answers(qs)));
        answer.dispatch((answers, false));
    };
    let pick = move |qid: String, oid: String| {
        draft.update(|d| {
            d.chosen.insert(qid, oid);
        });
        // One question: a click is the answer.
        if count == 1 {
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
                    qs.get(step.get_untracked())
                        .and_then(|q| q.options.get(n - 1).map(|o| (q.id.clone(), o.id.clone())))
                });
                if let Some((qid, oid)) = picked {
                    e.prevent_default();
                    pick(qid, oid);
                }
            }
        });
        on_cleanup(move || handle.remove());
    }
    let body = move || {
        let i = step.get().min(count.saturating_sub(1));
        let q = questions.with_value(|qs| qs[i].clone());
        let last = i + 1 == count;
        let qid = q.id.clone();
        let text_value = {
            let qid = qid.clone();
            move || draft.with(|d| d.text.get(&qid).cloned().unwrap_or_default())
        };
        let chars = {
            let text_value = text_value.clone();
            move || text_value().chars().count()
        };
        view! {
            <fieldset class="question">
                <legend>
                    {(count > 1).then(|| view! { <span class="muted">{format!("Question {} of {count} · ", i + 1)}</span> })}
                    {q.title.clone().map(|t| view! { <strong>{t} " "</strong> })}
                    {q.prompt.clone()}
                </legend>
                <div class="options">
                    {q.options
                        .iter()
                        .enumerate()
                        .map(|(n, o)| {
                            let (qid, oid) = (qid.clone(), o.id.clone());
                            let selected = {
                                let (qid, oid) = (qid.clone(), oid.clone());
                                move || draft.with(|d| d.chosen.get(&qid) == Some(&oid))
                            };
                            view! {
                                <button
                                    class="option"
                                    class:selected=selected.clone()
                                    aria-pressed=move || selected().to_string()
                                    data-testid=format!("clarification-option-{}", o.id)
                                    disabled=move || answer.pending().get()
                                    on:click=move |_| pick(qid.clone(), oid.clone())
                                >
                                    <span class="option-label"><kbd>{n + 1}</kbd> " " {o.label.clone()}</span>
                                    {(!o.description.is_empty()).then(|| view! { <span class="option-description">{o.description.clone()}</span> })}
                                </button>
                            }
                        })
                        .collect_view()}
                </div>
                <label class="custom-label">
                    <span class="visually-hidden">"Your own answer"</span>
                    <textarea
                        class="custom"
                        data-testid="clarification-custom-input"
                        aria-label="Your own answer"
                        placeholder="Or write your own answer (Enter sends, Shift+Enter for a new line)"
                        maxlength=ANSWER_CHARS
                        rows="2"
                        prop:value=text_value.clone()
                        on:input={
                            let qid = qid.clone();
                            move |e| {
                                let v = event_target_value(&e);
                                draft.update(|d| {
                                    d.text.insert(qid.clone(), v);
                                });
                            }
                        }
                        on:keydown=move |e| {
                            if e.key() == "Enter" && !e.shift_key() {
                                e.prevent_default();
                                if last {
                                    submit();
                                } else {
                                    step.update(|s| *s += 1);
                                }
                            }
                        }
                    ></textarea>
                    <span class="counter muted" aria-live="polite">{move || format!("{} / {ANSWER_CHARS}", chars())}</span>
                </label>
                <div class="actions">
                    {(count > 1).then(|| view! {
                        <button class="secondary" data-testid="clarification-back" disabled=move || step.get() == 0 on:click=move |_| step.update(|s| *s = s.saturating_sub(1))>"Back"</button>
                    })}
                    {(count > 1 && !last).then(|| view! {
                        <button class="secondary" data-testid="clarification-next" on:click=move |_| step.update(|s| *s += 1)>"Next"</button>
                    })}
                    {(count == 1 || last).then(|| view! {
                        <button data-testid="clarification-submit" disabled=move || !all_answered() || answer.pending().get() on:click=move |_| submit()>"Submit"</button>
                    })}
                    <button class="secondary" data-testid="clarification-skip" disabled=move || answer.pending().get() on:click=move |_| {
                        error.set(None);
                        answer.dispatch((vec![], true));
                    }>"Skip"</button>
                </div>
            </fieldset>
        }
    };
    let context = StoredValue::new(bundle.context.clone());
    let detached = bundle.detached;
    view! {
        {move || match outcome.get() {
            Some(Outcome::Sent) => None,
            Some(Outcome::Gone) => Some(view! {
                <p class="notice" role="status">"This question is gone: the agent moved on or it was answered elsewhere."</p>
            }.into_any()),
            Some(Outcome::Lost(text)) => Some(view! {
                <p class="notice" role="status">"Someone else answered first: " {text}</p>
            }.into_any()),
            None => None,
        }}
        <Show when=move || outcome.get().is_none()>
            <Show
                when=move || !collapsed.get()
                fallback=move || view! {
                    <button class="overlay-reopen" data-testid="clarification-reopen" on:click=move |_| collapsed.set(false)>
                        "Show the agent's question"
                    </button>
                }
            >
                <div class="clarification-overlay" data-testid="clarification-overlay" role="dialog" aria-label="Question from the agent">
                    {context.get_value().map(|c| view! { <p class="context">{c}</p> })}
                    {detached.then(|| view! {
                        <p class="notice" data-testid="clarification-deferred-notice">"The agent stopped waiting. Your answer will be sent as a new message."</p>
                    })}
                    {body}
                    {move || error.get().map(|t| view! { <p class="error" role="alert">{t}</p> })}
                </div>
            </Show>
        </Show>
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::QuestionOption;

    fn q(id: &str) -> Question {
        Question {
            id: id.into(),
            title: None,
            prompt: "?".into(),
            options: vec![QuestionOption {
                id: "a".into(),
                label: "A".into(),
                description: String::new(),
            }],
        }
    }

    #[test]
    fn a_question_is_answered_by_a_choice_or_by_text() {
        let mut d = Draft::default();
        assert!(!d.answered(&q("x")));
        d.text.insert("x".into(), "  ".into());
        assert!(!d.answered(&q("x")), "blank text is no answer");
        d.text.insert("x".into(), "mine".into());
        assert!(d.answered(&q("x")));
        d.chosen.insert("y".into(), "a".into());
        let answers = d.answers(&[q("x"), q("y")]);
        assert_eq!(answers[0].custom_text.as_deref(), Some("mine"));
        assert_eq!(answers[1].selected_options, ["a"]);
    }
}
