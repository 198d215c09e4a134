//! Asking and answering (L6–L19): ask, waiters, detach/expiry, respond (claim, deliver,
//! restore). The guarded SQL lives in `repo::authority`.

pub mod ask;
pub mod asking;
pub mod elicitation;
pub mod handoff;
pub mod read;
pub mod recovery;
pub mod respond;
pub mod takeover;
