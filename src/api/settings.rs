//! Server functions behind the settings page: agent profiles (env values are write-only).

use std::collections::BTreeMap;

use leptos::prelude::*;
use leptos::server_fn::codec::Json;

use crate::model::{AgentProfile, AppError};

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
            };
            profiles::update(&state, &id, edit).await
        }
        None => {
            let input = CreateProfile {
                name,
                command,
                args,
                env: env.into_iter().filter_map(|(k, v)| Some((k, v?))).collect(),
            };
            profiles::create(&state, input).await
        }
    }
}
