//! Agent profiles: how a session's agent process is started (name, command, args, env).
//! Everything is validated before the write; env values never leave the server.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::model::limits::{self, at_most, is_env_name};
use crate::model::{AgentPreset, CheckReport};
use crate::model::{AgentProfile, AppError};
use crate::server::agents::{self, check::CheckSpec};
use crate::server::hooks::Point;
use crate::server::repo::{NewAgentProfile, new_id};

/// The bundled mock agent profile (docs/api.md); its command is the mock agent next to the
/// server binary.
pub const MOCK_PROFILE: &str = "mock";
use crate::server::state::AppState;

pub struct CreateProfile {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub elicitation: bool,
    /// A4: `authenticate` with this method after `initialize`.
    pub auth_method: Option<String>,
}

fn bad(e: String) -> AppError {
    AppError::BadRequest(e)
}

fn validate(input: &CreateProfile) -> Result<(), AppError> {
    if input.name.trim().is_empty() || input.command.trim().is_empty() {
        return Err(bad("an agent profile needs a name and a command".into()));
    }
    at_most("name", &input.name, limits::NAME_CHARS).map_err(bad)?;
    at_most("command", &input.command, limits::COMMAND_CHARS).map_err(bad)?;
    if input.args.len() > limits::ARGS {
        return Err(bad(format!("at most {} args", limits::ARGS)));
    }
    for (i, a) in input.args.iter().enumerate() {
        at_most(&format!("args[{i}]"), a, limits::COMMAND_CHARS).map_err(bad)?;
    }
    if input.env.len() > limits::ENV_VARS {
        return Err(bad(format!("at most {} env variables", limits::ENV_VARS)));
    }
    for (name, value) in &input.env {
        if !is_env_name(name) {
            return Err(bad(format!(
                "env name {name:?} must be a letter or _ followed by letters, digits or _"
            )));
        }
        at_most(&format!("env {name}"), value, limits::ENV_VALUE_CHARS).map_err(bad)?;
    }
    if let Some(method) = &input.auth_method {
        at_most("auth_method", method, limits::NAME_CHARS).map_err(bad)?;
        if method.trim().is_empty() || method.chars().any(char::is_control) {
            return Err(bad(
                "auth_method is an id from the agent's authMethods: not empty, no control characters"
                    .into(),
            ));
        }
    }
    if input
        .args
        .iter()
        .chain(input.env.values())
        .chain([&input.command])
        .any(|s| s.contains('\0'))
    {
        return Err(bad(
            "command, args and env values must not contain NUL".into()
        ));
    }
    Ok(())
}

pub async fn create(state: &AppState, input: CreateProfile) -> Result<AgentProfile, AppError> {
    validate(&input)?;
    if state
        .repo
        .get_agent_profile_by_name(&input.name)
        .await?
        .is_some()
    {
        return Err(AppError::Conflict(format!(
            "an agent profile named {:?} exists",
            input.name
        )));
    }
    let new = NewAgentProfile {
        name: input.name,
        command: input.command,
        args: input.args,
        env: input.env,
        elicitation: input.elicitation,
        auth_method: input.auth_method,
    };
    Ok(state
        .repo
        .create_agent_profile(&new, state.clock.now())
        .await?
        .to_dto())
}

/// An edit: absent fields stay; `env` sets the given names (`None` removes one). Values stay
/// write-only: a client never needs to resend the ones it cannot see — unless it changes the
/// program (A6).
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct ProfileEdit {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Option<Vec<String>>,
    #[serde(default)]
    pub env: BTreeMap<String, Option<String>>,
    #[serde(default)]
    pub elicitation: Option<bool>,
    /// A4: a method id sets it, `""` clears it.
    #[serde(default)]
    pub auth_method: Option<String>,
}

pub async fn update(
    state: &AppState,
    id: &str,
    edit: ProfileEdit,
) -> Result<AgentProfile, AppError> {
    let current = state
        .repo
        .get_agent_profile(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("agent profile {id}")))?;
    if current.name == MOCK_PROFILE {
        return Err(AppError::Conflict(
            "the bundled mock profile cannot be changed".into(),
        ));
    }
    // A6: a new command or new args drop the stored values, unless this request sets them
    // again: whoever cannot read them must not be able to hand them to a program they chose.
    let program_changes = edit.command.as_ref().is_some_and(|c| *c != current.command)
        || edit
            .args
            .as_ref()
            .is_some_and(|a| *a != current.args_list());
    let mut env = if program_changes {
        BTreeMap::new()
    } else {
        current.env_values()
    };
    for (name, value) in edit.env {
        match value {
            Some(v) => env.insert(name, v),
            None => env.remove(&name),
        };
    }
    let merged = CreateProfile {
        name: edit.name.unwrap_or_else(|| current.name.clone()),
        command: edit.command.unwrap_or_else(|| current.command.clone()),
        args: edit.args.unwrap_or_else(|| current.args_list()),
        env,
        elicitation: edit.elicitation.unwrap_or(current.elicitation),
        auth_method: match edit.auth_method {
            Some(m) if m.is_empty() => None,
            Some(m) => Some(m),
            None => current.auth_method.clone(),
        },
    };
    validate(&merged)?;
    if merged.name != current.name
        && state
            .repo
            .get_agent_profile_by_name(&merged.name)
            .await?
            .is_some()
    {
        return Err(AppError::Conflict(format!(
            "an agent profile named {:?} exists",
            merged.name
        )));
    }
    let new = NewAgentProfile {
        name: merged.name,
        command: merged.command,
        args: merged.args,
        env: merged.env,
        elicitation: merged.elicitation,
        auth_method: merged.auth_method,
    };
    state
        .repo
        .update_agent_profile(id, &new)
        .await?
        .map(|p| p.to_dto())
        .ok_or_else(|| AppError::NotFound(format!("agent profile {id}")))
}

/// A1: the known agents as found on this server's `PATH`, and the bundled mock.
pub fn presets(state: &AppState) -> Vec<AgentPreset> {
    agents::presets::presets(
        std::env::var_os("PATH").as_deref(),
        &state.runtime.config.mock_agent,
    )
}

/// A2: starts the profile's agent in a throw-away directory, asks `initialize` under the
/// handshake deadline and stops it. One check per profile at a time (409 while one runs).
/// The check runs in a task of its own: a caller that goes away does not cut it short, so
/// its process is always stopped and its directory removed.
pub async fn check(state: &AppState, id: &str) -> Result<CheckReport, AppError> {
    let profile = state
        .repo
        .get_agent_profile(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("agent profile {id}")))?;
    if state.runtime.profile_checks.put(id, ()).is_some() {
        return Err(AppError::Conflict(format!(
            "a check of agent profile {:?} is running",
            profile.name
        )));
    }
    let dir = std::env::temp_dir().join(format!("turnstile-check-{}", new_id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        state.runtime.profile_checks.take(id);
        return Err(crate::server::telemetry::internal(&e));
    }
    let spec = CheckSpec {
        command: if profile.name == MOCK_PROFILE {
            state.runtime.config.mock_agent.clone()
        } else {
            PathBuf::from(&profile.command)
        },
        args: profile.args_list(),
        env: profile.env_values(),
        cwd: dir.clone(),
        deadline: state.runtime.config.agent_start_timeout,
        groups: state.runtime.agent_groups.clone(),
    };
    let (state, id) = (state.clone(), id.to_string());
    tokio::spawn(async move {
        state.hooks.run(Point::ProfileCheck, &id).await;
        let report = agents::check::check(spec).await;
        let _ = std::fs::remove_dir_all(&dir);
        state.runtime.profile_checks.take(&id);
        report
    })
    .await
    .map_err(|e| crate::server::telemetry::internal(&e))
}

pub async fn list(state: &AppState) -> Result<Vec<AgentProfile>, AppError> {
    Ok(state
        .repo
        .list_agent_profiles()
        .await?
        .iter()
        .map(|p| p.to_dto())
        .collect())
}
