//! Databases: a fresh SQLite file or PostgreSQL database per test, what a PostgreSQL-less run
//! does (`skip_postgres`), raw SQL, and snapshots of every row to prove nothing was written.

use std::path::PathBuf;
use std::sync::Arc;

use turnstile::server::repo::{self, Repository};

pub fn temp_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("turnstile-{prefix}-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A URL for a fresh, empty SQLite database file, in memory-backed `/dev/shm` when the machine
/// has it (the server syncs every commit to disk, which would make tests crawl).
pub fn sqlite_url() -> String {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        let d = shm.join(format!("turnstile-sqlite-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&d).expect("create shm dir");
        d
    } else {
        temp_dir("sqlite")
    };
    format!("sqlite:{}", dir.join("test.db").display())
}

/// A URL for a fresh, empty PostgreSQL database of the server named by `TEST_POSTGRES_URL`.
/// Without one the test fails, unless `TURNSTILE_SKIP_POSTGRES=1` says to run the SQLite half
/// only: then `None`, and the skip is counted (`TURNSTILE_SKIPPED_LOG`, which scripts/test.sh
/// sums at the end).
pub async fn postgres_url() -> Option<String> {
    let admin = match std::env::var("TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            skip_postgres();
            return None;
        }
    };
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at TEST_POSTGRES_URL: {e}"));
    let name = format!("t_{}", uuid::Uuid::now_v7().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create test database");
    let base = admin
        .rsplit_once('/')
        .map(|(base, _)| base)
        .expect("TEST_POSTGRES_URL has a database path");
    let query = admin
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    let base = base.split('?').next().unwrap_or(base);
    Some(format!("{base}/{name}{query}"))
}

/// Drops a database made by [`postgres_url`] once its story passed (a failed story keeps it for
/// a look): a long-lived `TEST_POSTGRES_URL` cluster otherwise grows by every run.
pub async fn drop_postgres(url: &str) {
    use sqlx::Connection;
    let Ok(admin) = std::env::var("TEST_POSTGRES_URL") else {
        return;
    };
    let name = url
        .rsplit_once('/')
        .map(|(_, db)| db.split('?').next().unwrap_or(db))
        .filter(|db| {
            db.starts_with("t_") && db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .expect("a database made by postgres_url");
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .expect("reach PostgreSQL to drop a test database");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await
    .expect("drop the test database");
}

pub async fn sqlite_repo() -> Arc<dyn Repository> {
    repo::connect(&sqlite_url()).await.expect("open sqlite")
}

pub async fn postgres_repo() -> Option<Arc<dyn Repository>> {
    let url = postgres_url().await?;
    Some(repo::connect(&url).await.expect("open postgres"))
}

/// The PostgreSQL half of a test without a PostgreSQL server: a failure, unless
/// `TURNSTILE_SKIP_POSTGRES=1`, when the skip is written to `TURNSTILE_SKIPPED_LOG` (one line
/// per skipped test) so the run can say how many were skipped.
pub fn skip_postgres() {
    use std::io::Write;
    assert!(
        std::env::var("TURNSTILE_SKIP_POSTGRES").is_ok_and(|v| v == "1"),
        "no PostgreSQL: TEST_POSTGRES_URL is not set (scripts/test.sh starts a private \
         cluster; TURNSTILE_SKIP_POSTGRES=1 runs the SQLite half only)"
    );
    let test = std::thread::current().name().unwrap_or("?").to_string();
    match std::env::var_os("TURNSTILE_SKIPPED_LOG") {
        Some(log) => {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .expect("open TURNSTILE_SKIPPED_LOG");
            writeln!(f, "{test}").expect("write TURNSTILE_SKIPPED_LOG");
        }
        None => eprintln!("{test}: PostgreSQL half skipped (TURNSTILE_SKIP_POSTGRES=1)"),
    }
}

/// Runs one story against SQLite and PostgreSQL: `both!(story_fn)` defines `mod story_fn`
/// with a `sqlite` and a `postgres` test.
#[macro_export]
macro_rules! both {
    ($($story:ident),+ $(,)?) => {
        $(
            mod $story {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$story($crate::support::sqlite_repo().await).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    if let Some(repo) = $crate::support::postgres_repo().await {
                        super::$story(repo).await;
                    }
                }
            }
        )+
    };
}

/// Runs raw SQL against the database behind `url`, outside the repository: used to inject
/// real failures (a renamed table makes every query that touches it fail) and stale rows.
pub async fn raw_exec(url: &str, sql: &str) {
    use sqlx::Connection;
    let sql = sqlx::AssertSqlSafe(sql.to_string());
    if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url)
            .await
            .expect("raw sqlite connection");
        sqlx::query(sql).execute(&mut conn).await.expect("raw sql");
    } else {
        let mut conn = sqlx::PgConnection::connect(url)
            .await
            .expect("raw postgres connection");
        sqlx::query(sql).execute(&mut conn).await.expect("raw sql");
    }
}

/// Row counts of the tables a request could write to (summaries excluded: reads reconcile
/// them, P7). Equal before and after means "nothing was written".
pub async fn table_counts(url: &str) -> std::collections::BTreeMap<&'static str, i64> {
    use sqlx::{Connection, Row};
    const TABLES: [&str; 9] = [
        "tasks",
        "sessions",
        "turns",
        "messages",
        "clarification_bundles",
        "clarification_questions",
        "permission_requests",
        "agent_profiles",
        "workflows",
    ];
    let sql = TABLES
        .iter()
        .map(|t| format!("(SELECT COUNT(*) FROM {t}) AS {t}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = sqlx::AssertSqlSafe(format!("SELECT {sql}"));
    let mut out = std::collections::BTreeMap::new();
    if url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(url).await.expect("sqlite");
        let row = sqlx::query(sql).fetch_one(&mut c).await.expect("counts");
        for t in TABLES {
            out.insert(t, row.get::<i64, _>(t));
        }
    } else {
        let mut c = sqlx::PgConnection::connect(url).await.expect("postgres");
        let row = sqlx::query(sql).fetch_one(&mut c).await.expect("counts");
        for t in TABLES {
            out.insert(t, row.get::<i64, _>(t));
        }
    }
    out
}

/// Every row of every table in the database behind `url` (the migrations' bookkeeping
/// included), each row one line of `column=value` pairs (SQL literals: `quote()` on SQLite,
/// `quote_nullable()` on PostgreSQL, so NULL, text and numbers stay distinct), sorted per
/// table. Equal before and after means "nothing was written", contents included: unlike
/// [`table_counts`] it sees a row whose content was changed.
///
/// `volatile` names `(table, column)` pairs that change without any request (a heartbeat's
/// timestamp, say): their values show as `<volatile>`, never silently dropped, and each must
/// be a column of the database (a typo panics). The caller justifies every one.
pub async fn table_rows(
    url: &str,
    volatile: &[(&str, &str)],
) -> std::collections::BTreeMap<String, Vec<String>> {
    use sqlx::Connection;
    let sqlite = url.starts_with("sqlite:");
    let tables_sql = if sqlite {
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name"
    } else {
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1"
    };
    let columns_sql = if sqlite {
        "SELECT name FROM pragma_table_info($1) ORDER BY cid"
    } else {
        "SELECT column_name::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position"
    };
    let quote = if sqlite { "quote" } else { "quote_nullable" };
    let ident = |name: &str| {
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "unexpected identifier {name:?}"
        );
        format!("\"{name}\"")
    };
    // One query per table: `SELECT 'a=' || quote("a") || ' b=' || quote("b") … FROM "t"`.
    let row_sql = |table: &str, columns: &[String]| {
        let parts = columns
            .iter()
            .map(|c| {
                if volatile.iter().any(|(t, col)| *t == table && col == c) {
                    format!("'{c}=<volatile>'")
                } else {
                    format!("'{c}=' || {quote}({})", ident(c))
                }
            })
            .collect::<Vec<_>>()
            .join(" || ' ' || ");
        sqlx::AssertSqlSafe(format!("SELECT {parts} AS r FROM {}", ident(table)))
    };
    let mut out = std::collections::BTreeMap::new();
    macro_rules! snapshot {
        ($conn:expr) => {{
            let mut c = $conn;
            let tables: Vec<String> = sqlx::query_scalar(tables_sql)
                .fetch_all(&mut c)
                .await
                .expect("list tables");
            for table in tables {
                let columns: Vec<String> = sqlx::query_scalar(columns_sql)
                    .bind(&table)
                    .fetch_all(&mut c)
                    .await
                    .expect("list columns");
                let mut rows: Vec<String> = sqlx::query_scalar(row_sql(&table, &columns))
                    .fetch_all(&mut c)
                    .await
                    .unwrap_or_else(|e| panic!("read {table}: {e}"));
                rows.sort();
                out.insert(table, (columns, rows));
            }
        }};
    }
    if sqlite {
        snapshot!(sqlx::SqliteConnection::connect(url).await.expect("sqlite"));
    } else {
        snapshot!(sqlx::PgConnection::connect(url).await.expect("postgres"));
    }
    for (table, column) in volatile {
        assert!(
            out.get(*table)
                .is_some_and(|(cols, _)| cols.iter().any(|c| c == column)),
            "volatile column {table}.{column} is not in the database"
        );
    }
    out.into_iter().map(|(t, (_, rows))| (t, rows)).collect()
}

/// The rows that differ between two [`table_rows`] snapshots, table by table (`-` only
/// before, `+` only after); empty when they are equal.
pub fn rows_diff(
    before: &std::collections::BTreeMap<String, Vec<String>>,
    after: &std::collections::BTreeMap<String, Vec<String>>,
) -> String {
    let mut report = String::new();
    if before == after {
        return report;
    }
    let tables: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let empty = Vec::new();
    for table in tables {
        let b = before.get(table).unwrap_or(&empty);
        let a = after.get(table).unwrap_or(&empty);
        for row in b.iter().filter(|r| !a.contains(r)) {
            report.push_str(&format!("\n  {table} - {row:.400}"));
        }
        for row in a.iter().filter(|r| !b.contains(r)) {
            report.push_str(&format!("\n  {table} + {row:.400}"));
        }
    }
    report
}

/// Panics with the rows that differ unless two [`table_rows`] snapshots are equal.
pub fn assert_same_rows(
    before: &std::collections::BTreeMap<String, Vec<String>>,
    after: &std::collections::BTreeMap<String, Vec<String>>,
    what: &str,
) {
    let diff = rows_diff(before, after);
    assert!(diff.is_empty(), "{what}: the database changed:{diff}");
}

/// A session with `turns` turns, each holding a message and a (stale, but for the last)
/// pending bundle: the shape of B1. Returns the session's id and its task's.
pub async fn session_with_history(repo: &Arc<dyn Repository>, turns: usize) -> (String, String) {
    let task = repo
        .create_task(
            &repo::NewTask {
                title: "history".into(),
                ..Default::default()
            },
            0,
        )
        .await
        .unwrap()
        .id;
    let session = repo
        .create_session(
            &repo::NewSession {
                task_id: task.clone(),
                agent_profile_id: None,
                name: "s".into(),
                state: turnstile::model::SessionState::WaitingForInput,
                is_primary: true,
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
            .insert_turn(&repo::NewTurn {
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
            &repo::NewMessage {
                session_id: session.clone(),
                turn_id: turn.clone(),
                author: turnstile::model::MessageAuthor::Agent,
                kind: turnstile::model::MessageKind::Text,
                content: "m".into(),
                pending_id: None,
            },
            at,
        )
        .await
        .unwrap();
        repo.insert_bundle(
            &repo::NewBundle {
                pending_id: None,
                session_id: session.clone(),
                turn_id: turn,
                context: None,
                dedup_key: format!("k{t}"),
                questions: vec![],
                message_content: "?".into(),
            },
            at,
        )
        .await
        .unwrap();
    }
    (session, task)
}
