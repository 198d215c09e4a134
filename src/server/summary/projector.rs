//! The projector (P3–P6): after every pending-relevant event it re-runs the loader and
//! compare-and-sets the task summary, with a bounded reload-and-retry on a competing revision.

use std::time::Duration;

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::Instant;

use super::loader;
use crate::model::{LastError, SummaryBody};
use crate::server::events::Event;
use crate::server::repo::{CasOutcome, RepoError, SummaryRecord};
use crate::server::state::AppState;
use crate::server::time::format_micros;

/// P6: attempts per refresh before the summary is marked invalidated.
pub const MAX_CAS_ATTEMPTS: u32 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// P4: replace every session-derived field.
    Full,
    /// P7: replace only the pending action.
    PendingOnly,
}

#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// P5: the loader failed; the stored summary is left as it was.
    #[error("loading the pending state of task {task_id} failed: {source}")]
    Loader { task_id: String, source: RepoError },
    #[error("writing the summary of task {task_id} failed: {source}")]
    Store { task_id: String, source: RepoError },
    /// P6: every attempt lost the compare-and-set; the summary is now marked invalidated.
    #[error("summary of task {task_id}: {attempts} compare-and-set attempts lost")]
    Exhausted { task_id: String, attempts: u32 },
}

/// Brings the stored summary of `task_id` in line with the repository: reads the stored
/// summary and the authority in one statement (never a projection read before the summary it
/// is applied to, which could be older than it). Publishes `task.status_summary.updated` after a write; an
/// equal summary is not rewritten.
pub async fn refresh_task(
    state: &AppState,
    task_id: &str,
    scope: Scope,
) -> Result<SummaryRecord, RefreshError> {
    refresh_with(state, task_id, scope, |_| {}).await
}

/// P3: records (or with `None` clears) the task's last error, with the same CAS loop.
pub async fn record_last_error(
    state: &AppState,
    task_id: &str,
    message: Option<&str>,
) -> Result<SummaryRecord, RefreshError> {
    let last_error = message.map(|m| LastError {
        message: m.chars().take(LAST_ERROR_CHARS).collect(),
        occurred_at: format_micros(state.clock.now()),
    });
    refresh_with(state, task_id, Scope::Full, move |body| {
        body.last_error = last_error.clone();
    })
    .await
}

/// P3 is bounded: a long agent error is cut in the summary (the transcript keeps it whole).
const LAST_ERROR_CHARS: usize = 500;

async fn refresh_with(
    state: &AppState,
    task_id: &str,
    scope: Scope,
    edit: impl Fn(&mut SummaryBody),
) -> Result<SummaryRecord, RefreshError> {
    let store_err = |source| RefreshError::Store {
        task_id: task_id.to_string(),
        source,
    };
    for attempt in 1..=MAX_CAS_ATTEMPTS {
        state
            .metrics
            .summary_refreshes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // One statement reads the stored summary and the authority (one snapshot, so the
        // summary is never older than the projection applied to it).
        let (stored, projection) = loader::load_with_summary(state.repo.as_ref(), task_id)
            .await
            .map_err(|source| {
                state
                    .metrics
                    .summary_loader_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                RefreshError::Loader {
                    task_id: task_id.to_string(),
                    source,
                }
            })?;
        let mut body = match (&stored, scope) {
            (Some(s), Scope::PendingOnly) => projection.apply_pending_only(s.body.clone()),
            (Some(s), Scope::Full) => projection.apply(s.body.clone()),
            (None, _) => projection.apply(Default::default()),
        };
        edit(&mut body);
        state
            .hooks
            .run(crate::server::hooks::Point::BeforeSummaryCas, task_id)
            .await;
        let now = state.clock.now();
        let outcome = match &stored {
            // P6 never rewrites an equal body. Finding that out with the compare-and-set
            // would send a write to the database (SQLite's one write connection, decision
            // 0023) for nothing, and most refreshes find nothing to change (B3): a read
            // confirms that the revision this refresh started from is still the stored one.
            Some(s) if !s.invalidated && s.body == body => CasOutcome::unwritten(
                state.repo.get_summary(task_id).await.map_err(store_err)?,
                Some(s.revision),
                &body,
            ),
            _ => {
                state
                    .metrics
                    .summary_writes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                state
                    .repo
                    .cas_summary(task_id, stored.as_ref().map(|s| s.revision), &body, now)
                    .await
                    .map_err(store_err)?
            }
        };
        match outcome {
            CasOutcome::Written { revision } => {
                let written = SummaryRecord {
                    task_id: task_id.to_string(),
                    revision,
                    body,
                    invalidated: false,
                    updated_at: now,
                };
                state.hub.publish(summary_event(&written));
                return Ok(written);
            }
            CasOutcome::Unchanged { .. } => {
                return Ok(stored.expect("unchanged implies a stored summary"));
            }
            CasOutcome::Conflict { .. } => {
                state
                    .metrics
                    .summary_cas_retries
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!(task_id, attempt, "summary compare-and-set lost; reloading");
                tokio::time::sleep(Duration::from_millis(u64::from(attempt))).await;
            }
        }
    }
    tracing::warn!(
        task_id,
        attempts = MAX_CAS_ATTEMPTS,
        "summary compare-and-set retries exhausted; marking invalidated"
    );
    state
        .repo
        .invalidate_summary(task_id, state.clock.now())
        .await
        .map_err(store_err)?;
    Err(RefreshError::Exhausted {
        task_id: task_id.to_string(),
        attempts: MAX_CAS_ATTEMPTS,
    })
}

pub fn summary_event(summary: &SummaryRecord) -> Event {
    Event::from(crate::model::Notification::SummaryUpdated {
        task_id: summary.task_id.clone(),
        status_summary: summary.to_dto(),
    })
}

/// The tasks waiting for a refresh, each once, in the order of their first event since their
/// last refresh, each with the time it is due (that event's arrival + the runtime's
/// `summary_gather`; one gather for all, so the queue is ordered by due time).
#[derive(Default)]
struct Due {
    queue: std::collections::VecDeque<(Instant, String)>,
    queued: std::collections::HashSet<String>,
}

impl Due {
    fn add(&mut self, event: &Event, due: Instant) {
        if let Some(task_id) = event
            .task_id
            .as_deref()
            .filter(|_| event.refreshes_projection())
            && self.queued.insert(task_id.to_string())
        {
            self.queue.push_back((due, task_id.to_string()));
        }
    }

    /// When the first task is due.
    fn next_at(&self) -> Option<Instant> {
        self.queue.front().map(|(at, _)| *at)
    }

    /// The first task if it is due by `now`, taken off the queue (an event after this
    /// queues it again).
    fn take_due(&mut self, now: Instant) -> Option<String> {
        if self.next_at()? > now {
            return None;
        }
        let (_, task_id) = self.queue.pop_front()?;
        self.queued.remove(&task_id);
        Some(task_id)
    }
}

/// Runs the projector until the hub closes or the server shuts down.
///
/// P4: each task is refreshed after its events, once per gather: its first event queues it,
/// due `summary_gather` later (decision 0039), and the events that arrive meanwhile are covered
/// by that one refresh, which reads the state after all of them. A round trip (`running`, then
/// a question again) then costs one refresh that writes nothing, instead of two writes; a
/// burst while the projector is busy costs one refresh too. A lag means events were missed:
/// every task is reconciled, so nothing stays stale (P10). When the server shuts down, the
/// tasks still gathering (and those of the events not yet received) are refreshed at once,
/// then the projector ends: `startup::finish` waits for it.
pub fn spawn(state: AppState) -> tokio::task::JoinHandle<()> {
    let mut events = state.hub.subscribe();
    let gather = state.runtime.config.summary_gather;
    tokio::spawn(async move {
        let mut due = Due::default();
        loop {
            let next_at = due.next_at();
            let received = tokio::select! {
                biased;
                () = state.runtime.projector_stop.cancelled() => None,
                e = events.recv() => Some(e),
                () = async {
                    match next_at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => None,
            };
            let stopping = state.runtime.projector_stop.is_cancelled();
            let now = Instant::now();
            let mut lagged = 0;
            match received {
                Some(Ok(event)) => due.add(&event, now + gather),
                Some(Err(RecvError::Lagged(missed))) => lagged += missed,
                Some(Err(RecvError::Closed)) => return,
                None => {}
            }
            loop {
                match events.try_recv() {
                    Ok(event) => due.add(&event, now + gather),
                    Err(TryRecvError::Lagged(missed)) => lagged += missed,
                    Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                }
            }
            if lagged > 0 {
                tracing::warn!(missed = lagged, "projector lagged; refreshing every task");
                if let Err(e) = super::reconcile::refresh_all(&state).await {
                    tracing::warn!(error = %e, "reconciliation after lag failed");
                }
                continue;
            }
            // Stopping, every queued task is due now: none is due later than a gather from now.
            let by = Instant::now() + if stopping { gather } else { Duration::ZERO };
            while let Some(task_id) = due.take_due(by) {
                if let Err(e) = refresh_task(&state, &task_id, Scope::Full).await {
                    tracing::warn!(error = %e, task_id, "projector refresh failed");
                }
            }
            if stopping {
                return;
            }
        }
    })
}
