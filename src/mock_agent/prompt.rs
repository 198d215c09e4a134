//! One prompt of the mock agent: its script's steps, run in order (docs/api.md "The bundled
//! mock agent").

use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::v1::{
    self,
    schema::{
        CompleteElicitationNotification, ContentBlock, ContentChunk, CreateElicitationRequest,
        PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
        SessionId, SessionUpdate, StopReason, ToolCall, ToolCallStatus, ToolCallUpdate,
        ToolCallUpdateFields, ToolKind,
    },
};
use agent_client_protocol::{Client, UntypedMessage};
use rmcp::model::CallToolRequestParams;

use super::MockState;
use super::script::{self, Step};

fn halves(s: &str) -> (String, String) {
    let mid = s
        .char_indices()
        .nth(s.chars().count() / 2)
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    (s[..mid].to_string(), s[mid..].to_string())
}

/// Runs one prompt's steps; returns the stop reason.
pub(super) async fn run_prompt(
    st: Arc<MockState>,
    conn: v1::ConnectionTo<Client>,
    sid: SessionId,
    text: String,
) -> StopReason {
    let say = |s: String| {
        // Two chunks per reply: the client must coalesce them into one message.
        let (a, b) = halves(&s);
        for part in [a, b].into_iter().filter(|p| !p.is_empty()) {
            st.update(
                &conn,
                &sid,
                SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::from(part))),
            );
        }
    };
    let steps = match script::parse(&text) {
        Ok(steps) => steps,
        Err(e) => {
            say(format!("Script error: {e}"));
            return StopReason::EndTurn;
        }
    };
    let key = sid.0.to_string();
    for step in steps {
        if st.cancelled.lock().unwrap().remove(&key) {
            return StopReason::Cancelled;
        }
        match step {
            Step::Say(s)
                if s.starts_with("Thanks, continuing")
                    && std::env::var_os("MOCK_AGENT_EXIT_ON_RESUME").is_some() =>
            {
                // A test knob: crash right after accepting a resume prompt (L18 after acceptance).
                st.exit_now(4);
                return StopReason::EndTurn;
            }
            Step::Say(s) => say(s),
            Step::Delay(ms) => {
                let sleep = tokio::time::sleep(Duration::from_millis(ms));
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        _ = &mut sleep => break,
                        _ = st.cancel_signal.notified() => {
                            if st.cancelled.lock().unwrap().remove(&key) {
                                return StopReason::Cancelled;
                            }
                        }
                    }
                }
            }
            Step::Stream { count, text } => {
                for _ in 0..count {
                    st.update(
                        &conn,
                        &sid,
                        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::from(
                            text.clone(),
                        ))),
                    );
                }
            }
            Step::Exit(code) => {
                st.exit_now(code);
                return StopReason::EndTurn;
            }
            Step::Ask {
                input,
                timeout_ms,
                reply_with_answer,
                end_turn_on_timeout,
            } => {
                let client = match st.client(&key).await {
                    Ok(c) => c,
                    Err(e) => {
                        say(format!("The question failed: {e}"));
                        continue;
                    }
                };
                // What the agent said before is on the wire before the question leaves.
                st.written.flushed().await;
                let args = rmcp::model::object(input);
                let call = client.call_tool(
                    CallToolRequestParams::new("ask_user_question").with_arguments(args),
                );
                let result = match timeout_ms {
                    Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), call).await {
                        Ok(r) => r,
                        Err(_) => {
                            say("Question timed out, continuing without answer.".into());
                            if end_turn_on_timeout {
                                return StopReason::EndTurn;
                            }
                            continue;
                        }
                    },
                    None => call.await,
                };
                match result {
                    Ok(r) if r.is_error.unwrap_or(false) => {
                        let text: Vec<String> = r
                            .content
                            .iter()
                            .filter_map(|c| c.as_text())
                            .map(|t| t.text.clone())
                            .collect();
                        say(format!("The question failed: {}", text.join(" ")));
                    }
                    Ok(r) if reply_with_answer => {
                        let answer = r.structured_content.clone().unwrap_or_default();
                        say(format!("You answered: {answer}"));
                    }
                    Ok(_) => {}
                    Err(e) => say(format!("The question failed: {e}")),
                }
            }
            Step::ClientCapabilities => {
                let caps = st.client_capabilities.lock().unwrap().clone();
                say(format!("Client capabilities: {caps}"));
            }
            Step::Write { path, content } => say(match st.file_in(&key, &path) {
                Ok(file) => match write_file(&file, &content) {
                    Ok(()) => format!("Wrote {path}"),
                    Err(e) => format!("Write failed: {e}"),
                },
                Err(e) => format!("Write failed: {e}"),
            }),
            Step::Read(path) => say(match st.file_in(&key, &path) {
                Ok(file) => match std::fs::read_to_string(&file) {
                    Ok(text) => format!("Read {path}: {text}"),
                    Err(_) => format!("Read {path}: missing"),
                },
                Err(e) => format!("Read failed: {e}"),
            }),
            Step::Permission => {
                st.update(
                    &conn,
                    &sid,
                    SessionUpdate::ToolCall(
                        ToolCall::new("call-1", "Run the test suite")
                            .kind(ToolKind::Execute)
                            .status(ToolCallStatus::Pending),
                    ),
                );
                let answer = conn
                    .send_request(RequestPermissionRequest::new(
                        sid.clone(),
                        ToolCallUpdate::new(
                            "call-1",
                            ToolCallUpdateFields::new().title("Run the test suite"),
                        ),
                        vec![
                            PermissionOption::new(
                                "allow",
                                "Allow",
                                PermissionOptionKind::AllowOnce,
                            ),
                            PermissionOption::new(
                                "reject",
                                "Reject",
                                PermissionOptionKind::RejectOnce,
                            ),
                        ],
                    ))
                    .block_task()
                    .await;
                let verdict = match answer.map(|r| r.outcome) {
                    Ok(RequestPermissionOutcome::Selected(sel)) => {
                        format!("selected {}", sel.option_id.0)
                    }
                    Ok(_) => "cancelled".to_string(),
                    Err(e) => format!("failed: {e}"),
                };
                say(format!("Permission outcome: {verdict}"));
            }
            Step::Elicit {
                message,
                schema,
                url,
                cancel,
                complete,
            } => {
                // What the agent said before is on the wire before the question leaves.
                st.written.flushed().await;
                let request = match (schema, url) {
                    (Some(schema), _) => serde_json::json!({
                        "mode": "form", "sessionId": sid.0.to_string(), "message": message,
                        "requestedSchema": schema,
                    }),
                    (None, url) => serde_json::json!({
                        "mode": "url", "sessionId": sid.0.to_string(), "message": message,
                        "elicitationId": format!("el-{}", sid.0), "url": url.unwrap_or_default(),
                    }),
                };
                // Checked as the typed request, sent as written: the typed one sorts the
                // schema's fields by name, and a real agent sends them in its own order (E3).
                let outcome =
                    match serde_json::from_value::<CreateElicitationRequest>(request.clone())
                        .map_err(|e| e.to_string())
                        .and_then(|_| {
                            UntypedMessage::new("elicitation/create", &request)
                                .map_err(|e| e.to_string())
                        }) {
                        Ok(request) => {
                            let sent = conn.send_request(request);
                            if cancel {
                                // E5: the agent gives its question up at once.
                                let _ = sent.cancel();
                            }
                            if complete {
                                // E7: the user finished at the link (as the agent learns it).
                                let _ = conn.send_notification(
                                    CompleteElicitationNotification::new(format!("el-{}", sid.0)),
                                );
                            }
                            match sent.block_task().await {
                                Ok(v) => {
                                    let action = v["action"].as_str().unwrap_or("?").to_string();
                                    match v.get("content") {
                                        Some(content) => format!("{action} {content}"),
                                        None => action,
                                    }
                                }
                                Err(e) => format!("error {e}"),
                            }
                        }
                        Err(e) => format!("error the script's request is no elicitation: {e}"),
                    };
                say(format!("Elicitation result: {outcome}"));
            }
        }
    }
    StopReason::EndTurn
}

fn write_file(file: &std::path::Path, content: &str) -> std::io::Result<()> {
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(file, content)
}
