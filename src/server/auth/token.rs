//! The access token every client needs (spec "Server process"), and what is derived from it:
//! the login cookie, one-time login codes, and the token file a server generates on first start.
//!
//! The token is kept only as digests. A login cookie is `<login id>.<MAC of the id>` under a key
//! derived from the token, so it never holds the token, every server started with the same
//! token accepts it, a logout can end one login (its id is revoked), and a new token ends
//! every login at once. Nothing here logs a token, a code or a cookie value.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The shortest access token accepted from the environment or a file.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The configured access token, kept only as digests.
pub struct AccessToken {
    token_digest: [u8; 32],
    cookie_key: [u8; 32],
}

impl AccessToken {
    pub fn new(token: &str) -> AccessToken {
        AccessToken {
            token_digest: Sha256::digest(token.as_bytes()).into(),
            cookie_key: Sha256::digest(format!("turnstile-cookie-v2:{token}").as_bytes()).into(),
        }
    }

    /// Constant-time: compares digests, so neither length nor content leaks through timing.
    pub fn matches_token(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        bool::from(digest.ct_eq(&self.token_digest))
    }

    fn mac(&self, login_id: &str) -> [u8; 32] {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.cookie_key).expect("HMAC takes any key length");
        mac.update(login_id.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// A new login: the value of [`super::AUTH_COOKIE`].
    pub fn new_login_cookie(&self) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        format!("{id}.{}", hex(&self.mac(&id)))
    }

    /// The login id of a cookie value this token signed (`None`: forged, or from another token).
    pub fn login_of_cookie<'a>(&self, value: &'a str) -> Option<&'a str> {
        let (id, mac) = value.split_once('.')?;
        if id.is_empty() || id.len() > 64 {
            return None;
        }
        let expected = hex(&self.mac(id));
        bool::from(expected.as_bytes().ct_eq(mac.as_bytes())).then_some(id)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh random token (two UUIDv4s: 244 random bits).
pub fn generate_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Where the token came from, for the start-up line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenSource {
    Environment,
    File,
    Generated,
}

/// The token to use: `ACCESS_TOKEN` (`from_env`), else `--access-token-file`, else
/// `<data-dir>/access-token`, generated with mode 0600 on first start and reused after. A
/// token shorter than [`MIN_TOKEN_CHARS`] is refused; a file others can read is refused too.
pub fn resolve_token(
    from_env: Option<&str>,
    file: Option<&Path>,
    data_dir: &Path,
) -> Result<(String, TokenSource), String> {
    let checked = |t: &str, what: &str| {
        let t = t.trim();
        if t.chars().count() < MIN_TOKEN_CHARS {
            return Err(format!(
                "the access token from {what} must be at least {MIN_TOKEN_CHARS} characters"
            ));
        }
        Ok(t.to_string())
    };
    if let Some(t) = from_env {
        return Ok((checked(t, "ACCESS_TOKEN")?, TokenSource::Environment));
    }
    if let Some(path) = file {
        let t = read_private(path)?;
        return Ok((checked(&t, &path.display().to_string())?, TokenSource::File));
    }
    let path = data_dir.join("access-token");
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => {
            let t = generate_token();
            f.write_all(t.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok((t, TokenSource::Generated))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let t = read_private(&path)?;
            Ok((checked(&t, &path.display().to_string())?, TokenSource::File))
        }
        Err(e) => Err(format!("cannot create {}: {e}", path.display())),
    }
}

/// The contents of a token file that only its owner can read.
fn read_private(path: &Path) -> Result<String, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{} can be read by other users; make it private first: chmod 600 {}",
            path.display(),
            path.display()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// How long a one-time login code lasts.
pub const LOGIN_CODE_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Unused login codes kept at once (the oldest goes first).
const MAX_LOGIN_CODES: usize = 8;

/// One-time login codes (`/login?token=<code>`): each opens one login, once, within
/// [`LOGIN_CODE_LIFETIME`]. Kept as digests, in memory (a restart prints a new one).
#[derive(Default)]
pub struct LoginCodes {
    live: Mutex<Vec<([u8; 32], Instant)>>,
}

impl LoginCodes {
    pub fn mint(&self, now: Instant) -> String {
        let code = generate_token();
        let mut live = self.live.lock().expect("login codes lock");
        live.retain(|(_, expires)| *expires > now);
        if live.len() >= MAX_LOGIN_CODES {
            live.remove(0);
        }
        live.push((
            Sha256::digest(code.as_bytes()).into(),
            now + LOGIN_CODE_LIFETIME,
        ));
        code
    }

    /// True once for a live code; the code is gone after.
    pub fn redeem(&self, code: &str, now: Instant) -> bool {
        let digest: [u8; 32] = Sha256::digest(code.as_bytes()).into();
        let mut live = self.live.lock().expect("login codes lock");
        live.retain(|(_, expires)| *expires > now);
        match live.iter().position(|(d, _)| bool::from(d.ct_eq(&digest))) {
            Some(i) => {
                live.remove(i);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_by_digest() {
        let t = AccessToken::new("s3cret-s3cret-s3cret");
        assert!(t.matches_token("s3cret-s3cret-s3cret"));
        assert!(!t.matches_token("s3cret-s3cret-s3cre"));
        assert!(!t.matches_token(""));
    }

    #[test]
    fn cookies_hold_a_signed_login_id_never_the_token() {
        let t = AccessToken::new("s3cret-s3cret-s3cret");
        let a = t.new_login_cookie();
        let b = t.new_login_cookie();
        assert_ne!(a, b, "each login is its own");
        assert!(!a.contains("s3cret"));
        let id = t.login_of_cookie(&a).expect("signed by this token");
        assert!(a.starts_with(id));
        // Forged, tampered, or signed by another token.
        let (id_a, mac_a) = a.split_once('.').unwrap();
        let (id_b, _) = b.split_once('.').unwrap();
        assert_eq!(t.login_of_cookie(&format!("{id_b}.{mac_a}")), None);
        assert_eq!(t.login_of_cookie(id_a), None);
        assert_eq!(t.login_of_cookie(""), None);
        assert_eq!(t.login_of_cookie("s3cret-s3cret-s3cret"), None);
        let other = AccessToken::new("another-token-entirely");
        assert_eq!(
            other.login_of_cookie(&a),
            None,
            "a new token ends every login"
        );
    }

    #[test]
    fn a_login_code_works_once_and_not_after_its_lifetime() {
        let codes = LoginCodes::default();
        let t0 = Instant::now();
        let code = codes.mint(t0);
        assert!(!codes.redeem("not-a-code", t0));
        assert!(codes.redeem(&code, t0));
        assert!(!codes.redeem(&code, t0), "one time");
        let late = codes.mint(t0);
        assert!(!codes.redeem(&late, t0 + LOGIN_CODE_LIFETIME));
    }

    #[test]
    fn the_token_file_is_generated_private_and_reused() {
        let dir = std::env::temp_dir().join(format!("turnstile-token-{}", generate_token()));
        std::fs::create_dir_all(&dir).unwrap();
        let (t, source) = resolve_token(None, None, &dir).unwrap();
        assert_eq!(source, TokenSource::Generated);
        let file = dir.join("access-token");
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            resolve_token(None, None, &dir).unwrap(),
            (t.clone(), TokenSource::File)
        );
        // The environment wins; short tokens and readable files are refused.
        let env = "from-the-environment-0123";
        assert_eq!(
            resolve_token(Some(env), Some(&file), &dir).unwrap(),
            (env.to_string(), TokenSource::Environment)
        );
        assert!(resolve_token(Some("short"), None, &dir).is_err());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = resolve_token(None, Some(&file), &dir).unwrap_err();
        assert!(err.contains("chmod 600"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
