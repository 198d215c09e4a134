//! Reconnect pacing for the live channel: exponential backoff with jitter, so a server that
//! restarts is found again within a second while one that stays down is not hammered, and many
//! tabs do not reconnect in step.

/// The first retry waits this long.
pub const FIRST_MS: u32 = 250;
/// No retry waits longer than this.
pub const MAX_MS: u32 = 10_000;

/// Milliseconds before reconnect attempt `attempt` (0 = the first after a close): `FIRST_MS`
/// doubling up to `MAX_MS`, stretched by up to 25 % with `jitter` in `[0, 1)`.
pub fn reconnect_delay_ms(attempt: u32, jitter: f64) -> u32 {
    let base = FIRST_MS.saturating_mul(1u32 << attempt.min(16)).min(MAX_MS);
    let jitter = jitter.clamp(0.0, 1.0);
    base + (f64::from(base) * 0.25 * jitter) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_the_first_and_stop_at_the_cap() {
        let delays: Vec<u32> = (0..8).map(|n| reconnect_delay_ms(n, 0.0)).collect();
        assert_eq!(delays, [250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
        assert_eq!(reconnect_delay_ms(u32::MAX, 0.0), MAX_MS, "no overflow");
    }

    #[test]
    fn jitter_stretches_by_at_most_a_quarter() {
        assert_eq!(reconnect_delay_ms(2, 0.999_999), 1000 + 249);
        assert_eq!(
            reconnect_delay_ms(2, 7.0),
            1250,
            "out-of-range jitter is clamped"
        );
        assert_eq!(reconnect_delay_ms(2, -1.0), 1000);
    }
}
