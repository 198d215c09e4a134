//! Test fixtures: real databases. SQLite gets a fresh file per test; PostgreSQL gets a fresh
//! database per test in the server named by `TEST_POSTGRES_URL` (scripts/test.sh starts a
//! private cluster and sets it). Without it, PostgreSQL tests fail unless
//! `TURNSTILE_SKIP_POSTGRES=1` ([`skip_postgres`]).
#![allow(dead_code)]

pub mod api;
#[macro_use]
pub mod db;
#[macro_use]
pub mod server;
pub mod wait;
pub mod ws;

// Every fixture by its plain name (`support::TestServer`); a binary uses what it needs.
#[allow(unused_imports)]
pub use api::*;
#[allow(unused_imports)]
pub use db::*;
#[allow(unused_imports)]
pub use server::*;
#[allow(unused_imports)]
pub use wait::*;
