//! W1: registering, editing and deleting repositories. Every input is checked before anything
//! is written: the directory against the workspace roots, what git finds there, the branch.

use crate::model::limits::{self, at_most};
use crate::model::{AppError, Repository};
use crate::server::repo::{Deleted, NewRepository, RepositoryRecord};
use crate::server::state::AppState;
use crate::server::workspace::git::{self, Found};

pub struct RegisterRepository {
    pub path: String,
    pub name: Option<String>,
    pub base_branch: Option<String>,
}

#[derive(serde::Deserialize)]
pub struct RepositoryEdit {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub base_branch: Option<String>,
}

fn name_of(name: &str) -> Result<String, AppError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(AppError::BadRequest("name must not be empty".into()));
    }
    at_most("name", name, limits::TITLE_CHARS).map_err(AppError::BadRequest)?;
    Ok(name.to_string())
}

/// Runs a blocking git inspection on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, AppError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AppError::Internal(format!("git stopped: {e}")))
}

/// W1: `branch` must be a local branch with a commit of the git repository at `path`.
pub(super) async fn existing_branch(path: &str, branch: &str) -> Result<(), AppError> {
    let (dir, name) = (std::path::PathBuf::from(path), branch.to_string());
    let found = blocking(move || git::has_branch(&dir, &name))
        .await?
        .map_err(AppError::Unprocessable)?;
    if found {
        Ok(())
    } else {
        Err(AppError::Unprocessable(format!(
            "the repository has no branch {branch:?} with a commit"
        )))
    }
}

/// `POST /repositories`.
pub async fn register(state: &AppState, input: RegisterRepository) -> Result<Repository, AppError> {
    let dir = state.runtime.workspaces.directory(&input.path)?;
    let name = match &input.name {
        Some(name) => name_of(name)?,
        None => name_of(&dir.file_name().map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ))?,
    };
    let inspected = dir.clone();
    let found = blocking(move || git::inspect(&inspected))
        .await?
        .map_err(|git::Refused(why)| AppError::Unprocessable(why))?;
    let path = dir
        .to_str()
        .ok_or_else(|| AppError::Unprocessable(format!("{} is not valid UTF-8", dir.display())))?;
    let base_branch = match (found.clone(), input.base_branch) {
        (Found::Plain, None) => None,
        (Found::Plain, Some(_)) => {
            return Err(AppError::Unprocessable(
                "a plain directory has no branches: leave base_branch out".into(),
            ));
        }
        (Found::Git { default_branch }, given) => {
            let branch = given.or(default_branch).ok_or_else(|| {
                AppError::Unprocessable("HEAD is detached: name the base_branch".into())
            })?;
            existing_branch(path, &branch).await?;
            Some(branch)
        }
    };
    let record = state
        .repo
        .create_repository(
            &NewRepository {
                name,
                path: path.to_string(),
                git: found != Found::Plain,
                base_branch,
            },
            state.clock.now(),
        )
        .await?
        .ok_or_else(|| AppError::Conflict(format!("{path} is registered already")))?;
    Ok(record.to_dto())
}

pub async fn list(state: &AppState) -> Result<Vec<Repository>, AppError> {
    Ok(state
        .repo
        .list_repositories()
        .await?
        .iter()
        .map(RepositoryRecord::to_dto)
        .collect())
}

pub async fn get(state: &AppState, id: &str) -> Result<Repository, AppError> {
    Ok(found(state, id).await?.to_dto())
}

async fn found(state: &AppState, id: &str) -> Result<RepositoryRecord, AppError> {
    state
        .repo
        .get_repository(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("repository {id}")))
}

/// `PATCH /repositories/{id}`: the name and, for a git repository, the base branch of tasks
/// created from now on.
pub async fn update(
    state: &AppState,
    id: &str,
    edit: RepositoryEdit,
) -> Result<Repository, AppError> {
    let current = found(state, id).await?;
    let name = match &edit.name {
        Some(name) => name_of(name)?,
        None => current.name.clone(),
    };
    let base_branch = match edit.base_branch {
        Some(_) if !current.git => {
            return Err(AppError::Unprocessable(
                "a plain directory has no branches".into(),
            ));
        }
        Some(branch) => {
            existing_branch(&current.path, &branch).await?;
            Some(branch)
        }
        None => current.base_branch.clone(),
    };
    state
        .repo
        .update_repository(id, &name, base_branch.as_deref())
        .await?
        .map(|r| r.to_dto())
        .ok_or_else(|| AppError::NotFound(format!("repository {id}")))
}

/// `DELETE /repositories/{id}`: refused (409) while tasks use it.
pub async fn delete(state: &AppState, id: &str) -> Result<(), AppError> {
    match state.repo.delete_repository(id).await? {
        Deleted::Deleted => Ok(()),
        Deleted::InUse => Err(AppError::Conflict(format!(
            "repository {id} is used by tasks: delete them first"
        ))),
        Deleted::NotFound => Err(AppError::NotFound(format!("repository {id}"))),
    }
}
