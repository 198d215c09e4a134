//! Waiting without fixed sleeps: for a condition (with a deadline), an event on the hub, the
//! projector to be idle, and a hook point held until another is reached.

use std::sync::Arc;

use super::*;

/// Waits (with a deadline, no fixed sleep) for an event matching `pred` on `rx`.
pub async fn next_event(
    rx: &mut tokio::sync::broadcast::Receiver<turnstile::server::events::Event>,
    pred: impl Fn(&turnstile::server::events::Event) -> bool,
) -> turnstile::server::events::Event {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(remaining, rx.recv()).await {
            Ok(Ok(e)) if pred(&e) => return e,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("event stream failed: {e}"),
            Err(_) => panic!("timed out waiting for an event"),
        }
    }
}

/// Holds the `n`-th pass (counting from 1) through `hold` until something passes through
/// `release`: forces one interleaving of two paths. Clear both points when done.
pub fn hold_nth_until(
    server: &TestServer,
    hold: turnstile::server::hooks::Point,
    n: usize,
    release: turnstile::server::hooks::Point,
) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let passes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let g = gate.clone();
    server.state.hooks.set(hold, move |_| {
        let nth = passes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == n;
        let g = g.clone();
        async move {
            if nth {
                g.acquire().await.expect("gate").forget();
            }
        }
    });
    server.state.hooks.set(release, move |_| {
        gate.add_permits(1);
        async {}
    });
}

/// Polls `what` until it holds (deadline 20 s).
pub async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A task without sessions whose projection event is published now: once its summary event
/// arrives, the projector has handled every event published before it.
pub async fn marker_task(state: &turnstile::server::state::AppState) -> String {
    let task = turnstile::server::repo::NewTask {
        title: "marker".into(),
        ..Default::default()
    };
    let id = state
        .repo
        .create_task(&task, state.clock.now())
        .await
        .unwrap()
        .id;
    state.hub.publish(
        turnstile::server::events::Event::new("session.created", serde_json::json!({}))
            .for_task(id.clone()),
    );
    id
}

/// Waits until the projector (decision 0039's gather included) has handled every event
/// published so far: a marker task published now is projected after them. Use it where a test
/// needs the projector quiet rather than guessing how long its gather takes.
pub async fn projector_idle(
    state: &turnstile::server::state::AppState,
    rx: &mut tokio::sync::broadcast::Receiver<turnstile::server::events::Event>,
) {
    let marker = marker_task(state).await;
    next_event(rx, |e| {
        e.action == "task.status_summary.updated" && e.payload["task_id"] == marker.as_str()
    })
    .await;
}
