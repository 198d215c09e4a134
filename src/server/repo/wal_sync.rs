//! Group commit for SQLite (decision 0024). The write connection commits with
//! `synchronous = NORMAL`: a commit appends its frames to the WAL file without waiting for the
//! disk. [`WalSync::sync`] makes every commit made so far durable with one `fdatasync` of the
//! WAL, shared by every caller waiting at the same time; the server calls it (through
//! `Repository::durable`) before it acknowledges a request or hands anything to an agent.
//!
//! Commits are counted by SQLite's WAL hook, which runs on the write connection right after
//! each commit (so a count read after a write returned includes that write). Registering the
//! hook replaces SQLite's automatic checkpoint, which is itself a WAL hook: ours checkpoints at
//! [`CHECKPOINT_FRAMES`].

use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use libsqlite3_sys::{SQLITE_OK, sqlite3, sqlite3_wal_checkpoint, sqlite3_wal_hook};

/// The WAL is checkpointed once it holds this many frames (pages): four times SQLite's own
/// `wal_autocheckpoint` default (decision 0024, amendment). The hook runs the checkpoint on
/// the committing thread while the write connection is held, so each one stalls the writes
/// queued behind it and a runtime worker; a round trip rewrites the same few hot pages, so a
/// checkpoint of 4,000 frames copies far fewer than four of 1,000. The WAL file peaks near
/// 16 MiB instead of 4 MiB.
pub const CHECKPOINT_FRAMES: c_int = 4000;

/// The commits of a database's write connection and how many of them are on disk.
pub struct WalSync {
    /// The database's WAL file (`<database>-wal`).
    wal: PathBuf,
    /// Commits made by the write connection (bumped by the WAL hook).
    committed: Arc<AtomicU64>,
    /// Commits known to be on disk.
    synced: AtomicU64,
    /// `fdatasync` calls made (tests).
    syncs: AtomicU64,
    /// Whether the directory entry of the WAL file has been synced once.
    directory_synced: AtomicBool,
    /// One sync at a time; whoever waits here may find its commits synced by the one before.
    leader: tokio::sync::Mutex<()>,
}

impl WalSync {
    pub fn new(database: PathBuf) -> Self {
        let mut wal = database.into_os_string();
        wal.push("-wal");
        Self {
            wal: wal.into(),
            committed: Arc::new(AtomicU64::new(0)),
            synced: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            directory_synced: AtomicBool::new(false),
            leader: tokio::sync::Mutex::new(()),
        }
    }

    /// Counts the commits of the connection `db` from now on.
    ///
    /// # Safety
    /// `db` must be an open connection to this database, used by one thread at a time (sqlx's
    /// locked handle). The counter it is given lives as long as the process (leaked once per
    /// connection: the write connection is opened once).
    pub unsafe fn watch(&self, db: *mut sqlite3) {
        let counter = Arc::into_raw(self.committed.clone()) as *mut c_void;
        // SAFETY: per this function's contract; `on_commit` only reads `counter` as the
        // `AtomicU64` it was made from.
        unsafe {
            sqlite3_wal_hook(db, Some(on_commit), counter);
        }
    }

    /// Commits made so far and commits known to be on disk.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.committed.load(Ordering::SeqCst),
            self.synced.load(Ordering::SeqCst),
        )
    }

    /// `fdatasync` calls made so far.
    #[cfg(test)]
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }

    /// Returns once every commit made before this call is on disk: at once when they all are,
    /// else after one `fdatasync` of the WAL that started after it was called (or a later one).
    pub async fn sync(&self) -> std::io::Result<()> {
        let target = self.committed.load(Ordering::SeqCst);
        if self.synced.load(Ordering::SeqCst) >= target {
            return Ok(());
        }
        let _leader = self.leader.lock().await;
        if self.synced.load(Ordering::SeqCst) >= target {
            return Ok(()); // the sync before ours covered our commits
        }
        // Read before the sync starts: every commit counted here is in the file it syncs.
        let upto = self.committed.load(Ordering::SeqCst);
        let wal = self.wal.clone();
        let directory = !self.directory_synced.load(Ordering::SeqCst);
        tokio::task::spawn_blocking(move || sync_file(&wal, directory))
            .await
            .map_err(std::io::Error::other)??;
        self.directory_synced.store(true, Ordering::SeqCst);
        self.syncs.fetch_add(1, Ordering::SeqCst);
        self.synced.fetch_max(upto, Ordering::SeqCst);
        Ok(())
    }
}

/// `fdatasync` of the WAL file (and once of its directory, so the file itself survives). No
/// WAL file means no commit is waiting in one: SQLite removes it only after checkpointing
/// everything into the synced database file.
fn sync_file(wal: &std::path::Path, directory: bool) -> std::io::Result<()> {
    match std::fs::File::open(wal) {
        Ok(file) => file.sync_data()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    if directory && let Some(dir) = wal.parent() {
        let dir = if dir.as_os_str().is_empty() {
            std::path::Path::new(".")
        } else {
            dir
        };
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// SQLite's WAL hook: after every commit of the watched connection.
unsafe extern "C" fn on_commit(
    counter: *mut c_void,
    db: *mut sqlite3,
    name: *const c_char,
    frames: c_int,
) -> c_int {
    // SAFETY: `counter` is the leaked `Arc<AtomicU64>` of `WalSync::watch`.
    let committed = unsafe { &*(counter as *const AtomicU64) };
    committed.fetch_add(1, Ordering::SeqCst);
    if frames >= CHECKPOINT_FRAMES {
        // What SQLite's own hook (the automatic checkpoint) does; a busy reader only
        // postpones it to a later commit.
        // SAFETY: called by SQLite on the connection's thread with its own arguments.
        unsafe {
            sqlite3_wal_checkpoint(db, name);
        }
    }
    SQLITE_OK
}
