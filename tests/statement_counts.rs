//! B3: how many statements the projector's refresh sends, counted from sqlx's own
//! statement log (target `sqlx::query`, one event per statement on every thread, the SQLite
//! workers' included). Times are the benchmark's business; this pins the cause: the stored
//! summary and the authority are one read (one snapshot), so a refresh that finds the summary
//! right costs that read and its confirmation, and one that changes it that read and its
//! compare-and-set.
//!
//! Also an ask's write: the statement that finds the current turn inserts the bundle (B3: one
//! statement less on SQLite's one write connection per ask).
//!
//! And a session's state change: its event carries the P1 pending action its own `UPDATE …
//! RETURNING` read (`SESSION_COLUMNS`), so it costs one statement, not a session read before and
//! a P1 read after.
//!
//! One test in this binary, one database after the other: the count is process-wide.

#[path = "it/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use support::TestServer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use turnstile::server::summary::projector::{Scope, refresh_task};

/// Counts the statements that read or write task summaries or read the authority (`WITH cur`,
/// the P1 queries of `authority.rs`), and an ask's turn lookups and bundle inserts.
struct SummaryStatements(Arc<AtomicUsize>, Arc<AtomicUsize>, Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SummaryStatements {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if field.name() == "db.statement" {
                    self.0 = format!("{v:?}");
                }
            }
            fn record_str(&mut self, field: &tracing::field::Field, v: &str) {
                if field.name() == "db.statement" {
                    self.0 = v.to_string();
                }
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        if text.0.contains("task_status_summaries") || text.0.contains("WITH cur") {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        // An ask's turn lookup (the statement it had before) and its bundle insert.
        if text.0.contains("SELECT t.id FROM turns t")
            || text.0.contains("INSERT INTO clarification_bundles")
        {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
        // A statement on sessions: a session read, the P1 batch read, a state change (not the
        // projector's task read, which follows the event on its own time).
        if (text.0.contains("FROM sessions") || text.0.contains("UPDATE sessions"))
            && !text.0.contains("cur.task_id")
        {
            self.2.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_a_refresh_reads_summary_and_authority_in_one_statement() {
    let counted = Arc::new(AtomicUsize::new(0));
    let turn_reads = Arc::new(AtomicUsize::new(0));
    let session_statements = Arc::new(AtomicUsize::new(0));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(
        SummaryStatements(
            counted.clone(),
            turn_reads.clone(),
            session_statements.clone(),
        ),
    ))
    .expect("the only subscriber of this binary");
    refresh_counts(&support::sqlite_url(), &counted).await;
    ask_counts(&support::sqlite_url(), &turn_reads).await;
    state_change_counts(&support::sqlite_url(), &session_statements).await;
    if let Some(url) = support::postgres_url().await {
        refresh_counts(&url, &counted).await;
        ask_counts(&url, &turn_reads).await;
        state_change_counts(&url, &session_statements).await;
        support::drop_postgres(&url).await;
    }
}

/// L6 in one statement: the ask's insert finds the open current turn itself; with none (here:
/// the turn completed) it writes nothing.
async fn ask_counts(url: &str, turn_reads: &AtomicUsize) {
    use turnstile::server::repo::NewAsk;
    let server = TestServer::start(url).await;
    let repo = &server.state.repo;
    let (session, _) = support::session_with_history(repo, 0).await;
    let turn = repo
        .insert_turn(&turnstile::server::repo::NewTurn {
            id: None,
            session_id: session.clone(),
            started_at: 10,
            created_at: 10,
            fence: None,
        })
        .await
        .unwrap();
    let ask = |n: u32| NewAsk {
        pending_id: format!("ask-{n}-{}", uuid::Uuid::now_v7()),
        session_id: session.clone(),
        context: None,
        dedup_key: format!("d{n}"),
        questions: vec![],
        message_content: "?".into(),
        source: "mcp",
        replies: vec![],
    };
    let before = turn_reads.load(Ordering::SeqCst);
    let written = repo.ask_in_current_turn(&ask(1), 20).await.unwrap();
    assert_eq!(
        turn_reads.load(Ordering::SeqCst) - before,
        1,
        "{url}: one statement finds the turn and inserts the bundle"
    );
    assert_eq!(written.expect("the turn is open").bundle.turn_id, turn.id);
    repo.complete_turn(&turn.id, 30).await.unwrap();
    assert!(
        repo.ask_in_current_turn(&ask(2), 40)
            .await
            .unwrap()
            .is_none(),
        "{url}: no open turn, no bundle"
    );
    assert_eq!(repo.session_bundles(&session).await.unwrap().len(), 1);
    server.stop().await;
}

/// A state change is one statement on sessions, and its event carries the P1 that statement
/// read (P9: the revision reserved before it). A change to the state the session is already in
/// writes nothing and publishes nothing.
async fn state_change_counts(url: &str, session_statements: &AtomicUsize) {
    use turnstile::model::{PendingAction, SessionState};
    use turnstile::server::orchestrator::sessions::set_state;
    let server = TestServer::start(url).await;
    let state = &server.state;
    // Waiting, with the pending bundle of its last turn: P1 is `clarification`.
    let (session, _) = support::session_with_history(&state.repo, 1).await;
    let mut events = state.hub.subscribe();
    let reserved_before = state.next_pending_revision().await.sequence;
    let before = session_statements.load(Ordering::SeqCst);
    let moved = set_state(state, &session, SessionState::Running)
        .await
        .unwrap()
        .expect("moved");
    assert_eq!(
        session_statements.load(Ordering::SeqCst) - before,
        1,
        "{url}: one UPDATE … RETURNING, no session read before it, no P1 read after it"
    );
    assert_eq!(moved.pending_action, Some(PendingAction::Clarification));
    let event = loop {
        let e = events.recv().await.unwrap();
        if e.action == "session.state_changed" {
            break e.payload;
        }
    };
    assert_eq!(
        event["session"]["pending_action"], "clarification",
        "{url}: the event carries the P1 its write read: {event}"
    );
    // P9: the event's revision was reserved inside the call, between these two.
    let sequence = event["session"]["pending_action_revision"]["sequence"]
        .as_u64()
        .expect("a revision");
    let reserved_after = state.next_pending_revision().await.sequence;
    assert!(
        reserved_before < sequence && sequence < reserved_after,
        "{url}: {reserved_before} < {sequence} < {reserved_after}"
    );
    let before = session_statements.load(Ordering::SeqCst);
    let same = set_state(state, &session, SessionState::Running)
        .await
        .unwrap()
        .expect("already running");
    assert_eq!(same.state, SessionState::Running);
    assert_eq!(
        session_statements.load(Ordering::SeqCst) - before,
        2,
        "{url}: the guarded update changes nothing, then one read tells why"
    );
    let moved = set_state(state, &session, SessionState::Completed)
        .await
        .unwrap()
        .expect("moved");
    assert_eq!(
        moved.pending_action, None,
        "{url}: P1 of a terminal session"
    );
    server.stop().await;
}

async fn refresh_counts(url: &str, counted: &AtomicUsize) {
    let server = TestServer::start(url).await;
    let state = &server.state;
    let (_, task) = support::session_with_history(&state.repo, 1).await;
    // The writes above published nothing, so the projector is idle: these refreshes are the
    // only statements on summaries.
    let first = refresh_task(state, &task, Scope::Full).await.unwrap();
    let before = counted.load(Ordering::SeqCst);
    let again = refresh_task(state, &task, Scope::Full).await.unwrap();
    assert_eq!(again, first, "nothing changed");
    assert_eq!(
        counted.load(Ordering::SeqCst) - before,
        2,
        "{url}: an unchanged summary costs one read of summary and authority and one \
         confirmation"
    );
    state.repo.invalidate_summary(&task, 3).await.unwrap();
    let before = counted.load(Ordering::SeqCst);
    let rewritten = refresh_task(state, &task, Scope::Full).await.unwrap();
    assert_eq!(rewritten.revision, first.revision + 1);
    assert_eq!(
        counted.load(Ordering::SeqCst) - before,
        2,
        "{url}: a changed summary costs one read and one compare-and-set"
    );
    server.stop().await;
}
