//! The `agentwal` binary on PostgreSQL: the read commands on a URL against the local store
//! it was migrated from, `migrate` (forks, retention with a mid-chain first checkpoint,
//! pending and finished calls, a second run, an interrupted one, a conflict), read-only
//! handles that cannot write, damage found by `verify`, and bad addresses.

#![cfg(feature = "postgres")]

#[path = "../common/mod.rs"]
mod common;

mod helpers;
mod migrate;
mod read_commands;
mod verify;
