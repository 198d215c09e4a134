//! Injection points for tests that must force an interleaving deterministically (a competing
//! write between a read and its compare-and-set, a pause between a claim and its delivery) or
//! a failure at a named step of a delivery.
//!
//! Only builds with the `test-hooks` feature (tests and benchmarks, decision 0042) can arm
//! them; in every other build [`Hooks`] is an empty struct whose `run` and `check` do nothing
//! and compile away, and no point's name is in the binary.

use crate::server::repo::RepoError;

#[cfg(feature = "test-hooks")]
pub use armed::Hooks;
#[cfg(not(feature = "test-hooks"))]
pub use inert::Hooks;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "test-hooks", derive(Debug))]
pub enum Point {
    /// Right before a summary compare-and-set; the key is the task id (P6).
    BeforeSummaryCas,
    /// Right after a responder won the claim, before it looks for the live waiter; the key is
    /// the pending id (L13/L15 races).
    AfterClaim,
    /// A responder lost the claim, before it classifies the loss (L14); the key is the
    /// pending id.
    ClaimLost,
    /// Before a detached answer's resume becomes owed (L18: before acceptance).
    Owe,
    /// A detached answer's resume is owed (accepted), before the worker that delivers it is
    /// woken (L18); the key is the pending id.
    Owed,
    /// Before a live delivery (or a detached rejection) is recorded, i.e. before the answer is
    /// handed over (L15/L16).
    Finalize,
    /// After a live answer's delivery was recorded, before it is handed to the waiting call;
    /// a failure armed here stands for a call that ended just then (it gets no answer).
    Handover,
    /// Before an owed resume is handed to the agent (L18: after acceptance); the key is the
    /// session id.
    Dispatch,
    /// Before a server looks at an answer another server offers it; the key is the
    /// pending id.
    AcceptOffer,
    /// Before the session worker takes a streamed chunk of the agent's reply; the key is the
    /// session id.
    StreamChunk,
    /// Before the ACP connection hands an update of the agent (a reply chunk, a tool call) to
    /// the session worker: the update is still "in the agent's stream"; the key is the
    /// session id.
    AgentUpdate,
    /// The session worker asked the agent's output stream for a mark and now takes the
    /// agent's earlier events until it comes (`worker::sync`); the key is the session id.
    AwaitMark,
    /// A new question arrived and waits for the worker to take what the agent sent before it
    /// (`worker::sync`); the key is the session id.
    AskSync,
    /// The question's wait for the worker (`worker::sync`) timed out, before it stops
    /// accepting the worker's reply; the key is the session id.
    SyncGaveUp,
    /// The session worker handed the agent's earlier output to the question waiting for it
    /// (`Command::Sync`); the key is the session id.
    SyncReplied,
    /// This server could not record its heartbeat and has decided whether to stop its agents
    /// (`lease`); the key is `past-fence` once the fence time has passed, else
    /// `before-fence`.
    HeartbeatFailed,
    /// Between reconciliation's two reads (P7): the stored summaries and the authoritative
    /// pending state; the key is the first task id.
    ReconcileReads,
    /// An ask's transaction committed, before its bundle is read back (L5: a newer turn can
    /// supersede it right there); the key is the pending id.
    AskWritten,
    /// Before commits are synced to disk (`AppState::durable`, I8, decision 0024); a failure
    /// armed here stands for a failed sync.
    Durable,
    /// A prompt is about to start its turn (L18: an answer may become owed right now); the key
    /// is the session id.
    TurnInsert,
    /// The agent is gone and its session is about to be failed or left waiting for an owed
    /// answer (L18); the key is the session id.
    Failing,
    /// An agent's permission request is about to be written into the current turn (N6); the
    /// key is the session id.
    PermissionAsked,
    /// A completed turn's step action is about to run or be deferred (N3); the key is the
    /// session id.
    StepGuard,
    /// An ask's bundle was read back, before the asker decides whether to wait (L15); the key is
    /// the pending id.
    AskRead,
    /// A server took the waiting call an answer was offered to, before it records the delivery
    /// (L15 across servers); the key is the pending id.
    Accepting,
    /// An answer offer was not confirmed in time, before its server withdraws it; the key is
    /// the pending id.
    Withdraw,
    /// A server decided an answer offer it took (delivered, or left for its server to
    /// withdraw); the key is the pending id.
    Accepted,
    /// A server took a dead server's session over (the owner row names it now), before it
    /// recovers the session; the key is the session id.
    TakingOver,
    /// Before a server records its heartbeat; the key is the server id.
    Beat,
    /// Before a profile's check starts its agent (A2); the key is the profile id.
    ProfileCheck,
    /// The agent withdrew its elicitation (`$/cancel_request`) and its client now waits for
    /// the question to be recorded and detached before it answers (E5); the key is the
    /// session id.
    WithdrawnWaits,
    /// The session worker is about to dispatch an owed resume (L18), its agent ready; the key
    /// is the session id.
    BeforeDispatch,
    /// An owed resume's dispatch is committed, before the worker hands its prompt to the
    /// agent (L18); the key is the session id.
    HandingOver,
}

#[cfg(feature = "test-hooks")]
impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::BeforeSummaryCas => "before-summary-cas",
            Point::AfterClaim => "after-claim",
            Point::ClaimLost => "claim-lost",
            Point::Owe => "owe",
            Point::Owed => "owed",
            Point::Finalize => "finalize",
            Point::Handover => "handover",
            Point::Dispatch => "dispatch",
            Point::AcceptOffer => "accept-offer",
            Point::StreamChunk => "stream-chunk",
            Point::AgentUpdate => "agent-update",
            Point::AwaitMark => "await-mark",
            Point::AskSync => "ask-sync",
            Point::SyncGaveUp => "sync-gave-up",
            Point::SyncReplied => "sync-replied",
            Point::HeartbeatFailed => "heartbeat-failed",
            Point::ReconcileReads => "reconcile-reads",
            Point::AskWritten => "ask-written",
            Point::Durable => "durable",
            Point::TurnInsert => "turn-insert",
            Point::Failing => "failing",
            Point::PermissionAsked => "permission-asked",
            Point::StepGuard => "step-guard",
            Point::AskRead => "ask-read",
            Point::Accepting => "accepting",
            Point::Withdraw => "withdraw",
            Point::Accepted => "accepted",
            Point::TakingOver => "taking-over",
            Point::Beat => "beat",
            Point::ProfileCheck => "checking-a-profile",
            Point::WithdrawnWaits => "withdrawn-waits",
            Point::BeforeDispatch => "before-dispatch",
            Point::HandingOver => "handing-over-a-resume",
        }
    }
}

/// The real points: a hook or an armed failure per point.
#[cfg(feature = "test-hooks")]
mod armed {
    use std::collections::HashMap;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::RwLock;

    use super::{Point, RepoError};

    type Hook = Box<dyn Fn(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

    #[derive(Default)]
    pub struct Hooks {
        hooks: RwLock<HashMap<Point, Hook>>,
        /// Point → how many more times it fails.
        faults: RwLock<HashMap<Point, u32>>,
    }

    impl std::fmt::Debug for Hooks {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let set: Vec<&str> = self
                .hooks
                .read()
                .expect("hooks lock")
                .keys()
                .map(|p| p.name())
                .collect();
            f.debug_struct("Hooks").field("set", &set).finish()
        }
    }

    impl Hooks {
        /// Runs `hook(key)` every time `point` is reached, until cleared.
        pub fn set<F, Fut>(&self, point: Point, hook: F)
        where
            F: Fn(String) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = ()> + Send + 'static,
        {
            self.hooks
                .write()
                .expect("hooks lock")
                .insert(point, Box::new(move |k| Box::pin(hook(k))));
        }

        pub fn clear(&self, point: Point) {
            self.hooks.write().expect("hooks lock").remove(&point);
        }

        /// Makes the next `times` passes through `point` fail with [`RepoError::Injected`].
        pub fn fail(&self, point: Point, times: u32) {
            self.faults
                .write()
                .expect("faults lock")
                .insert(point, times);
        }

        /// Failures still armed at `point`.
        pub fn armed(&self, point: Point) -> u32 {
            self.faults
                .read()
                .expect("faults lock")
                .get(&point)
                .copied()
                .unwrap_or(0)
        }

        /// `Err` when a failure is armed at `point` (and uses it up).
        pub fn check(&self, point: Point) -> Result<(), RepoError> {
            if self.faults.read().expect("faults lock").is_empty() {
                return Ok(());
            }
            let mut faults = self.faults.write().expect("faults lock");
            match faults.get_mut(&point) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    Err(RepoError::Injected(point.name()))
                }
                _ => Ok(()),
            }
        }

        pub async fn run(&self, point: Point, key: &str) {
            let pending = self
                .hooks
                .read()
                .expect("hooks lock")
                .get(&point)
                .map(|h| h(key.to_string()));
            if let Some(fut) = pending {
                fut.await;
            }
        }
    }
}

/// Points that cannot be armed: every pass is free.
#[cfg(not(feature = "test-hooks"))]
mod inert {
    use super::{Point, RepoError};

    /// Built only by `Hooks::default()`, as the armed table is.
    #[derive(Debug, Default)]
    pub struct Hooks(());

    impl Hooks {
        #[inline(always)]
        pub fn check(&self, _point: Point) -> Result<(), RepoError> {
            Ok(())
        }

        #[inline(always)]
        pub async fn run(&self, _point: Point, _key: &str) {}
    }
}
