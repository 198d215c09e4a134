//! The notifications between servers: what a body holds and what a received one asks.

use serde_json::{Value, json};

use crate::server::events::{Event, Request};

/// The notification body of a local event.
pub(super) fn body(origin: &str, e: &Event) -> String {
    json!({
        "o": origin,
        "a": e.action,
        "t": e.task_id,
        "s": e.session_id,
        "p": *e.payload,
    })
    .to_string()
}

/// What a notification asks of this server.
#[derive(Debug, PartialEq)]
pub(super) enum Received {
    /// Relay this event.
    Event(Event),
    /// Read the body from `event_spill`.
    Spilled(String),
    /// The sender lost events: this server's clients refetch.
    Resync,
    /// Another server offers the answer of a call that may wait here.
    Offer(String),
    /// Another server delivered the answer we offered.
    Delivered(String),
    /// A request addressed to this server.
    Request(Request),
    /// The reply to request `rid` of this server.
    Reply(String, Value),
    /// Server `0` listens now (`peers.rs`): it waits for our welcome.
    Hello(String),
    /// Server `0` heard our hello.
    Welcome(String),
    /// Our own notification, or one we cannot read.
    Ignore,
}

pub(super) fn parse(own: &str, text: &str) -> Received {
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return Received::Ignore;
    };
    if v["o"].as_str().is_none_or(|o| o == own) || v["to"].as_str().is_some_and(|to| to != own) {
        return Received::Ignore;
    }
    if let (Some(rid), Some(body)) = (v["rid"].as_str(), v.get("req")) {
        return Received::Request(Request {
            from: v["o"].as_str().unwrap_or_default().to_string(),
            rid: rid.to_string(),
            body: body.clone(),
        });
    }
    if let (Some(rid), Some(body)) = (v["rid"].as_str(), v.get("rep")) {
        return Received::Reply(rid.to_string(), body.clone());
    }
    if v.get("resync").is_some() {
        return Received::Resync;
    }
    let from = || v["o"].as_str().unwrap_or_default().to_string();
    if v.get("hello").is_some() {
        return Received::Hello(from());
    }
    if v.get("welcome").is_some() {
        return Received::Welcome(from());
    }
    if let Some(id) = v["spill"].as_str() {
        return Received::Spilled(id.to_string());
    }
    if let Some(id) = v["offer"].as_str() {
        return Received::Offer(id.to_string());
    }
    if let Some(id) = v["delivered"].as_str() {
        return Received::Delivered(id.to_string());
    }
    let Some(action) = v["a"].as_str() else {
        return Received::Ignore;
    };
    let mut e = Event::new(action, v["p"].clone());
    e.task_id = v["t"].as_str().map(str::to_string);
    e.session_id = v["s"].as_str().map(str::to_string);
    e.remote = true;
    Received::Event(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_travels_with_its_routing_and_comes_back_remote() {
        let e = Event::new("task.created", json!({ "task": { "id": "t1" } }))
            .for_task("t1")
            .for_session("s1");
        let text = body("a", &e);
        assert_eq!(parse("a", &text), Received::Ignore, "our own notification");
        let Received::Event(back) = parse("b", &text) else {
            panic!("relayed")
        };
        assert_eq!(back, e);
        assert!(back.remote);
    }

    #[test]
    fn bad_or_partial_notifications_are_ignored_or_resync() {
        assert_eq!(parse("b", "not json"), Received::Ignore);
        assert_eq!(parse("b", r#"{"a":"x"}"#), Received::Ignore, "no origin");
        assert_eq!(parse("b", r#"{"o":"a"}"#), Received::Ignore, "no action");
        assert_eq!(parse("b", r#"{"o":"a","resync":"lost"}"#), Received::Resync);
        assert_eq!(
            parse("b", r#"{"o":"a","hello":true}"#),
            Received::Hello("a".into())
        );
        assert_eq!(
            parse("b", r#"{"o":"a","to":"b","welcome":true}"#),
            Received::Welcome("a".into())
        );
        assert_eq!(
            parse("c", r#"{"o":"a","to":"b","welcome":true}"#),
            Received::Ignore
        );
        assert_eq!(parse("a", r#"{"o":"a","hello":true}"#), Received::Ignore);
        assert_eq!(
            parse("b", r#"{"o":"a","spill":"42"}"#),
            Received::Spilled("42".into())
        );
        assert_eq!(
            parse("b", r#"{"o":"a","offer":"p"}"#),
            Received::Offer("p".into())
        );
        assert_eq!(
            parse("b", r#"{"o":"a","delivered":"p"}"#),
            Received::Delivered("p".into())
        );
        assert_eq!(
            parse("b", r#"{"o":"a","to":"c","rid":"1","req":{}}"#),
            Received::Ignore,
            "addressed to another server"
        );
        assert_eq!(
            parse("b", r#"{"o":"a","to":"b","rid":"1","req":{"x":1}}"#),
            Received::Request(Request {
                from: "a".into(),
                rid: "1".into(),
                body: json!({ "x": 1 })
            })
        );
        assert_eq!(
            parse("b", r#"{"o":"a","to":"b","rid":"1","rep":true}"#),
            Received::Reply("1".into(), json!(true))
        );
    }
}
