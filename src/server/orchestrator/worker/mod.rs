//! One worker task per live session: it owns the agent connection, the prompt queue and the
//! open turn, turns agent events into transcript rows, and delivers owed resumes (L17/L18).
//! Commands and agent events are handled one at a time, so a turn's updates are written
//! before its completion. Every channel is bounded; a full one is a clear error, not memory.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::stream::StreamMerge;
use crate::model::AppError;
use crate::server::agents::{AgentConnection, AgentError, AgentEvent};
pub use crate::server::mailbox::{Command, IdleMark, PromptAccepted, SessionHandle};
use crate::server::repo::RepoError;
use crate::server::state::AppState;

mod agent;
mod control;
mod output;
mod turns;

pub use control::{deliver_owed, fence, handle, idle_mark, runs_here, stop, stop_all, sync};
pub use output::{reply_event, write_replies};

/// Prompts a session may queue behind its open turn.
pub const MAX_QUEUED_PROMPTS: usize = 32;
/// Commands a worker may have waiting.
const COMMAND_BUFFER: usize = 64;

/// Why the worker could not do something.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Repo(#[from] RepoError),
    /// The agent could not be started or reached; the text is shown to the user.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

impl From<WorkerError> for AppError {
    fn from(e: WorkerError) -> Self {
        match e {
            WorkerError::Repo(e) => e.into(),
            WorkerError::Agent(e) => AppError::Unavailable(e.reason),
        }
    }
}

/// The running agent and the MCP token hash it was given.
struct Agent {
    connection: AgentConnection,
    token_hash: String,
}

struct Worker {
    busy: Arc<AtomicUsize>,
    handled: Arc<AtomicU64>,
    state: AppState,
    session_id: String,
    task_id: String,
    agent: Option<Agent>,
    events: Option<mpsc::Receiver<AgentEvent>>,
    stop: CancellationToken,
    queue: VecDeque<String>,
    /// Permission requests of the open turn that may still wait for the human.
    permissions: Vec<String>,
    open_turn: Option<String>,
    stream: StreamMerge,
    /// Whether `busy` counts an owed stream write.
    flush_owed: bool,
    /// Another server runs the session now (`Command::Fence`).
    fenced: bool,
    /// This server's claim on the session (several servers on PostgreSQL): taken before its
    /// agent launches, carried by the writes that start agent work.
    claim: Option<crate::server::repo::Fence>,
    /// The agent failed (crashed, or could not start): what is owed waits for the user's
    /// next prompt or retry, not for a wake-up (L18), so a crashing agent is not relaunched
    /// behind the user's back.
    failed: bool,
    /// A4: the prompt that could not start because the agent needs a login; a retry sends it.
    unsent: Option<String>,
}

async fn sleep_until_due(due: Option<Instant>) {
    if let Some(due) = due {
        tokio::time::sleep_until(due).await;
    }
}

async fn next_event(events: &mut Option<mpsc::Receiver<AgentEvent>>) -> Option<AgentEvent> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Worker {
    async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        loop {
            // Biased: a command sent before something the agent then does is handled first
            // (an owed answer is signalled before the superseded ask is released, so the
            // agent's reaction — even an exit — is seen after it).
            let due = self.stream.due();
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                _ = sleep_until_due(due), if due.is_some() => {
                    self.handled.fetch_add(1, Ordering::SeqCst);
                    self.flush_stream().await;
                }
                command = commands.recv() => match command {
                    None => break,
                    Some(c) => {
                        self.handled.fetch_add(1, Ordering::SeqCst);
                        // A question takes what is owed instead (`Command::Sync`).
                        if !matches!(c, Command::Sync { .. }) {
                            self.flush_stream().await;
                        }
                        self.on_command(c).await;
                        self.count_owed_flush();
                        self.busy.fetch_sub(1, Ordering::SeqCst);
                    }
                },
                event = next_event(&mut self.events) => {
                    self.busy.fetch_add(1, Ordering::SeqCst);
                    self.take_event(event).await;
                    self.busy.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
        self.flush_stream().await;
        self.stop_agent().await;
        self.state.runtime.queued.take(&self.session_id);
        // Answer what is still queued so no caller waits forever.
        commands.close();
        while let Ok(command) = commands.try_recv() {
            reply_stopped(command);
        }
    }

    async fn take_event(&mut self, event: Option<AgentEvent>) {
        self.handled.fetch_add(1, Ordering::SeqCst);
        // Streamed chunks wait in memory; anything else sees them written first.
        if !matches!(
            event,
            Some(AgentEvent::Text(_) | AgentEvent::Thought(_) | AgentEvent::Marked(_))
        ) {
            self.flush_stream().await;
        }
        match event {
            Some(e) => self.on_event(e).await,
            // The agent's channel closed without `Exited`: treat it as an exit.
            None => {
                self.on_event(AgentEvent::Exited("agent connection closed".into()))
                    .await
            }
        }
        self.count_owed_flush();
    }

    /// Takes every event the agent sent before now: up to a mark put into its output stream
    /// after what it has written (`agents/relay.rs`), so also what was still in the pipe or
    /// the ACP connection; without a running agent, what the channel holds. Bounded by
    /// the runtime's `sync_wait`.
    async fn take_until_mark(&mut self) {
        let mark = self.agent.as_ref().and_then(|a| a.connection.mark());
        let deadline = Instant::now() + self.state.runtime.config.sync_wait;
        if mark.is_some() {
            self.state
                .hooks
                .run(crate::server::hooks::Point::AwaitMark, &self.session_id)
                .await;
        }
        loop {
            let Some(rx) = self.events.as_mut() else {
                return;
            };
            let event = match mark {
                Some(_) => match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(event)) => event,
                    // Closed: the main loop sees the end; or the mark is late: give up on it.
                    Ok(None) | Err(_) => return,
                },
                None => match rx.try_recv() {
                    Ok(event) => event,
                    Err(_) => return,
                },
            };
            if let AgentEvent::Marked(m) = event {
                if Some(m) == mark {
                    return;
                }
                continue;
            }
            let exited = matches!(event, AgentEvent::Exited(_));
            self.take_event(Some(event)).await;
            if exited {
                return;
            }
        }
    }

    /// A streamed chunk waiting in memory is work: the worker counts as busy until it is
    /// written (`idle_mark` must not see a quiescent point with a write still to come).
    fn count_owed_flush(&mut self) {
        let owes = self.stream.owes();
        if owes != self.flush_owed {
            if owes {
                self.busy.fetch_add(1, Ordering::SeqCst);
            } else {
                self.busy.fetch_sub(1, Ordering::SeqCst);
            }
            self.flush_owed = owes;
        }
    }

    fn log(&self, what: &str, result: Result<impl Sized, impl std::fmt::Display>) {
        if let Err(e) = result {
            tracing::warn!(session_id = %self.session_id, error = %e, "{what}");
        }
    }

    fn not_run(&self, what: &str) {
        tracing::info!(session_id = %self.session_id, "the caller of a {what} stopped waiting; not run");
    }

    async fn on_command(&mut self, command: Command) {
        match command {
            // A caller that stopped waiting (its bounded wait ended with "try again") gets
            // nothing done behind its back: its retry must not run the prompt twice.
            Command::Prompt { reply, .. } if reply.is_closed() => self.not_run("prompt"),
            Command::Retry { reply } if reply.is_closed() => self.not_run("retry"),
            Command::Prompt { content, reply } => {
                self.failed = false;
                // The user wrote again instead of retrying: the new prompt replaces the unsent.
                self.unsent = None;
                let result = self.accept_prompt(content).await;
                reply_to(reply, result);
            }
            Command::DeliverOwed => {
                if self.open_turn.is_none() && !self.failed {
                    let r = self.deliver_owed().await;
                    self.log("delivering an owed resume failed", r);
                }
            }
            Command::Retry { reply } => {
                self.failed = false;
                let result = if self.open_turn.is_some() {
                    Ok(false)
                } else {
                    self.retry().await
                };
                reply_to(reply, result);
            }
            Command::Cancel => {
                if let (Some(agent), Some(_)) = (&self.agent, &self.open_turn) {
                    agent.connection.cancel();
                    // ACP: after session/cancel, pending permission requests answer Cancelled.
                    self.cancel_permissions().await;
                }
            }
            Command::Sync { reply } => {
                // What the agent sent before this point ends there and goes to the question,
                // which writes it in its own transaction, before itself (`sync`): the reply's
                // message precedes the question, and both cost one commit.
                self.take_until_mark().await;
                let owed = self.owed_replies();
                match reply.send(owed) {
                    Ok(()) => {
                        self.state
                            .hooks
                            .run(crate::server::hooks::Point::SyncReplied, &self.session_id)
                            .await
                    }
                    // The question stopped waiting: written here, as any flush.
                    Err(owed) => write_replies(&self.state, owed).await,
                }
            }
            Command::Fence => {
                tracing::warn!(session_id = %self.session_id, "another server runs this session now; stopping its agent here");
                self.fenced = true;
                self.stop.cancel();
            }
            Command::Release => {
                if self.open_turn.is_none() && self.agent.is_some() {
                    tracing::info!(session_id = %self.session_id, "stopping an idle agent to make room");
                    self.stop_agent().await;
                } else if self.agent.is_some() {
                    // Busy again since it was picked: it keeps its slot.
                    self.state.runtime.agents.busy(&self.session_id);
                }
            }
        }
    }
}

/// Sends a command's reply. A caller that stopped waiting (its request ended, or its wait
/// timed out) no longer needs it; nothing else can fail here.
pub(super) fn reply_to<T>(reply: tokio::sync::oneshot::Sender<T>, value: T) {
    if reply.send(value).is_err() {
        tracing::debug!("a command's caller stopped waiting for its reply");
    }
}

/// Answers a command that arrived after the worker stopped.
fn reply_stopped(command: Command) {
    let stopped = || AppError::Unavailable("the session worker has stopped".into());
    match command {
        Command::Prompt { reply, .. } => {
            reply_to(reply, Err(stopped()));
        }
        Command::Retry { reply } => {
            reply_to(reply, Err(stopped()));
        }
        Command::Sync { reply } => {
            reply_to(reply, Vec::new());
        }
        Command::DeliverOwed | Command::Cancel | Command::Release | Command::Fence => {}
    }
}
