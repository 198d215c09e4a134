//! The failure budget for access tokens (spec "Server process"): wrong tokens are limited per
//! client — an IPv4 address, or an IPv6 /64, which one host usually holds whole — and across
//! all clients, so that neither one address nor many can try tokens without bound.
//!
//! Hand-written (decision 0008): rate-limit crates count every request; this counts failures.
//! Every attempt is counted *before* its credential is checked and given back when it was
//! right ([`FailureLimiter::begin`] / [`Attempt::succeeded`]), so checking and recording are
//! one step: parallel guesses cannot all pass a check made before any of them failed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens one client may send per window.
pub const FAILURES_PER_CLIENT: u32 = 10;
/// Wrong tokens all clients together may send per window.
pub const FAILURES_IN_ALL: u32 = 1000;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Clients tracked at once. Above twice [`FAILURES_IN_ALL`] (an entry needs an attempt within
/// the last window, and at most that many are counted per window), so the table never has to
/// forget a lockout to make room.
const MAX_TRACKED: usize = 4096;

/// The addresses this machine's own clients come from: agents reach `/mcp` at 127.0.0.1, local
/// browsers at 127.0.0.1 or ::1. Other loopback addresses (127.0.0.2, …) count like any other
/// client.
pub fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4 == std::net::Ipv4Addr::LOCALHOST,
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped() == Some(std::net::Ipv4Addr::LOCALHOST)
        }
    }
}

/// The unit a failure budget belongs to: an IPv4 address (IPv4-mapped IPv6 included) or the
/// /64 of an IPv6 address.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    count: u32,
}

impl Window {
    fn fresh(now: Instant) -> Window {
        Window {
            start: now,
            count: 0,
        }
    }

    fn current(&mut self, now: Instant, window: Duration) -> &mut Window {
        if now.duration_since(self.start) >= window {
            *self = Window::fresh(now);
        }
        self
    }
}

struct Counts {
    clients: HashMap<IpAddr, Window>,
    all: Window,
}

pub struct FailureLimiter {
    per_client: u32,
    in_all: u32,
    window: Duration,
    counts: Mutex<Counts>,
}

/// Why an attempt was refused before its credential was looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// This client used its budget for this window.
    Client,
    /// All clients together did.
    Everyone,
}

/// An attempt counted as a failure until [`Attempt::succeeded`] gives it back.
#[must_use = "an attempt stays counted as a failure unless it succeeded"]
pub struct Attempt<'a> {
    limiter: &'a FailureLimiter,
    key: IpAddr,
    start: Instant,
    all_start: Instant,
}

impl Attempt<'_> {
    /// The credential was right: the attempt is not a failure.
    pub fn succeeded(self) {
        let mut counts = self.limiter.counts.lock().expect("limiter lock");
        if let Some(w) = counts.clients.get_mut(&self.key)
            && w.start == self.start
        {
            w.count = w.count.saturating_sub(1);
        }
        if counts.all.start == self.all_start {
            counts.all.count = counts.all.count.saturating_sub(1);
        }
    }
}

impl FailureLimiter {
    pub fn new(per_client: u32, in_all: u32, window: Duration) -> FailureLimiter {
        FailureLimiter {
            per_client,
            in_all,
            window,
            counts: Mutex::new(Counts {
                clients: HashMap::new(),
                all: Window::fresh(Instant::now()),
            }),
        }
    }

    /// The limits of spec "Server process".
    pub fn standard() -> FailureLimiter {
        FailureLimiter::new(FAILURES_PER_CLIENT, FAILURES_IN_ALL, FAILURE_WINDOW)
    }

    /// Counts an attempt from `ip`, or refuses it when a budget is used up.
    pub fn begin(&self, ip: IpAddr, now: Instant) -> Result<Attempt<'_>, Refused> {
        let key = client_key(ip);
        let window = self.window;
        let mut counts = self.counts.lock().expect("limiter lock");
        let counts = &mut *counts;
        if counts.clients.len() >= MAX_TRACKED && !counts.clients.contains_key(&key) {
            counts
                .clients
                .retain(|_, w| now.duration_since(w.start) < window);
        }
        let all = *counts.all.current(now, window);
        if let Some(w) = counts.clients.get_mut(&key) {
            let w = w.current(now, window);
            if w.count >= self.per_client {
                return Err(Refused::Client);
            }
        }
        if all.count >= self.in_all || counts.clients.len() >= MAX_TRACKED {
            return Err(Refused::Everyone);
        }
        let w = counts
            .clients
            .entry(key)
            .or_insert_with(|| Window::fresh(now));
        w.count += 1;
        counts.all.count += 1;
        Ok(Attempt {
            limiter: self,
            key,
            start: w.start,
            all_start: counts.all.start,
        })
    }

    /// Clients tracked now (tests).
    pub fn tracked(&self) -> usize {
        self.counts.lock().expect("limiter lock").clients.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(l: &FailureLimiter, ip: &str, at: Instant) -> Result<(), Refused> {
        l.begin(ip.parse().unwrap(), at).map(drop)
    }

    #[test]
    fn failures_block_a_client_for_the_rest_of_the_window() {
        let l = FailureLimiter::new(3, 1000, Duration::from_secs(60));
        let t0 = Instant::now();
        for _ in 0..3 {
            fail(&l, "10.0.0.9", t0).unwrap();
        }
        assert_eq!(
            fail(&l, "10.0.0.9", t0 + Duration::from_secs(59)),
            Err(Refused::Client)
        );
        fail(&l, "10.0.0.8", t0).unwrap();
        fail(&l, "10.0.0.9", t0 + Duration::from_secs(61)).unwrap();
    }

    #[test]
    fn right_credentials_cost_nothing() {
        let l = FailureLimiter::new(2, 1000, Duration::from_secs(60));
        let t0 = Instant::now();
        for _ in 0..100 {
            l.begin("10.0.0.9".parse().unwrap(), t0)
                .unwrap()
                .succeeded();
        }
        fail(&l, "10.0.0.9", t0).unwrap();
        fail(&l, "10.0.0.9", t0).unwrap();
        assert_eq!(fail(&l, "10.0.0.9", t0), Err(Refused::Client));
    }

    #[test]
    fn parallel_attempts_are_counted_before_they_are_checked() {
        let l = FailureLimiter::new(3, 1000, Duration::from_secs(60));
        let t0 = Instant::now();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        // Three in flight at once: a fourth is refused before any of them was judged.
        let held: Vec<_> = (0..3).map(|_| l.begin(ip, t0).unwrap()).collect();
        assert_eq!(l.begin(ip, t0).err(), Some(Refused::Client));
        for a in held {
            a.succeeded();
        }
        l.begin(ip, t0).unwrap().succeeded();
    }

    #[test]
    fn an_ipv6_64_is_one_client_and_mapped_ipv4_is_ipv4() {
        let l = FailureLimiter::new(2, 1000, Duration::from_secs(60));
        let t0 = Instant::now();
        fail(&l, "2001:db8:1:2::1", t0).unwrap();
        fail(&l, "2001:db8:1:2:ffff::9", t0).unwrap();
        assert_eq!(fail(&l, "2001:db8:1:2::77", t0), Err(Refused::Client));
        fail(&l, "2001:db8:1:3::1", t0).unwrap();
        fail(&l, "10.0.0.1", t0).unwrap();
        fail(&l, "::ffff:10.0.0.1", t0).unwrap();
        assert_eq!(fail(&l, "10.0.0.1", t0), Err(Refused::Client));
    }

    #[test]
    fn a_lockout_survives_thousands_of_other_addresses() {
        let l = FailureLimiter::standard();
        let t0 = Instant::now();
        for _ in 0..FAILURES_PER_CLIENT {
            fail(&l, "192.168.1.66", t0).unwrap();
        }
        for i in 0..4100u32 {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            let _ = l.begin(IpAddr::V4(ip), t0);
        }
        assert_eq!(fail(&l, "192.168.1.66", t0), Err(Refused::Client));
        assert!(l.tracked() <= MAX_TRACKED);
        // The budget of everyone is spent too: nobody new gets a try this window.
        assert_eq!(fail(&l, "172.16.0.1", t0), Err(Refused::Everyone));
        assert_eq!(
            fail(&l, "192.168.1.66", t0 + Duration::from_secs(30)),
            Err(Refused::Client)
        );
        fail(&l, "172.16.0.1", t0 + FAILURE_WINDOW).unwrap();
    }
}
