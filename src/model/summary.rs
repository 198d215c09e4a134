use serde::{Deserialize, Serialize};

use super::{PendingAction, SessionState};

/// P3: the bounded, versioned task status summary. `revision` and `updated_at` live in their
/// own columns; everything else is the body, compared as a whole for "equal content".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub revision: i64,
    pub updated_at: String,
    #[serde(flatten)]
    pub body: SummaryBody,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SummaryBody {
    pub pending_action: Option<PendingAction>,
    pub primary_session: Option<PrimarySessionRef>,
    /// "generating" | "idle" | null
    pub activity: Option<String>,
    pub last_error: Option<LastError>,
    pub queued_prompt_count: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrimarySessionRef {
    pub id: String,
    pub state: SessionState,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LastError {
    pub message: String,
    pub occurred_at: String,
}
