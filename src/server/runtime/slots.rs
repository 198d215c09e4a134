//! Who holds what: entries exactly one party can take, the agents that run, per-session
//! counters.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use crate::model::Response;
use crate::server::agents::AgentError;

/// A map where exactly one party can take an entry (L13/L15: one of respond, cancel, timeout,
/// supersession wins a waiter).
pub struct Slots<T> {
    inner: Mutex<HashMap<String, T>>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            inner: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Slots<T> {
    /// Registers `value` under `key`, replacing (and returning) an older one.
    pub fn put(&self, key: &str, value: T) -> Option<T> {
        self.inner
            .lock()
            .expect("slots lock")
            .insert(key.to_string(), value)
    }

    /// Takes the entry: whoever gets `Some` owns it.
    pub fn take(&self, key: &str) -> Option<T> {
        self.inner.lock().expect("slots lock").remove(key)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.inner.lock().expect("slots lock").contains_key(key)
    }

    /// How many entries wait to be taken.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("slots lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn keys(&self) -> Vec<String> {
        self.inner
            .lock()
            .expect("slots lock")
            .keys()
            .cloned()
            .collect()
    }
}

/// What a waiting `ask_user_question` call is told. A sender dropped without a message means
/// the responder that took it could not record the delivery (nothing was delivered): the call
/// registers again and keeps waiting.
#[derive(Debug)]
pub enum WaiterMsg {
    /// L15: the answer (or the rejection). The responder has already moved the session back
    /// to `running` with the delivery record, and published it (decision 0032).
    Answer { response: Response },
    /// The wait is over without an answer: an identical call took it over (L8), or a newer
    /// turn superseded the question (L5).
    Ended(&'static str),
}

/// Which sessions have a running agent process, and since when each one is idle (no open
/// turn). At the cap, the longest-idle agent makes room; busy agents are never stopped.
pub struct AgentSlots {
    max: usize,
    running: Mutex<HashMap<String, Option<Instant>>>,
}

impl AgentSlots {
    pub fn new(max: usize) -> Self {
        AgentSlots {
            max: max.max(1),
            running: Mutex::new(HashMap::new()),
        }
    }

    /// Admits `session` as busy. `Ok(Some(victim))`: the idle agent of `victim` must stop to
    /// make room (its slot is already given away). `Err`: every agent is busy.
    pub fn admit(&self, session: &str) -> Result<Option<String>, AgentError> {
        let mut running = self.running.lock().expect("agents lock");
        if running.contains_key(session) || running.len() < self.max {
            running.insert(session.to_string(), None);
            return Ok(None);
        }
        let victim = running
            .iter()
            .filter_map(|(id, idle)| idle.map(|since| (since, id.clone())))
            .min()
            .map(|(_, id)| id);
        match victim {
            Some(v) => {
                running.remove(&v);
                running.insert(session.to_string(), None);
                Ok(Some(v))
            }
            None => Err(AgentError::from(format!(
                "{} agents are busy (the limit of --max-agents); try again when one finishes",
                self.max
            ))),
        }
    }

    /// Whether a new agent could start now (a free slot, or an idle agent to stop).
    pub fn has_room(&self) -> bool {
        let running = self.running.lock().expect("agents lock");
        running.len() < self.max || running.values().any(Option::is_some)
    }

    pub fn busy(&self, session: &str) {
        self.set(session, None);
    }

    pub fn idle(&self, session: &str) {
        self.idle_at(session, Instant::now());
    }

    pub fn idle_at(&self, session: &str, since: Instant) {
        self.set(session, Some(since));
    }

    fn set(&self, session: &str, idle: Option<Instant>) {
        self.running
            .lock()
            .expect("agents lock")
            .insert(session.to_string(), idle);
    }

    pub fn leave(&self, session: &str) {
        self.running.lock().expect("agents lock").remove(session);
    }

    pub fn count(&self) -> usize {
        self.running.lock().expect("agents lock").len()
    }
}

impl Slots<usize> {
    /// The sum of the entries.
    pub fn total(&self) -> usize {
        self.inner.lock().expect("slots lock").values().sum()
    }
}

/// Per-session counters the stream merger reads.
#[derive(Default)]
pub struct SessionCounters {
    /// session → rows written into its transcript by others than its worker (questions), so
    /// a streamed reply ends where such a row entered (no per-chunk query).
    foreign_rows: Mutex<HashMap<String, u64>>,
}

impl SessionCounters {
    pub fn note_foreign_row(&self, session: &str) {
        *self
            .foreign_rows
            .lock()
            .expect("rows lock")
            .entry(session.to_string())
            .or_default() += 1;
    }

    pub fn foreign_rows(&self, session: &str) -> u64 {
        self.foreign_rows
            .lock()
            .expect("rows lock")
            .get(session)
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn at_the_cap_the_longest_idle_agent_makes_room() {
        let slots = AgentSlots::new(2);
        assert_eq!(slots.admit("a"), Ok(None));
        assert_eq!(slots.admit("b"), Ok(None));
        assert!(slots.admit("c").is_err(), "both busy: nobody is stopped");
        let t0 = Instant::now();
        slots.idle_at("b", t0);
        slots.idle_at("a", t0 + Duration::from_millis(5));
        assert_eq!(slots.admit("c"), Ok(Some("b".into())), "b idles longest");
        assert_eq!(slots.count(), 2);
        assert_eq!(slots.admit("a"), Ok(None), "already admitted");
        slots.leave("a");
        assert_eq!(slots.admit("d"), Ok(None));
    }
}
