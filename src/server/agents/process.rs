//! Agent processes with least privilege (spec "Server process"): a minimal environment (never
//! the server's secrets such as `DATABASE_URL` or `ACCESS_TOKEN`), their own process group
//! (killed as a group, so a wrapper such as `npx` leaves no grandchildren behind, also when the
//! agent exits on its own or the server stops), and their stderr in the server's log (at info,
//! within a budget) with its last lines kept to explain a failure.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, ChildStderr, Command};

use super::AgentError;

/// Server variables an agent may inherit: enough to find programs and run in the user's
/// locale. Everything else comes from the agent profile's own `env`.
const INHERITED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "TERM",
];

/// The environment of an agent process: the inherited basics, then the profile's variables.
pub fn agent_env(profile: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    agent_env_from(|k| std::env::var(k).ok(), profile)
}

fn agent_env_from(
    server: impl Fn(&str) -> Option<String>,
    profile: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = INHERITED
        .iter()
        .filter_map(|k| server(k).map(|v| (k.to_string(), v)))
        .collect();
    env.extend(profile.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// `CAP_SYS_PTRACE` (linux/capability.h).
const CAP_SYS_PTRACE: libc::c_ulong = 19;

/// Starts `command` in its own process group with piped stdio and the minimal environment.
/// It cannot get `CAP_SYS_PTRACE` (dropped from its bounding set before it runs): with it, an
/// agent of a server running as root could read the server's environment and memory although
/// the server is not dumpable (spec "Server process").
pub fn spawn(
    command: &Path,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
) -> Result<Child, AgentError> {
    let mut cmd = Command::new(command);
    // SAFETY: runs in the child between fork and exec and makes one syscall, nothing else
    // (async-signal-safe). Without CAP_SETPCAP it fails with EPERM, which is fine: such a
    // process has no CAP_SYS_PTRACE to drop.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0);
            Ok(())
        });
    }
    cmd.args(args)
        .env_clear()
        .envs(agent_env(env))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| AgentError::from(format!("cannot start agent {}: {e}", command.display())))
}

/// Kills the whole process group led by `pid` (the agent and everything it started). Call it
/// before the leader is reaped, so the group id cannot have been reused.
pub fn kill_group(pid: u32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    if pid > 0 {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

/// Waits up to `grace` for our child `pid` to terminate **without reaping it** (a pidfd turns
/// readable when the process exits, `pidfd_open(2)`), so its group can still be killed safely
/// afterwards. Returns whether it exited within `grace`; `false` also when the kernel has no
/// pidfds (the caller then kills the group at once, which is safe too).
pub async fn exited_unreaped(pid: u32, grace: Duration) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
    let Ok(fd) = i32::try_from(fd) else {
        return false;
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` was just returned to us by the kernel and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: the AsyncFd owns `fd` (an OwnedFd), which stays open and the same until it drops.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    };
    let Ok(fd) = registered else {
        return false;
    };
    tokio::time::timeout(grace, fd.readable()).await.is_ok()
}

/// The process groups of a server's running agents. A registered group's leader has not been
/// reaped yet, so its id is still this agent's: a server that stops kills every group left
/// ([`AgentGroups::kill_all`]) before it exits, so no agent — nor anything it started —
/// outlives the server, whether or not its worker got to stop it.
#[derive(Debug, Default)]
pub struct AgentGroups {
    live: Mutex<HashSet<u32>>,
}

impl AgentGroups {
    /// Registers the group led by `pid` until the returned guard is released or dropped.
    pub fn register(self: &Arc<Self>, pid: u32) -> GroupRegistration {
        self.live.lock().expect("agent groups lock").insert(pid);
        GroupRegistration {
            groups: self.clone(),
            pid,
        }
    }

    /// Kills the group led by `pid` if it is still registered (its leader unreaped).
    pub fn kill(&self, pid: u32) {
        let live = self.live.lock().expect("agent groups lock");
        if live.contains(&pid) {
            kill_group(pid);
        }
    }

    /// Kills every registered group (server shutdown); returns how many there were.
    pub fn kill_all(&self) -> usize {
        let live = std::mem::take(&mut *self.live.lock().expect("agent groups lock"));
        for pid in &live {
            kill_group(*pid);
        }
        live.len()
    }

    /// Groups registered now.
    pub fn len(&self) -> usize {
        self.live.lock().expect("agent groups lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A registered agent group; it leaves the registry when dropped (before its leader is reaped).
pub struct GroupRegistration {
    groups: Arc<AgentGroups>,
    pid: u32,
}

impl GroupRegistration {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Kills the group and leaves the registry, under its lock (so a concurrent
    /// [`AgentGroups::kill`] can never signal a reaped leader's id).
    pub fn kill(self) {
        let mut live = self.groups.live.lock().expect("agent groups lock");
        if live.remove(&self.pid) {
            kill_group(self.pid);
        }
    }
}

impl Drop for GroupRegistration {
    fn drop(&mut self) {
        self.groups
            .live
            .lock()
            .expect("agent groups lock")
            .remove(&self.pid);
    }
}

/// Lines an agent's stderr kept for its error message.
const TAIL_LINES: usize = 20;
const TAIL_LINE_CHARS: usize = 500;
/// Bytes of one line held while it is read (a UTF-8 character is at most four).
const TAIL_LINE_BYTES: usize = 4 * TAIL_LINE_CHARS;

/// Stderr lines of one agent logged per window; the rest are counted and the count logged
/// when the next window opens. An agent printing without pause cannot fill the server's log.
const LOG_LINES_PER_WINDOW: u32 = 100;
const LOG_WINDOW: Duration = Duration::from_secs(10);

/// The last lines an agent wrote to stderr.
#[derive(Clone, Default)]
pub struct StderrTail(Arc<Mutex<VecDeque<String>>>);

/// How many of an agent's stderr lines the log takes: [`LOG_LINES_PER_WINDOW`] per
/// [`LOG_WINDOW`].
#[derive(Debug)]
struct LogBudget {
    window: Instant,
    logged: u32,
    skipped: u64,
}

impl LogBudget {
    fn new(now: Instant) -> LogBudget {
        LogBudget {
            window: now,
            logged: 0,
            skipped: 0,
        }
    }

    /// Whether a line read at `now` is logged, and the lines skipped in the window that just
    /// ended (to be reported once, before this line).
    fn admit(&mut self, now: Instant) -> (bool, u64) {
        let mut ended = 0;
        if now.duration_since(self.window) >= LOG_WINDOW {
            ended = std::mem::take(&mut self.skipped);
            self.window = now;
            self.logged = 0;
        }
        if self.logged < LOG_LINES_PER_WINDOW {
            self.logged += 1;
            (true, ended)
        } else {
            self.skipped += 1;
            (false, ended)
        }
    }
}

impl StderrTail {
    /// Reads `stderr` until it closes: each line goes to the log (target
    /// `turnstile::agent_stderr`, with `agent`: the session, or `check`) within the budget, and
    /// the last lines are kept (each cut to a bounded length, and never held longer than that
    /// in memory: a line without an end is cut too).
    pub fn capture(stderr: ChildStderr, agent: String) -> StderrTail {
        let tail = StderrTail::default();
        tokio::spawn(tail.clone().keep(stderr, agent));
        tail
    }

    async fn keep(self, stderr: impl AsyncRead + Unpin, agent: String) {
        let mut reader = BufReader::new(stderr);
        let mut line: Vec<u8> = Vec::new();
        let mut budget = LogBudget::new(Instant::now());
        loop {
            let buf = match reader.fill_buf().await {
                Ok(buf) if !buf.is_empty() => buf,
                _ => break,
            };
            let newline = buf.iter().position(|&b| b == b'\n');
            let end = newline.unwrap_or(buf.len());
            let room = TAIL_LINE_BYTES.saturating_sub(line.len());
            line.extend_from_slice(&buf[..end.min(room)]);
            let used = newline.map_or(buf.len(), |i| i + 1);
            reader.consume(used);
            if newline.is_some() {
                self.push(&line, &agent, &mut budget);
                line.clear();
            }
        }
        if !line.is_empty() {
            self.push(&line, &agent, &mut budget);
        }
        if budget.skipped > 0 {
            tracing::info!(target: "turnstile::agent_stderr", %agent, skipped = budget.skipped, "stderr lines not logged");
        }
    }

    fn push(&self, line: &[u8], agent: &str, budget: &mut LogBudget) {
        let line: String = String::from_utf8_lossy(line)
            .chars()
            .take(TAIL_LINE_CHARS)
            .collect();
        let (log, skipped) = budget.admit(Instant::now());
        if skipped > 0 {
            tracing::info!(target: "turnstile::agent_stderr", %agent, skipped, "stderr lines not logged");
        }
        if log {
            tracing::info!(target: "turnstile::agent_stderr", %agent, "{line}");
        }
        let mut t = self.0.lock().expect("stderr tail lock");
        if t.len() == TAIL_LINES {
            t.pop_front();
        }
        t.push_back(line);
    }

    /// The lines kept, joined; `None` when the agent wrote nothing to stderr.
    pub fn text(&self) -> Option<String> {
        let t = self.0.lock().expect("stderr tail lock");
        (!t.is_empty()).then(|| t.iter().map(String::as_str).collect::<Vec<_>>().join("\n"))
    }

    /// `reason`, followed by the stderr tail when there is one.
    pub fn explain(&self, reason: &str) -> String {
        let t = self.0.lock().expect("stderr tail lock");
        if t.is_empty() {
            reason.to_string()
        } else {
            let lines: Vec<&str> = t.iter().map(String::as_str).collect();
            format!(
                "{reason}\nLast agent output (stderr):\n{}",
                lines.join("\n")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_logs_a_bounded_number_of_stderr_lines_per_window_and_counts_the_rest() {
        let start = Instant::now();
        let mut budget = LogBudget::new(start);
        for _ in 0..LOG_LINES_PER_WINDOW {
            assert_eq!(budget.admit(start), (true, 0));
        }
        for _ in 0..7 {
            assert_eq!(budget.admit(start + Duration::from_secs(1)), (false, 0));
        }
        // The next window logs again and reports the seven once.
        let next = start + LOG_WINDOW;
        assert_eq!(budget.admit(next), (true, 7));
        assert_eq!(budget.admit(next), (true, 0));
    }

    #[test]
    fn agents_never_inherit_server_secrets() {
        let server = |k: &str| match k {
            "DATABASE_URL" => Some("postgres://user:secret@db/x".to_string()),
            "ACCESS_TOKEN" => Some("hunter2hunter2hunter2".to_string()),
            "PATH" => Some("/usr/bin".to_string()),
            _ => None,
        };
        let env = agent_env_from(
            server,
            &BTreeMap::from([("OPENAI_API_KEY".into(), "k".into())]),
        );
        assert!(!env.contains_key("DATABASE_URL"));
        assert!(!env.contains_key("ACCESS_TOKEN"));
        assert_eq!(env.get("OPENAI_API_KEY").map(String::as_str), Some("k"));
        assert!(env.contains_key("PATH"));
    }

    #[tokio::test]
    async fn the_stderr_tail_keeps_bounded_lines_even_without_a_newline() {
        let (mut writer, reader) = tokio::io::duplex(1024);
        let tail = StderrTail::default();
        let kept = tokio::spawn(tail.clone().keep(reader, "test".into()));
        use tokio::io::AsyncWriteExt;
        for i in 0..30 {
            writer
                .write_all(format!("line {i}\n").as_bytes())
                .await
                .unwrap();
        }
        // 1 MiB without a newline: held cut, not whole.
        let long = vec![b'x'; 1024 * 1024];
        writer.write_all(&long).await.unwrap();
        drop(writer);
        kept.await.unwrap();
        let t = tail.0.lock().unwrap();
        assert_eq!(t.len(), TAIL_LINES);
        assert_eq!(t.front().map(String::as_str), Some("line 11"));
        assert_eq!(t.back().map(String::len), Some(TAIL_LINE_CHARS));
    }

    #[tokio::test]
    async fn a_registered_group_is_killed_with_everything_it_started() {
        let mut child = Command::new("/bin/sh")
            .args(["-c", "sleep 300 & echo $!; wait"])
            .stdout(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let grandchild: i32 = out.next_line().await.unwrap().unwrap().parse().unwrap();
        let groups = Arc::new(AgentGroups::default());
        let registration = groups.register(child.id().unwrap());
        assert!(!exited_unreaped(registration.pid(), Duration::ZERO).await);
        assert_eq!(groups.kill_all(), 1);
        assert!(groups.is_empty());
        assert!(exited_unreaped(registration.pid(), Duration::from_secs(10)).await);
        drop(registration);
        child.wait().await.unwrap();
        // Killed means gone or a zombie (reparented, it may wait for a reaper that never
        // comes in a container).
        let gone = || {
            std::fs::read_to_string(format!("/proc/{grandchild}/stat")).map_or(true, |stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .is_none_or(|state| state == "Z" || state == "X")
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !gone() {
            assert!(
                std::time::Instant::now() < deadline,
                "the grandchild survived"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
