//! Injection points for tests that must force an interleaving deterministically (a competing
//! write between a read and its compare-and-set, for example). Empty in production: each hook
//! is one uncontended lock read.

use std::future::Future;
use std::pin::Pin;
use std::sync::RwLock;

type Hook = Box<dyn Fn(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

#[derive(Default)]
pub struct Hooks {
    before_summary_cas: RwLock<Option<Hook>>,
}

impl Hooks {
    /// Runs `hook(task_id)` right before every summary compare-and-set (P6 tests).
    pub fn set_before_summary_cas<F, Fut>(&self, hook: F)
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        *self.before_summary_cas.write().expect("hooks lock") =
            Some(Box::new(move |id| Box::pin(hook(id))));
    }

    pub fn clear(&self) {
        *self.before_summary_cas.write().expect("hooks lock") = None;
    }

    pub async fn before_summary_cas(&self, task_id: &str) {
        let pending = self
            .before_summary_cas
            .read()
            .expect("hooks lock")
            .as_ref()
            .map(|h| h(task_id.to_string()));
        if let Some(fut) = pending {
            fut.await;
        }
    }
}
