//! B3 (decision 0030): on a SQLite database file every statement runs on the thread
//! of the task that sends it, not on the connection's worker thread (the patched
//! `vendor/sqlx-sqlite`). A statement sent to that thread cost two thread switches and a
//! runtime wake-up; an ask → answer round trip sent ~20, which was most of the server's
//! context switches (65 per round trip before, 10 after).
//!
//! Statements are seen through sqlx's own statement log (target `sqlx::query`), which SQLite's
//! driver writes on the thread that runs the statement. One test in this binary: the
//! subscriber is process-wide.

mod support;

use std::sync::{Arc, Mutex};

use tracing_subscriber::layer::{Context, SubscriberExt};
use turnstile::model::{BundleStatus, SessionState};
use turnstile::server::repo::{Claim, ClaimOutcome, NewAsk, NewTurn};

/// The names of the threads that ran each logged statement.
#[derive(Clone, Default)]
struct StatementThreads(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StatementThreads {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "sqlx::query" {
            let thread = std::thread::current();
            let name = thread.name().unwrap_or("unnamed").to_string();
            self.0.lock().unwrap().push(name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_sqlite_statements_run_on_the_callers_thread() {
    let threads = StatementThreads::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(threads.clone()))
        .expect("the only subscriber of this binary");
    let repo = support::sqlite_repo().await;
    threads.0.lock().unwrap().clear(); // opening and migrating are not the point

    // An ask's round trip through the repository: reads, single writes, a write transaction.
    let (session, _) = support::session_with_history(&repo, 2).await;
    let turn = repo
        .insert_turn(&NewTurn {
            id: None,
            session_id: session.clone(),
            started_at: 10_000,
            created_at: 10_000,
            fence: None,
        })
        .await
        .unwrap();
    let pending_id = format!("inline-{}", uuid::Uuid::now_v7());
    let written = repo
        .ask_in_current_turn(
            &NewAsk {
                pending_id: pending_id.clone(),
                session_id: session.clone(),
                context: None,
                dedup_key: "k".into(),
                questions: vec![],
                message_content: "?".into(),
                replies: vec![],
            },
            10_001,
        )
        .await
        .unwrap()
        .expect("the turn is open");
    assert_eq!(written.bundle.turn_id, turn.id);
    assert!(repo.get_bundle(&pending_id).await.unwrap().is_some());
    let claim = Claim {
        status: BundleStatus::Answered,
        response: "{}".into(),
        reject_reason: None,
        by: "test".into(),
    };
    assert!(matches!(
        repo.claim_bundle(&pending_id, &claim, 10_002)
            .await
            .unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    assert!(repo.finalize_delivery(&pending_id).await.unwrap());
    repo.set_session_state(&session, SessionState::Running, 10_003)
        .await
        .unwrap()
        .expect("moved");
    repo.pending_actions_for_sessions(std::slice::from_ref(&session))
        .await
        .unwrap();

    let seen = threads.0.lock().unwrap().clone();
    assert!(seen.len() >= 10, "statements were logged: {seen:?}");
    let on_worker: Vec<_> = seen
        .iter()
        .filter(|name| name.starts_with("sqlx-sqlite-worker"))
        .collect();
    assert!(
        on_worker.is_empty(),
        "{} of {} statements ran on a connection's worker thread",
        on_worker.len(),
        seen.len()
    );
}
