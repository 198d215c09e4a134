//! B1: the authority's queries must cost the same with 1 or 1,000 historical turns.
//! Times are the benchmark's business (`scripts/bench.sh`); these tests pin the cause: on
//! SQLite every table the authority reads is searched through an index (never scanned, never
//! sorted per row), and on PostgreSQL the rows the executor actually reads, measured with
//! `EXPLAIN ANALYZE`, do not grow with the session's history.

use crate::support;

use serde_json::Value;
use sqlx::{Connection, Row};
use support::session_with_history;
use turnstile::server::repo::authority::SQL;
use turnstile::server::repo::{self, Backend};

/// What a statement is bound to.
#[derive(Clone, Copy)]
enum Arg {
    /// The session id.
    Session,
    /// A JSON array holding the session id.
    Sessions,
    /// A JSON array holding the session's task id.
    Tasks,
}

/// The authority's statements and what each is bound to.
fn statements(backend: Backend) -> Vec<(&'static str, String, Arg)> {
    vec![
        ("current_turn_id", SQL.current_turn_id.clone(), Arg::Session),
        (
            "active_bundles",
            SQL.active_bundles(backend).to_string(),
            Arg::Session,
        ),
        (
            "pending_actions",
            SQL.pending_actions(backend).to_string(),
            Arg::Sessions,
        ),
        (
            "task_sessions",
            SQL.task_sessions(backend).to_string(),
            Arg::Tasks,
        ),
        (
            "task_sessions_with_summaries",
            SQL.task_sessions_with_summaries(backend).to_string(),
            Arg::Tasks,
        ),
    ]
}

/// The batch forms of P1 (many sessions per statement), which read session rows only.
fn is_batch(name: &str) -> bool {
    name.starts_with("pending_actions") || name.starts_with("task_sessions")
}

/// The value a statement is bound to for `session` (of task `task`).
fn bind(arg: Arg, session: &str, task: &str) -> String {
    match arg {
        Arg::Session => session.to_string(),
        Arg::Sessions => serde_json::json!([session]).to_string(),
        Arg::Tasks => serde_json::json!([task]).to_string(),
    }
}

#[tokio::test]
async fn b1_sqlite_authority_plans_search_indexes_and_never_scan_history() {
    let url = support::sqlite_url();
    let repo = repo::connect(&url).await.unwrap();
    let (session, task) = session_with_history(&repo, 50).await;
    // No ANALYZE: the server never runs it, so the planner works from the schema alone.
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    for (name, sql, arg) in statements(Backend::Sqlite) {
        let arg = bind(arg, &session, &task);
        let plan: Vec<(i64, i64, String)> = sqlx::query_as::<_, (i64, i64, i64, String)>(
            sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")),
        )
        .bind(&arg)
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, parent, _, detail)| (id, parent, detail))
        .collect();
        let text: Vec<&str> = plan.iter().map(|(_, _, d)| d.as_str()).collect();
        // Decision 0025: the current turn is the session row's maintained pointer, so the
        // authority's reads never search the turns or their messages.
        assert!(
            !text
                .iter()
                .any(|d| d.contains(" ct ") || d.contains("turns") || d.contains("messages")),
            "{name}: reads turns or messages\n{text:#?}"
        );
        // Decision 0028: the batch reads P1 from the session row's maintained column, so it
        // never searches bundles or permission requests, whatever the history.
        if is_batch(name) {
            assert!(
                !text.iter().any(|d| {
                    [
                        "clarification_bundles",
                        "permission_requests",
                        "bundles_authority",
                        "permissions_authority",
                    ]
                    .iter()
                    .any(|t| d.contains(t))
                }),
                "{name}: the batch reads bundles or permission requests\n{text:#?}"
            );
        }
        for (_, parent, detail) in &plan {
            assert!(
                !detail.starts_with("SCAN")
                    || detail.contains("json_each")
                    || detail == "SCAN CONSTANT ROW",
                "{name}: a table is scanned: {detail}\n{text:#?}"
            );
            // A bundle's own questions (at most four, `MAX_QUESTIONS`) are put in order for
            // its `questions` column; that is not history.
            let own_questions = detail == "USE TEMP B-TREE FOR json_group_array(ORDER BY)";
            assert!(
                !(detail.contains("TEMP B-TREE") && *parent != 0) || own_questions,
                "{name}: a subquery sorts its rows (the index order is not used): {detail}\n{text:#?}"
            );
        }
    }
}

/// Rows the executor read from history tables, from an `EXPLAIN (ANALYZE, FORMAT JSON)` plan.
fn history_rows_read(node: &Value) -> f64 {
    let own = match node["Relation Name"].as_str() {
        Some("turns" | "clarification_bundles" | "messages" | "permission_requests") => {
            node["Actual Rows"].as_f64().unwrap_or(0.0)
                * node["Actual Loops"].as_f64().unwrap_or(1.0)
                + node["Rows Removed by Filter"].as_f64().unwrap_or(0.0)
                    * node["Actual Loops"].as_f64().unwrap_or(1.0)
        }
        _ => 0.0,
    };
    own + node["Plans"]
        .as_array()
        .map(|plans| plans.iter().map(history_rows_read).sum())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn b1_postgres_authority_reads_the_same_rows_with_1_or_300_turns() {
    let Some(url) = support::postgres_url().await else {
        return;
    };
    let repo = repo::connect(&url).await.unwrap();
    let short = session_with_history(&repo, 1).await;
    let long = session_with_history(&repo, 300).await;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();
    for (name, sql, arg) in statements(Backend::Postgres) {
        let mut read = Vec::new();
        for (session, task) in [&short, &long] {
            let arg = bind(arg, session, task);
            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                "EXPLAIN (ANALYZE, FORMAT JSON) {sql}"
            )))
            .bind(&arg)
            .fetch_one(&mut conn)
            .await
            .unwrap();
            // The plan is a `json` column (text on the wire); sqlx is built without JSON types.
            let plan: Value =
                serde_json::from_str(&row.try_get_unchecked::<String, _>(0).unwrap()).unwrap();
            for table in ["turns", "messages"] {
                assert!(
                    !plans_relation(&plan[0]["Plan"], table),
                    "{name} reads {table} (decision 0025: the session row holds the current turn)"
                );
            }
            if is_batch(name) {
                for table in ["clarification_bundles", "permission_requests"] {
                    assert!(
                        !plans_relation(&plan[0]["Plan"], table),
                        "{name} reads {table} (decision 0028: the session row holds P1)"
                    );
                }
            }
            read.push(history_rows_read(&plan[0]["Plan"]));
        }
        eprintln!(
            "{name}: {} history rows read with 1 turn, {} with 300",
            read[0], read[1]
        );
        assert!(
            read[1] <= read[0] + 4.0,
            "{name}: {} history rows read with 1 turn, {} with 300",
            read[0],
            read[1]
        );
    }
    drop(conn);
    support::drop_postgres(&url).await;
}

/// Whether any node of a JSON plan reads `relation`.
fn plans_relation(node: &Value, relation: &str) -> bool {
    node["Relation Name"].as_str() == Some(relation)
        || node["Plans"]
            .as_array()
            .is_some_and(|plans| plans.iter().any(|p| plans_relation(p, relation)))
}

/// The plan tree of an `EXPLAIN (ANALYZE, FORMAT JSON)` query.
async fn explained(
    conn: &mut sqlx::PgConnection,
    query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Value {
    let row = query.fetch_one(conn).await.unwrap();
    // The plan is a `json` column (text on the wire); sqlx is built without JSON types.
    let plan: Value =
        serde_json::from_str(&row.try_get_unchecked::<String, _>(0).unwrap()).unwrap();
    plan[0]["Plan"].clone()
}

/// Rows the executor read from `relation` (returned and filtered out), from an
/// `EXPLAIN (ANALYZE, FORMAT JSON)` plan.
fn rows_read_from(node: &Value, relation: &str) -> f64 {
    let loops = node["Actual Loops"].as_f64().unwrap_or(1.0);
    let own = if node["Relation Name"].as_str() == Some(relation) {
        (node["Actual Rows"].as_f64().unwrap_or(0.0)
            + node["Rows Removed by Filter"].as_f64().unwrap_or(0.0))
            * loops
    } else {
        0.0
    };
    own + node["Plans"]
        .as_array()
        .map(|plans| plans.iter().map(|p| rows_read_from(p, relation)).sum())
        .unwrap_or(0.0)
}

/// B2 on PostgreSQL: a task-list page (its tasks with their summaries) and its batch reads
/// (the sessions of its 100 tasks, their P1 pending actions) read those tasks' rows, not whole
/// tables, with 10,000 tasks of 3 sessions each and fresh statistics. The page joined the
/// summaries in a plain join, which PostgreSQL ran as a hash join over all of them (fresh
/// statistics) or before the `LIMIT` (none). PostgreSQL planned `IN (SELECT
/// jsonb_array_elements_text($1))` as a hash semi-join over a scan of all 30,000 sessions
/// (10 ms per list read); `authority::is_one_of_json_ids` makes it an index condition.
#[tokio::test]
async fn b2_postgres_page_reads_only_the_pages_rows() {
    let Some(url) = support::postgres_url().await else {
        return;
    };
    repo::connect(&url).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    for sql in [
        // First without statistics (as after a bulk load), so autovacuum must not run.
        "ALTER TABLE tasks SET (autovacuum_enabled = false)",
        "ALTER TABLE sessions SET (autovacuum_enabled = false)",
        "ALTER TABLE task_status_summaries SET (autovacuum_enabled = false)",
        "INSERT INTO tasks (id, title, description, state, created_at, updated_at) \
         SELECT 't' || g, 'task ' || g, '', 'open', g, g FROM generate_series(1, 10000) g",
        "INSERT INTO sessions (id, task_id, name, state, is_primary, created_at) \
         SELECT 's' || g || '-' || k, 't' || g, 's', 'waiting_for_input', k = 1, g \
         FROM generate_series(1, 10000) g, generate_series(1, 3) k",
        "INSERT INTO task_status_summaries (task_id, revision, summary, invalidated, updated_at) \
         SELECT 't' || g, 1, '{}', FALSE, g FROM generate_series(1, 10000) g",
    ] {
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }
    let tasks: Vec<String> = (1..=100).map(|g| format!("t{g}")).collect();
    let sessions: Vec<String> = (1..=100).map(|g| format!("s{g}-1")).collect();
    for statistics in ["none", "fresh"] {
        if statistics == "fresh" {
            sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();
        }
        for (name, sql, ids) in [
            (
                "task_sessions",
                SQL.task_sessions(Backend::Postgres),
                &tasks,
            ),
            (
                "task_sessions_with_summaries",
                SQL.task_sessions_with_summaries(Backend::Postgres),
                &tasks,
            ),
            (
                "pending_actions",
                SQL.pending_actions(Backend::Postgres),
                &sessions,
            ),
        ] {
            let query = sqlx::query(sqlx::AssertSqlSafe(format!(
                "EXPLAIN (ANALYZE, FORMAT JSON) {sql}"
            )))
            .bind(serde_json::json!(ids).to_string());
            let plan = explained(&mut conn, query).await;
            let read = rows_read_from(&plan, "sessions");
            assert!(
                read <= 3.0 * 100.0,
                "{name}, {statistics} statistics: {read} session rows read for 100 ids of \
                 30,000 sessions\n{plan:#}"
            );
        }
        // The page itself: its tasks' summaries, not every summary.
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "EXPLAIN (ANALYZE, FORMAT JSON) {}",
            repo::page_statement(Backend::Postgres, false)
        )))
        .bind(None::<String>)
        .bind(false)
        .bind(None::<i64>)
        .bind(None::<String>)
        .bind(101_i64);
        let plan = explained(&mut conn, query).await;
        let read = rows_read_from(&plan, "task_status_summaries");
        assert!(
            read <= 101.0,
            "page, {statistics} statistics: {read} summary rows read for a page of 101 of \
             10,000 tasks\n{plan:#}"
        );
    }
    drop(conn);
    support::drop_postgres(&url).await;
}
