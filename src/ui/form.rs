//! Forms that work before hydration and without JavaScript (a plain POST to the server
//! function's URL, which answers with a redirect back) and, once hydrated, dispatch their server
//! action in place. This replaces Leptos' `<ActionForm>`, whose form-data decoding (serde_qs) and
//! redirect hook cost 20.8 KB of the gzipped browser bundle (B7, docs/decisions/0013).

use leptos::ev::SubmitEvent;

/// Stops the browser's own submission and returns the submitted form's fields by name (an
/// absent field reads as ""). Only ever called from `on:submit`, which runs in the browser.
pub fn take_submission(ev: &SubmitEvent) -> impl Fn(&str) -> String {
    ev.prevent_default();
    #[cfg(feature = "hydrate")]
    let data = {
        use wasm_bindgen::JsCast;
        ev.target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlFormElement>().ok())
            .and_then(|f| web_sys::FormData::new_with_form(&f).ok())
    };
    #[cfg(not(feature = "hydrate"))]
    let data: Option<()> = None;
    move |name: &str| {
        #[cfg(feature = "hydrate")]
        return data
            .as_ref()
            .and_then(|d| d.get(name).as_string())
            .unwrap_or_default();
        #[cfg(not(feature = "hydrate"))]
        {
            let _ = (&data, name);
            String::new()
        }
    }
}
