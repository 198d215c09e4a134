//! Server functions behind the settings page: agent profiles (env values are write-only) and
//! repositories (W1).

use std::collections::BTreeMap;

use leptos::prelude::*;
use leptos::server_fn::codec::Json;

use crate::model::{AgentPreset, AgentProfile, AppError, CheckReport, Repository};

#[server(prefix = "/api/fn", endpoint = "list_agent_profiles")]
pub async fn list_agent_profiles() -> Result<Vec<AgentProfile>, AppError> {
    crate::server::orchestrator::profiles::list(&super::state()?).await
}

/// Adds a profile (`id: None`) or edits one: `env` maps names to new values, `None` removes a
/// variable, and names not given keep their (unseen) values.
#[server(prefix = "/api/fn", endpoint = "save_agent_profile", input = Json)]
pub async fn save_agent_profile(
    id: Option<String>,
    name: String,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, Option<String>>,
    /// A4: sets the method (`""` clears it on an edit); absent keeps it.
    #[server(default)]
    auth_method: Option<String>,
) -> Result<AgentProfile, AppError> {
    use crate::server::orchestrator::profiles::{self, CreateProfile, ProfileEdit};
    let state = super::state()?;
    match id {
        Some(id) => {
            let edit = ProfileEdit {
                name: Some(name),
                command: Some(command),
                args: Some(args),
                env,
                elicitation: None,
                auth_method,
            };
            profiles::update(&state, &id, edit).await
        }
        None => {
            let input = CreateProfile {
                name,
                command,
                args,
                env: env.into_iter().filter_map(|(k, v)| Some((k, v?))).collect(),
                elicitation: true,
                auth_method: auth_method.filter(|m| !m.is_empty()),
            };
            profiles::create(&state, input).await
        }
    }
}

/// A1: the known agents as found on the server, to fill a new profile from.
#[server(prefix = "/api/fn", endpoint = "list_agent_presets")]
pub async fn list_agent_presets() -> Result<Vec<AgentPreset>, AppError> {
    Ok(crate::server::orchestrator::profiles::presets(
        &super::state()?,
    ))
}

/// A2: starts the profile's agent, asks `initialize`, stops it.
#[server(prefix = "/api/fn", endpoint = "check_agent_profile")]
pub async fn check_agent_profile(id: String) -> Result<CheckReport, AppError> {
    crate::server::orchestrator::profiles::check(&super::state()?, &id).await
}

/// W1: the registered repositories (the settings page and the new-task forms).
#[server(prefix = "/api/fn", endpoint = "list_repositories")]
pub async fn list_repositories() -> Result<Vec<Repository>, AppError> {
    crate::server::orchestrator::repositories::list(&super::state()?).await
}

/// W1: registers a directory, checked as `POST /api/v1/repositories` checks it.
#[server(prefix = "/api/fn", endpoint = "add_repository")]
pub async fn add_repository(
    path: String,
    #[server(default)] name: Option<String>,
) -> Result<Repository, AppError> {
    use crate::server::orchestrator::repositories::{self, RegisterRepository};
    let input = RegisterRepository {
        path,
        name,
        base_branch: None,
    };
    repositories::register(&super::state()?, input).await
}
