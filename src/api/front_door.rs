//! The front door: tower layers every request passes before any route (spec "Server process").
//! Any web page the user opens can reach this server, loopback included, so:
//! - `Host` must name this server (DNS rebinding) → 403;
//! - state-changing requests, server functions and the `/ws` upgrade must come from this very
//!   origin (CSRF, cross-site WebSocket) → 403;
//! - server functions take only JSON or form bodies (a `text/plain` body needs no CORS
//!   preflight) → 415;
//! - every request but the login page, health, static files and `/mcp` needs the access token,
//!   on loopback too: API calls get 401, pages redirect to `/login`; too many wrong tokens from
//!   one client, or from all of them, → 429;
//! - every response carries `frame-ancestors 'none'` and friends; pages add a nonce CSP.
//!
//! The decisions are in `server::auth`; this file only reads headers and answers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::api::ApiError;
use crate::model::AppError;
use crate::server::auth::{AUTH_COOKIE, Authenticated, FrontDoor, Logins, cookie, same_origin};

/// The CSP for every response that does not set its own (pages set a nonce-based one).
pub const BASE_CSP: &str =
    "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The CSP of rendered pages: scripts only from this origin or with this response's nonce
/// (Leptos puts it on its hydration scripts), wasm compilation allowed, never framed.
pub fn page_csp(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
         object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The request's authority: the `Host` header (HTTP/1.1) or the URI's (HTTP/2).
fn request_host(req: &Request) -> Option<String> {
    header_str(req.headers(), header::HOST)
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
}

fn refuse(status: StatusCode, error: AppError) -> Response {
    let mut r = ApiError(error).into_response();
    *r.status_mut() = status;
    r
}

/// DNS rebinding: a page whose name resolves to 127.0.0.1 still sends its own name as `Host`.
pub async fn check_host(State(door): State<Arc<FrontDoor>>, req: Request, next: Next) -> Response {
    match request_host(&req) {
        Some(host) if door.host_allowed(&host) => next.run(req).await,
        _ => refuse(
            StatusCode::FORBIDDEN,
            AppError::Forbidden(
                "this server does not answer to that host name (add it with --allowed-host)".into(),
            ),
        ),
    }
}

fn is_websocket_upgrade(req: &Request) -> bool {
    header_str(req.headers(), header::UPGRADE).is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
}

fn is_server_fn(req: &Request) -> bool {
    req.uri().path().starts_with("/api/fn/")
}

/// CSRF and cross-site WebSocket: only this origin may change state, call a server function
/// or open the socket. Reads are harmless to forge (the browser keeps their answers from a
/// foreign page).
pub async fn check_origin(req: Request, next: Next) -> Response {
    let changes_state = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changes_state || is_server_fn(&req) || is_websocket_upgrade(&req) {
        let headers = req.headers();
        let host = request_host(&req).unwrap_or_default();
        let origin = header_str(headers, header::ORIGIN);
        let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
        if !same_origin(origin, site, &host) {
            return refuse(
                StatusCode::FORBIDDEN,
                AppError::Forbidden("cross-origin requests may not change anything here".into()),
            );
        }
    }
    next.run(req).await
}

/// Server functions read JSON or form bodies only: `text/plain` (which a foreign page can send
/// without a preflight) and everything else is refused before any work.
pub async fn server_fn_content_type(req: Request, next: Next) -> Response {
    if !is_server_fn(&req) {
        return next.run(req).await;
    }
    let ct = header_str(req.headers(), header::CONTENT_TYPE).unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    let form = essence.eq_ignore_ascii_case("application/x-www-form-urlencoded");
    let ok =
        *req.method() == Method::POST && (essence.eq_ignore_ascii_case("application/json") || form);
    if !ok {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AppError::UnsupportedMediaType(
                "server functions take POST with application/json or \
                 application/x-www-form-urlencoded"
                    .into(),
            ),
        );
    }
    // The body is text: JSON that is not UTF-8, or a form whose values are not once decoded,
    // is refused here — the decoders would skip such bytes in fields nobody reads, or replace
    // them, and write what the client never meant.
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, crate::api::rest::MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                AppError::PayloadTooLarge(format!(
                    "request body exceeds {} bytes",
                    crate::api::rest::MAX_BODY_BYTES
                )),
            );
        }
    };
    if let Err(e) = text_body(&bytes, form) {
        return refuse(StatusCode::BAD_REQUEST, e);
    }
    let response = next
        .run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await;
    with_error_status(response).await
}

/// `Err` unless `body` is UTF-8 text (a form: once its percent-escapes are decoded).
pub fn text_body(body: &[u8], form: bool) -> Result<(), AppError> {
    let not_text = || AppError::BadRequest("the request body is not UTF-8 text".into());
    if !form {
        return std::str::from_utf8(body).map(drop).map_err(|_| not_text());
    }
    // `&` and `=` are ASCII, so the whole decoded body is UTF-8 exactly when every key and
    // value is.
    let hex = |b: u8| (b as char).to_digit(16);
    let mut decoded = Vec::with_capacity(body.len());
    let mut rest = body;
    while let Some((&b, tail)) = rest.split_first() {
        let escaped = match tail {
            [h, l, ..] if b == b'%' => hex(*h).zip(hex(*l)),
            _ => None,
        };
        match escaped {
            Some((h, l)) => {
                decoded.push((h * 16 + l) as u8);
                rest = &tail[2..];
            }
            None => {
                decoded.push(b);
                rest = tail;
            }
        }
    }
    std::str::from_utf8(&decoded)
        .map(drop)
        .map_err(|_| not_text())
}

/// A server function's error answers with its own status (Leptos answers every error with
/// 500): the body is our JSON error, whose code says which.
async fn with_error_status(response: Response) -> Response {
    use leptos::server_fn::error::SERVER_FN_ERROR_HEADER;
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR
        || !response.headers().contains_key(SERVER_FN_ERROR_HEADER)
    {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    if let Ok(e) = serde_json::from_slice::<AppError>(&bytes)
        && let Ok(status) = StatusCode::from_u16(e.status())
    {
        parts.status = status;
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Paths anyone may fetch: the login page, health, the static files (served by a file service
/// that answers a missing file with a plain 404 and never renders the app) and the MCP
/// endpoint (agents authenticate there with their own per-session bearer token).
fn is_public(path: &str) -> bool {
    path == "/login"
        || path == "/healthz"
        || path == "/favicon.svg"
        || path == "/pkg"
        || path.starts_with("/pkg/")
        || path == "/mcp"
        || path.starts_with("/mcp/")
}

/// API clients and the socket get 401; pages redirect to the login page.
fn wants_api_answer(path: &str) -> bool {
    path.starts_with("/api/") || path == "/ws" || path == "/metrics" || path == "/logout"
}

pub fn client_ip(req: &Request) -> IpAddr {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

enum Credential<'a> {
    None,
    Bearer(&'a str),
    Cookie(&'a str),
}

fn credential(headers: &HeaderMap) -> Credential<'_> {
    if let Some(bearer) = header_str(headers, header::AUTHORIZATION)
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
    {
        return Credential::Bearer(bearer);
    }
    match header_str(headers, header::COOKIE).and_then(|c| cookie(c, AUTH_COOKIE)) {
        Some(c) => Credential::Cookie(c),
        None => Credential::None,
    }
}

/// What the token layer reads: the door, and the logins that were ended.
#[derive(Clone)]
pub struct Gate {
    pub door: Arc<FrontDoor>,
    pub logins: Logins,
}

/// Whether `value` is a cookie of a login that was not ended (`Ok(None)`: it is not).
pub async fn live_login<'a>(gate: &Gate, value: &'a str) -> Result<Option<&'a str>, AppError> {
    let Some(token) = gate.door.token() else {
        return Ok(None);
    };
    gate.logins.live(token, value).await.map_err(AppError::from)
}

/// Every request but the public paths needs the access token (a bearer or a login cookie),
/// loopback clients too; only `--no-token-on-loopback` opens a loopback server. A request that
/// passes carries [`Authenticated`], which server functions check again (`api::state`).
pub async fn require_token(State(gate): State<Gate>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if is_public(&path) {
        return next.run(req).await;
    }
    let Some(token) = gate.door.token() else {
        req.extensions_mut().insert(Authenticated);
        return next.run(req).await;
    };
    let presented = credential(req.headers());
    let valid = match presented {
        Credential::None => false,
        _ => {
            let attempt = match gate.door.failures.begin(client_ip(&req), Instant::now()) {
                Ok(attempt) => attempt,
                Err(_) => return too_many_failures(),
            };
            let valid = match presented {
                Credential::Bearer(t) => token.matches_token(t),
                Credential::Cookie(c) => match live_login(&gate, c).await {
                    Ok(login) => login.is_some(),
                    Err(e) => {
                        attempt.succeeded();
                        return ApiError(e).into_response();
                    }
                },
                Credential::None => false,
            };
            if valid {
                attempt.succeeded();
            }
            valid
        }
    };
    if valid {
        req.extensions_mut().insert(Authenticated);
        return next.run(req).await;
    }
    if wants_api_answer(&path) || *req.method() != Method::GET {
        return refuse(
            StatusCode::UNAUTHORIZED,
            AppError::Unauthorized(
                "this server needs its access token (Authorization: Bearer <token>, or log in)"
                    .into(),
            ),
        );
    }
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let query = serde_urlencoded::to_string([("next", target.as_str())]).unwrap_or_default();
    Redirect::to(&format!("/login?{query}")).into_response()
}

pub fn too_many_failures() -> Response {
    refuse(
        StatusCode::TOO_MANY_REQUESTS,
        AppError::TooManyRequests(
            "too many wrong access tokens from this address; wait a minute".into(),
        ),
    )
}

/// Adds the default CSP when a response has none of its own.
pub async fn default_csp(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    response
        .headers_mut()
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(BASE_CSP));
    response
}

/// Bodies larger than this are refused (413). A body whose declared length is over the limit
/// is read and thrown away up to [`DRAIN_BYTES`] first, so the client is not cut off while it
/// sends and gets the error instead of a broken pipe; bodies without a declared length are
/// cut at the limit by `RequestBodyLimitLayer`.
pub async fn refuse_oversized_bodies(req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(len) = declared.filter(|n| *n > crate::api::rest::MAX_BODY_BYTES as u64) else {
        return next.run(req).await;
    };
    if len <= DRAIN_BYTES {
        let _ = axum::body::to_bytes(req.into_body(), DRAIN_BYTES as usize).await;
    }
    refuse(
        StatusCode::PAYLOAD_TOO_LARGE,
        AppError::PayloadTooLarge(format!(
            "request body of {len} bytes exceeds {} bytes",
            crate::api::rest::MAX_BODY_BYTES
        )),
    )
}

/// The most an oversized body is read to answer it cleanly.
const DRAIN_BYTES: u64 = 8 << 20;

#[cfg(test)]
mod tests {
    use super::text_body;

    #[test]
    fn bodies_must_be_utf8_text_forms_once_decoded() {
        assert!(text_body(r#"{"title": "caf\u00e9", "x": "é"}"#.as_bytes(), false).is_ok());
        assert!(text_body(b"{\"junk\": \"\xff\xfe\"}", false).is_err());
        assert!(text_body(b"title=caf%C3%A9&prompt=a+b%20c", true).is_ok());
        assert!(
            text_body(b"title=%FF%FE&prompt=", true).is_err(),
            "escaped bytes"
        );
        assert!(text_body(b"title=\xff", true).is_err(), "raw bytes");
        // A `%` that escapes nothing stays a `%` (as the decoders read it).
        assert!(text_body(b"title=100%&x=%4", true).is_ok());
        assert!(text_body(b"title=%zz", true).is_ok());
    }
}
