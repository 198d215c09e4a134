//! Browser-only loads that follow a key: whenever the tracked `key()` changes, `fetch(key)` runs
//! again and only the latest request's result lands (an older one finishing late is dropped).
//! Used for what is decided or shown only after hydration (the session list N1 decides on, the
//! active question, the pending permission), where a server-rendered value would only risk a
//! hydration mismatch. Written here rather than with `LocalResource`, which in this Leptos
//! version did not re-run when its task changed while a previous load was still in flight.

use std::future::Future;

use leptos::prelude::*;

pub fn load_latest<K, T, Fut>(
    key: impl Fn() -> K + 'static,
    fetch: impl Fn(K) -> Fut + 'static,
) -> ReadSignal<Option<T>>
where
    K: 'static,
    T: Send + Sync + 'static,
    Fut: Future<Output = T> + 'static,
{
    let value = RwSignal::new(None::<T>);
    let latest = StoredValue::new(0u64);
    Effect::new(move |_| {
        let k = key();
        latest.update_value(|n| *n += 1);
        let mine = latest.get_value();
        let fut = fetch(k);
        leptos::task::spawn_local(async move {
            let loaded = fut.await;
            if latest.try_get_value() == Some(mine) {
                value.try_set(Some(loaded));
            }
        });
    });
    value.read_only()
}
