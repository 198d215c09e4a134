//! Decision 0028 on PostgreSQL: `sessions.current_turn_pending` (P1, maintained by triggers) is
//! recomputed by two writers of one session one after the other, the second seeing the first's
//! rows. The interleaving is forced: the first writer's transaction stays open until the second
//! is seen waiting for the session row in `pg_locks`, and only then commits.

mod support;

use sqlx::{Connection, PgConnection};
use turnstile::server::repo;

/// Waits (bounded) until the backend `pid` waits for a lock.
async fn until_waiting_for_a_lock(observer: &mut PgConnection, pid: i32) {
    for _ in 0..5_000 {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)",
        )
        .bind(pid)
        .fetch_one(&mut *observer)
        .await
        .unwrap();
        if waiting {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("backend {pid} never waited for a lock");
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
    let repo = repo::connect(&url).await.unwrap();
    // One turn holding one pending question (the first), the session waiting for its answer.
    let (session, task) = support::session_with_history(&repo, 1).await;
    let first = repo
        .active_bundles(&session)
        .await
        .unwrap()
        .remove(0)
        .record;
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
    let b_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut b)
        .await
        .unwrap();
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
    until_waiting_for_a_lock(&mut observer, b_pid).await;
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
