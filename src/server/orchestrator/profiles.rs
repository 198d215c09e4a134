//! Agent profiles: how a session's agent process is started (name, command, args, env).
//! Everything is validated before the write; env values never leave the server.

use std::collections::BTreeMap;

use crate::model::limits::{self, at_most, is_env_name};
use crate::model::{AgentProfile, AppError};
use crate::server::repo::NewAgentProfile;
use crate::server::state::AppState;

pub struct CreateProfile {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
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
    };
    Ok(state
        .repo
        .create_agent_profile(&new, state.clock.now())
        .await?
        .to_dto())
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
