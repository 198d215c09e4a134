use std::collections::BTreeMap;

use leptos::ev::KeyboardEvent;
use leptos::prelude::*;

use crate::api::transcript::{Answered, answer_question};
use crate::model::{Answer, Bundle};
use crate::ui::live::Live;

/// The active question of the session (N4/N5): single-question bundles answer on one click;
/// multi-question bundles collect a choice per question and submit. Skip rejects; Escape only
/// collapses. A detached bundle says the answer goes out as a new message.
#[component]
pub fn Overlay(bundle: Bundle) -> impl IntoView {
    let live = expect_context::<Live>();
    let collapsed = RwSignal::new(false);
    let chosen = RwSignal::new(BTreeMap::<String, String>::new());
    let custom = RwSignal::new(String::new());
    let outcome = RwSignal::new(None::<String>);
    let pending_id = bundle.pending_id.clone();
    let answer = Action::new(move |(answers, rejected): &(Vec<Answer>, bool)| {
        let (pending_id, answers, rejected) = (pending_id.clone(), answers.clone(), *rejected);
        async move { answer_question(pending_id, answers, rejected).await }
    });
    Effect::new(move |_| match answer.value().get() {
        Some(Ok(Answered::Claimed)) | Some(Ok(Answered::Gone)) => live.session.update(|v| *v += 1),
        Some(Ok(Answered::Lost { response, .. })) => {
            let text = response
                .map(|r| {
                    if r.rejected {
                        "skipped".to_string()
                    } else {
                        r.answers
                            .iter()
                            .flat_map(|a| a.selected_options.clone())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                })
                .unwrap_or_default();
            outcome.set(Some(format!("Someone else answered first: {text}")));
        }
        Some(Err(e)) => outcome.set(Some(e.to_string())),
        None => {}
    });
    let single = bundle.questions.len() == 1;
    let first_id = bundle
        .questions
        .first()
        .map(|q| q.id.clone())
        .unwrap_or_default();
    let all_ids: Vec<String> = bundle.questions.iter().map(|q| q.id.clone()).collect();
    let submit = {
        let first_id = first_id.clone();
        move || {
            let text = custom.get_untracked();
            let picked = chosen.get_untracked();
            let answers = all_ids
                .iter()
                .map(|id| Answer {
                    question_id: id.clone(),
                    selected_options: picked.get(id).cloned().into_iter().collect(),
                    custom_text: (id == &first_id && !text.trim().is_empty()).then(|| text.clone()),
                })
                .collect();
            answer.dispatch((answers, false));
        }
    };
    let on_key = move |e: KeyboardEvent| {
        if e.key() == "Escape" {
            collapsed.set(true);
        }
    };
    let questions = bundle.questions.clone();
    view! {
        <Show
            when=move || !collapsed.get()
            fallback=move || view! { <button class="overlay-reopen" on:click=move |_| collapsed.set(false)>"Show the agent's question"</button> }
        >
            <div class="clarification-overlay" data-testid="clarification-overlay" role="dialog" aria-label="Question from the agent" tabindex="0" on:keydown=on_key>
                {bundle.context.clone().map(|c| view! { <p class="context">{c}</p> })}
                {bundle.detached.then(|| view! {
                    <p class="notice" data-testid="clarification-deferred-notice">"The agent stopped waiting. Your answer will be sent as a new message."</p>
                })}
                {questions
                    .iter()
                    .map(|q| {
                        let qid = q.id.clone();
                        view! {
                            <fieldset class="question">
                                <legend>{q.title.clone().unwrap_or_default()} " " {q.prompt.clone()}</legend>
                                {q.options
                                    .iter()
                                    .map(|o| {
                                        let (qid, oid) = (qid.clone(), o.id.clone());
                                        let selected = {
                                            let (qid, oid) = (qid.clone(), oid.clone());
                                            move || chosen.with(|c| c.get(&qid) == Some(&oid))
                                        };
                                        let submit = submit.clone();
                                        view! {
                                            <button
                                                class="option"
                                                class:selected=selected
                                                data-testid=format!("clarification-option-{}", o.id)
                                                title=o.description.clone()
                                                disabled=move || answer.pending().get()
                                                on:click=move |_| {
                                                    chosen.update(|c| { c.insert(qid.clone(), oid.clone()); });
                                                    if single {
                                                        submit();
                                                    }
                                                }
                                            >
                                                {o.label.clone()}
                                            </button>
                                        }
                                    })
                                    .collect_view()}
                            </fieldset>
                        }
                    })
                    .collect_view()}
                <input
                    class="custom"
                    data-testid="clarification-custom-input"
                    aria-label="Your own answer"
                    placeholder="Or write your own answer"
                    prop:value=move || custom.get()
                    on:input=move |e| custom.set(event_target_value(&e))
                />
                <div class="actions">
                    <button data-testid="clarification-submit" disabled=move || answer.pending().get() on:click={
                        let submit = submit.clone();
                        move |_| submit()
                    }>"Submit"</button>
                    <button data-testid="clarification-skip" class="secondary" disabled=move || answer.pending().get() on:click=move |_| {
                        answer.dispatch((vec![], true));
                    }>"Skip"</button>
                </div>
                {move || outcome.get().map(|t| view! { <p class="outcome" role="status">{t}</p> })}
            </div>
        </Show>
    }
}
