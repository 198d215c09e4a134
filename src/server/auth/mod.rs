//! The front door's rules (spec "Server process"), as plain functions the HTTP layers in
//! `api::front_door` call: which `Host` names are ours (DNS rebinding), which `Origin` is the
//! same origin (CSRF, cross-site WebSocket), and the access token every client needs, on
//! loopback too (bearer for API clients, an HttpOnly cookie for browsers; `token.rs`), with its
//! failure budget (`limiter.rs`).
//!
//! Nothing here logs a token or a cookie value.

mod limiter;
mod token;

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

pub use limiter::{
    Attempt, FAILURE_WINDOW, FAILURES_IN_ALL, FAILURES_PER_CLIENT, FailureLimiter, Refused,
    client_key, is_local,
};
pub use token::{
    AccessToken, LOGIN_CODE_LIFETIME, LoginCodes, MIN_TOKEN_CHARS, TokenSource, generate_token,
    resolve_token,
};

/// The browser cookie that carries a login (HttpOnly, SameSite=Strict).
pub const AUTH_COOKIE: &str = "turnstile_auth";

/// Logins and their end (`POST /logout`): a cookie signed by the token names a login, which is
/// live until it is revoked for every server of the database.
#[derive(Clone)]
pub struct Logins {
    repo: std::sync::Arc<dyn crate::server::repo::Repository>,
    clock: crate::server::time::Clock,
}

/// How long a login lasts (its cookie's `Max-Age`); a revocation is kept as long.
pub const LOGIN_LIFETIME: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

impl Logins {
    pub fn of(state: &crate::server::state::AppState) -> Logins {
        Logins {
            repo: state.repo.clone(),
            clock: state.clock.clone(),
        }
    }

    /// The login a cookie `value` names, when `token` signed it and it was not ended.
    pub async fn live<'a>(
        &self,
        token: &AccessToken,
        value: &'a str,
    ) -> Result<Option<&'a str>, crate::server::repo::RepoError> {
        let Some(id) = token.login_of_cookie(value) else {
            return Ok(None);
        };
        Ok((!self.repo.login_revoked(id).await?).then_some(id))
    }

    /// Ends login `id` on every server of this database.
    pub async fn end(&self, id: &str) -> Result<(), crate::server::repo::RepoError> {
        let now = self.clock.now();
        let forget_before = now - LOGIN_LIFETIME.as_micros() as i64;
        self.repo.revoke_login(id, now, forget_before).await
    }
}

/// A request extension: this request passed the access-token check (or the server is an open
/// loopback one). Server functions refuse to run without it (`api::state`).
#[derive(Clone, Copy, Debug)]
pub struct Authenticated;

/// Everything the front door needs to decide about a request.
pub struct FrontDoor {
    allowed_hosts: HashSet<String>,
    token: Option<AccessToken>,
    /// Sets `Secure` on the login cookie (a TLS proxy in front: `--cookie-secure`).
    pub cookie_secure: bool,
    pub failures: FailureLimiter,
    pub login_codes: LoginCodes,
}

impl FrontDoor {
    /// `bound` is the listening address; `extra_hosts` come from `--allowed-host`. `token` is
    /// `None` only for a loopback server started with `--no-token-on-loopback`. With a token,
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
            cookie_secure: false,
            failures: FailureLimiter::standard(),
            login_codes: LoginCodes::default(),
        }
    }

    /// Open loopback access (`--no-token-on-loopback`): loopback names and the bound address.
    pub fn open_loopback(bound: SocketAddr) -> FrontDoor {
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

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v.trim())
    })
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
        let d = FrontDoor::open_loopback("192.168.1.20:3000".parse().unwrap());
        assert!(d.host_allowed("192.168.1.20:3000"));
        let any = FrontDoor::open_loopback("0.0.0.0:3000".parse().unwrap());
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
    fn cookies_are_found_by_name() {
        let h = "a=1; turnstile_auth=abc ; b=2";
        assert_eq!(cookie(h, AUTH_COOKIE), Some("abc"));
        assert_eq!(cookie(h, "c"), None);
    }
}
