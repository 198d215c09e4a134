//! A2: checking an agent profile before a task depends on it. The agent is started as a
//! session's would be (its own process group, the minimal environment, no ptrace), in a
//! throw-away directory, asked `initialize` under the handshake deadline, and stopped; what it
//! said about itself is the report. Nothing of it outlives the check: its group is killed
//! before its leader is reaped, whatever happened.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::{
    self,
    schema::{ClientCapabilities, Implementation, InitializeRequest},
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use super::process::{self, AgentGroups, StderrTail};
use crate::model::{
    AgentInfo, AuthMethod, Capabilities, CheckReport, McpTransports, PromptContent,
};

/// What to start.
pub struct CheckSpec {
    pub command: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// An empty directory the agent may not keep (the caller removes it afterwards).
    pub cwd: PathBuf,
    pub deadline: Duration,
    pub groups: Arc<AgentGroups>,
}

fn failed(error: String, tail: &StderrTail) -> CheckReport {
    CheckReport {
        ok: false,
        error: Some(error),
        stderr_tail: tail.text(),
        ..CheckReport::default()
    }
}

/// The report of an `initialize` response (as JSON, ACP's camelCase names).
pub fn report_of(v: &Value) -> CheckReport {
    const CAPS: &str = "agentCapabilities";
    let flag = |path: &[&str]| {
        path.iter()
            .try_fold(v, |at, key| at.get(key))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let text = |at: &Value, key: &str| at.get(key).and_then(Value::as_str).map(str::to_string);
    CheckReport {
        ok: true,
        agent_info: v.get("agentInfo").map(|i| AgentInfo {
            name: text(i, "name").unwrap_or_default(),
            version: text(i, "version").unwrap_or_default(),
        }),
        protocol_version: v.get("protocolVersion").and_then(Value::as_u64),
        capabilities: Capabilities {
            load_session: flag(&[CAPS, "loadSession"]),
            mcp: McpTransports {
                http: flag(&[CAPS, "mcpCapabilities", "http"]),
                sse: flag(&[CAPS, "mcpCapabilities", "sse"]),
            },
            prompt: PromptContent {
                image: flag(&[CAPS, "promptCapabilities", "image"]),
                audio: flag(&[CAPS, "promptCapabilities", "audio"]),
                embedded_context: flag(&[CAPS, "promptCapabilities", "embeddedContext"]),
            },
        },
        auth_methods: v
            .get("authMethods")
            .and_then(Value::as_array)
            .map(|methods| {
                methods
                    .iter()
                    .map(|m| AuthMethod {
                        id: text(m, "id").unwrap_or_default(),
                        name: text(m, "name").unwrap_or_default(),
                        description: text(m, "description"),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        error: None,
        stderr_tail: None,
    }
}

/// Starts the agent, asks `initialize`, stops it (A2).
pub async fn check(spec: CheckSpec) -> CheckReport {
    let mut child = match process::spawn(&spec.command, &spec.args, &spec.env, &spec.cwd) {
        Ok(child) => child,
        Err(e) => return failed(e.reason, &StderrTail::default()),
    };
    let Some(pid) = child.id() else {
        return failed("the agent exited at once".into(), &StderrTail::default());
    };
    let group = spec.groups.register(pid);
    let tail = child
        .stderr
        .take()
        .map(|e| StderrTail::capture(e, "check".to_string()))
        .unwrap_or_default();
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        group.kill();
        return failed("the agent's stdio is unavailable".into(), &tail);
    };
    let transport = ByteStreams::new(stdin.compat_write(), stdout.compat());
    let (tx, rx) = oneshot::channel::<Result<Value, String>>();
    let driver = Client.v1().name("turnstile-check").connect_with(
        transport,
        async move |cx: v1::ConnectionTo<Agent>| {
            let answer = cx
                .send_request(
                    InitializeRequest::new(ProtocolVersion::V1)
                        .client_capabilities(ClientCapabilities::new())
                        .client_info(Implementation::new("turnstile", env!("CARGO_PKG_VERSION"))),
                )
                .block_task()
                .await
                .map_err(|e| format!("initialize failed: {e}"))
                .map(|r| serde_json::to_value(&r).unwrap_or_default());
            let _ = tx.send(answer);
            Ok(())
        },
    );
    let outcome = tokio::time::timeout(spec.deadline, async {
        // The connection ends once `initialize` is answered (or fails); its own error (the
        // agent closed its output first) explains a missing answer.
        let ended = driver.await;
        match rx.await {
            Ok(answer) => answer,
            Err(_) => Err(match ended {
                Err(e) => format!("agent connection failed: {e}"),
                Ok(()) => "the agent closed the connection before answering".into(),
            }),
        }
    })
    .await;
    // Killed and deregistered in one step, before the leader is reaped.
    group.kill();
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .ok()
        .and_then(Result::ok);
    match outcome {
        Ok(Ok(answer)) => report_of(&answer),
        Ok(Err(why)) => {
            let why = match status.filter(|s| !s.success()) {
                Some(status) => format!("{why} (agent exited: {status})"),
                None => why,
            };
            failed(why, &tail)
        }
        Err(_) => failed(
            format!(
                "the agent did not answer `initialize` within {} s; it was stopped",
                spec.deadline.as_secs()
            ),
            &tail,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a2_the_report_reads_what_initialize_said() {
        let r = report_of(&json!({
            "protocolVersion": 1,
            "agentInfo": { "name": "claude-agent-acp", "version": "0.9.1" },
            "agentCapabilities": {
                "loadSession": true,
                "mcpCapabilities": { "http": true },
                "promptCapabilities": { "image": true, "embeddedContext": true }
            },
            "authMethods": [{ "id": "claude-login", "name": "Log in with Claude", "description": "Run `claude /login`" }]
        }));
        assert!(r.ok);
        assert_eq!(r.agent_info.unwrap().name, "claude-agent-acp");
        assert_eq!(r.protocol_version, Some(1));
        assert!(r.capabilities.load_session && r.capabilities.mcp.http && !r.capabilities.mcp.sse);
        assert!(r.capabilities.prompt.image && !r.capabilities.prompt.audio);
        assert_eq!(r.auth_methods[0].id, "claude-login");
    }

    #[test]
    fn a2_missing_capabilities_read_as_absent() {
        let r = report_of(&json!({ "protocolVersion": 1 }));
        assert_eq!(r.capabilities, Capabilities::default());
        assert!(r.agent_info.is_none() && r.auth_methods.is_empty());
    }
}
