//! The session worker's mailbox: the commands a worker takes and the handle that sends them.
//! The registry of handles lives in [`crate::server::runtime::Runtime`]; the worker itself
//! (in `orchestrator::worker`) owns the receiving end. Keeping the interface here lets the
//! state hold the registry without depending on the services (one-way module graph).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::model::AppError;

/// What `POST /sessions/{id}/prompt` reports.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct PromptAccepted {
    pub queued: bool,
    /// The new turn when it started at once.
    pub turn_id: Option<String>,
    pub queue_position: Option<usize>,
}

pub enum Command {
    Prompt {
        content: String,
        reply: oneshot::Sender<Result<PromptAccepted, AppError>>,
    },
    /// An owed resume may be waiting (after an answer, at start-up): deliver it when idle.
    DeliverOwed,
    /// Relaunch the agent if needed and deliver what is owed; replies whether a resume began.
    Retry {
        reply: oneshot::Sender<Result<bool, AppError>>,
    },
    Cancel,
    /// Stop the agent if it is idle: another session needs its slot (`--max-agents`).
    Release,
    /// Take every event the agent sent before now (up to a mark in its output, decision
    /// 0033), then reply with the output still owed to the transcript, ended there: the caller
    /// (a question) writes it in its own transaction (`worker::sync`).
    Sync {
        reply: oneshot::Sender<Vec<crate::server::repo::ReplyWrite>>,
    },
    /// Several servers: another server runs this session now (it took it over while this server was
    /// out of touch): stop the agent and the worker without touching what the new owner
    /// recovered (its permission requests stay).
    Fence,
}

#[derive(Clone)]
pub struct SessionHandle {
    pub(crate) tx: mpsc::Sender<Command>,
    pub(crate) stop: CancellationToken,
    /// Commands sent and not yet handled, plus one while the worker handles anything.
    pub(crate) busy: Arc<AtomicUsize>,
    /// How many commands and agent events the worker has started to handle.
    pub(crate) handled: Arc<AtomicU64>,
}

impl SessionHandle {
    pub fn send(&self, command: Command) -> Result<(), AppError> {
        self.busy.fetch_add(1, Ordering::SeqCst);
        self.tx.try_send(command).map_err(|e| {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            match e {
                mpsc::error::TrySendError::Full(_) => {
                    AppError::Unavailable("the session is busy; try again in a moment".into())
                }
                mpsc::error::TrySendError::Closed(_) => {
                    AppError::Unavailable("the session worker has stopped".into())
                }
            }
        })
    }

    pub(crate) fn is_alive(&self) -> bool {
        !self.tx.is_closed() && !self.stop.is_cancelled()
    }
}

/// A mark of an idle worker: equal marks taken before and after reading the database prove
/// that the worker handled nothing in between (tests use it to find quiescent points; the
/// agent itself only acts within an open turn, which the database shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleMark {
    pub(crate) worker: usize,
    pub(crate) handled: u64,
}
