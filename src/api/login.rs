//! `/login` and `/logout` (spec "Server process"). The login page is plain HTML, no script: it
//! works before any wasm loads. The access token, or a one-time code from the login URL the
//! server prints at start-up (`/login?token=<code>`), opens a login: an HttpOnly,
//! SameSite=Strict cookie naming the login, signed with a key derived from the token (never
//! the token itself); the browser then goes on without the code in its address bar. Wrong
//! tokens and codes count against the failure budget. `POST /logout` ends the cookie's login on
//! every server of this database.

use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{FromRequest, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::front_door::{Gate, client_ip, live_login, too_many_failures};
use crate::server::auth::{AUTH_COOKIE, FrontDoor, cookie};

use crate::server::auth::LOGIN_LIFETIME as COOKIE_MAX_AGE;

#[derive(Deserialize)]
pub struct Next {
    #[serde(default)]
    next: Option<String>,
    /// A one-time login code (the start-up URL).
    #[serde(default)]
    token: Option<String>,
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
<p>This server needs its access token: open the login link the server printed when it started, or paste the token from the file <code>access-token</code> in its data directory (or the <code>ACCESS_TOKEN</code> it was started with).</p>
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

fn login_cookie(door: &FrontDoor, value: &str, max_age: Duration) -> Option<HeaderValue> {
    let secure = if door.cookie_secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{AUTH_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        max_age.as_secs()
    ))
    .ok()
}

/// A new login for this browser, then on to `next`.
fn logged_in(door: &FrontDoor, next: &str) -> Response {
    let Some(token) = door.token() else {
        return Redirect::to(next).into_response();
    };
    let mut r = Redirect::to(next).into_response();
    if let Some(v) = login_cookie(door, &token.new_login_cookie(), COOKIE_MAX_AGE) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

pub async fn show(State(gate): State<Gate>, req: Request) -> Response {
    let Query(q) = match Query::<Next>::try_from_uri(req.uri()) {
        Ok(q) => q,
        Err(_) => return html(StatusCode::BAD_REQUEST, page("/", Some("Bad login link."))),
    };
    let next = safe_next(q.next.as_deref());
    let Some(code) = q.token else {
        return html(StatusCode::OK, page(&next, None));
    };
    let door = &gate.door;
    let Ok(attempt) = door.failures.begin(client_ip(&req), Instant::now()) else {
        return too_many_failures();
    };
    if !door.login_codes.redeem(code.trim(), Instant::now()) {
        return html(
            StatusCode::UNAUTHORIZED,
            page(
                &next,
                Some("That login link was used already or has expired: log in with the token."),
            ),
        );
    }
    attempt.succeeded();
    logged_in(door, &next)
}

pub async fn submit(State(gate): State<Gate>, req: Request) -> Response {
    let ip = client_ip(&req);
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
    let door = &gate.door;
    let Some(token) = door.token() else {
        return Redirect::to(&next).into_response();
    };
    let Ok(attempt) = door.failures.begin(ip, Instant::now()) else {
        return too_many_failures();
    };
    if !token.matches_token(form.token.trim()) {
        return html(
            StatusCode::UNAUTHORIZED,
            page(&next, Some("That is not this server's access token.")),
        );
    }
    attempt.succeeded();
    logged_in(door, &next)
}

/// Ends this browser's login: its cookie is refused from now on, on every server of this
/// database, and the browser forgets it. (Behind the token layer: only a live login gets here.)
pub async fn logout(State(gate): State<Gate>, req: Request) -> Response {
    let value = req
        .headers()
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|c| cookie(c, AUTH_COOKIE))
        .map(str::to_string);
    if let Some(value) = value
        && let Ok(Some(login)) = live_login(&gate, &value).await
        && let Err(e) = gate.logins.end(login).await
    {
        return super::ApiError(crate::model::AppError::from(e)).into_response();
    }
    let mut r = Redirect::to("/login").into_response();
    if let Some(v) = login_cookie(&gate.door, "", Duration::ZERO) {
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
