//! Settings: agent profiles — list, add, edit. Environment values are write-only: the page
//! shows variable names; a value left empty keeps what is stored, "remove" deletes it.

use std::collections::BTreeMap;

use leptos::prelude::*;

use crate::api::settings::{list_agent_profiles, save_agent_profile};
use crate::model::AgentProfile;

#[component]
pub fn Settings() -> impl IntoView {
    let version = RwSignal::new(0u64);
    let profiles = Resource::new(move || version.get(), |_| list_agent_profiles());
    let editing = RwSignal::new(None::<Option<AgentProfile>>);
    view! {
        <section class="settings" aria-label="Settings">
            <h1>"Agent profiles"</h1>
            <p class="muted">"An agent profile says how a session's agent process starts: any command that speaks the Agent Client Protocol over stdio."</p>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match profiles.await {
                        Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                        Ok(list) => view! {
                            <ul class="profiles">
                                {list
                                    .into_iter()
                                    .map(|p| {
                                        let edit = p.clone();
                                        let bundled = p.name == "mock";
                                        view! {
                                            <li class="profile" data-testid="agent-profile" data-profile-name=p.name.clone()>
                                                <strong>{p.name.clone()}</strong>
                                                <code>{p.command.clone()} " " {p.args.join(" ")}</code>
                                                <span class="muted">{if p.env.is_empty() { String::new() } else { format!("env: {}", p.env.join(", ")) }}</span>
                                                {(!bundled).then(|| view! {
                                                    <button class="secondary" on:click=move |_| editing.set(Some(Some(edit.clone())))>"Edit"</button>
                                                })}
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
            <button data-testid="agent-profile-add" on:click=move |_| editing.set(Some(None))>"Add a profile"</button>
            {move || editing.get().map(|profile| view! {
                <ProfileForm profile on_saved=move || { editing.set(None); version.update(|v| *v += 1); } />
            })}
            <h2>"This browser"</h2>
            <p class="muted">"Logged in with this server's access token. Logging out ends this browser's login on every server of this database."</p>
            // A plain form: works before (and without) the wasm.
            <form method="post" action="/logout">
                <button type="submit" class="secondary" data-testid="logout">"Log out"</button>
            </form>
        </section>
    }
}

/// What the form sends.
#[derive(Clone)]
struct ProfileInput {
    id: Option<String>,
    name: String,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, Option<String>>,
}

#[component]
fn ProfileForm<F>(profile: Option<AgentProfile>, on_saved: F) -> impl IntoView
where
    F: Fn() + Copy + Send + Sync + 'static,
{
    let id = profile.as_ref().map(|p| p.id.clone());
    let name = RwSignal::new(profile.as_ref().map(|p| p.name.clone()).unwrap_or_default());
    let command = RwSignal::new(
        profile
            .as_ref()
            .map(|p| p.command.clone())
            .unwrap_or_default(),
    );
    let args = RwSignal::new(
        profile
            .as_ref()
            .map(|p| p.args.join("\n"))
            .unwrap_or_default(),
    );
    let existing = profile.as_ref().map(|p| p.env.clone()).unwrap_or_default();
    // Existing names: a new value (empty keeps the stored one) and whether to remove it.
    let values = RwSignal::new(BTreeMap::<String, (String, bool)>::new());
    let added = RwSignal::new(String::new());
    let save = Action::new(move |input: &ProfileInput| {
        let ProfileInput {
            id,
            name,
            command,
            args,
            env,
        } = input.clone();
        async move { save_agent_profile(id, name, command, args, env).await }
    });
    Effect::new(move |_| {
        if let Some(Ok(_)) = save.value().get() {
            on_saved();
        }
    });
    let submit = move |e: leptos::ev::SubmitEvent| {
        e.prevent_default();
        let mut env: BTreeMap<String, Option<String>> = BTreeMap::new();
        for (k, (v, remove)) in values.get_untracked() {
            if remove {
                env.insert(k, None);
            } else if !v.is_empty() {
                env.insert(k, Some(v));
            }
        }
        for line in added.get_untracked().lines() {
            if let Some((k, v)) = line.split_once('=') {
                env.insert(k.trim().to_string(), Some(v.to_string()));
            }
        }
        let args: Vec<String> = args
            .get_untracked()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        save.dispatch(ProfileInput {
            id: id.clone(),
            name: name.get_untracked(),
            command: command.get_untracked(),
            args,
            env,
        });
    };
    view! {
        <form class="profile-form" aria-label="Agent profile" on:submit=submit>
            <label>"Name" <input required prop:value=move || name.get() on:input=move |e| name.set(event_target_value(&e)) /></label>
            <label>"Command" <input required placeholder="/usr/local/bin/my-agent" prop:value=move || command.get() on:input=move |e| command.set(event_target_value(&e)) /></label>
            <label>"Arguments (one per line)" <textarea prop:value=move || args.get() on:input=move |e| args.set(event_target_value(&e))></textarea></label>
            {(!existing.is_empty()).then(|| view! {
                <fieldset class="env">
                    <legend>"Environment (values are never shown)"</legend>
                    <p class="muted">"A new command or new arguments clear these values unless you enter them again here."</p>
                    {existing
                        .into_iter()
                        .map(|k| {
                            let (k1, k2) = (k.clone(), k.clone());
                            view! {
                                <div class="env-row">
                                    <code>{k.clone()}</code>
                                    <input
                                        type="password"
                                        aria-label=format!("New value for {k}")
                                        placeholder="unchanged"
                                        on:input=move |e| {
                                            let v = event_target_value(&e);
                                            values.update(|m| m.entry(k1.clone()).or_default().0 = v);
                                        }
                                    />
                                    <label>
                                        <input type="checkbox" on:change=move |e| {
                                            let on = event_target_checked(&e);
                                            values.update(|m| m.entry(k2.clone()).or_default().1 = on);
                                        } />
                                        " remove"
                                    </label>
                                </div>
                            }
                        })
                        .collect_view()}
                </fieldset>
            })}
            <label>"Add variables (NAME=value, one per line)" <textarea placeholder="OPENAI_API_KEY=…" prop:value=move || added.get() on:input=move |e| added.set(event_target_value(&e))></textarea></label>
            <button type="submit" data-testid="agent-profile-save" disabled=move || save.pending().get()>"Save"</button>
            {move || save.value().get().and_then(Result::err).map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })}
        </form>
    }
}
