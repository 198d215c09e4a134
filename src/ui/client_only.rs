//! Views that only ever exist in the browser, kept out of the hydration machinery.
//!
//! Converting a view into an `AnyView` (every lazily loaded chunk returns one) compiles the
//! view's hydration code too, even when it is never hydrated: the question overlay is built
//! after hydration, once its question has loaded, yet its hydration code was a fifth of its wasm
//! chunk. Wrapped in [`ClientOnly`], the erased view hydrates by building (no hydration code of
//! its own), and the server renders only a placeholder for it (B7,
//! docs/decisions/0013-browser-bundle-size.md).
//!
//! Inside, the view must not erase its children either (`#[component]`s and `.into_any()`
//! compile their hydration code): plain functions and `Either` instead.

use leptos::tachys::html::attribute::Attribute;
use leptos::tachys::html::attribute::any_attribute::AnyAttribute;
use leptos::tachys::hydration::Cursor;
use leptos::tachys::view::add_attr::AddAnyAttr;
use leptos::tachys::view::{Mountable, Position, PositionState, Render, RenderHtml};

/// A view the server never renders (it writes a placeholder) and the browser builds.
pub struct ClientOnly<V>(pub V);

impl<V: Render> Render for ClientOnly<V> {
    type State = V::State;

    fn build(self) -> Self::State {
        self.0.build()
    }

    fn rebuild(self, state: &mut Self::State) {
        self.0.rebuild(state)
    }
}

impl<V: AddAnyAttr> AddAnyAttr for ClientOnly<V> {
    type Output<SomeNewAttr: Attribute> = ClientOnly<V::Output<SomeNewAttr>>;

    fn add_any_attr<NewAttr: Attribute>(self, attr: NewAttr) -> Self::Output<NewAttr>
    where
        Self::Output<NewAttr>: RenderHtml,
    {
        ClientOnly(self.0.add_any_attr(attr))
    }
}

impl<V: RenderHtml> RenderHtml for ClientOnly<V> {
    type AsyncOutput = Self;
    type Owned = ClientOnly<V::Owned>;

    const MIN_LENGTH: usize = 3;

    fn dry_resolve(&mut self) {}

    async fn resolve(self) -> Self::AsyncOutput {
        self
    }

    fn to_html_with_buf(
        self,
        buf: &mut String,
        position: &mut Position,
        escape: bool,
        _mark_branches: bool,
        _extra_attrs: Vec<AnyAttribute>,
    ) {
        // The placeholder hydration finds (as a list's end marker is written).
        if escape {
            buf.push_str("<!>");
            *position = Position::NextChild;
        }
    }

    fn hydrate<const FROM_SERVER: bool>(
        self,
        cursor: &Cursor,
        position: &PositionState,
    ) -> Self::State {
        // Built, and put where the server left its placeholder.
        let marker = cursor.next_placeholder(position);
        let mut state = self.0.build();
        if let Some(parent) = marker.parent_element() {
            state.mount(&parent, Some(marker.as_ref()));
        }
        state
    }

    fn into_owned(self) -> Self::Owned {
        ClientOnly(self.0.into_owned())
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use leptos::prelude::*;

    use super::ClientOnly;

    #[test]
    fn the_server_writes_only_a_placeholder() {
        let owner = Owner::new();
        owner.set();
        let html = ClientOnly(view! { <p>"only in the browser"</p> }).to_html();
        assert_eq!(html, "<!>");
    }
}
