//! Clients: the REST client `Api` with the mock agent's script helpers, raw HTTP for what a
//! client library would normalise, and a bare WebSocket handshake.

use super::*;

/// An HTTP client that sends [`TEST_TOKEN`] as its bearer.
pub fn client() -> reqwest::Client {
    client_with_token(TEST_TOKEN)
}

/// An HTTP client that sends `token` as its bearer.
pub fn client_with_token(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().expect("a header value"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("an HTTP client")
}

/// `GET url` with [`TEST_TOKEN`].
pub async fn get(url: impl reqwest::IntoUrl) -> reqwest::Response {
    client().get(url).send().await.expect("GET")
}

/// A small REST client for the server under test.
pub struct Api {
    pub client: reqwest::Client,
    pub base: String,
}

impl Api {
    /// A client of the server at `base` with [`TEST_TOKEN`].
    pub fn new(base: &str) -> Api {
        Api {
            client: client(),
            base: base.to_string(),
        }
    }

    /// `POST /api/v1/clarifications/{pending_id}/respond` with `body` (answers or a rejection).
    pub async fn respond(
        &self,
        pending_id: &str,
        body: serde_json::Value,
    ) -> (reqwest::StatusCode, serde_json::Value) {
        self.post(
            &format!("/api/v1/clarifications/{pending_id}/respond"),
            body,
        )
        .await
    }

    pub async fn get(&self, path: &str) -> (reqwest::StatusCode, serde_json::Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("GET");
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }

    pub async fn post(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> (reqwest::StatusCode, serde_json::Value) {
        self.send(reqwest::Method::POST, path, body).await
    }

    pub async fn patch(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> (reqwest::StatusCode, serde_json::Value) {
        self.send(reqwest::Method::PATCH, path, body).await
    }

    /// `method path` with a JSON body: the status and the JSON answer (`Null` when none).
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: serde_json::Value,
    ) -> (reqwest::StatusCode, serde_json::Value) {
        let r = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }

    /// The agent's row that starts with `prefix`, once all of it is written: the agent streams
    /// a reply in chunks, so the row is read when a later row follows it or its turn ended.
    /// (A question's row is written by another task and may follow a reply still streaming:
    /// a turn that asks goes on waiting for the whole text instead.)
    pub async fn agent_said(&self, session: &str, prefix: &str) -> String {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let messages = self.messages(session).await;
            let found = messages.iter().position(|m| {
                m["author"] == "agent"
                    && m["content"].as_str().is_some_and(|c| c.starts_with(prefix))
            });
            if let Some(i) = found {
                let row = &messages[i];
                let ended = i + 1 < messages.len() || {
                    let (_, turns) = self.get(&format!("/api/v1/sessions/{session}/turns")).await;
                    turns["turns"].as_array().is_some_and(|t| {
                        t.iter()
                            .any(|t| t["id"] == row["turn_id"] && t["completed_at"].is_string())
                    })
                };
                if ended {
                    return row["content"].as_str().unwrap_or_default().to_string();
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for the agent to say {prefix:?}: {messages:#?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// `DELETE path`: its status.
    pub async fn delete(&self, path: &str) -> reqwest::StatusCode {
        self.client
            .delete(format!("{}{path}", self.base))
            .send()
            .await
            .expect("DELETE")
            .status()
    }

    /// Polls `GET path` until `pred` holds (deadline 20 s, no fixed sleeps between state checks
    /// beyond a short poll interval).
    pub async fn wait_for(
        &self,
        path: &str,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let (_, v) = self.get(path).await;
            if pred(&v) {
                return v;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for {what}: last {path} = {v:#}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The mock agent asks one question with a 300 ms client-side timeout: the bundle detaches
/// and the turn completes (a detached, still-active question).
pub const SHORT_TIMEOUT: &str = r#"e2e:ask-timeout(300, {"questions": [{"id": "db", "prompt": "Which database?", "options": [{"id": "postgresql", "label": "PostgreSQL"}, {"id": "sqlite", "label": "SQLite"}]}]})"#;

/// `GET /sessions/{id}/turns` holds exactly `n` turns, all completed.
pub fn turns_done(n: usize) -> impl Fn(&serde_json::Value) -> bool {
    move |v| {
        v["turns"]
            .as_array()
            .is_some_and(|t| t.len() == n && t.iter().all(|t| t["completed_at"].is_string()))
    }
}

impl Api {
    /// A task whose primary session runs `prompt`: (task id, session id).
    pub async fn start_task(&self, prompt: &str) -> (String, String) {
        let (status, task) = self
            .post(
                "/api/v1/tasks",
                serde_json::json!({ "title": "agent task", "prompt": prompt }),
            )
            .await;
        assert_eq!(status, 200, "{task}");
        (
            task["id"].as_str().unwrap().to_string(),
            task["primary_session_id"]
                .as_str()
                .expect("a primary session")
                .to_string(),
        )
    }

    /// Polls the session's transcript until one of its messages matches `pred`; returns all
    /// of them.
    pub async fn wait_for_message(
        &self,
        session: &str,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Vec<serde_json::Value> {
        let page = self
            .wait_for(&format!("/api/v1/sessions/{session}/messages"), what, |v| {
                v["messages"]
                    .as_array()
                    .is_some_and(|ms| ms.iter().any(&pred))
            })
            .await;
        page["messages"].as_array().unwrap().clone()
    }

    pub async fn messages(&self, session: &str) -> Vec<serde_json::Value> {
        self.get(&format!("/api/v1/sessions/{session}/messages"))
            .await
            .1["messages"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The contents of the agent's messages, in order.
    pub async fn agent_lines(&self, session: &str) -> Vec<String> {
        self.messages(session)
            .await
            .into_iter()
            .filter(|m| m["author"] == "agent")
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect()
    }

    /// The `pending_id` of the session's first question or permission request, once there is one.
    pub async fn pending_id(&self, session: &str) -> String {
        self.pending_id_of(session, "a question or permission request", |_| true)
            .await
    }

    /// The `pending_id` of the session's first message of `kind` (`clarification_request`,
    /// `permission_request`), once there is one.
    pub async fn pending_id_of_kind(&self, session: &str, kind: &str) -> String {
        self.pending_id_of(session, kind, |m| m["kind"] == kind)
            .await
    }

    async fn pending_id_of(
        &self,
        session: &str,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> String {
        let carries = |m: &serde_json::Value| m["pending_id"].is_string() && pred(m);
        let messages = self.wait_for_message(session, what, carries).await;
        let found = messages.iter().find(|m| carries(m)).unwrap();
        found["pending_id"].as_str().unwrap().to_string()
    }

    pub async fn wait_turns_done(&self, session: &str, n: usize) -> Vec<serde_json::Value> {
        self.wait_for(
            &format!("/api/v1/sessions/{session}/turns"),
            &format!("{n} completed turns"),
            turns_done(n),
        )
        .await["turns"]
            .as_array()
            .unwrap()
            .clone()
    }
}

/// A WebSocket handshake to `/ws` with extra request headers: `Ok` when it upgraded, else the
/// HTTP status it was refused with.
pub async fn ws_handshake(base: &str, headers: &[(&str, &str)]) -> Result<(), u16> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!("{}/ws", base.replacen("http://", "ws://", 1));
    let mut request = url.into_client_request().expect("ws request");
    for (k, v) in headers {
        request.headers_mut().insert(
            reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok(_) => Ok(()),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("websocket handshake failed unexpectedly: {e}"),
    }
}

/// The value of the unlabelled metric `name` in a `/metrics` text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// One HTTP/1.1 request sent byte for byte as given — `path` is not normalised (an HTTP
/// library would resolve `%2e%2e` segments before sending) — answered as (status, body; a
/// chunked body decoded).
pub async fn raw_http(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        stream.read_to_end(&mut answer),
    )
    .await
    .expect("an answer in time")
    .expect("read");
    let text = String::from_utf8_lossy(&answer).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    if !chunked {
        return (status, rest.to_string());
    }
    let mut body = String::new();
    let mut rest = rest;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        body.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    (status, body)
}
