//! The worker's agent process: launch (or `session/load`) within the slot limit, stop, and
//! what a dead agent leaves behind.

use super::control::release;
use super::{Agent, Worker, WorkerError};
use crate::model::SessionState;
use crate::server::agents;
use crate::server::orchestrator::{publish, sessions};
use crate::server::repo::Backend;
use crate::server::runtime::WaiterMsg;

/// What a crash's reason says when an answer waits for the agent (L18).
const KEPT: &str =
    "Your answer is kept and will be sent when the agent starts again: send a message or retry.";

impl Worker {
    pub(super) async fn ensure_agent(&mut self) -> Result<(), WorkerError> {
        if self.agent.is_some() {
            self.state.runtime.agents.busy(&self.session_id);
            return Ok(());
        }
        let session = self
            .state
            .repo
            .get_session(&self.session_id)
            .await?
            .ok_or_else(|| WorkerError::Agent("the session is gone".into()))?;
        self.admit()?;
        // One agent per session across servers: claimed before it launches.
        if let Err(e) = self.claim().await {
            self.state.runtime.agents.leave(&self.session_id);
            return Err(e);
        }
        let r = sessions::set_state(&self.state, &self.session_id, SessionState::Starting).await;
        self.log("cannot change the session state", r);
        let launched = match sessions::launch_spec(&self.state, &session).await {
            Ok((spec, token_hash)) => {
                self.state
                    .repo
                    .set_mcp_token_hash(&self.session_id, &token_hash)
                    .await?;
                let timeout = self.state.runtime.config.agent_start_timeout;
                let started = std::time::Instant::now();
                let launched = tokio::select! {
                    r = agents::launch(spec, timeout) => r.map(|(c, rx)| (c, rx, token_hash)),
                    _ = self.stop.cancelled() => Err("the session is stopping".into()),
                };
                self.state
                    .metrics
                    .record_launch(started.elapsed(), launched.is_ok());
                launched.map_err(WorkerError::Agent)
            }
            Err(e) => Err(e),
        };
        match launched {
            Ok((connection, events, token_hash)) => {
                let r = self
                    .state
                    .repo
                    .set_acp_session_id(&self.session_id, connection.acp_session_id())
                    .await;
                self.log("cannot store the ACP session id", r);
                self.agent = Some(Agent {
                    connection,
                    token_hash,
                });
                self.events = Some(events);
                Ok(())
            }
            Err(reason) => {
                self.state.runtime.agents.leave(&self.session_id);
                if let Ok(Some(s)) = self.state.repo.get_session(&self.session_id).await
                    && let Some(hash) = s.mcp_token_hash
                {
                    let r = self
                        .state
                        .repo
                        .revoke_mcp_token(&self.session_id, &hash)
                        .await;
                    self.log("cannot revoke the MCP token", r);
                }
                Err(reason)
            }
        }
    }

    /// Several servers (PostgreSQL): claims the session for this server (compare-and-set, a new
    /// epoch) unless it holds a claim with a running agent. `Fenced` when another live server
    /// owns it: this server must not start agent work for it.
    pub(super) async fn claim(&mut self) -> Result<(), WorkerError> {
        if self.state.repo.backend() != Backend::Postgres
            || (self.claim.is_some() && self.agent.is_some())
        {
            return Ok(());
        }
        let config = &self.state.runtime.config;
        let alive_since = self.state.clock.now()
            - i64::try_from(config.server_ttl.as_micros()).unwrap_or(i64::MAX);
        match self
            .state
            .repo
            .claim_session(&self.session_id, &config.server_id, alive_since)
            .await?
        {
            Some(epoch) => {
                self.claim = Some(crate::server::repo::Fence {
                    server_id: config.server_id.clone(),
                    epoch,
                });
                // A server starting up leaves this session to us while we live.
                self.state.runtime.owned.put(&self.session_id, ());
                Ok(())
            }
            None => Err(WorkerError::Repo(crate::server::repo::RepoError::Fenced(
                self.session_id.clone(),
            ))),
        }
    }

    /// A write carrying this server's claim was refused: another server runs the session now.
    /// Stops here as on `Command::Fence`.
    pub(super) fn fenced_out(&mut self) {
        tracing::warn!(session_id = %self.session_id, "another server claimed this session; stopping its agent here");
        self.fenced = true;
        self.stop.cancel();
    }

    /// Takes (or keeps) a slot among the running agents; an idle agent elsewhere may be asked
    /// to stop to make room (`--max-agents`).
    pub(super) fn admit(&self) -> Result<(), WorkerError> {
        if self.agent.is_some() {
            return Ok(());
        }
        let victim = self
            .state
            .runtime
            .agents
            .admit(&self.session_id)
            .map_err(WorkerError::Agent)?;
        if let Some(victim) = victim {
            release(&self.state, &victim);
        }
        Ok(())
    }

    /// The agent is gone: its questions' calls still registered on this server can no longer
    /// hear an answer. They end now, so an answer given from here on takes the detached way
    /// (owed, L17/L18) instead of going to a call nobody reads.
    async fn end_calls(&self) {
        let Ok(bundles) = self.state.repo.session_bundles(&self.session_id).await else {
            return;
        };
        for b in bundles
            .iter()
            .filter(|b| b.status == crate::model::BundleStatus::Pending)
        {
            if let Some(call) = self.state.runtime.waiters.take(&b.pending_id) {
                super::reply_to(call, WaiterMsg::Ended("the agent stopped"));
            }
        }
    }

    /// Drops the agent: its process group is killed, its MCP token revoked, its slot freed, its
    /// questions' calls ended and its waiting permission requests cancelled (N6).
    pub(super) async fn stop_agent(&mut self) {
        self.events = None;
        self.claim = None;
        if let Some(agent) = self.agent.take() {
            drop(agent.connection);
            let r = self
                .state
                .repo
                .revoke_mcp_token(&self.session_id, &agent.token_hash)
                .await;
            self.log("cannot revoke the MCP token", r);
        }
        self.state.runtime.agents.leave(&self.session_id);
        self.state.runtime.owned.take(&self.session_id);
        self.end_calls().await;
        self.cancel_permissions().await;
        if self.fenced {
            // The session's requests are the new owner's now (it cancelled ours at takeover).
            return;
        }
        let r = self
            .state
            .repo
            .cancel_permissions(Some(&self.session_id), self.state.clock.now())
            .await;
        match r {
            Ok(cancelled) => {
                for p in cancelled {
                    publish::permission_resolved(&self.state, &p);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot cancel permission requests"),
        }
    }

    /// The agent crashed or could not start: the reason is shown and the session fails (L11
    /// expires its questions) — unless an answer is owed to it (L18): then the session waits
    /// and the next launch delivers the answer. The guarded move to `failed` decides (an answer
    /// owed at any moment before it keeps the session waiting); the reason is written before
    /// it, worded from a first look, and completed by a note if an answer became owed since.
    pub(super) async fn fail(&mut self, reason: &str) {
        tracing::warn!(session_id = %self.session_id, reason, "agent failed");
        self.failed = true;
        self.stop_agent().await;
        let owed = self.owes_an_answer().await;
        let shown = if owed {
            format!("{reason}\n{KEPT}")
        } else {
            reason.to_string()
        };
        let turn = match self.open_turn.take() {
            Some(turn_id) => {
                self.system_error(&turn_id, shown.clone()).await;
                self.complete_turn(&turn_id).await;
                Some(turn_id)
            }
            // Idle: the reason goes into the current turn, which stays as it is.
            None => {
                let current = self
                    .state
                    .repo
                    .current_turn_id(&self.session_id)
                    .await
                    .ok()
                    .flatten();
                if let Some(turn_id) = &current {
                    self.system_error(turn_id, shown.clone()).await;
                }
                current
            }
        };
        self.queue.clear();
        self.queue_changed().await;
        self.state
            .hooks
            .run(crate::server::hooks::Point::Failing, &self.session_id)
            .await;
        // The state first: whoever sees the summary's reason sees the session's final state.
        let failed = match sessions::set_state(&self.state, &self.session_id, SessionState::Failed)
            .await
        {
            Ok(moved) => moved.is_some_and(|s| s.state == SessionState::Failed),
            Err(e) => {
                tracing::warn!(session_id = %self.session_id, error = %e, "cannot fail the session");
                false
            }
        };
        let shown = if !failed && !owed && self.owes_an_answer().await {
            // Owed between the first look and the move: the move kept the session waiting.
            if let Some(turn_id) = &turn {
                self.system_error(turn_id, KEPT.to_string()).await;
            }
            format!("{reason}\n{KEPT}")
        } else {
            shown
        };
        if !failed {
            let r =
                sessions::set_state(&self.state, &self.session_id, SessionState::WaitingForInput)
                    .await;
            self.log("cannot change the session state", r);
        }
        self.record_error(&shown).await;
    }

    /// A4: the agent would not start before its user logs in. Unlike a failure, the session
    /// waits for input with the reason shown (P3 `last_error`), and a retry after the login
    /// starts `prompt`, which never reached the agent, again.
    pub(super) async fn await_login(&mut self, prompt: String, reason: &str) {
        tracing::info!(session_id = %self.session_id, reason, "the agent needs a login");
        self.failed = true;
        if let Some(turn_id) = self.open_turn.take() {
            self.system_error(&turn_id, reason.to_string()).await;
            self.complete_turn(&turn_id).await;
        }
        self.unsent = Some(prompt);
        let r =
            sessions::set_state(&self.state, &self.session_id, SessionState::WaitingForInput).await;
        self.log("cannot change the session state", r);
        self.record_error(reason).await;
    }

    /// Whether an answer is owed to this session's agent (L18); a failed read counts as owed
    /// (the guarded move decides in the end).
    async fn owes_an_answer(&self) -> bool {
        self.state
            .repo
            .owed_resumes(&self.session_id)
            .await
            .map(|o| !o.is_empty())
            .unwrap_or(true)
    }
}
