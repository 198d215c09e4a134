//! A WebSocket client of the server under test (spec/api.md WebSocket).

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use super::TestServer;

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub async fn connect(server: &TestServer) -> Socket {
    connect_to(&server.base).await
}

/// A socket to the server at `base` (`http://…`) with [`super::TEST_TOKEN`].
pub async fn connect_to(base: &str) -> Socket {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!("{}/ws", base.replacen("http://", "ws://", 1));
    let mut request = url.into_client_request().expect("a websocket request");
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", super::TEST_TOKEN).parse().unwrap(),
    );
    let (socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket connect");
    socket
}

/// Next JSON frame matching `pred`, with a deadline.
pub async fn next_frame(socket: &mut Socket, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let frame = tokio::time::timeout(remaining, socket.next())
            .await
            .expect("timed out waiting for a frame");
        if let Some(Ok(Message::Text(text))) = frame {
            let v: Value = serde_json::from_str(text.as_str()).expect("json frame");
            // The browser's parser (no derive buffering, no `Value`) reads every frame as the
            // derive does.
            assert_eq!(
                turnstile::model::Push::from_json(text.as_str()).ok(),
                serde_json::from_str::<turnstile::model::Envelope>(text.as_str())
                    .ok()
                    .as_ref()
                    .map(turnstile::model::Push::from),
                "{text}"
            );
            if pred(&v) {
                return v;
            }
        } else if frame.is_none() {
            panic!("socket closed");
        }
    }
}

pub async fn send(socket: &mut Socket, v: Value) {
    socket
        .send(Message::Text(v.to_string().into()))
        .await
        .unwrap();
}
