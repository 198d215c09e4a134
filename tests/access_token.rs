//! LAN access (spec "Server process"): a server bound to every interface needs its access
//! token from every client, loopback included. API clients send a bearer; browsers log in
//! once and carry an HttpOnly, SameSite=Strict cookie; the socket needs it too; wrong tokens
//! from one address are rate-limited; agents keep their own per-session MCP tokens.

mod support;

use reqwest::StatusCode;
use reqwest::redirect::Policy;
use serde_json::{Value, json};
use support::{Api, BinaryServer, TestServer, table_counts, ws_handshake};

const TOKEN: &str = "lan-token-0123456789abcdef";

both_http!(
    lan_clients_need_the_token,
    the_login_page_sets_a_strict_http_only_cookie,
    wrong_tokens_are_rate_limited,
    agents_keep_working_behind_the_token,
    the_binary_on_every_interface_prints_a_token_and_never_logs_it,
);

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

async fn lan(url: &str) -> TestServer {
    TestServer::start_configured(url, "0.0.0.0:0", Some(TOKEN), |_| {}).await
}

async fn lan_clients_need_the_token(url: String) {
    let server = lan(&url).await;
    let c = client();
    let before = table_counts(&url).await;
    // Without it: API → 401 (JSON), pages → the login page, the socket → 401.
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
    assert_eq!(table_counts(&url).await, before, "nothing was written");
    // Health and the login page stay public.
    for path in ["/healthz", "/login"] {
        let r = c.get(server.url(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    // With it: a bearer works for the API and the socket.
    let bearer = format!("Bearer {TOKEN}");
    let r = c
        .post(server.url("/api/v1/tasks"))
        .header("authorization", &bearer)
        .json(&json!({ "title": "mine" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        ws_handshake(&server.base, &[("authorization", bearer.as_str())]).await,
        Ok(())
    );
    // Behind the token, the machine's own addresses are names it answers to.
    let lan_ip = if_addrs::get_if_addrs()
        .unwrap()
        .into_iter()
        .find(|i| !i.is_loopback() && i.ip().is_ipv4())
        .map(|i| i.ip());
    if let Some(ip) = lan_ip {
        let port = server.base.rsplit(':').next().unwrap();
        let r = c
            .get(format!("http://{ip}:{port}/api/v1/tasks"))
            .header("authorization", &bearer)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "over {ip}");
    }
    server.stop().await;
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
    assert!(!cookie.contains(TOKEN), "the cookie is not the token");
    let pair = cookie.split(';').next().unwrap().to_string();
    // The cookie opens pages, the API and the socket.
    let r = c
        .get(server.url("/"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = c
        .get(server.url("/api/v1/tasks"))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        ws_handshake(&server.base, &[("cookie", pair.as_str())]).await,
        Ok(())
    );
    // A forged cookie does not.
    let r = c
        .get(server.url("/api/v1/tasks"))
        .header("cookie", format!("turnstile_auth={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
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
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_requests");
    server.stop().await;
}

async fn agents_keep_working_behind_the_token(url: String) {
    let server = lan(&url).await;
    let mut api = Api::new(&server.base);
    api.client = reqwest::Client::builder()
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {TOKEN}").parse().unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .unwrap();
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

/// The real binary (not the test server): bound to every interface without a token it makes
/// one and shows it on the terminal (stderr) but never in its log (stdout); the token works
/// as a bearer; `--allowed-host` admits a proxy's name and nothing else. Given
/// `ACCESS_TOKEN`, it serves beyond loopback with that one (it used to exit 1).
async fn the_binary_on_every_interface_prints_a_token_and_never_logs_it(url: String) {
    let dir = support::temp_dir("lan-binary");
    let (log, terminal) = (dir.join("stdout"), dir.join("stderr"));
    let server = BinaryServer::spawn_on(
        "0.0.0.0",
        &url,
        &dir,
        &["--allowed-host", "turnstile.example.lan"],
        &[],
        Some((&log, &terminal)),
    )
    .await;
    let shown = std::fs::read_to_string(&terminal).unwrap();
    let token = shown
        .split("Access token")
        .nth(1)
        .and_then(|rest| {
            rest.lines()
                .map(str::trim)
                .find(|l| l.len() >= 16 && !l.contains(char::is_whitespace))
        })
        .unwrap_or_else(|| panic!("no token on the terminal: {shown}"))
        .to_string();
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
    let mut child = server.child;
    child.kill().await.unwrap();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("turnstile listening"),
        "the log was captured: {logged}"
    );
    assert!(
        !logged.contains(&token),
        "the token is never logged: {logged}"
    );

    // With ACCESS_TOKEN it serves beyond loopback with that token.
    let given = "given-token-0123456789abcdef";
    let server = BinaryServer::spawn_on(
        "0.0.0.0",
        &url,
        &dir,
        &[],
        &[("ACCESS_TOKEN", given)],
        Some((&log, &terminal)),
    )
    .await;
    let port = server.api.base.rsplit(':').next().unwrap().to_string();
    let ours = format!("127.0.0.1:{port}");
    assert_eq!(
        tasks_status(&server, &ours, Some(given)).await,
        StatusCode::OK
    );
    assert_eq!(
        tasks_status(&server, &ours, Some(&token)).await,
        StatusCode::UNAUTHORIZED
    );
    assert!(
        !std::fs::read_to_string(&terminal)
            .unwrap()
            .contains("Access token")
    );
    let mut child = server.child;
    child.kill().await.unwrap();
    assert!(!std::fs::read_to_string(&log).unwrap().contains(given));
}
