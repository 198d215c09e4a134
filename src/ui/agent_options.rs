//! The options of an agent `<select>` (A5): the bundled mock first, then every other profile,
//! the chosen one selected. Shared by the new-task and new-session forms.

use leptos::prelude::*;

use crate::model::AgentProfile;

/// `profiles` as options; the one whose id is `chosen` is selected (an empty id: the mock).
#[component]
pub fn AgentOptions(profiles: Signal<Vec<AgentProfile>>, chosen: Signal<String>) -> impl IntoView {
    view! {
        <option value="">"mock (bundled)"</option>
        {move || {
            profiles
                .get()
                .into_iter()
                .filter(|p| p.name != "mock")
                .map(|p| {
                    let id = p.id.clone();
                    view! { <option value=p.id.clone() selected=move || chosen.get() == id>{p.name.clone()}</option> }
                })
                .collect_view()
        }}
    }
}
