//! Decision 0028 on PostgreSQL: `sessions.current_turn_pending` (P1, maintained by triggers) is
//! recomputed by two writers of one session one after the other, the second seeing the first's
//! rows; and the repository's transactions take a bundle row before its session row, as every
//! bundle write's trigger does, so none of them deadlocks with a bundle writer. Each
//! interleaving is forced: one side holds its rows until the other is seen waiting in
//! `pg_locks`.

use crate::support;

use sqlx::{Connection, PgConnection};
use std::sync::Arc;

use turnstile::server::repo::{self, BundleRecord, Claim, ClaimOutcome, Repository};

/// Waits (bounded) until some backend of this database other than `observer` waits for a lock.
async fn until_someone_waits(observer: &mut PgConnection) {
    for _ in 0..5_000 {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE NOT l.granted AND a.datname = current_database() \
               AND a.pid <> pg_backend_pid())",
        )
        .fetch_one(&mut *observer)
        .await
        .unwrap();
        if waiting {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("nobody waited for a lock");
}

/// A session waiting for the answer to its one question (one turn): the repository, the
/// session, its task and the question's bundle.
async fn one_pending_question(url: &str) -> (Arc<dyn Repository>, String, String, BundleRecord) {
    let repo = repo::connect(url).await.unwrap();
    let (session, task) = support::session_with_history(&repo, 1).await;
    let bundle = repo
        .active_bundles(&session)
        .await
        .unwrap()
        .remove(0)
        .record;
    (repo, session, task, bundle)
}

async fn pending_of(conn: &mut PgConnection, session: &str) -> Option<String> {
    sqlx::query_scalar("SELECT current_turn_pending FROM sessions WHERE id = $1")
        .bind(session)
        .fetch_one(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p1_two_writers_of_one_session_recompute_in_turn_postgres() {
    let Some(url) = support::postgres_url().await else {
        return;
    };
    // One turn holding one pending question (the first), the session waiting for its answer.
    let (repo, session, task, first) = one_pending_question(&url).await;
    let mut observer = PgConnection::connect(&url).await.unwrap();
    assert_eq!(
        pending_of(&mut observer, &session).await.as_deref(),
        Some("clarification")
    );

    // Writer A asks a second question in the same turn and keeps its transaction open.
    let mut a = PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut a).await.unwrap();
    sqlx::query(
        "INSERT INTO clarification_bundles (pending_id, session_id, task_id, turn_id, dedup_key, \
         created_at) VALUES ('second', $1, $2, $3, 'second', $4)",
    )
    .bind(&session)
    .bind(&task)
    .bind(&first.turn_id)
    .bind(2_000_i64)
    .execute(&mut a)
    .await
    .unwrap();

    // Writer B answers the first question meanwhile: it must wait for A's session row, then
    // see A's question, so the session still waits for an answer.
    let mut b = PgConnection::connect(&url).await.unwrap();
    let first_id = first.pending_id.clone();
    let answer = tokio::spawn(async move {
        sqlx::query(
            "UPDATE clarification_bundles SET status = 'answered', resolved_at = 1 \
             WHERE pending_id = $1",
        )
        .bind(&first_id)
        .execute(&mut b)
        .await
        .unwrap();
    });
    // Only B can wait: A holds its rows, and the observer is not counted.
    until_someone_waits(&mut observer).await;
    sqlx::query("COMMIT").execute(&mut a).await.unwrap();
    answer.await.unwrap();

    assert_eq!(
        pending_of(&mut observer, &session).await.as_deref(),
        Some("clarification"),
        "the second question is pending in the current turn"
    );
    let batch = repo
        .pending_actions_for_sessions(std::slice::from_ref(&session))
        .await
        .unwrap();
    assert_eq!(
        batch[&session],
        Some(turnstile::model::PendingAction::Clarification)
    );
    drop((a, observer, repo));
    support::drop_postgres(&url).await;
}

/// Runs `op(repo, task, pending_id)`, a repository call that must take the bundle row of a
/// just-answered question (a detached answer, about to be owed), while another connection holds
/// that row the way a bundle writer does just before its trigger takes the session row. Once
/// `op` is seen waiting, the holder changes the bundle's status, so its trigger takes the
/// session row: it must get it (`op`'s transaction, waiting for the bundle, holds no session
/// row) and commit. Returns what `op` returned.
async fn while_a_bundle_writer_holds<T, F, Fut>(url: &str, op: F) -> T
where
    F: FnOnce(Arc<dyn Repository>, String, String) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let (repo, _session, task, bundle) = one_pending_question(url).await;
    let claim = Claim {
        status: turnstile::model::BundleStatus::Answered,
        response: "{}".into(),
        reject_reason: None,
        by: "test".into(),
    };
    assert!(matches!(
        repo.claim_bundle(&bundle.pending_id, &claim, 2_000)
            .await
            .unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    let mut holder = PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM clarification_bundles WHERE pending_id = $1 FOR NO KEY UPDATE")
        .bind(&bundle.pending_id)
        .execute(&mut holder)
        .await
        .unwrap();
    let mut observer = PgConnection::connect(url).await.unwrap();
    let call = tokio::spawn(op(repo.clone(), task, bundle.pending_id.clone()));
    until_someone_waits(&mut observer).await;
    sqlx::query("UPDATE clarification_bundles SET status = 'answered' WHERE pending_id = $1")
        .bind(&bundle.pending_id)
        .execute(&mut holder)
        .await
        .expect("the bundle writer is not chosen as a deadlock victim");
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    let result = call.await.unwrap();
    drop((holder, observer, repo));
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_order_owe_resume_takes_the_bundle_before_the_session_postgres() {
    let Some(url) = support::postgres_url().await else {
        return;
    };
    let owed = while_a_bundle_writer_holds(&url, |repo, _task, pending_id| async move {
        repo.owe_resume(&pending_id, "resume", 3_000).await
    })
    .await
    .expect("owe_resume is not chosen as a deadlock victim");
    assert!(owed.is_some(), "the answer's resume is owed");
    support::drop_postgres(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_order_delete_task_takes_the_bundles_before_the_sessions_postgres() {
    let Some(url) = support::postgres_url().await else {
        return;
    };
    let deleted = while_a_bundle_writer_holds(&url, |repo, task, _pending_id| async move {
        repo.delete_task(&task).await
    })
    .await
    .expect("delete_task is not chosen as a deadlock victim");
    assert!(deleted);
    support::drop_postgres(&url).await;
}
