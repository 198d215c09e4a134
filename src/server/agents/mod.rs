//! The ACP client runtime: one agent process per session, outbound only. Arrives with the
//! agents issue.
