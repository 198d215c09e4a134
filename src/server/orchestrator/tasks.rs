use crate::model::{AppError, Task};
use crate::server::repo::NewTask;
use crate::server::state::AppState;
use crate::server::summary::task_view;

pub struct CreateTask {
    pub title: String,
    pub description: String,
    pub workflow_id: Option<String>,
    pub step_id: Option<String>,
}

/// Creates a task on its workflow (the default one unless given) at the given step (the first
/// one unless given). Everything is validated before the write.
pub async fn create_task(state: &AppState, input: CreateTask) -> Result<Task, AppError> {
    let title = input.title.trim();
    if title.is_empty() {
        return Err(AppError::BadRequest("title must not be empty".into()));
    }
    let workflow = match &input.workflow_id {
        Some(id) => state
            .repo
            .list_workflows()
            .await?
            .into_iter()
            .find(|w| &w.workflow.id == id)
            .ok_or_else(|| AppError::BadRequest(format!("unknown workflow_id {id:?}")))?,
        None => state
            .repo
            .default_workflow()
            .await?
            .ok_or_else(|| AppError::Internal("the default workflow is missing".into()))?,
    };
    let step_id = match &input.step_id {
        Some(id) if workflow.steps.iter().any(|s| &s.id == id) => id.clone(),
        Some(id) => {
            return Err(AppError::BadRequest(format!(
                "step_id {id:?} is not a step of workflow {:?}",
                workflow.workflow.id
            )));
        }
        None => workflow
            .steps
            .first()
            .map(|s| s.id.clone())
            .ok_or_else(|| AppError::Internal("workflow without steps".into()))?,
    };
    let record = state
        .repo
        .create_task(
            &NewTask {
                title: title.to_string(),
                description: input.description,
                workflow_id: Some(workflow.workflow.id.clone()),
                step_id: Some(step_id),
            },
            state.clock.now(),
        )
        .await?;
    task_view::get_task(state, &record.id).await
}
