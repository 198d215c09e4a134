//! Components. They render what server functions and (later) the WebSocket store give them;
//! decisions live in `crate::client`.

pub mod board;
pub mod chat;
pub mod clarification;
pub mod drawer;
pub mod live;
pub mod sidebar;
pub mod task;
