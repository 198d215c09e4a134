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
use crate::client::store::IdMap;
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
    chosen: IdMap<String>,
    text: IdMap<String>,
}

impl Draft {
    fn answered(&self, q: &Question) -> bool {
        self.chosen.contains(&q.id) || self.text.get(&q.id).is_some_and(|t| !t.trim().is_empty())
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
    let draft = RwSignal::new(Draft::default());
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
    let all_answered =
        move || draft.with(|d| questions.with_value(|qs| qs.iter().all(|q| d.answered(q))));
    let submit = move || {
        if all_answered() {
            send(
                draft.with_untracked(|d| questions.with_value(|qs| d.answers(qs))),
                false,
            );
        }
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
                                    disabled=move || sending.get()
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
                        <button data-testid="clarification-submit" disabled=move || !all_answered() || sending.get() on:click=move |_| submit()>"Submit"</button>
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
            form: Default::default(),
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
