//! What the browser remembers between visits (`localStorage`): the session last viewed per task
//! (N1) and the agent last chosen for a new task (A5). Nothing on the server.

/// The value kept under `key`; `None` on the server and when the browser keeps none.
pub fn get(key: &str) -> Option<String> {
    #[cfg(feature = "hydrate")]
    {
        let storage = leptos::prelude::window().local_storage().ok().flatten()?;
        storage.get_item(key).ok().flatten()
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = key;
        None
    }
}

/// Keeps `value` under `key` (best effort: a browser without storage forgets it).
pub fn set(key: &str, value: &str) {
    #[cfg(feature = "hydrate")]
    if let Some(storage) = leptos::prelude::window().local_storage().ok().flatten() {
        let _ = storage.set_item(key, value);
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (key, value);
}
