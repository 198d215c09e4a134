//! Where statements run: a SQLite database file's connections are kept by the repository
//! itself, PostgreSQL's (and an in-memory SQLite database's one) by a sqlx pool
//! (docs/decisions/0029-sqlite-connections-outside-the-pool.md).
//!
//! Why not sqlx's pool for SQLite: a pool takes a connection back through a spawned task that
//! first pings it, and a SQLite connection's ping is a round trip to the connection's own
//! thread. So every statement cost two trips to that thread and a task on a busy runtime, and
//! SQLite's one write connection (decision 0023) was checked out 98% of the time in B3, much of
//! it waiting for its own return. A connection of this process cannot have been closed by a
//! server, so there is nothing for the ping to find; the connections here are handed back on
//! drop, at once, in the order callers asked (a fair semaphore).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sqlx::pool::PoolConnection;
use sqlx::{ConnectOptions, Connection, Database, Pool};
use sqlx_core::transaction::TransactionManager as _;

/// The connections one kind of statement runs on.
pub(super) enum Connections<DB: Database> {
    /// A SQLite database file: at most `permits` connections, opened when first needed (or
    /// given at the start, like the one write connection), never pinged.
    Own(ConnectionSet<DB>),
    /// PostgreSQL (whose server can end a connection: the pool replaces it) and in-memory
    /// SQLite (one connection for everything), with the pool's usage (shared by the reads and
    /// writes on one pool).
    Pooled(Pool<DB>, Arc<Counters>),
}

pub(super) struct ConnectionSet<DB: Database> {
    idle: std::sync::Mutex<Vec<DB::Connection>>,
    permits: tokio::sync::Semaphore,
    options: <DB::Connection as Connection>::Options,
    usage: Counters,
}

/// How a set's connections have been used so far (for `GET /metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionUsage {
    /// Times a connection was lent.
    pub lent: u64,
    /// Time callers waited for a connection, in microseconds.
    pub waited_micros: u64,
    /// Time connections were lent out, in microseconds: for SQLite's one write connection,
    /// how busy the database's writing is (its queue grows as this nears the elapsed time).
    pub held_micros: u64,
}

/// A sqlx pool's usage and its connections now (`GET /metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolUsage {
    pub usage: ConnectionUsage,
    /// Connections open, idle or lent.
    pub size: u32,
    /// Connections open and idle.
    pub idle: usize,
}

#[derive(Default)]
pub(super) struct Counters {
    lent: AtomicU64,
    waited_micros: AtomicU64,
    held_micros: AtomicU64,
}

impl Counters {
    fn lend(&self, asked: Instant) {
        self.lent.fetch_add(1, Ordering::Relaxed);
        self.waited_micros
            .fetch_add(micros_since(asked), Ordering::Relaxed);
    }

    fn snapshot(&self) -> ConnectionUsage {
        ConnectionUsage {
            lent: self.lent.load(Ordering::Relaxed),
            waited_micros: self.waited_micros.load(Ordering::Relaxed),
            held_micros: self.held_micros.load(Ordering::Relaxed),
        }
    }
}

/// Counts the time a connection is out, from lending to drop.
pub(super) struct Held<'a> {
    counters: &'a Counters,
    since: Instant,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.counters
            .held_micros
            .fetch_add(micros_since(self.since), Ordering::Relaxed);
    }
}

fn micros_since(at: Instant) -> u64 {
    u64::try_from(at.elapsed().as_micros()).unwrap_or(u64::MAX)
}

impl<DB: Database> ConnectionSet<DB> {
    /// At most `limit` connections: `open` first, more made from `options` when needed.
    pub(super) fn new(
        open: Vec<DB::Connection>,
        limit: usize,
        options: <DB::Connection as Connection>::Options,
    ) -> Self {
        Self {
            idle: std::sync::Mutex::new(open),
            permits: tokio::sync::Semaphore::new(limit),
            options,
            usage: Counters::default(),
        }
    }

    pub(super) fn usage(&self) -> ConnectionUsage {
        self.usage.snapshot()
    }
}

impl<DB: Database> Connections<DB> {
    /// The writes and the reads on one pool, counted together.
    pub(super) fn one_pool(pool: Pool<DB>) -> (Self, Self) {
        let usage = Arc::new(Counters::default());
        (
            Connections::Pooled(pool.clone(), usage.clone()),
            Connections::Pooled(pool, usage),
        )
    }

    /// A connection for as long as the result lives: `.execute(&mut *conn)`.
    pub(super) async fn get(&self) -> Result<Conn<'_, DB>, sqlx::Error> {
        match self {
            Connections::Pooled(pool, usage) => {
                let asked = Instant::now();
                let conn = pool.acquire().await?;
                usage.lend(asked);
                Ok(Conn::Pooled(
                    conn,
                    Held {
                        counters: usage,
                        since: Instant::now(),
                    },
                ))
            }
            Connections::Own(set) => {
                let asked = Instant::now();
                let permit = set
                    .permits
                    .acquire()
                    .await
                    .expect("the semaphore is never closed");
                let idle = set.idle.lock().expect("poisoned").pop();
                let conn = match idle {
                    Some(conn) => conn,
                    None => set.options.connect().await?,
                };
                set.usage.lend(asked);
                Ok(Conn::Lent(Lent {
                    conn: Some(conn),
                    set,
                    _held: Held {
                        counters: &set.usage,
                        since: Instant::now(),
                    },
                    _permit: permit,
                }))
            }
        }
    }

    /// The usage of a set of this process's own connections (`None` for a pool).
    pub(super) fn usage(&self) -> Option<ConnectionUsage> {
        match self {
            Connections::Own(set) => Some(set.usage()),
            Connections::Pooled(..) => None,
        }
    }

    /// The usage of a sqlx pool, with its size and idle connections now (`None` for a set of
    /// this process's own connections).
    pub(super) fn pool_usage(&self) -> Option<PoolUsage> {
        match self {
            Connections::Pooled(pool, usage) => Some(PoolUsage {
                usage: usage.snapshot(),
                size: pool.size(),
                idle: pool.num_idle(),
            }),
            Connections::Own(_) => None,
        }
    }

    pub(super) fn pool(&self) -> Option<&Pool<DB>> {
        match self {
            Connections::Pooled(pool, _) => Some(pool),
            Connections::Own(_) => None,
        }
    }
}

/// A connection lent by a [`ConnectionSet`]; back in the set when dropped (before its permit
/// is released, so the next caller finds it).
pub(super) struct Lent<'a, DB: Database> {
    conn: Option<DB::Connection>,
    set: &'a ConnectionSet<DB>,
    _held: Held<'a>,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl<DB: Database> Drop for Lent<'_, DB> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.set.idle.lock().expect("poisoned").push(conn);
        }
    }
}

/// A connection while one caller has it.
pub(super) enum Conn<'a, DB: Database> {
    Lent(Lent<'a, DB>),
    /// The guard counts the time held (its field is only read when it drops).
    Pooled(PoolConnection<DB>, #[allow(dead_code)] Held<'a>),
}

impl<DB: Database> Deref for Conn<'_, DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &DB::Connection {
        match self {
            Conn::Lent(l) => l.conn.as_ref().expect("lent until dropped"),
            Conn::Pooled(c, _) => c,
        }
    }
}

impl<DB: Database> DerefMut for Conn<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match self {
            Conn::Lent(l) => l.conn.as_mut().expect("lent until dropped"),
            Conn::Pooled(c, _) => c,
        }
    }
}

/// A transaction on one connection: `commit` ends it; dropped before that, it is rolled back
/// (queued on the connection, which runs it before its next statement).
pub(super) struct Tx<'a, DB: Database> {
    conn: Conn<'a, DB>,
    open: bool,
}

impl<'a, DB: Database> Tx<'a, DB> {
    pub(super) async fn begin(
        mut conn: Conn<'a, DB>,
        statement: &'static str,
    ) -> Result<Self, sqlx::Error> {
        DB::TransactionManager::begin(&mut conn, Some(sqlx::SqlSafeStr::into_sql_str(statement)))
            .await?;
        Ok(Self { conn, open: true })
    }

    pub(super) async fn commit(mut self) -> Result<(), sqlx::Error> {
        DB::TransactionManager::commit(&mut self.conn).await?;
        self.open = false;
        Ok(())
    }
}

impl<DB: Database> Drop for Tx<'_, DB> {
    fn drop(&mut self) {
        if self.open {
            DB::TransactionManager::start_rollback(&mut self.conn);
        }
    }
}

impl<DB: Database> Deref for Tx<'_, DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &DB::Connection {
        &self.conn
    }
}

impl<DB: Database> DerefMut for Tx<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.conn
    }
}
