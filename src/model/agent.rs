//! What the server knows about agent programs before a profile uses them: the presets of the
//! common ACP agents (A1) and the report of a profile's check (A2).

use serde::{Deserialize, Serialize};

/// A known ACP agent, as found (or not) on the server (spec/agents.md A1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentPreset {
    pub id: String,
    pub name: String,
    /// What a profile from this preset runs: the absolute path when found, else the command
    /// to install first.
    pub command: String,
    pub args: Vec<String>,
    /// The command is on the server's `PATH` (or is the bundled mock agent).
    pub found: bool,
    /// What to run to install it, when it is not found (shown, never run by the server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<String>,
}

/// The agent's name and version as it gave them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub name: String,
    pub version: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McpTransports {
    pub http: bool,
    pub sse: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptContent {
    pub image: bool,
    pub audio: bool,
    pub embedded_context: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    pub load_session: bool,
    pub mcp: McpTransports,
    pub prompt: PromptContent,
}

/// One way the agent can be logged in (ACP `authMethods`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuthMethod {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A profile's check (spec/agents.md A2).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_info: Option<AgentInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<u64>,
    pub capabilities: Capabilities,
    pub auth_methods: Vec<AuthMethod>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
}

impl CheckReport {
    /// One line for the settings page: who answered and what it can do, or why it failed.
    pub fn summary(&self) -> String {
        if !self.ok {
            return format!(
                "Failed: {}",
                self.error.as_deref().unwrap_or("no reason given")
            );
        }
        let who = self
            .agent_info
            .as_ref()
            .map(|i| format!("{} {}", i.name, i.version).trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "the agent".into());
        let caps = &self.capabilities;
        let mut can = Vec::new();
        if caps.load_session {
            can.push("resumes sessions");
        }
        can.push(if caps.mcp.http {
            "MCP over HTTP"
        } else {
            "MCP over stdio only"
        });
        if caps.prompt.image {
            can.push("images");
        }
        let mut line = format!("OK: {who} ({})", can.join(", "));
        if !self.auth_methods.is_empty() {
            let names: Vec<&str> = self.auth_methods.iter().map(|m| m.name.as_str()).collect();
            line.push_str(&format!("; may need a login: {}", names.join(", ")));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2_the_summary_says_who_answered_and_what_it_can_do() {
        let ok = CheckReport {
            ok: true,
            agent_info: Some(AgentInfo {
                name: "turnstile-mock-agent".into(),
                version: "0.1.0".into(),
            }),
            capabilities: Capabilities {
                load_session: true,
                mcp: McpTransports {
                    http: true,
                    sse: false,
                },
                ..Capabilities::default()
            },
            ..CheckReport::default()
        };
        assert_eq!(
            ok.summary(),
            "OK: turnstile-mock-agent 0.1.0 (resumes sessions, MCP over HTTP)"
        );
        let failed = CheckReport {
            error: Some("cannot start agent /x: No such file".into()),
            ..CheckReport::default()
        };
        assert_eq!(
            failed.summary(),
            "Failed: cannot start agent /x: No such file"
        );
    }
}
