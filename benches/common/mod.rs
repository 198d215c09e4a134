//! What the benchmarks share: their command line, the databases they run on, and the task
//! population of B2, B5 and B6.
#![allow(dead_code)] // each benchmark uses its part

use std::sync::Arc;

use turnstile::model::SessionState;
use turnstile::server::repo::{NewSession, NewTask, Repository};

/// `cargo bench --bench NAME -- [--quick] [--json PATH]`.
pub struct Args {
    pub quick: bool,
    pub json: Option<String>,
}

/// The command line, or `None` when not run by `cargo bench` (`cargo test --all-targets`
/// builds and starts every bench target: then it does nothing).
pub fn args() -> Option<Args> {
    let args: Vec<String> = std::env::args().collect();
    // `cargo test --all-targets` runs benches too, after every test: they say nothing then,
    // so the story counts (`tests/zz_story_counts.rs`) stay the run's last words.
    if !args.iter().any(|a| a == "--bench") {
        return None;
    }
    Some(Args {
        quick: args.iter().any(|a| a == "--quick"),
        json: args
            .iter()
            .position(|a| a == "--json")
            .and_then(|i| args.get(i + 1).cloned()),
    })
}

impl Args {
    pub fn write_json(&self, value: &serde_json::Value) {
        if let Some(path) = &self.json {
            std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
        }
    }
}

/// `(name, url base)`: SQLite always, PostgreSQL when `TEST_POSTGRES_URL` is set.
pub fn backends() -> Vec<(String, String)> {
    let mut backends = vec![("sqlite".to_string(), "sqlite".to_string())];
    if let Ok(url) = std::env::var("TEST_POSTGRES_URL")
        && !url.is_empty()
    {
        backends.push(("postgres".to_string(), url));
    }
    backends
}

/// Where this run keeps its files (SQLite databases, server data directories): one directory,
/// removed by [`clean_up`].
pub fn scratch_dir() -> &'static std::path::Path {
    static DIR: std::sync::LazyLock<std::path::PathBuf> = std::sync::LazyLock::new(|| {
        let dir = std::env::temp_dir().join(format!("turnstile-bench-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    });
    &DIR
}

/// The PostgreSQL databases this run created: `(server URL, database name)`.
static CREATED: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// The URL of a new, empty database on the backend of `url_base`.
pub async fn fresh_database(url_base: &str, name: &str) -> String {
    if url_base.starts_with("sqlite") {
        let dir = scratch_dir().join(format!("{name}-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        return format!("sqlite:{}", dir.join("b.db").display());
    }
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url_base).await.unwrap();
    let db = format!("bench_{}", uuid::Uuid::now_v7().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(&mut conn)
        .await
        .unwrap();
    CREATED
        .lock()
        .unwrap()
        .push((url_base.to_string(), db.clone()));
    let base = url_base.rsplit_once('/').unwrap().0;
    format!("{base}/{db}")
}

/// Removes what the run made: its scratch directory (each run's databases and server data
/// directories, up to a few hundred MB) and its PostgreSQL databases.
pub async fn clean_up() {
    use sqlx::Connection;
    let created = std::mem::take(&mut *CREATED.lock().unwrap());
    for (server, db) in created {
        let mut conn = sqlx::PgConnection::connect(&server).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {db} WITH (FORCE)"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let _ = std::fs::remove_dir_all(scratch_dir());
}

/// `tasks` tasks with three idle sessions each, through the repository (4 tasks at a time).
pub async fn populate_tasks(repo: &Arc<dyn Repository>, tasks: usize) {
    let mut next = 0;
    while next < tasks {
        let batch: Vec<_> = (next..(next + 4).min(tasks))
            .map(|n| {
                let repo = repo.clone();
                async move {
                    let task = repo
                        .create_task(
                            &NewTask {
                                title: format!("Task {n:05}"),
                                ..Default::default()
                            },
                            1_000 + n as i64,
                        )
                        .await
                        .unwrap()
                        .id;
                    for s in 0..3 {
                        repo.create_session(
                            &NewSession {
                                task_id: task.clone(),
                                agent_profile_id: None,
                                name: format!("s{s}"),
                                state: SessionState::WaitingForInput,
                                is_primary: s == 0,
                                mcp_token_hash: None,
                            },
                            1_000 + n as i64,
                        )
                        .await
                        .unwrap();
                    }
                }
            })
            .collect();
        futures::future::join_all(batch).await;
        next += 4;
    }
}
