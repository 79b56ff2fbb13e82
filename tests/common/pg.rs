//! The PostgreSQL server of the tests: `scripts/test.sh` starts a throwaway cluster
//! (`scripts/pg-cluster.sh`) and names its socket directory in `AGENTWAL_PG_HOST`. A test
//! that needs the server and finds no such variable fails, saying how to run it: it is
//! never skipped.

use std::sync::atomic::{AtomicU64, Ordering};

use agentwal::State;
use agentwal::postgres::{PgOptions, PgStore};

/// The variable naming the server's socket directory.
pub const HOST_ENV: &str = "AGENTWAL_PG_HOST";

/// The socket directory of the test server; panics (fails the test) if it is not set.
pub fn host() -> String {
    std::env::var(HOST_ENV).unwrap_or_else(|_| {
        panic!(
            "{HOST_ENV} is not set: the PostgreSQL tests need a server. Run them through \
             `bash scripts/test.sh`, which starts a throwaway cluster, or start one with \
             `eval \"$(scripts/pg-cluster.sh start)\"` first"
        )
    })
}

/// The test server's address, as `PgStore::open` takes it.
pub fn url() -> String {
    format!("host={} user=postgres dbname=postgres", host())
}

/// A schema name no other test of any run uses, from `name`.
pub fn fresh_schema(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(36)
        .collect();
    format!("t_{clean}_{}_{n}", std::process::id())
}

/// A store in a fresh schema of the test server.
pub fn store<S: State>(name: &str, options: PgOptions) -> PgStore<S> {
    let options = PgOptions {
        schema: fresh_schema(name),
        ..options
    };
    PgStore::open(&url(), options).expect("open a PgStore on the test server")
}
