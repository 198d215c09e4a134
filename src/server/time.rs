//! Timestamps are written by Rust as microseconds since the Unix epoch (UTC) and shown on the
//! wire as RFC 3339 with microseconds (docs/decisions/0003-timestamps-as-microseconds.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, SecondsFormat, Utc};

pub type Micros = i64;

pub fn format_micros(at: Micros) -> String {
    DateTime::<Utc>::from_timestamp_micros(at)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Where services read "now" from. Production uses the system clock; tests use a manual clock
/// so that orderings (equal `started_at`, L1) are chosen, not hoped for.
#[derive(Clone)]
pub enum Clock {
    System,
    Manual(Arc<AtomicI64>),
}

impl Clock {
    pub fn manual(start: Micros) -> Self {
        Clock::Manual(Arc::new(AtomicI64::new(start)))
    }

    pub fn now(&self) -> Micros {
        match self {
            Clock::System => Utc::now().timestamp_micros(),
            Clock::Manual(at) => at.load(Ordering::SeqCst),
        }
    }

    /// Moves a manual clock forward; a no-op on the system clock.
    pub fn advance(&self, by: Micros) {
        if let Clock::Manual(at) = self {
            at.fetch_add(by, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339_with_microseconds_in_utc() {
        assert_eq!(
            format_micros(1_700_000_000_123_456),
            "2023-11-14T22:13:20.123456Z"
        );
    }
}
