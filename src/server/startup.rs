//! Start-up: bump the epoch, seed the bundled data, recover, reconcile, start the projector.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use leptos::prelude::*;

use crate::server::clarification::{recovery, takeover};
use crate::server::events;
use crate::server::hooks::{Hooks, Point};
use crate::server::orchestrator::{forward, lease, publish, worker, workflow};
use crate::server::repo::{
    Backend, NewAgentProfile, NewWorkflow, NewWorkflowStep, RepoResult, Repository,
};
use crate::server::runtime::{Runtime, RuntimeConfig};
use crate::server::state::{AppState, Shared};
use crate::server::summary::{projector, reconcile};
use crate::server::time::Clock;

pub use crate::server::orchestrator::profiles::MOCK_PROFILE;

/// Events a slow subscriber may fall behind before it must resync (P10).
pub const HUB_CAPACITY: usize = 1024;

/// The default workflow seeded at first start.
pub const DEFAULT_STEPS: [&str; 4] = ["Backlog", "In progress", "Review", "Done"];

/// Seeds what every database has: the default workflow and the `mock` profile. Idempotent.
pub async fn seed(repo: &dyn Repository, at: i64) -> RepoResult<()> {
    if repo.default_workflow().await?.is_none() {
        let steps = DEFAULT_STEPS
            .iter()
            .map(|name| NewWorkflowStep {
                name: (*name).to_string(),
                on_turn_complete: None,
            })
            .collect();
        repo.create_workflow(
            &NewWorkflow {
                name: "Default".into(),
                is_default: true,
                steps,
            },
            at,
        )
        .await?;
    }
    if repo
        .get_agent_profile_by_name(MOCK_PROFILE)
        .await?
        .is_none()
    {
        repo.create_agent_profile(
            &NewAgentProfile {
                name: MOCK_PROFILE.into(),
                command: "mock_agent".into(),
                args: vec![],
                env: BTreeMap::new(),
                elicitation: true,
                auth_method: None,
            },
            at,
        )
        .await?;
    }
    Ok(())
}

/// Builds the application state: bumps the projection epoch (P9), seeds, reconciles every
/// task summary (P7) and starts the projector (P4). Fails loudly when any of it fails.
pub async fn build_state(
    repo: Arc<dyn Repository>,
    leptos_options: LeptosOptions,
    clock: Clock,
    runtime: RuntimeConfig,
) -> RepoResult<AppState> {
    let epoch = repo.bump_epoch().await?;
    seed(repo.as_ref(), clock.now()).await?;
    // Several servers: with other servers on the database, their live sessions are theirs.
    let keep = live_elsewhere(repo.as_ref(), &runtime, clock.now()).await?;
    let now = clock.now();
    let alive_since = now - ttl_micros(&runtime);
    let recovered =
        recovery::recover_except(repo.as_ref(), now, &keep, &runtime.server_id, alive_since)
            .await?;
    if recovered != Default::default() {
        tracing::info!(
            ?recovered,
            "recovered interrupted clarification deliveries (L19)"
        );
    }
    let shutdown = tokio_util::sync::CancellationToken::new();
    let hub = events::connect(
        repo.postgres_options(),
        &runtime.server_id,
        HUB_CAPACITY,
        shutdown.clone(),
    )
    .await?;
    welcomed(hub.as_ref(), repo.as_ref(), &runtime, clock.now()).await?;
    let state = AppState::new(Shared {
        leptos_options,
        repo,
        hub,
        clock,
        epoch,
        pending_sequence: Arc::new(AtomicU64::new(0)),
        hooks: Arc::new(Hooks::default()),
        runtime: Arc::new(Runtime::new(runtime)),
        metrics: Arc::default(),
        shutdown,
    });
    // Questions whose claims recovery restored are answerable again, on every server.
    if !recovered.restored_bundles.is_empty() {
        publish::bundles_by_id(
            &state,
            publish::BundleEvent::Restored,
            &recovered.restored_bundles,
        )
        .await;
    }
    let closed =
        recovery::recover_sessions_except(state.repo.as_ref(), state.clock.now(), &keep).await?;
    spawn_heartbeat(&state);
    let failed = reconcile::reconcile_all(&state).await?;
    if failed > 0 {
        tracing::warn!(
            failed,
            "some task summaries could not be repaired at boot; they read as invalidated"
        );
    }
    *state.runtime.projector.lock().expect("projector lock") =
        Some(projector::spawn(state.clone()));
    // Several servers: answers given on other servers for calls waiting here.
    if let Some(offers) = state.hub.take_offers() {
        crate::server::clarification::handoff::serve(state.clone(), offers);
    }
    if let Some(requests) = state.hub.take_requests() {
        crate::server::orchestrator::forward::serve(state.clone(), requests);
    }
    // E2: agents' elicitations become questions.
    if let Some(queue) = state
        .runtime
        .elicitations_rx
        .lock()
        .expect("elicitation queue lock")
        .take()
    {
        crate::server::clarification::elicitation::serve(state.clone(), queue);
    }
    // N3: turns recovery completed, and turns whose server stopped before their step action,
    // run (or defer) it like any completion.
    workflow::run_due(&state, None).await;
    // P3: queues died with the old process; their counts go back to zero. P4: the closed
    // sessions wait for input now, which their tasks' activity shows.
    for task_id in closed.tasks {
        if let Err(e) = projector::refresh_task(&state, &task_id, projector::Scope::Full).await {
            tracing::warn!(task_id, error = %e, "summary refresh after recovery failed");
        }
    }
    // L18: owed answers are delivered by the sessions' next launch — this one. Those of the
    // sessions other live servers run are theirs: their servers are woken, in case this one
    // accepted an answer and stopped before it woke them (decision 0036).
    let mut elsewhere = Vec::new();
    for s in state.repo.sessions_with_owed_resumes().await? {
        if keep.contains(&s.id) {
            elsewhere.push(s);
        } else {
            worker::deliver_owed(&state, &s.id, &s.task_id);
        }
    }
    // Waited for (bounded), so the owners have the wake-up before this server serves: what
    // they deliver starts now, not at some later moment a client could not tell from idle.
    let wakes = elsewhere
        .iter()
        .map(|s| forward::wake_owner(&state, &s.id, &s.task_id));
    if tokio::time::timeout(OWNER_WAKE_WAIT, futures::future::join_all(wakes))
        .await
        .is_err()
    {
        tracing::warn!(
            "a server running a session with an owed resume did not answer within \
             {OWNER_WAKE_WAIT:?}; its heartbeat delivers it"
        );
    }
    Ok(state)
}

/// How long start-up waits for the servers it wakes for owed resumes (decision 0036).
const OWNER_WAKE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long start-up waits for the other live servers to hear this one (`welcomed`).
const WELCOME_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Several servers: waits until every other live server has heard that this one listens, so
/// none leaves it out of the events it publishes from now on (a server alone sends none,
/// `events/bridge/peers.rs`). A server that stopped without its row expiring yet never
/// answers: start-up goes on after [`WELCOME_WAIT`] (that server, if alive after all, sees
/// this one at its next heartbeat and asks the clients to resync).
async fn welcomed(
    hub: &dyn events::EventHub,
    repo: &dyn Repository,
    runtime: &RuntimeConfig,
    now: crate::server::time::Micros,
) -> RepoResult<()> {
    let Some(peers) = hub.peers() else {
        return Ok(());
    };
    let others = repo
        .other_live_servers(&runtime.server_id, now - ttl_micros(runtime))
        .await?;
    if !others.is_empty() && !peers.await_welcomes(&others, WELCOME_WAIT).await {
        tracing::warn!(
            ?others,
            "not every live server answered this one's hello; going on"
        );
    }
    Ok(())
}

/// The sessions whose agent runs on another live server (PostgreSQL only; this server's own
/// beat is recorded first).
async fn live_elsewhere(
    repo: &dyn Repository,
    runtime: &RuntimeConfig,
    now: crate::server::time::Micros,
) -> RepoResult<Vec<String>> {
    if repo.backend() != Backend::Postgres {
        return Ok(Vec::new());
    }
    repo.beat(&runtime.server_id, now).await?;
    repo.sessions_of_live_servers(&runtime.server_id, now - ttl_micros(runtime))
        .await
}

fn ttl_micros(runtime: &RuntimeConfig) -> i64 {
    i64::try_from(runtime.server_ttl.as_micros()).unwrap_or(i64::MAX)
}

/// Records this server's heartbeat every third of `--server-ttl` until shutdown, stops the
/// agents of sessions it may have lost (`lease`), takes over the sessions of servers that
/// stopped beating, and delivers owed resumes of its own sessions whose wake-up never came
/// (PostgreSQL only). The taking over and delivering run beside the heartbeat, one round at a
/// time, never on its loop: a server recovering many sessions (or held up recovering one) keeps
/// beating, so nobody takes its sessions over while it recovers them (one agent per session).
/// Each finished round counts in `Runtime::lease_rounds`.
fn spawn_heartbeat(state: &AppState) {
    if state.repo.backend() != Backend::Postgres {
        return;
    }
    let state = state.clone();
    let round = Arc::new(tokio::sync::Mutex::new(()));
    tokio::spawn(async move {
        let every = state.runtime.config.server_ttl / 3;
        let mut last_beat = tokio::time::Instant::now();
        // Whether another server could take this one's sessions over, as seen at the last
        // beat (the first: the one start-up recorded just before).
        let mut not_alone = look(&state, state.clock.now()).await;
        loop {
            tokio::select! {
                _ = state.shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let server = &state.runtime.config.server_id;
            state.hooks.run(Point::Beat, server).await;
            let now = state.clock.now();
            // Bounded: an unreachable database must not hold the loop past the fence time.
            let beat = match tokio::time::timeout(every, state.repo.beat(server, now)).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err("timed out".to_string()),
            };
            if let Err(e) = beat {
                tracing::warn!(error = %e, "cannot record this server's heartbeat");
                let past_fence =
                    last_beat.elapsed() >= lease::fence_after(state.runtime.config.server_ttl);
                if not_alone && past_fence {
                    lease::fence_all(&state);
                }
                let key = if past_fence {
                    "past-fence"
                } else {
                    "before-fence"
                };
                state.hooks.run(Point::HeartbeatFailed, key).await;
                continue;
            }
            last_beat = tokio::time::Instant::now();
            not_alone = look(&state, now).await;
            lease::fence_lost(&state).await;
            let dead_before = now - ttl_micros(&state.runtime.config);
            // The previous round still runs: this beat starts none.
            let Ok(running) = round.clone().try_lock_owned() else {
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let _running = running;
                if let Err(e) = takeover::take_over_dead(&state, dead_before).await {
                    tracing::warn!(error = %e, "cannot take over a stopped server's sessions");
                }
                if let Err(e) = forward::deliver_owed_here(&state).await {
                    tracing::warn!(error = %e, "cannot look for owed resumes of this server's sessions");
                }
                state.runtime.lease_rounds.send_modify(|n| *n += 1);
            });
        }
    });
}

/// [`others_alive`], also told to the event bridge: a server alone sends no events
/// (`events/bridge/peers.rs`).
async fn look(state: &AppState, now: crate::server::time::Micros) -> bool {
    let began = state.hub.peers().map(|p| p.look());
    let others = others_alive(state, now).await;
    if let (Some(peers), Some(began)) = (state.hub.peers(), began) {
        peers.looked(began, others);
    }
    others
}

/// Whether another server beat within the TTL before `now` (so it could take this server's
/// sessions over). Unknown counts as not alone: the safe side is to stop the agents.
async fn others_alive(state: &AppState, now: crate::server::time::Micros) -> bool {
    let since = now - ttl_micros(&state.runtime.config);
    !matches!(
        state.repo.other_live_servers(&state.runtime.config.server_id, since).await,
        Ok(others) if others.is_empty()
    )
}

/// Ends a shutdown (begun by [`shutdown`], which this begins if nothing did), once nothing
/// serves requests any more: stops the projector and waits, at most [`PROJECTOR_FLUSH_WAIT`],
/// for it to write the summary refreshes it had queued — those of requests that finished while
/// the server drained included. Boot reconciliation repairs only pending actions (P7), so a
/// refresh dropped here would leave a task's other fields stale until its next event.
pub async fn finish(state: &AppState) {
    if !state.shutdown.is_cancelled() {
        shutdown(state);
    }
    state.runtime.projector_stop.cancel();
    let projector = state
        .runtime
        .projector
        .lock()
        .expect("projector lock")
        .take();
    if let Some(projector) = projector
        && tokio::time::timeout(PROJECTOR_FLUSH_WAIT, projector)
            .await
            .is_err()
    {
        tracing::warn!(
            "the projector did not write its queued summaries within {PROJECTOR_FLUSH_WAIT:?}"
        );
    }
}

/// How long [`finish`] waits for the projector's last refreshes.
const PROJECTOR_FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Begins a shutdown: open MCP streams and sockets are released and every agent process is
/// stopped (killed with its process group). The HTTP server stops accepting at the same time.
pub fn shutdown(state: &AppState) {
    state.shutdown.cancel();
    crate::server::orchestrator::worker::stop_all(state);
    // The workers stop their agents in their own time, which a process exit does not wait
    // for: every agent's group is killed now, so nothing an agent started outlives us.
    let killed = state.runtime.agent_groups.kill_all();
    if killed > 0 {
        tracing::info!(agents = killed, "agent process groups killed");
    }
}
