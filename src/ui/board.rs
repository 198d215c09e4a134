use leptos::prelude::*;

#[component]
pub fn Board() -> impl IntoView {
    view! {
        <section class="board" aria-label="Board">
            <p class="muted">"Pick a task on the left."</p>
        </section>
    }
}
