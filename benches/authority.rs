//! B1 (shared/design/performance.md): the cost of "is there an active question?" must not grow
//! with history. For 100 sessions, measures `pending_actions_for_sessions` (batch) and
//! `active_bundles` (one session) with 1 and with N historical turns per session, each old turn
//! holding a stale pending bundle, against a naive baseline that reads the whole history and
//! decides in Rust. Ratios are taken within the same run.
//!
//!     cargo bench --bench authority             # N = 1,000
//!     cargo bench --bench authority -- --quick  # N = 100
//!
//! PostgreSQL runs too when TEST_POSTGRES_URL is set (scripts/postgres.sh can start one).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use turnstile::model::{MessageAuthor, MessageKind, SessionState};
use turnstile::server::repo::{
    self, NewBundle, NewMessage, NewSession, NewTask, NewTurn, Repository,
};

const SESSIONS: usize = 100;

async fn fresh(url_base: &str, name: &str) -> (Arc<dyn Repository>, String) {
    let url = common::fresh_database(url_base, name).await;
    (repo::connect(&url).await.unwrap(), url)
}

/// PostgreSQL: the state autovacuum keeps a live database in (visibility map set, dead row
/// versions of the session rows pruned, statistics fresh). Without it the 100,000 rows
/// inserted a moment earlier are measured before any autovacuum ran: every index-only probe
/// visits the heap, and the planner has no statistics for the history tables.
async fn settle(url: &str) {
    if url.starts_with("postgres") {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query("VACUUM ANALYZE")
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

/// 100 sessions, each with `turns` turns; every turn holds one pending bundle (all but the
/// newest are superseded history) and one message.
async fn populate(repo: &Arc<dyn Repository>, turns: usize) -> Vec<String> {
    let task = repo
        .create_task(
            &NewTask {
                title: "bench".into(),
                ..Default::default()
            },
            0,
        )
        .await
        .unwrap()
        .id;
    let mut ids = Vec::with_capacity(SESSIONS);
    for s in 0..SESSIONS {
        let session = repo
            .create_session(
                &NewSession {
                    task_id: task.clone(),
                    agent_profile_id: None,
                    name: format!("s{s}"),
                    state: SessionState::WaitingForInput,
                    is_primary: false,
                    mcp_token_hash: None,
                },
                0,
            )
            .await
            .unwrap()
            .id;
        for t in 0..turns {
            let at = 1_000 + t as i64;
            let turn = repo
                .insert_turn(&NewTurn {
                    id: None,
                    session_id: session.clone(),
                    started_at: at,
                    created_at: at,
                    fence: None,
                })
                .await
                .unwrap()
                .id;
            repo.insert_message(
                &NewMessage {
                    session_id: session.clone(),
                    turn_id: turn.clone(),
                    author: MessageAuthor::Agent,
                    kind: MessageKind::Text,
                    content: "m".into(),
                    pending_id: None,
                },
                at,
            )
            .await
            .unwrap();
            repo.insert_bundle(
                &NewBundle {
                    pending_id: None,
                    session_id: session.clone(),
                    turn_id: turn,
                    context: None,
                    dedup_key: format!("{s}-{t}"),
                    questions: vec![],
                    message_content: "?".into(),
                },
                at,
            )
            .await
            .unwrap();
        }
        ids.push(session);
    }
    ids
}

/// The naive baseline: read every turn and bundle of the sessions, decide in Rust.
async fn naive(repo: &Arc<dyn Repository>, ids: &[String]) -> usize {
    let mut active = 0;
    for id in ids {
        let turns = repo.list_turns(id).await.unwrap();
        let current = turns.last().map(|t| t.id.clone());
        active += repo
            .session_bundles(id)
            .await
            .unwrap()
            .iter()
            .filter(|b| Some(&b.turn_id) == current.as_ref() && b.status.as_str() == "pending")
            .count();
    }
    active
}

/// One B1 query: `(label, run once on this database)`.
type Probe = fn(
    Arc<dyn Repository>,
    Vec<String>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

fn probes() -> [(&'static str, Probe); 3] {
    [
        ("pending_actions_for_sessions(100)", |repo, ids| {
            Box::pin(async move {
                let p = repo.pending_actions_for_sessions(&ids).await.unwrap();
                assert_eq!(p.len(), SESSIONS);
            })
        }),
        ("active_bundles(1)", |repo, ids| {
            Box::pin(async move {
                assert_eq!(repo.active_bundles(&ids[0]).await.unwrap().len(), 1);
            })
        }),
        ("naive full-history scan (100)", |repo, ids| {
            Box::pin(async move {
                assert_eq!(naive(&repo, &ids).await, SESSIONS);
            })
        }),
    ]
}

/// Medians of `probe` on the small and the large database, sampled alternately so that drift
/// on a noisy machine (another build, frequency changes) hits both sides alike.
async fn interleaved(
    probe: Probe,
    small: &(Arc<dyn Repository>, Vec<String>),
    large: &(Arc<dyn Repository>, Vec<String>),
    samples: usize,
) -> (Duration, Duration) {
    let run = |db: &(Arc<dyn Repository>, Vec<String>)| probe(db.0.clone(), db.1.clone());
    run(small).await; // warm-up
    run(large).await;
    let (mut a, mut b) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    for _ in 0..samples {
        let start = Instant::now();
        run(small).await;
        a.push(start.elapsed());
        let start = Instant::now();
        run(large).await;
        b.push(start.elapsed());
    }
    a.sort();
    b.sort();
    (a[samples / 2], b[samples / 2])
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    let Some(args) = common::args() else {
        return;
    };
    let history = if args.quick { 100 } else { 1000 };
    let samples = if args.quick { 51 } else { 201 };
    println!(
        "B1: {SESSIONS} sessions, 1 vs {history} turns each (every old turn holds a stale pending bundle); medians of {samples} alternating samples"
    );
    println!("| database | query | 1 turn | {history} turns | ratio | target |");
    println!("|---|---|---|---|---|---|");
    let mut results = serde_json::Map::new();
    for (name, url) in common::backends() {
        let small = {
            let (repo, url) = fresh(&url, "small").await;
            let ids = populate(&repo, 1).await;
            settle(&url).await;
            (repo, ids)
        };
        let large = {
            let (repo, url) = fresh(&url, "large").await;
            let ids = populate(&repo, history).await;
            settle(&url).await;
            (repo, ids)
        };
        let mut rows = serde_json::Map::new();
        for (query, probe) in probes() {
            let naive = query.starts_with("naive");
            // The naive baseline takes a second per sample at 1,000 turns: fewer samples.
            let n = if naive { samples.min(21) } else { samples };
            let (a, b) = interleaved(probe, &small, &large, n).await;
            let ratio = b.as_secs_f64() / a.as_secs_f64();
            let target = if naive { "grows ~linearly" } else { "≤ 1.3" };
            println!(
                "| {name} | {query} | {} | {} | {ratio:.2} | {target} |",
                ms(a),
                ms(b)
            );
            rows.insert(
                query.to_string(),
                serde_json::json!({
                    "one_turn_ms": a.as_secs_f64() * 1e3,
                    "history_ms": b.as_secs_f64() * 1e3,
                    "history_turns": history,
                    "ratio": ratio,
                    "target_ratio": if naive { None } else { Some(1.3) },
                    "pass": naive || ratio <= 1.3,
                }),
            );
        }
        results.insert(name, serde_json::Value::Object(rows));
    }
    args.write_json(&serde_json::Value::Object(results));
    common::clean_up().await;
}
