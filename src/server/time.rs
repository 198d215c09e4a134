//! Timestamps are written by Rust as microseconds since the Unix epoch (UTC) and shown on the
//! wire as RFC 3339 with microseconds (docs/decisions/0003-timestamps-as-microseconds.md).

use chrono::{DateTime, SecondsFormat, Utc};

pub type Micros = i64;

pub fn format_micros(at: Micros) -> String {
    DateTime::<Utc>::from_timestamp_micros(at)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Where services read "now" from. Orderings that tests must force (equal `started_at`, L1)
/// are forced through the repository, which takes every timestamp from its caller.
#[derive(Clone)]
pub enum Clock {
    System,
}

impl Clock {
    pub fn now(&self) -> Micros {
        match self {
            Clock::System => Utc::now().timestamp_micros(),
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
