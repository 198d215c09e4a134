//! Paged task lists (the sidebar, the board): the first page is a resource that reloads on
//! resync and when the filter changes; "load more" appends later pages by cursor. Whatever the
//! number of tasks, the page renders one page until the user asks for more.

use leptos::prelude::*;

use crate::api::tasks::list_tasks;
use crate::model::{AppError, Task, TaskPage, TaskQuery};
use crate::ui::live::Live;

/// Tasks per page in the sidebar and on the board.
pub const PAGE: u32 = 50;

#[derive(Clone, Copy)]
pub struct TaskPages {
    pub first: Resource<Result<TaskPage, AppError>>,
    more: RwSignal<Vec<Task>>,
    cursor: RwSignal<Option<String>>,
    load: Action<String, Result<TaskPage, AppError>>,
}

impl TaskPages {
    /// Open tasks whose title contains `filter()` (empty: all), most recently updated first.
    pub fn new(filter: Signal<String>) -> TaskPages {
        let live = expect_context::<Live>();
        let query = move |cursor: Option<String>| {
            let q = filter.get_untracked();
            TaskQuery {
                limit: Some(PAGE),
                cursor,
                q: (!q.is_empty()).then_some(q),
                ..Default::default()
            }
        };
        let first = Resource::new(
            move || (live.resync.get(), filter.get()),
            move |_| list_tasks(query(None)),
        );
        let more = RwSignal::new(Vec::<Task>::new());
        let cursor = RwSignal::new(None::<String>);
        Effect::new(move |_| {
            if let Some(Ok(page)) = first.get() {
                more.set(vec![]);
                cursor.set(page.next_cursor);
            }
        });
        let load = Action::new(move |cursor: &String| list_tasks(query(Some(cursor.clone()))));
        Effect::new(move |_| {
            if let Some(Ok(page)) = load.value().get() {
                more.update(|m| m.extend(page.tasks));
                cursor.set(page.next_cursor);
            }
        });
        TaskPages {
            first,
            more,
            cursor,
            load,
        }
    }

    /// Every task loaded so far (the snapshot the live store merges over).
    pub fn loaded(&self) -> Vec<Task> {
        let mut all = match self.first.get() {
            Some(Ok(p)) => p.tasks,
            _ => vec![],
        };
        all.extend(self.more.get());
        all
    }

    pub fn has_more(&self) -> bool {
        self.cursor.get().is_some()
    }

    pub fn loading(&self) -> bool {
        self.load.pending().get()
    }

    pub fn load_more(&self) {
        if let Some(c) = self.cursor.get_untracked() {
            self.load.dispatch(c);
        }
    }
}

/// The "load more" button of a paged list, shown while there is a next page.
#[component]
pub fn LoadMore(pages: TaskPages, testid: &'static str) -> impl IntoView {
    view! {
        <Show when=move || pages.has_more()>
            <button
                class="secondary load-more"
                data-testid=testid
                disabled=move || pages.loading()
                on:click=move |_| pages.load_more()
            >
                "Load more"
            </button>
        </Show>
    }
}
