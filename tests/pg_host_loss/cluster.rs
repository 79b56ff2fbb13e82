//! The primary and its synchronous standby, the options and addresses, and `psql`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::env::env_u64;
use crate::common::pg::{cluster, signal};
use agentwal::postgres::PgOptions;

const ROUNDS_ENV: &str = "AGENTWAL_PG_HOST_LOSS_ROUNDS";

/// Child mode: the primary's socket directory.
pub(crate) const CHILD_HOST_ENV: &str = "AGENTWAL_PG_HOST_LOSS_CHILD_HOST";

const SCHEMA: &str = "host_loss";

pub(crate) const TASK: &str = "probe";

pub(crate) fn rounds() -> u64 {
    env_u64(ROUNDS_ENV).unwrap_or(3)
}

pub(crate) fn options(deadline: Duration) -> PgOptions {
    PgOptions {
        deadline,
        snapshot_every: 8,
        schema: SCHEMA.into(),
        ..PgOptions::default()
    }
}

pub(crate) fn url(host: &str) -> String {
    format!("host={host} user=postgres dbname=postgres")
}

// ---------------------------------------------------------------------------------------
// The pair of clusters

/// The value of `name` in the `export NAME='value' ...` line pg-cluster.sh prints.
fn exported(out: &str, name: &str) -> String {
    let key = format!("{name}='");
    let at = out
        .find(&key)
        .unwrap_or_else(|| panic!("pg-cluster.sh printed no {name}: {out:?}"))
        + key.len();
    let len = out[at..].find('\'').expect("a closing quote");
    out[at..at + len].to_string()
}

/// A primary and its synchronous standby, both stopped and removed on drop.
pub(crate) struct Pair {
    pub(crate) primary: String,
    pub(crate) standby: String,
}

impl Pair {
    pub(crate) fn start() -> Pair {
        let primary = exported(&cluster(&["start"]), "AGENTWAL_PG_HOST");
        // Removed on drop even if the standby fails to come up.
        let mut pair = Pair {
            primary,
            standby: String::new(),
        };
        pair.standby = exported(
            &cluster(&["standby", &pair.primary]),
            "AGENTWAL_PG_STANDBY_HOST",
        );
        pair
    }

    pub(crate) fn pids(base: &str) -> Vec<String> {
        cluster(&["pids", base])
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// The primary's host is lost: every one of its processes SIGKILLed at once.
    pub(crate) fn kill_primary(&self) {
        let pids = Pair::pids(&self.primary);
        assert!(!pids.is_empty(), "the primary is not running");
        signal("-KILL", &pids);
    }

    pub(crate) fn promote(&self) {
        cluster(&["promote", &self.standby]);
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for base in [&self.standby, &self.primary] {
            if !base.is_empty() {
                // Thaws a frozen server first; errors are not the test's subject here.
                let _ = Command::new("bash")
                    .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-cluster.sh"))
                    .args(["stop", base])
                    .output();
            }
        }
    }
}

/// One value from `psql` on the server at `host`.
pub(crate) use crate::common::pg::psql_at as psql;
