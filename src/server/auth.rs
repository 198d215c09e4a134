//! The front door's rules (spec "Server process"), as plain functions the HTTP layers in
//! `api::front_door` call: which `Host` names are ours (DNS rebinding), which `Origin` is the
//! same origin (CSRF, cross-site WebSocket), and the access token that guards a server bound
//! beyond loopback (bearer for API clients, an HttpOnly cookie for browsers).
//!
//! Nothing here logs a token or a cookie value.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The browser cookie that carries a login (HttpOnly, SameSite=Strict).
pub const AUTH_COOKIE: &str = "turnstile_auth";

/// Everything the front door needs to decide about a request.
pub struct FrontDoor {
    allowed_hosts: HashSet<String>,
    token: Option<AccessToken>,
    pub failures: FailureLimiter,
}

impl FrontDoor {
    /// `bound` is the listening address; `extra_hosts` come from `--allowed-host`. With a token,
    /// the machine's own interface addresses are admitted too (LAN access).
    pub fn new(bound: SocketAddr, extra_hosts: &[String], token: Option<String>) -> FrontDoor {
        let mut allowed: HashSet<String> = ["localhost", "127.0.0.1", "[::1]"]
            .into_iter()
            .map(str::to_string)
            .collect();
        if !bound.ip().is_unspecified() {
            allowed.insert(host_of_ip(bound.ip()));
        }
        for h in extra_hosts {
            allowed.insert(normalize_host(h));
        }
        if token.is_some() {
            allowed.extend(interface_addresses().into_iter().map(host_of_ip));
        }
        FrontDoor {
            allowed_hosts: allowed,
            token: token.map(|t| AccessToken::new(&t)),
            failures: FailureLimiter::new(FAILURES_PER_WINDOW, FAILURE_WINDOW),
        }
    }

    /// The loopback default: no token, loopback names and the bound address only.
    pub fn loopback(bound: SocketAddr) -> FrontDoor {
        FrontDoor::new(bound, &[], None)
    }

    pub fn token(&self) -> Option<&AccessToken> {
        self.token.as_ref()
    }

    /// DNS rebinding: the request's `Host` (an authority, `name[:port]`) names this server.
    pub fn host_allowed(&self, host: &str) -> bool {
        match split_authority(host) {
            Some((name, _)) => self.allowed_hosts.contains(&name),
            None => false,
        }
    }
}

/// `name[:port]` → (lower-case name, port). IPv6 names keep their brackets.
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let authority: http::uri::Authority = authority.trim().parse().ok()?;
    if authority.as_str().contains('@') {
        return None;
    }
    Some((authority.host().to_ascii_lowercase(), authority.port_u16()))
}

fn normalize_host(h: &str) -> String {
    split_authority(h)
        .map(|(name, _)| name)
        .unwrap_or_else(|| h.trim().to_ascii_lowercase())
}

fn host_of_ip(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

fn interface_addresses() -> Vec<IpAddr> {
    if_addrs::get_if_addrs()
        .map(|list| list.into_iter().map(|i| i.ip()).collect())
        .unwrap_or_default()
}

/// CSRF and cross-site WebSocket: a request may change state only when it comes from this
/// very origin. `origin` is the `Origin` header (if any), `fetch_site` the `Sec-Fetch-Site`
/// header (if any), `host` the request's `Host`. Clients that send neither (curl, agents) are
/// not browsers and pass; the access token (if configured) still applies to them.
pub fn same_origin(origin: Option<&str>, fetch_site: Option<&str>, host: &str) -> bool {
    if let Some(origin) = origin {
        let Ok(uri) = origin.trim().parse::<http::Uri>() else {
            return false;
        };
        let scheme_ok = matches!(uri.scheme_str(), Some("http") | Some("https"));
        let path_ok = matches!(uri.path(), "" | "/");
        return scheme_ok
            && path_ok
            && uri
                .authority()
                .is_some_and(|a| a.as_str().eq_ignore_ascii_case(host.trim()));
    }
    match fetch_site {
        None => true,
        Some(site) => matches!(site.trim(), "same-origin" | "none"),
    }
}

/// The configured access token, kept only as digests: the bearer is compared by its SHA-256,
/// the cookie holds a second, domain-separated digest (so the cookie is not the token itself).
pub struct AccessToken {
    token_digest: [u8; 32],
    cookie_value: String,
}

impl AccessToken {
    pub fn new(token: &str) -> AccessToken {
        let cookie = Sha256::digest(format!("turnstile-cookie-v1:{token}").as_bytes());
        AccessToken {
            token_digest: Sha256::digest(token.as_bytes()).into(),
            cookie_value: format!("{cookie:x}"),
        }
    }

    /// Constant-time: compares digests, so neither length nor content leaks through timing.
    pub fn matches_token(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        bool::from(digest.ct_eq(&self.token_digest))
    }

    pub fn matches_cookie(&self, presented: &str) -> bool {
        let a = Sha256::digest(presented.as_bytes());
        let b = Sha256::digest(self.cookie_value.as_bytes());
        bool::from(a.ct_eq(&b))
    }

    /// What the login sets in [`AUTH_COOKIE`].
    pub fn cookie_value(&self) -> &str {
        &self.cookie_value
    }
}

/// A fresh random token for a server bound beyond loopback without one (printed once).
pub fn generate_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v.trim())
    })
}

const FAILURES_PER_WINDOW: u32 = 10;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Bounds the limiter's memory: beyond this many tracked addresses the oldest windows go.
const MAX_TRACKED: usize = 4096;

/// Rate-limits failed token attempts per client address: after `limit` failures within
/// `window`, every attempt from that address is refused until the window passes. Successful
/// requests cost nothing (every API call carries the token). Hand-written (see
/// docs/decisions/0008-the-front-door.md): rate-limit crates count every request, not failures.
pub struct FailureLimiter {
    limit: u32,
    window: Duration,
    seen: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl FailureLimiter {
    pub fn new(limit: u32, window: Duration) -> FailureLimiter {
        FailureLimiter {
            limit,
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// True while `ip` has used up its failures for the current window.
    pub fn is_blocked(&self, ip: IpAddr, now: Instant) -> bool {
        let seen = self.seen.lock().expect("limiter lock");
        seen.get(&ip)
            .is_some_and(|(start, n)| now.duration_since(*start) < self.window && *n >= self.limit)
    }

    pub fn record_failure(&self, ip: IpAddr, now: Instant) {
        let mut seen = self.seen.lock().expect("limiter lock");
        if seen.len() >= MAX_TRACKED && !seen.contains_key(&ip) {
            let window = self.window;
            seen.retain(|_, (start, _)| now.duration_since(*start) < window);
            if seen.len() >= MAX_TRACKED {
                seen.clear();
            }
        }
        let entry = seen.entry(ip).or_insert((now, 0));
        if now.duration_since(entry.0) >= self.window {
            *entry = (now, 0);
        }
        entry.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn door() -> FrontDoor {
        FrontDoor::new(
            "127.0.0.1:3000".parse().unwrap(),
            &["turnstile.example:443".into()],
            None,
        )
    }

    #[test]
    fn only_our_own_host_names_pass() {
        let d = door();
        for ok in [
            "localhost:3000",
            "LOCALHOST",
            "127.0.0.1:3000",
            "[::1]:3000",
            "turnstile.example",
        ] {
            assert!(d.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example:3000",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "",
            "user@localhost",
            "local host",
        ] {
            assert!(!d.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn the_bound_address_is_admitted_but_unspecified_is_not() {
        let d = FrontDoor::loopback("192.168.1.20:3000".parse().unwrap());
        assert!(d.host_allowed("192.168.1.20:3000"));
        let any = FrontDoor::loopback("0.0.0.0:3000".parse().unwrap());
        assert!(!any.host_allowed("0.0.0.0:3000"));
    }

    #[test]
    fn same_origin_means_scheme_and_authority_of_this_host() {
        assert!(same_origin(
            Some("http://localhost:3000"),
            None,
            "localhost:3000"
        ));
        assert!(same_origin(
            Some("https://LOCALHOST:3000"),
            None,
            "localhost:3000"
        ));
        assert!(!same_origin(
            Some("http://evil.example"),
            None,
            "localhost:3000"
        ));
        assert!(!same_origin(
            Some("http://localhost:3001"),
            None,
            "localhost:3000"
        ));
        assert!(!same_origin(Some("null"), None, "localhost:3000"));
        assert!(!same_origin(Some("file://x"), None, "localhost:3000"));
        // No Origin: browsers still say where the request came from.
        assert!(!same_origin(None, Some("cross-site"), "localhost:3000"));
        assert!(!same_origin(None, Some("same-site"), "localhost:3000"));
        assert!(same_origin(None, Some("same-origin"), "localhost:3000"));
        assert!(same_origin(None, Some("none"), "localhost:3000"));
        // Not a browser at all (curl, agents).
        assert!(same_origin(None, None, "localhost:3000"));
    }

    #[test]
    fn tokens_and_cookies_compare_by_digest() {
        let t = AccessToken::new("s3cret");
        assert!(t.matches_token("s3cret"));
        assert!(!t.matches_token("s3cre"));
        assert!(!t.matches_token(""));
        assert!(t.matches_cookie(t.cookie_value()));
        assert!(!t.matches_cookie("s3cret"), "the cookie is not the token");
        assert_ne!(t.cookie_value(), "s3cret");
    }

    #[test]
    fn cookies_are_found_by_name() {
        let h = "a=1; turnstile_auth=abc ; b=2";
        assert_eq!(cookie(h, AUTH_COOKIE), Some("abc"));
        assert_eq!(cookie(h, "c"), None);
    }

    #[test]
    fn failures_block_an_address_for_the_rest_of_the_window() {
        let l = FailureLimiter::new(3, Duration::from_secs(60));
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        let other: IpAddr = "10.0.0.8".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(!l.is_blocked(ip, t0));
            l.record_failure(ip, t0);
        }
        assert!(l.is_blocked(ip, t0 + Duration::from_secs(59)));
        assert!(!l.is_blocked(other, t0));
        assert!(!l.is_blocked(ip, t0 + Duration::from_secs(61)));
    }
}
