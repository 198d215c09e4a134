//! Shared data transfer types (serde only): what crosses the wire between the server, the
//! browser and API clients. Shapes follow `shared/spec/api.md`; nothing here touches a database.

mod agent;
mod changes;
mod envelope_parse;
mod error;
pub mod form;
pub mod limits;
mod notification;
mod pending;
mod repository;
mod session;
mod summary;
mod task;
mod transcript;
mod workflow;

pub use agent::{
    AgentInfo, AgentPreset, AuthMethod, Capabilities, CheckReport, McpTransports, PromptContent,
};
pub use changes::{ChangedFile, Changes, DiffLine, FileDiff, Hunk};
pub use envelope_parse::{Push, session_request};
pub use error::AppError;
pub use notification::{Envelope, EnvelopeBody, MessageChange, Notification, PendingSnapshot};
pub use pending::{PendingAction, PendingActionRevision};
pub use repository::Repository;
pub use session::{Session, SessionState};
pub use summary::{LastError, PrimarySessionRef, Summary, SummaryBody};
pub use task::{Task, TaskPage, TaskQuery};
pub use transcript::{
    Answer, Bundle, BundleStatus, Message, MessageAuthor, MessageKind, MessagePage, Permission,
    PermissionOption, Question, QuestionOption, RESUME_MARKER, Response, Turn,
};
pub use workflow::{AgentProfile, Workflow, WorkflowStep};

/// Parses a `snake_case` wire/database name into an enum, listing the accepted values on error.
macro_rules! wire_enum {
    ($name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        concat!("unknown ", stringify!($name), " {:?} (expected one of: {})"),
                        other,
                        [$($text),+].join(", ")
                    )),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                s.parse()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use wire_enum;
