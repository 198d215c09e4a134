//! SQLite, the embedded default: a WAL database file, one connection that writes and up to
//! eight read-only ones for the rest (decision 0023), the repository's own rather than a
//! pool's (decision 0029). Write transactions start with `BEGIN IMMEDIATE` so a
//! read-then-write transaction never fails to upgrade.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Sqlite};

use super::connections::{ConnectionSet, Connections};
use super::sql::{RowsAffected, SqlBackend, SqlRepository};
use super::wal_sync::WalSync;
use super::{Backend, RepoResult};

pub type SqliteRepository = SqlRepository<Sqlite>;

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::sqlite::SqliteQueryResult::rows_affected(self)
    }
}

impl SqlBackend for Sqlite {
    const KIND: Backend = Backend::Sqlite;
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const LOCK_SESSION: &'static str = "SELECT 1 FROM sessions WHERE id = $1";

    fn postgres_options(_: &sqlx::Pool<Self>) -> Option<sqlx::postgres::PgConnectOptions> {
        None
    }
}

impl SqliteRepository {
    /// `url` is `sqlite:<path>` (created if missing) or `sqlite::memory:`.
    pub async fn connect(url: &str) -> RepoResult<Self> {
        Self::open(url, Duration::from_secs(10)).await
    }

    /// [`Self::connect`] with SQLite's busy timeout chosen: how long a connection waits for a
    /// lock another connection holds (tests use zero, so any such wait is an error).
    async fn open(url: &str, busy_timeout: Duration) -> RepoResult<Self> {
        let memory = url.contains(":memory:");
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .foreign_keys(true)
            .busy_timeout(busy_timeout)
            .journal_mode(if memory {
                SqliteJournalMode::Memory
            } else {
                SqliteJournalMode::Wal
            })
            // Commits do not wait for the disk; `Repository::durable` syncs them, once for
            // every caller waiting together, before anything is acknowledged (group commit,
            // docs/decisions/0024-sqlite-group-commit.md, which replaces 0010's FULL).
            .synchronous(SqliteSynchronous::Normal);
        let durability =
            (!memory).then(|| Arc::new(WalSync::new(options.get_filename().to_path_buf())));
        if memory {
            // An in-memory database exists per connection: the one connection does all.
            let pool = SqlitePoolOptions::new()
                .test_before_acquire(false)
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with(options)
                .await?;
            sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
            let (writes, reads) = Connections::one_pool(pool);
            return Ok(Self {
                writes,
                reads,
                durability,
            });
        }
        // One connection writes (decision 0023), held outside any pool (decision 0029). It
        // stays open for the life of the repository: it holds the WAL files the read-only
        // connections need.
        let mut writer = options.connect().await?;
        if let Some(wal) = &durability {
            let mut handle = writer.lock_handle().await?;
            // SAFETY: the handle is locked, so this thread alone uses the connection while
            // the hook is installed.
            unsafe { wal.watch(handle.as_raw_handle().as_ptr()) };
        }
        sqlx::migrate!("./migrations/sqlite")
            .run_direct(None, &mut writer, false)
            .await?;
        // Read connections are opened when first needed, at most eight.
        Ok(Self {
            reads: Connections::Own(ConnectionSet::new(
                Vec::new(),
                8,
                options.clone().read_only(true),
            )),
            writes: Connections::Own(ConnectionSet::new(vec![writer], 1, options)),
            durability,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::ffi::CStr;

    use super::SqliteRepository;
    use crate::model::SessionState;
    use crate::server::repo::connections::Connections;
    use crate::server::repo::{
        NewSession, NewTask, Repository, SessionStore, TaskFilter, TaskStore, TranscriptStore,
    };

    /// How often each statement this connection has prepared was prepared again, by its SQL.
    async fn re_prepares(repo: &SqliteRepository) -> HashMap<String, i32> {
        use libsqlite3_sys::{
            SQLITE_STMTSTATUS_REPREPARE, sqlite3_next_stmt, sqlite3_sql, sqlite3_stmt_status,
        };
        let mut conn = repo.reads.pool().unwrap().acquire().await.unwrap();
        let mut handle = conn.lock_handle().await.unwrap();
        let db = handle.as_raw_handle().as_ptr();
        let mut out = HashMap::new();
        // SAFETY: the handle is locked for this scope; `sqlite3_next_stmt` walks the
        // connection's own prepared statements, which stay alive while it is locked, and
        // `sqlite3_sql` returns each one's text, owned by the statement.
        unsafe {
            let mut stmt = sqlite3_next_stmt(db, std::ptr::null_mut());
            while !stmt.is_null() {
                let sql = CStr::from_ptr(sqlite3_sql(stmt))
                    .to_string_lossy()
                    .into_owned();
                let n = sqlite3_stmt_status(stmt, SQLITE_STMTSTATUS_REPREPARE, 0);
                *out.entry(sql).or_default() += n;
                stmt = sqlite3_next_stmt(db, stmt);
            }
        }
        out
    }

    /// B2 (sql.rs, "Bound limits"): reading list pages of different sizes, filters and
    /// cursors prepares each statement once; none is parsed and planned again per read.
    #[tokio::test]
    async fn b2_list_reads_never_re_prepare_a_statement() {
        // In memory: one connection, so every read below runs on the one inspected.
        let repo = SqliteRepository::connect("sqlite::memory:").await.unwrap();
        // The migrations' own statements were prepared again as the schema changed.
        let before = re_prepares(&repo).await;
        for i in 0..5 {
            let new = NewTask {
                title: format!("task {i}"),
                description: String::new(),
                workflow_id: None,
                step_id: None,
            };
            repo.create_task(&new, 1_000 + i).await.unwrap();
        }
        for limit in [2, 3, 101] {
            for title_like in [None, Some("%task%".to_string())] {
                let page = repo
                    .list_tasks_page(&TaskFilter {
                        archived: false,
                        title_like,
                        pending_only: false,
                        after: None,
                        limit,
                    })
                    .await
                    .unwrap();
                assert_eq!(page.len(), limit.min(5) as usize);
            }
            repo.list_messages("no-such-session", None, limit)
                .await
                .unwrap();
            repo.list_messages_before("no-such-session", None, limit)
                .await
                .unwrap();
        }
        let after = re_prepares(&repo).await;
        assert!(
            after.len() >= before.len() + 3,
            "the reads' statements are not cached"
        );
        let again: Vec<_> = after
            .iter()
            .filter(|(sql, n)| **n > before.get(*sql).copied().unwrap_or(0))
            .collect();
        assert!(again.is_empty(), "prepared again: {again:#?}");
    }

    /// Decisions 0026 and 0029: an in-process SQLite connection cannot have been closed by a
    /// server, so nothing pings it, before a statement or after (a sqlx pool pings each
    /// connection it takes back: a round trip to the connection's thread): a database file's
    /// connections are the repository's own, not a pool's.
    #[tokio::test]
    async fn no_connection_of_a_database_file_is_pooled_so_none_is_pinged() {
        let db = TempDb::new();
        let repo = SqliteRepository::connect(&db.url()).await.unwrap();
        assert!(
            matches!(repo.writes, Connections::Own(_)),
            "the write connection is pooled"
        );
        assert!(
            matches!(repo.reads, Connections::Own(_)),
            "the read connections are pooled"
        );
    }

    /// Decision 0029: a write transaction dropped before its commit (a failed or cancelled
    /// operation) is rolled back on the write connection, which the next caller then finds
    /// outside any transaction (its `BEGIN IMMEDIATE` would fail inside one).
    #[tokio::test]
    async fn a_write_transaction_dropped_before_its_commit_writes_nothing() {
        let db = TempDb::new();
        let repo = SqliteRepository::connect(&db.url()).await.unwrap();
        let insert = |key: &'static str| {
            sqlx::query("INSERT INTO meta (key, value) VALUES ($1, 1)").bind(key)
        };
        {
            let mut tx = repo.write_tx().await.unwrap();
            insert("dropped").execute(&mut *tx).await.unwrap();
        }
        let mut tx = repo.write_tx().await.unwrap();
        insert("kept").execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        let keys: Vec<String> =
            sqlx::query_scalar("SELECT key FROM meta WHERE key IN ('dropped', 'kept')")
                .fetch_all(&mut *repo.reader().await.unwrap())
                .await
                .unwrap();
        assert_eq!(keys, ["kept"]);
    }

    /// A database file in a directory of its own, removed when dropped.
    struct TempDb(std::path::PathBuf);

    impl TempDb {
        fn new() -> Self {
            let dir =
                std::env::temp_dir().join(format!("turnstile-sqlite-{}", uuid::Uuid::now_v7()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn url(&self) -> String {
            format!("sqlite:{}", self.0.join("t.db").display())
        }
    }

    impl Drop for TempDb {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// B3 (decision 0023): concurrent writers never meet SQLite's busy handler. The busy
    /// timeout is zero, so a write that found another connection holding the write lock would
    /// fail at once with "database is locked" (with one pool for everything it does, within
    /// the first few of these writes); queued for the one write connection, every write
    /// waits in the process and succeeds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn b3_concurrent_writers_wait_in_the_process_not_in_sqlites_busy_handler() {
        let db = TempDb::new();
        let repo = std::sync::Arc::new(
            SqliteRepository::open(&db.url(), std::time::Duration::ZERO)
                .await
                .unwrap(),
        );
        let writers: Vec<_> = (0..16)
            .map(|w| {
                let repo = repo.clone();
                tokio::spawn(async move {
                    for i in 0..20 {
                        let new = NewTask {
                            title: format!("writer {w} task {i}"),
                            description: String::new(),
                            workflow_id: None,
                            step_id: None,
                        };
                        let task = repo.create_task(&new, 1_000 + i).await?;
                        // A write transaction too, not only single statements.
                        let session = NewSession {
                            task_id: task.id,
                            agent_profile_id: None,
                            name: "s".into(),
                            state: SessionState::Created,
                            is_primary: true,
                            mcp_token_hash: None,
                        };
                        repo.create_session(&session, 1_001 + i).await?;
                    }
                    Ok::<_, crate::server::repo::RepoError>(())
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap().unwrap();
        }
        assert_eq!(repo.list_tasks().await.unwrap().len(), 16 * 20);
    }

    /// Decision 0023: the pool every read uses cannot write, so a write that skipped the
    /// write connection fails in the tests instead of waiting for SQLite's lock.
    #[tokio::test]
    async fn the_read_pool_refuses_writes() {
        let db = TempDb::new();
        let repo = SqliteRepository::connect(&db.url()).await.unwrap();
        let err = sqlx::query("UPDATE meta SET value = value")
            .execute(&mut *repo.reader().await.unwrap())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("readonly"), "{err}");
    }

    fn new_task(title: &str) -> NewTask {
        NewTask {
            title: title.into(),
            description: String::new(),
            workflow_id: None,
            step_id: None,
        }
    }

    /// I8 with group commit (decision 0024): every commit of the write connection is counted
    /// after it is made; `durable` syncs once for all commits made before it and not at all
    /// when they are on disk already.
    #[tokio::test]
    async fn i8_durable_syncs_once_for_every_commit_made_before_it() {
        let db = TempDb::new();
        let repo = SqliteRepository::connect(&db.url()).await.unwrap();
        let wal = repo.durability.clone().expect("a database file has a WAL");
        let (c0, _) = wal.counts();
        for i in 0..3 {
            repo.create_task(&new_task(&format!("t{i}")), 1_000 + i)
                .await
                .unwrap();
        }
        let (c1, s1) = wal.counts();
        assert_eq!(c1, c0 + 3, "one count per commit");
        assert!(s1 < c1, "not on disk before `durable`");
        let syncs = wal.syncs();
        repo.durable().await.unwrap();
        assert_eq!(wal.counts(), (c1, c1));
        assert_eq!(wal.syncs(), syncs + 1, "one sync for the three");
        repo.durable().await.unwrap();
        assert_eq!(wal.syncs(), syncs + 1, "nothing new: no sync");
        // Reads commit nothing.
        repo.list_tasks().await.unwrap();
        repo.durable().await.unwrap();
        assert_eq!(wal.syncs(), syncs + 1);
    }

    /// Decision 0024: the WAL hook that counts commits replaces SQLite's automatic checkpoint;
    /// it checkpoints at its own threshold, so the WAL does not grow without bound.
    #[tokio::test]
    async fn the_commit_counter_keeps_checkpointing_the_wal() {
        use crate::server::repo::wal_sync::CHECKPOINT_FRAMES;
        let db = TempDb::new();
        let repo = SqliteRepository::connect(&db.url()).await.unwrap();
        let frames = CHECKPOINT_FRAMES as u64;
        // Every commit appends at least one frame of 4 KiB: twice the threshold in commits
        // would leave at least twice the threshold in the WAL if nothing checkpointed.
        for i in 0..2 * frames {
            repo.create_task(&new_task("t"), i as i64).await.unwrap();
        }
        let wal = std::fs::metadata(db.0.join("t.db-wal")).unwrap().len();
        let bound = frames * 4096 * 3 / 2;
        assert!(
            wal < bound,
            "WAL of {wal} bytes (bound {bound}): never checkpointed"
        );
    }
}
