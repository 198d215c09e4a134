//! What questions need in memory: link completions that may come before their question (E7)
//! and the questions of the bundles this server wrote (L12, B3).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::model::Question;

/// E7: an agent's `elicitation/complete` for a link it asked the user to open. The completion
/// may arrive before its question is written (the two travel on different tasks): it is kept
/// until the question waits for it; the kept ones are bounded (a hostile agent cannot grow
/// them).
#[derive(Default)]
pub struct Completions {
    inner: Mutex<HashMap<String, Completion>>,
}

enum Completion {
    Waiting(oneshot::Sender<()>),
    Done,
}

/// Completions kept before their question waits for them.
const KEPT_COMPLETIONS: usize = 1024;

impl Completions {
    fn key(session_id: &str, elicitation_id: &str) -> String {
        format!("{session_id}\u{0}{elicitation_id}")
    }

    /// Resolves when the agent completes `elicitation_id` (at once if it already has).
    pub fn wait(&self, session_id: &str, elicitation_id: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let key = Self::key(session_id, elicitation_id);
        let mut map = self.inner.lock().expect("completions lock");
        match map.remove(&key) {
            Some(Completion::Done) => {
                let _ = tx.send(());
            }
            _ => {
                map.insert(key, Completion::Waiting(tx));
            }
        }
        rx
    }

    pub fn complete(&self, session_id: &str, elicitation_id: &str) {
        let key = Self::key(session_id, elicitation_id);
        let mut map = self.inner.lock().expect("completions lock");
        match map.remove(&key) {
            Some(Completion::Waiting(tx)) => {
                let _ = tx.send(());
            }
            _ if map.len() < KEPT_COMPLETIONS => {
                map.insert(key, Completion::Done);
            }
            _ => {}
        }
    }

    /// The question is no longer waiting.
    pub fn forget(&self, session_id: &str, elicitation_id: &str) {
        self.inner
            .lock()
            .expect("completions lock")
            .remove(&Self::key(session_id, elicitation_id));
    }
}

/// Bundles a [`QuestionCache`] keeps; beyond it the oldest go first.
const CACHED_BUNDLES: usize = 4096;

/// The questions of bundles this server wrote, by pending id: an answer validates against
/// them (L12) without reading its bundle back (B3: one read less per answer). A bundle's
/// questions never change once written, and whether it can still be answered is always
/// decided by the claim's compare-and-set, never by this cache; a miss reads the bundle.
#[derive(Default)]
pub struct QuestionCache {
    inner: Mutex<Remembered>,
}

#[derive(Default)]
struct Remembered {
    by_id: HashMap<String, Arc<Vec<Question>>>,
    /// Pending ids, oldest first (forgotten ones until they reach the front).
    order: VecDeque<String>,
}

impl QuestionCache {
    pub fn put(&self, pending_id: &str, questions: Arc<Vec<Question>>) {
        let mut guard = self.inner.lock().expect("question cache lock");
        let Remembered { by_id: map, order } = &mut *guard;
        while map.len() >= CACHED_BUNDLES {
            match order.pop_front() {
                Some(oldest) => {
                    map.remove(&oldest);
                }
                None => break,
            }
        }
        if map.insert(pending_id.to_string(), questions).is_none() {
            order.push_back(pending_id.to_string());
        }
        // Ids forgotten early stay in `order` until they reach its front; never let them pile up.
        if order.len() > 2 * CACHED_BUNDLES {
            order.retain(|id| map.contains_key(id));
        }
    }

    pub fn get(&self, pending_id: &str) -> Option<Arc<Vec<Question>>> {
        let guard = self.inner.lock().expect("question cache lock");
        guard.by_id.get(pending_id).cloned()
    }

    /// The bundle was answered or rejected here: no answer will need its questions again
    /// (a late one reads them).
    pub fn forget(&self, pending_id: &str) {
        self.inner
            .lock()
            .expect("question cache lock")
            .by_id
            .remove(pending_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e7_a_completion_meets_its_question_in_either_order_and_is_bounded() {
        let c = Completions::default();
        // Completed first, then waited for: resolves at once.
        c.complete("s", "early");
        assert_eq!(c.wait("s", "early").try_recv(), Ok(()));
        // Waited for first: resolves when completed; another session's id is another link.
        let mut rx = c.wait("s", "late");
        c.complete("other", "late");
        assert!(rx.try_recv().is_err());
        c.complete("s", "late");
        assert_eq!(rx.try_recv(), Ok(()));
        // Completions nobody waits for are kept up to the bound only.
        for i in 0..KEPT_COMPLETIONS + 10 {
            c.complete("s", &format!("stray-{i}"));
        }
        assert_eq!(c.inner.lock().unwrap().len(), KEPT_COMPLETIONS);
        c.forget("s", "stray-0");
        assert_eq!(c.inner.lock().unwrap().len(), KEPT_COMPLETIONS - 1);
    }

    #[test]
    fn the_question_cache_is_bounded_and_forgets_the_oldest_first() {
        let cache = QuestionCache::default();
        let questions = Arc::new(Vec::new());
        for i in 0..CACHED_BUNDLES + 10 {
            cache.put(&format!("b{i}"), questions.clone());
        }
        assert_eq!(cache.inner.lock().unwrap().by_id.len(), CACHED_BUNDLES);
        assert!(cache.get("b9").is_none(), "the oldest went first");
        assert!(cache.get("b10").is_some());
        // Forgotten ids never pile up in the eviction order.
        for i in 0..3 * CACHED_BUNDLES {
            let id = format!("c{i}");
            cache.put(&id, questions.clone());
            cache.forget(&id);
        }
        assert!(cache.inner.lock().unwrap().order.len() <= 2 * CACHED_BUNDLES + 1);
        assert!(cache.get(&format!("b{}", CACHED_BUNDLES + 9)).is_some());
    }
}
