//! Agent processes with least privilege (spec "Server process"): a minimal environment (never
//! the server's secrets such as `DATABASE_URL` or `ACCESS_TOKEN`), their own process group
//! (killed as a group, so a wrapper such as `npx` leaves no grandchildren behind), and the
//! last lines of their stderr kept to explain a failure.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
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

/// Starts `command` in its own process group with piped stdio and the minimal environment.
pub fn spawn(
    command: &Path,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
) -> Result<Child, AgentError> {
    Command::new(command)
        .args(args)
        .env_clear()
        .envs(agent_env(env))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| AgentError(format!("cannot start agent {}: {e}", command.display())))
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

/// Lines an agent's stderr kept for its error message.
const TAIL_LINES: usize = 20;
const TAIL_LINE_CHARS: usize = 500;

/// The last lines an agent wrote to stderr.
#[derive(Clone, Default)]
pub struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    /// Reads `stderr` until it closes, keeping the last lines (each cut to a bounded length).
    pub fn capture(stderr: ChildStderr) -> StderrTail {
        let tail = StderrTail::default();
        let keep = tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let line: String = line.chars().take(TAIL_LINE_CHARS).collect();
                tracing::debug!(target: "agent_stderr", "{line}");
                let mut t = keep.0.lock().expect("stderr tail lock");
                if t.len() == TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        tail
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
}
