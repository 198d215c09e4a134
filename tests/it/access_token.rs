//! The access token (spec "Server process"): every client needs it, on loopback too — API
//! clients send a bearer, browsers log in once (the token, or the one-time link the server
//! prints) and carry an HttpOnly, SameSite=Strict cookie; the socket needs it too; no path
//! (static files, missing files, encoded traversal) renders application data without it;
//! logout and a new token end logins; wrong tokens are limited per client and in all; agents
//! keep their own per-session MCP tokens.

use crate::support;

use std::net::IpAddr;

use reqwest::StatusCode;
use reqwest::redirect::Policy;
use serde_json::{Value, json};
use support::{Access, Api, BinaryServer, TestServer, table_counts, ws_handshake};

const TOKEN: &str = "lan-token-0123456789abcdef";

both_http!(
    loopback_clients_need_the_token_too,
    lan_clients_need_the_token,
    no_path_shows_application_data_without_the_token,
    the_login_page_sets_a_strict_http_only_cookie,
    logout_ends_the_login_everywhere,
    a_new_token_ends_every_login,
    wrong_tokens_are_rate_limited,
    a_lockout_survives_thousands_of_other_addresses,
    agents_keep_working_behind_the_token,
    the_binary_makes_a_private_token_and_logs_a_one_time_login_link,
    the_token_never_comes_from_the_command_line,
    the_login_cookie_is_secure_behind_a_tls_proxy,
);

/// A client without credentials that shows redirects instead of following them.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

async fn lan(url: &str) -> TestServer {
    TestServer::start_configured(url, "0.0.0.0:0", Access::Token(TOKEN), |_| {}).await
}

async fn loopback(url: &str) -> TestServer {
    TestServer::start_configured(url, "127.0.0.1:0", Access::Token(TOKEN), |_| {}).await
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Without credentials: API → 401 (JSON), pages → the login page, the socket → 401, nothing
/// written; health, the login page and static files stay public.
async fn refuses_strangers(server: &TestServer, url: &str) {
    let c = client();
    let before = table_counts(url).await;
    let r = c.get(server.url("/api/v1/tasks")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let r = c
        .post(server.url("/api/v1/tasks"))
        .json(&json!({ "title": "sneaky" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = c.get(server.url("/t/x?session=y")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        r.headers()["location"],
        "/login?next=%2Ft%2Fx%3Fsession%3Dy"
    );
    assert_eq!(ws_handshake(&server.base, &[]).await, Err(401));
    assert_eq!(table_counts(url).await, before, "nothing was written");
    for path in ["/healthz", "/login", "/pkg/turnstile.css", "/favicon.svg"] {
        let r = c.get(server.url(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
}

async fn loopback_clients_need_the_token_too(url: String) {
    let server = loopback(&url).await;
    refuses_strangers(&server, &url).await;
    let r = client()
        .get(server.url("/api/v1/tasks"))
        .header("authorization", bearer(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    server.stop().await;

    // Only `--no-token-on-loopback` opens it.
    let open =
        TestServer::start_configured(&url, "127.0.0.1:0", Access::OpenLoopback, |_| {}).await;
    let r = client()
        .get(open.url("/api/v1/tasks"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    open.stop().await;
}

async fn lan_clients_need_the_token(url: String) {
    let server = lan(&url).await;
    refuses_strangers(&server, &url).await;
    let c = client();
    let r = c
        .post(server.url("/api/v1/tasks"))
        .header("authorization", bearer(TOKEN))
        .json(&json!({ "title": "mine" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        ws_handshake(&server.base, &[("authorization", bearer(TOKEN).as_str())]).await,
        Ok(())
    );
    // Behind the token, the machine's own addresses are names it answers to.
    if let Some(ip) = lan_ip() {
        let port = server.base.rsplit(':').next().unwrap();
        let r = c
            .get(format!("http://{ip}:{port}/api/v1/tasks"))
            .header("authorization", bearer(TOKEN))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "over {ip}");
    }
    server.stop().await;
}

fn lan_ip() -> Option<IpAddr> {
    if_addrs::get_if_addrs()
        .unwrap()
        .into_iter()
        .find(|i| !i.is_loopback() && i.ip().is_ipv4())
        .map(|i| i.ip())
}

/// What an attacker must never read without the token: a task's title, its transcript, an
/// agent profile's command.
const SECRET_TITLE: &str = "Secret-task-title-zq4711";
const SECRET_COMMAND: &str = "/opt/secret-agent-command-zq4711";

/// Whether `body` shows either secret, or part of one. The mark has letters no hexadecimal id
/// (a request id in an error body) can hold.
fn leaks(body: &str) -> bool {
    body.contains("zq4711")
}

/// Every route, page and server function, asked without credentials — plainly and through
/// encoded traversal under `/pkg/` — shows no task, transcript or profile: API and server
/// functions answer 401, pages go to the login page, and static paths answer a plain 404.
async fn no_path_shows_application_data_without_the_token(url: String) {
    for bind in ["127.0.0.1:0", "0.0.0.0:0"] {
        let server = TestServer::start_configured(&url, bind, Access::Token(TOKEN), |_| {}).await;
        let api = Api {
            client: support::client_with_token(TOKEN),
            base: server.base.clone(),
        };
        let (task, session) = api.start_task("/e2e:simple-message").await;
        api.client
            .patch(server.url(&format!("/api/v1/tasks/{task}")))
            .json(&json!({ "title": SECRET_TITLE }))
            .send()
            .await
            .unwrap();
        let (status, _) = api
            .post(
                "/api/v1/agent-profiles",
                json!({ "name": format!("secret {bind}"), "command": SECRET_COMMAND }),
            )
            .await;
        assert_eq!(status, 200);
        api.wait_turns_done(&session, 1).await;
        // With the token the secrets are there to find (so their absence below means
        // something).
        let (_, list) = api.get("/api/v1/tasks").await;
        assert!(leaks(&list.to_string()));

        let mut paths: Vec<(String, String)> = Vec::new();
        let get = || "GET".to_string();
        for page in [
            "/",
            "/settings",
            &format!("/t/{task}"),
            "/t/x",
            "/no/such/page",
        ] {
            paths.push((get(), page.to_string()));
        }
        for route in turnstile::api::route_list() {
            let path: Vec<String> = route
                .path()
                .split('/')
                .map(|seg| {
                    if seg.starts_with(':') || seg.starts_with('{') {
                        task.clone()
                    } else {
                        seg.to_string()
                    }
                })
                .collect();
            paths.push((get(), path.join("/")));
        }
        for rest in [
            "/api/v1/tasks".to_string(),
            format!("/api/v1/tasks/{task}"),
            format!("/api/v1/tasks/{task}/sessions"),
            format!("/api/v1/sessions/{session}/messages"),
            format!("/api/v1/sessions/{session}/turns"),
            "/api/v1/workflows".into(),
            "/api/v1/agent-profiles".into(),
            "/api/v1/nope".into(),
            "/metrics".into(),
        ] {
            paths.push((get(), rest));
        }
        for (path, method) in leptos::server_fn::axum::server_fn_paths() {
            paths.push((method.to_string(), path.to_string()));
        }
        paths.push(("POST".into(), "/api/fn/no_such_fn".into()));
        let targets: Vec<String> = paths.iter().map(|(_, p)| p.clone()).collect();
        for target in &targets {
            let rest = target.trim_start_matches('/');
            for traversal in [
                format!("/pkg/%2e%2e/{rest}"),
                format!("/pkg/..%2f{rest}"),
                format!("/pkg/%2e%2e%2f{rest}"),
                format!("/pkg/../{rest}"),
                format!("/pkg/%2E%2E/%2e%2e/{rest}"),
            ] {
                paths.push((get(), traversal));
            }
            paths.push((get(), format!("/%2e%2e/{rest}")));
        }
        for path in [
            "/pkg/",
            "/pkg",
            "/pkg/nope",
            "/pkg/nope.wasm",
            "/pkg/%2e%2e/",
        ] {
            paths.push((get(), path.to_string()));
        }
        for (method, path) in &paths {
            let (status, body) = support::raw_http(
                &server.base,
                method,
                path,
                &[
                    ("content-type", "application/json"),
                    ("origin", &server.base),
                ],
                "{}",
            )
            .await;
            let status = StatusCode::from_u16(status).unwrap();
            assert!(
                !leaks(&body),
                "{method} {path} ({status}) shows data: {body}"
            );
            assert!(
                !body.contains("data-hydrated") && !body.contains("__RESOLVED_RESOURCES"),
                "{method} {path} ({status}) rendered the app: {body}"
            );
            assert!(
                matches!(status.as_u16(), 401 | 303 | 404),
                "{method} {path}: {status}"
            );
            if path.starts_with("/pkg") {
                assert_eq!(status, StatusCode::NOT_FOUND, "{path}: a plain 404");
                assert!(body.len() < 64, "{path}: a plain 404, not a page: {body}");
            }
        }
        server.stop().await;
    }
}

/// The `turnstile_auth=…` pair a login answer sets.
fn cookie_pair(r: &reqwest::Response) -> String {
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_string()
}

async fn log_in(server: &TestServer, token: &str) -> reqwest::Response {
    client()
        .post(server.url("/login"))
        .header("origin", &server.base)
        .form(&[("token", token), ("next", "/")])
        .send()
        .await
        .unwrap()
}

async fn status_with_cookie(server: &TestServer, pair: &str) -> StatusCode {
    client()
        .get(server.url("/api/v1/tasks"))
        .header("cookie", pair)
        .send()
        .await
        .unwrap()
        .status()
}

async fn the_login_page_sets_a_strict_http_only_cookie(url: String) {
    let server = lan(&url).await;
    let c = client();
    let page = c
        .get(server.url("/login?next=%2Ft%2Fabc"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(r#"data-testid="login-token""#));
    assert!(page.contains(r#"data-testid="login-submit""#));
    assert!(page.contains(r#"value="/t/abc""#));
    let own = server.base.clone();
    let r = c
        .post(server.url("/login"))
        .header("origin", &own)
        .form(&[("token", "wrong-token-wrong-token"), ("next", "/t/abc")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(!r.headers().contains_key("set-cookie"));
    let r = c
        .post(server.url("/login"))
        .header("origin", &own)
        .form(&[("token", TOKEN), ("next", "//evil.example/x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/", "no open redirect");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "not without --cookie-secure");
    assert!(!cookie.contains(TOKEN), "the cookie is not the token");
    let pair = cookie_pair(&r);
    // The cookie opens pages, the API and the socket.
    let r = c
        .get(server.url("/"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(status_with_cookie(&server, &pair).await, StatusCode::OK);
    assert_eq!(
        ws_handshake(&server.base, &[("cookie", pair.as_str())]).await,
        Ok(())
    );
    // A forged cookie does not.
    assert_eq!(
        status_with_cookie(&server, &format!("turnstile_auth={TOKEN}")).await,
        StatusCode::UNAUTHORIZED
    );
    let (id, _) = pair.split_once('.').unwrap();
    assert_eq!(
        status_with_cookie(&server, &format!("{id}.{}", "0".repeat(64))).await,
        StatusCode::UNAUTHORIZED
    );
    server.stop().await;
}

/// `POST /logout` ends this login — on this server, after a restart, and on another server of
/// the same database — and leaves other logins alone.
async fn logout_ends_the_login_everywhere(url: String) {
    let server = lan(&url).await;
    let mine = cookie_pair(&log_in(&server, TOKEN).await);
    let other = cookie_pair(&log_in(&server, TOKEN).await);
    assert_ne!(mine, other);
    // A foreign page cannot log the user out (CSRF).
    let r = client()
        .post(server.url("/logout"))
        .header("cookie", &mine)
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(status_with_cookie(&server, &mine).await, StatusCode::OK);
    let r = client()
        .post(server.url("/logout"))
        .header("cookie", &mine)
        .header("origin", &server.base)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/login");
    let cleared = r.headers()["set-cookie"].to_str().unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    assert_eq!(
        status_with_cookie(&server, &mine).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(status_with_cookie(&server, &other).await, StatusCode::OK);
    let second = lan(&url).await;
    assert_eq!(
        status_with_cookie(&second, &mine).await,
        StatusCode::UNAUTHORIZED,
        "ended on every server of the database"
    );
    assert_eq!(status_with_cookie(&second, &other).await, StatusCode::OK);
    second.stop().await;
    server.stop().await;
}

/// A new token ends every login made with the old one, and the old token itself.
async fn a_new_token_ends_every_login(url: String) {
    let server = lan(&url).await;
    let pair = cookie_pair(&log_in(&server, TOKEN).await);
    assert_eq!(status_with_cookie(&server, &pair).await, StatusCode::OK);
    server.stop().await;
    let rotated = "rotated-token-0123456789abcdef";
    let server =
        TestServer::start_configured(&url, "0.0.0.0:0", Access::Token(rotated), |_| {}).await;
    assert_eq!(
        status_with_cookie(&server, &pair).await,
        StatusCode::UNAUTHORIZED
    );
    let r = client()
        .get(server.url("/api/v1/tasks"))
        .header("authorization", bearer(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let pair = cookie_pair(&log_in(&server, rotated).await);
    assert_eq!(status_with_cookie(&server, &pair).await, StatusCode::OK);
    server.stop().await;
}

async fn wrong_tokens_are_rate_limited(url: String) {
    let server = lan(&url).await;
    let c = client();
    let mut statuses = Vec::new();
    for i in 0..12 {
        let r = c
            .get(server.url("/api/v1/tasks"))
            .header("authorization", format!("Bearer guess-{i}"))
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(&statuses[..10], &[401; 10]);
    assert_eq!(&statuses[10..], &[429, 429], "{statuses:?}");
    // Blocked means blocked: even the right token waits for the window to pass.
    let r = c
        .get(server.url("/api/v1/tasks"))
        .header("authorization", bearer(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_requests");
    // The login form and its one-time links count against the same budget.
    let r = c
        .post(server.url("/login"))
        .header("origin", &server.base)
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    server.stop().await;
}

/// A client bound to `source` (a loopback address of its own: 127.0.0.0/8 is all loopback).
fn client_from(source: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .local_address(source)
        .build()
        .unwrap()
}

/// Locked out is locked out, however many other addresses try wrong tokens meanwhile (the
/// tracker never forgets a lockout to make room), and many addresses together have a budget.
async fn a_lockout_survives_thousands_of_other_addresses(url: String) {
    let server = loopback(&url).await;
    let locked = client_from("127.0.0.2".parse().unwrap());
    let api = server.url("/api/v1/tasks");
    for i in 0..10 {
        let r = locked
            .get(&api)
            .header("authorization", format!("Bearer guess-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
    let mut refused = 0;
    for i in 0..4_100u32 {
        let ip = IpAddr::from([127, 1 + (i >> 16) as u8, (i >> 8) as u8, i as u8]);
        let r = client_from(ip)
            .get(&api)
            .header("authorization", "Bearer guess")
            .send()
            .await
            .unwrap();
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
        } else {
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        }
    }
    assert!(
        refused >= 3_000,
        "all clients together have a budget: {refused}"
    );
    let r = locked
        .get(&api)
        .header("authorization", bearer(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "still locked out"
    );
    server.stop().await;
}

async fn agents_keep_working_behind_the_token(url: String) {
    let server = lan(&url).await;
    let api = Api {
        client: support::client_with_token(TOKEN),
        base: server.base.clone(),
    };
    // The agent reaches /mcp with its own session token, not the access token.
    let (_, session) = api.start_task("/e2e:clarification").await;
    let pending_id = api.pending_id(&session).await;
    let (status, body) = api
        .respond(
            &pending_id,
            json!({ "answers": [{ "question_id": "db", "selected_options": ["sqlite"] }] }),
        )
        .await;
    assert_eq!(
        (status.as_u16(), &body["claimed"]),
        (200, &json!(true)),
        "{body}"
    );
    api.wait_turns_done(&session, 1).await;
    let lines = api.agent_lines(&session).await;
    assert!(
        lines
            .iter()
            .any(|l| l.contains(r#"You answered: {"db":{"selected_option":"sqlite"}}"#)),
        "{lines:?}"
    );
    server.stop().await;
}

/// `GET /api/v1/tasks` on `server` with `Host: host` and an optional bearer.
async fn tasks_status(server: &BinaryServer, host: &str, bearer: Option<&str>) -> StatusCode {
    let mut r = client()
        .get(format!("{}/api/v1/tasks", server.api.base))
        .header("host", host);
    if let Some(token) = bearer {
        r = r.header("authorization", format!("Bearer {token}"));
    }
    r.send().await.unwrap().status()
}

/// The login link of the start-up line in `log`.
fn login_link(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("turnstile listening"))
        .unwrap_or_else(|| panic!("no start-up line: {text}"));
    let at = line
        .find("url=")
        .unwrap_or_else(|| panic!("no url: {line}"));
    line[at + 4..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// The real binary, started with no token: it makes one in `<data-dir>/access-token` (0600)
/// and reuses it; its log shows a one-time login link and never the token; the link logs a
/// browser in once, without the code in the address it lands on; `--allowed-host` admits a
/// proxy's name and nothing else; `ACCESS_TOKEN` wins over the file.
async fn the_binary_makes_a_private_token_and_logs_a_one_time_login_link(url: String) {
    use std::os::unix::fs::PermissionsExt;
    let dir = support::temp_dir("token-binary");
    let (log, terminal) = (dir.join("stdout"), dir.join("stderr"));
    let server = BinaryServer::spawn_on(
        "0.0.0.0",
        &url,
        &dir,
        &["--allowed-host", "turnstile.example.lan"],
        &[("ACCESS_TOKEN", "")],
        Some((&log, &terminal)),
    )
    .await;
    let file = dir.join("access-token");
    let token = std::fs::read_to_string(&file).unwrap();
    assert!(token.len() >= 32, "{token}");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let port = server.api.base.rsplit(':').next().unwrap().to_string();
    let ours = format!("127.0.0.1:{port}");
    assert_eq!(
        tasks_status(&server, &ours, None).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        tasks_status(&server, &ours, Some("wrong-token-0123456789")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        tasks_status(&server, &ours, Some(&token)).await,
        StatusCode::OK
    );
    assert_eq!(
        tasks_status(&server, "turnstile.example.lan", Some(&token)).await,
        StatusCode::OK,
        "--allowed-host admits the proxy's name"
    );
    assert_eq!(
        tasks_status(&server, "evil.example", Some(&token)).await,
        StatusCode::FORBIDDEN,
        "any other name is refused, token or not"
    );

    let link = login_link(&log);
    assert!(
        link.starts_with(&format!("http://127.0.0.1:{port}/login?token=")),
        "{link}"
    );
    let r = client().get(&link).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        r.headers()["location"],
        "/",
        "the code leaves the address bar"
    );
    let pair = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let r = client()
        .get(format!("{}/api/v1/tasks", server.api.base))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the link logged the browser in");
    let again = client().get(&link).send().await.unwrap();
    assert_eq!(
        again.status(),
        StatusCode::UNAUTHORIZED,
        "the link works once"
    );
    assert!(!again.headers().contains_key("set-cookie"));

    let mut child = server.child;
    child.kill().await.unwrap();
    let logged =
        std::fs::read_to_string(&log).unwrap() + &std::fs::read_to_string(&terminal).unwrap();
    assert!(
        !logged.contains(&token),
        "the token is never shown: {logged}"
    );

    // The next start reuses the file; ACCESS_TOKEN wins over it.
    let server = BinaryServer::spawn_on(
        "0.0.0.0",
        &url,
        &dir,
        &[],
        &[("ACCESS_TOKEN", "")],
        Some((&log, &terminal)),
    )
    .await;
    assert_eq!(
        tasks_status(&server, &ours_of(&server), Some(&token)).await,
        StatusCode::OK
    );
    let mut child = server.child;
    child.kill().await.unwrap();
    let given = "given-token-0123456789abcdef";
    let server = BinaryServer::spawn_on(
        "127.0.0.1",
        &url,
        &dir,
        &[],
        &[("ACCESS_TOKEN", given)],
        Some((&log, &terminal)),
    )
    .await;
    assert_eq!(
        tasks_status(&server, &ours_of(&server), Some(given)).await,
        StatusCode::OK
    );
    assert_eq!(
        tasks_status(&server, &ours_of(&server), Some(&token)).await,
        StatusCode::UNAUTHORIZED
    );
    let mut child = server.child;
    child.kill().await.unwrap();
    assert!(!std::fs::read_to_string(&log).unwrap().contains(given));
}

fn ours_of(server: &BinaryServer) -> String {
    server.api.base.trim_start_matches("http://").to_string()
}

/// Runs the binary to its exit with `args` and `env`: (exit code, stderr).
async fn run_to_exit(url: &str, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = support::temp_dir("token-refused");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .args(["--database-url", url, "--data-dir"])
        .arg(&dir)
        .args(args)
        .env_remove("ACCESS_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), command.output())
        .await
        .expect("it exits")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A token on the command line is refused with the way to give it (every local user can read
/// argv); short tokens are refused; `--no-token-on-loopback` opens a loopback server only.
async fn the_token_never_comes_from_the_command_line(url: String) {
    let (code, err) = run_to_exit(&url, &["--access-token", "a-token-0123456789abcdef"], &[]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("ACCESS_TOKEN") && err.contains("--access-token-file"),
        "{err}"
    );
    let (code, err) = run_to_exit(&url, &[], &[("ACCESS_TOKEN", "short")]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("at least 16"), "{err}");
    let (code, err) = run_to_exit(
        &url,
        &["--addr", "0.0.0.0:0", "--no-token-on-loopback"],
        &[],
    )
    .await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("loopback"), "{err}");

    // A token file: private only, and it is the token.
    let dir = support::temp_dir("token-file");
    let file = dir.join("token");
    std::fs::write(&file, "from-a-file-0123456789abcdef\n").unwrap();
    let (code, err) =
        run_to_exit(&url, &["--access-token-file", file.to_str().unwrap()], &[]).await;
    assert_eq!(code, Some(1), "a readable file is refused: {err}");
    assert!(err.contains("chmod 600"), "{err}");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = BinaryServer::spawn(
        &url,
        &dir,
        &["--access-token-file", file.to_str().unwrap()],
        &[("ACCESS_TOKEN", "")],
    )
    .await;
    assert_eq!(
        tasks_status(
            &server,
            &ours_of(&server),
            Some("from-a-file-0123456789abcdef")
        )
        .await,
        StatusCode::OK
    );
    let mut child = server.child;
    child.kill().await.unwrap();

    // Open loopback, asked for.
    let server = BinaryServer::spawn(
        &url,
        &dir,
        &["--no-token-on-loopback"],
        &[("ACCESS_TOKEN", "")],
    )
    .await;
    assert_eq!(
        tasks_status(&server, &ours_of(&server), None).await,
        StatusCode::OK
    );
    let mut child = server.child;
    child.kill().await.unwrap();
}

/// Behind a TLS proxy (`--cookie-secure`) the login cookie is marked `Secure`, so a browser
/// never sends it over plain HTTP.
async fn the_login_cookie_is_secure_behind_a_tls_proxy(url: String) {
    let dir = support::temp_dir("cookie-secure");
    let server = BinaryServer::spawn(&url, &dir, &["--cookie-secure"], &[]).await;
    let r = client()
        .post(format!("{}/login", server.api.base))
        .header("origin", &server.api.base)
        .form(&[("token", support::TEST_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");
    let mut child = server.child;
    child.kill().await.unwrap();
}
