//! `/login`: the page a browser sees when the server has an access token (spec "Server
//! process"). Plain HTML, no script: it works before any wasm loads. A right token sets an
//! HttpOnly, SameSite=Strict cookie holding a digest of the token (never the token) and goes on
//! to `next`; wrong tokens count against the address's failure budget.

use std::sync::Arc;
use std::time::Instant;

use axum::Form;
use axum::extract::{FromRequest, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::front_door::{client_ip, too_many_failures};
use crate::server::auth::{AUTH_COOKIE, FrontDoor};

/// A login lasts 30 days.
const COOKIE_MAX_AGE: u64 = 30 * 24 * 3600;

#[derive(Deserialize)]
pub struct Next {
    #[serde(default)]
    next: Option<String>,
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: Option<String>,
}

/// Only a path on this server: never `//host` or `/\host` (an open redirect).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.starts_with("/\\")
                && !n.chars().any(char::is_control) =>
        {
            n.to_string()
        }
        _ => "/".into(),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn page(next: &str, error: Option<&str>) -> String {
    let error = error
        .map(|e| format!(r#"<p class="error" role="alert">{}</p>"#, escape(e)))
        .unwrap_or_default();
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8" />
<meta name="viewport" content="width=device-width, initial-scale=1" />
<title>Log in · Turnstile</title>
<link rel="icon" href="/favicon.svg" type="image/svg+xml" />
<link rel="stylesheet" href="/pkg/turnstile.css" />
</head>
<body class="login">
<main class="login-card">
<h1 class="brand">Turnstile</h1>
<p>This server needs its access token. It was printed when the server started, or set with <code>--access-token</code>.</p>
<form method="post" action="/login">
<input type="hidden" name="next" value="{next}" />
<label for="token">Access token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus data-testid="login-token" />
<button type="submit" data-testid="login-submit">Log in</button>
</form>
{error}
</main>
</body>
</html>"#,
        next = escape(next),
    )
}

fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, Html(body)).into_response();
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    r
}

pub async fn show(Query(q): Query<Next>) -> Response {
    html(StatusCode::OK, page(&safe_next(q.next.as_deref()), None))
}

pub async fn submit(State(door): State<Arc<FrontDoor>>, req: Request) -> Response {
    let ip = client_ip(&req);
    let now = Instant::now();
    let Form(form) = match Form::<LoginForm>::from_request(req, &()).await {
        Ok(f) => f,
        Err(_) => {
            return html(
                StatusCode::BAD_REQUEST,
                page("/", Some("Send the login form.")),
            );
        }
    };
    let next = safe_next(form.next.as_deref());
    let Some(token) = door.token() else {
        return axum::response::Redirect::to(&next).into_response();
    };
    if door.failures.is_blocked(ip, now) {
        return too_many_failures();
    }
    if !token.matches_token(form.token.trim()) {
        door.failures.record_failure(ip, now);
        return html(
            StatusCode::UNAUTHORIZED,
            page(&next, Some("That is not this server's access token.")),
        );
    }
    let cookie = format!(
        "{AUTH_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={COOKIE_MAX_AGE}",
        token.cookie_value()
    );
    let mut r = axum::response::Redirect::to(&next).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_server() {
        assert_eq!(safe_next(Some("/t/abc?session=x")), "/t/abc?session=x");
        for bad in [
            "//evil.example",
            "/\\evil.example",
            "https://evil.example",
            "",
            "x",
        ] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad}");
        }
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn the_page_escapes_what_it_echoes() {
        let p = page("/\"><script>alert(1)</script>", Some("<b>"));
        assert!(!p.contains("<script>alert"));
        assert!(!p.contains("<b>"));
    }
}
