//! Injection points for tests that must force an interleaving deterministically (a competing
//! write between a read and its compare-and-set, a pause between a claim and its delivery).
//! Empty in production: each point costs one uncontended lock read.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::RwLock;

type Hook = Box<dyn Fn(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    /// Right before a summary compare-and-set; the key is the task id (P6).
    BeforeSummaryCas,
    /// Right after a responder won the claim, before it looks for the live waiter; the key is
    /// the pending id (L13/L15 races).
    AfterClaim,
}

#[derive(Default)]
pub struct Hooks {
    hooks: RwLock<HashMap<Point, Hook>>,
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
