//! What runs a session's agent: its own process (in its own group, `process`), or in tests the
//! bundled mock inside this process.

use agent_client_protocol::ByteStreams;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use super::AgentError;
use super::acp_client::LaunchSpec;
use super::process::{self, StderrTail};
use super::relay::{self, Relay};

pub(super) type Out = Box<dyn futures::AsyncWrite + Send + Unpin>;
pub(super) type In = Box<dyn futures::AsyncRead + Send + Unpin>;
/// A started agent: what runs it, its stderr, and the byte streams ACP speaks over.
pub(super) type Started = (
    Runner,
    StderrTail,
    ByteStreams<Out, In>,
    std::sync::Arc<Relay>,
);

/// The agent as a process of its own, in its own process group (`process`).
pub(super) fn spawn_process(spec: &LaunchSpec) -> Result<Started, AgentError> {
    let mut child = process::spawn(&spec.command, &spec.args, &spec.env, &spec.cwd)?;
    let group = spec
        .groups
        .register(child.id().ok_or("the agent exited at once")?);
    let stdin = child.stdin.take().ok_or("agent stdin unavailable")?;
    let stdout = child.stdout.take().ok_or("agent stdout unavailable")?;
    let tail = child
        .stderr
        .take()
        .map(|e| StderrTail::capture(e, spec.session_id.clone()))
        .unwrap_or_default();
    let unread = relay::unread_in_pipe(std::os::fd::AsRawFd::as_raw_fd(&stdout));
    let (relay, incoming) = Relay::wrap(stdout, unread);
    let transport = ByteStreams::new(
        Box::new(stdin.compat_write()) as Out,
        Box::new(incoming.compat()) as In,
    );
    Ok((Runner::Process { group, child }, tail, transport, relay))
}

/// The bundled mock agent as a task of this process over an in-memory pipe (`test-hooks`
/// builds: tests and benchmarks with thousands of sessions; decision 0042).
#[cfg(feature = "test-hooks")]
pub(super) fn start_in_process(mock: crate::mock_agent::InProcess) -> Started {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (their_in, their_out) = tokio::io::split(theirs);
    let agent = tokio::spawn(async move {
        let _ =
            crate::mock_agent::serve(their_in.compat(), their_out.compat_write(), Some(mock)).await;
    });
    let (our_in, our_out) = tokio::io::split(ours);
    let (relay, incoming) = Relay::wrap(our_in, Box::new(|| 0));
    let transport = ByteStreams::new(
        Box::new(our_out.compat_write()) as Out,
        Box::new(incoming.compat()) as In,
    );
    (
        Runner::InProcess(agent),
        StderrTail::default(),
        transport,
        relay,
    )
}

/// What runs the agent: a process (its group killed when the connection ends) or, in tests,
/// the mock agent inside this process.
pub(super) enum Runner {
    Process {
        /// Dropped before `child`: a group leaves the registry before its leader is reaped.
        group: process::GroupRegistration,
        child: tokio::process::Child,
    },
    #[cfg(feature = "test-hooks")]
    InProcess(tokio::task::JoinHandle<()>),
}

impl Runner {
    pub(super) fn pid(&self) -> Option<u32> {
        match self {
            Runner::Process { group, .. } => Some(group.pid()),
            #[cfg(feature = "test-hooks")]
            Runner::InProcess(_) => None,
        }
    }

    /// The connection is over: nothing of the agent may outlive it. An agent that ended on its
    /// own is given a moment to exit (for its status), watched without reaping it; then its
    /// group is killed while the leader is still unreaped (so the group id cannot have been
    /// reused), and only then reaped. Returns how it exited.
    pub(super) async fn end(self, asked: bool) -> Option<std::process::ExitStatus> {
        match self {
            Runner::Process { group, mut child } => {
                if !asked {
                    process::exited_unreaped(group.pid(), std::time::Duration::from_secs(2)).await;
                }
                // Killed and deregistered in one step, before the leader is reaped.
                group.kill();
                tokio::time::timeout(std::time::Duration::from_secs(5), child.wait())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            #[cfg(feature = "test-hooks")]
            Runner::InProcess(agent) => {
                agent.abort();
                None
            }
        }
    }
}
