//! Settings: agent profiles — list, add (blank or from a preset, A1), edit, check (A2) — and
//! repositories (W1, `ui::repositories`).
//! Environment values are write-only: the page shows variable names; a value left empty keeps
//! what is stored, "remove" deletes it.

use std::collections::BTreeMap;

use leptos::prelude::*;

use crate::api::settings::{
    check_agent_profile, list_agent_presets, list_agent_profiles, save_agent_profile,
};
use crate::model::{AgentPreset, AgentProfile};

/// What the profile form opens on: a profile to edit, or a new one (blank or from a preset).
#[derive(Clone)]
enum Editing {
    Profile(AgentProfile),
    New(Option<AgentPreset>),
}

#[component]
pub fn Settings() -> impl IntoView {
    let version = RwSignal::new(0u64);
    let profiles = Resource::new(move || version.get(), |_| list_agent_profiles());
    let presets = Resource::new(|| (), |_| list_agent_presets());
    let editing = RwSignal::new(None::<Editing>);
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
                                                {p.auth_method.clone().map(|m| view! { <span class="muted">"logs in with " {m}</span> })}
                                                {(!bundled).then(|| view! {
                                                    <button class="secondary" on:click=move |_| editing.set(Some(Editing::Profile(edit.clone())))>"Edit"</button>
                                                })}
                                                <Check id=p.id.clone() />
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
            <button data-testid="agent-profile-add" on:click=move |_| editing.set(Some(Editing::New(None)))>"Add a profile"</button>
            <h2>"Add from a preset"</h2>
            <p class="muted">"The agents Turnstile knows, as found on this server's PATH. A preset fills a profile you can edit; nothing is installed for you."</p>
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    presets.await.ok().map(|list| view! {
                        <ul class="presets">
                            {list
                                .into_iter()
                                .map(|p| {
                                    let chosen = p.clone();
                                    view! {
                                        <li class="preset" data-testid="agent-preset" data-preset-id=p.id.clone()>
                                            <strong>{p.name.clone()}</strong>
                                            {if p.found {
                                                view! { <code>{p.command.clone()} " " {p.args.join(" ")}</code> }.into_any()
                                            } else {
                                                view! { <span class="muted">"Not found. Install: " <code>{p.install.clone().unwrap_or_default()}</code></span> }.into_any()
                                            }}
                                            <button
                                                class="secondary"
                                                data-testid=format!("agent-preset-use-{}", p.id)
                                                on:click=move |_| editing.set(Some(Editing::New(Some(chosen.clone()))))
                                            >
                                                "Add from preset"
                                            </button>
                                        </li>
                                    }
                                })
                                .collect_view()}
                        </ul>
                    })
                })}
            </Suspense>
            {move || editing.get().map(|editing_now| view! {
                <ProfileForm editing=editing_now on_saved=move || { editing.set(None); version.update(|v| *v += 1); } />
            })}
            <crate::ui::repositories::RepositorySettings />
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
    auth_method: Option<String>,
}

/// A2: "Check" starts the profile's agent on the server and shows what it said about itself.
#[component]
fn Check(id: String) -> impl IntoView {
    let id = StoredValue::new(id);
    let check = Action::new(move |_: &()| check_agent_profile(id.get_value()));
    view! {
        <button class="secondary" data-testid="agent-profile-check" disabled=move || check.pending().get() on:click=move |_| { check.dispatch(()); }>
            {move || if check.pending().get() { "Checking…" } else { "Check" }}
        </button>
        {move || check.value().get().map(|result| match result {
            Ok(report) => view! {
                <span class="check-result" class:error=!report.ok data-testid="agent-profile-check-result" role="status">{report.summary()}</span>
                {report.stderr_tail.clone().map(|tail| view! {
                    <details class="collapsed"><summary>"Agent output (stderr)"</summary><pre>{tail}</pre></details>
                })}
            }.into_any(),
            Err(e) => view! { <span class="error" data-testid="agent-profile-check-result" role="alert">{e.to_string()}</span> }.into_any(),
        })}
    }
}

#[component]
fn ProfileForm<F>(editing: Editing, on_saved: F) -> impl IntoView
where
    F: Fn() + Copy + Send + Sync + 'static,
{
    // A new profile from a preset starts with the preset's name, command and arguments.
    let (profile, start) = match editing {
        Editing::Profile(p) => (Some(p.clone()), Some((p.name, p.command, p.args))),
        Editing::New(preset) => (None, preset.map(|p| (p.name, p.command, p.args))),
    };
    let id = profile.as_ref().map(|p| p.id.clone());
    let (name, command, args) = start.unwrap_or_default();
    let name = RwSignal::new(name);
    let command = RwSignal::new(command);
    let args = RwSignal::new(args.join("\n"));
    let auth_method = RwSignal::new(
        profile
            .as_ref()
            .and_then(|p| p.auth_method.clone())
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
            auth_method,
        } = input.clone();
        async move { save_agent_profile(id, name, command, args, env, auth_method).await }
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
        // A4: empty clears the method of a profile, and sets none on a new one.
        let method = auth_method.get_untracked().trim().to_string();
        save.dispatch(ProfileInput {
            id: id.clone(),
            name: name.get_untracked(),
            command: command.get_untracked(),
            args,
            env,
            auth_method: (id.is_some() || !method.is_empty()).then_some(method),
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
            <label>
                "Auth method (optional)"
                <input
                    placeholder="an id from the agent's auth methods, as Check lists them"
                    prop:value=move || auth_method.get()
                    on:input=move |e| auth_method.set(event_target_value(&e))
                />
            </label>
            <label>"Add variables (NAME=value, one per line)" <textarea placeholder="OPENAI_API_KEY=…" prop:value=move || added.get() on:input=move |e| added.set(event_target_value(&e))></textarea></label>
            <button type="submit" data-testid="agent-profile-save" disabled=move || save.pending().get()>"Save"</button>
            {move || save.value().get().and_then(Result::err).map(|e| view! { <p class="error" role="alert">{e.to_string()}</p> })}
        </form>
    }
}
