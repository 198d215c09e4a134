//! The worker registry as the rest of the server sees it: starting a session's worker (or
//! finding the running one), asking it for something (deliver owed resumes, take the agent's
//! earlier output, stop, fence), and telling whether it is idle.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::mpsc;

use super::{COMMAND_BUFFER, Worker};
use crate::server::mailbox::{Command, IdleMark, SessionHandle};
use crate::server::orchestrator::stream::StreamMerge;
use crate::server::repo::ReplyWrite;
use crate::server::state::AppState;

/// `Some` when the session's worker has nothing to do right now: no command waiting or being
/// handled, no agent event being handled.
pub fn idle_mark(state: &AppState, session_id: &str) -> Option<IdleMark> {
    let workers = state.runtime.workers.lock().expect("workers lock");
    let Some(h) = workers.get(session_id).filter(|h| h.is_alive()) else {
        return Some(IdleMark {
            worker: 0,
            handled: 0,
        });
    };
    (h.busy.load(Ordering::SeqCst) == 0).then(|| IdleMark {
        worker: Arc::as_ptr(&h.handled) as usize,
        handled: h.handled.load(Ordering::SeqCst),
    })
}

/// Stops the worker of `session_id` (and with it the agent process), if one runs.
pub fn stop(state: &AppState, session_id: &str) {
    let handle = state
        .runtime
        .workers
        .lock()
        .expect("workers lock")
        .remove(session_id);
    if let Some(h) = handle {
        h.stop.cancel();
    }
}

/// Stops every worker and its agent (server shutdown).
pub fn stop_all(state: &AppState) {
    let handles: Vec<SessionHandle> = state
        .runtime
        .workers
        .lock()
        .expect("workers lock")
        .drain()
        .map(|(_, h)| h)
        .collect();
    for h in handles {
        h.stop.cancel();
    }
}

/// Waits (up to the runtime's `sync_wait`, one second) until the session's worker has taken everything the agent sent
/// before now. The agent's `ask_user_question` comes over MCP while its reply's last chunks
/// may still be in its stdout pipe, the ACP connection or the worker's queue: taken first,
/// they stay in the reply before the question instead of starting the one after it.
///
/// Returns what of that output the transcript does not have yet, for the question to write in
/// its own transaction before itself (one commit for both, B3); whoever gets it must write it
/// ([`super::write_replies`] when the question writes nothing).
pub async fn sync(state: &AppState, session_id: &str) -> Vec<ReplyWrite> {
    state
        .hooks
        .run(crate::server::hooks::Point::AskSync, session_id)
        .await;
    let Some(h) = running(state, session_id) else {
        return Vec::new();
    };
    let (reply, mut done) = tokio::sync::oneshot::channel();
    if h.send(Command::Sync { reply }).is_err() {
        return Vec::new();
    }
    let wait = state.runtime.config.sync_wait;
    match tokio::time::timeout(wait, &mut done).await {
        Ok(Ok(owed)) => owed,
        // The worker stopped: it wrote what it had.
        Ok(Err(_)) => Vec::new(),
        Err(_) => {
            state
                .hooks
                .run(crate::server::hooks::Point::SyncGaveUp, session_id)
                .await;
            // The question goes on without the order guarantee rather than waiting longer;
            // once closed, the worker's reply fails and it writes the output itself. One sent
            // just before the close is taken here, so none is lost.
            done.close();
            if let Ok(owed) = done.try_recv() {
                return owed;
            }
            tracing::warn!(
                session_id,
                "the worker did not take the agent's earlier output within {wait:?}"
            );
            Vec::new()
        }
    }
}

/// Whether `session_id`'s worker runs on this server.
pub fn runs_here(state: &AppState, session_id: &str) -> bool {
    running(state, session_id).is_some()
}

/// The running worker of `session_id`, if any (never starts one).
fn running(state: &AppState, session_id: &str) -> Option<SessionHandle> {
    state
        .runtime
        .workers
        .lock()
        .expect("workers lock")
        .get(session_id)
        .filter(|h| h.is_alive())
        .cloned()
}

/// Several servers: stops the worker of `session_id` (and its agent) because another server runs the
/// session now; what that server recovered is left alone.
pub fn fence(state: &AppState, session_id: &str) {
    let handle = state
        .runtime
        .workers
        .lock()
        .expect("workers lock")
        .remove(session_id);
    if let Some(h) = handle
        && h.send(Command::Fence).is_err()
    {
        h.stop.cancel();
    }
}

/// Asks the worker of `session_id`, if it runs, to stop its idle agent.
pub(super) fn release(state: &AppState, session_id: &str) {
    if let Some(h) = running(state, session_id)
        && h.send(Command::Release).is_err()
    {
        tracing::debug!(
            session_id,
            "the worker stopped before it could release its agent"
        );
    }
}

/// Asks the session's worker (started if needed) to deliver what it owes.
pub fn deliver_owed(state: &AppState, session_id: &str, task_id: &str) {
    if let Err(e) = handle(state, session_id, task_id).send(Command::DeliverOwed) {
        tracing::warn!(session_id, error = %e, "cannot wake the worker for an owed resume; the next prompt delivers it");
    }
}

/// The worker of `session_id`, started if needed.
pub fn handle(state: &AppState, session_id: &str, task_id: &str) -> SessionHandle {
    let mut workers = state.runtime.workers.lock().expect("workers lock");
    if let Some(h) = workers.get(session_id).filter(|h| h.is_alive()) {
        return h.clone();
    }
    let (tx, rx) = mpsc::channel(COMMAND_BUFFER);
    let stop = state.shutdown.child_token();
    let busy = Arc::new(AtomicUsize::new(0));
    let handled = Arc::new(AtomicU64::new(0));
    let worker = Worker {
        busy: busy.clone(),
        handled: handled.clone(),
        state: state.clone(),
        session_id: session_id.to_string(),
        task_id: task_id.to_string(),
        agent: None,
        events: None,
        stop: stop.clone(),
        queue: VecDeque::new(),
        permissions: Vec::new(),
        open_turn: None,
        stream: StreamMerge::default(),
        flush_owed: false,
        fenced: false,
        claim: None,
        failed: false,
        unsent: None,
    };
    tokio::spawn(worker.run(rx));
    let h = SessionHandle {
        tx,
        stop,
        busy,
        handled,
    };
    workers.insert(session_id.to_string(), h.clone());
    h
}
