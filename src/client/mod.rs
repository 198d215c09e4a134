//! Pure client logic (no `view!`), unit-tested natively and shared by the desktop sidebar and
//! the phone drawer: which session a click opens (N1/N2) and which snapshot is newer (P9).

pub mod answer_draft;
pub mod backoff;
pub mod notify;
pub mod selection;
pub mod store;
pub mod text;
