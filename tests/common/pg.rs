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

/// One value from `psql` on the test server: what `sql` printed (unaligned, tuples only);
/// fails the test, with psql's error, if it fails.
pub fn psql(sql: &str) -> String {
    psql_at(&host(), sql)
}

/// [`psql`] on the server whose socket directory is `host`.
pub fn psql_at(host: &str, sql: &str) -> String {
    let out = std::process::Command::new("runuser")
        .args(["-u", "postgres", "--", "psql", "-h", host])
        .args(["-U", "postgres", "-d", "postgres", "-qAt", "-c", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
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

// ---------------------------------------------------------------------------------------
// What the fault probes share (tests/pg_faults.rs, pg_host_loss/, pg_workers/).

/// The probes' seed: `AGENTWAL_PG_PROBE_SEED`, else the clock (printed by each probe, so a
/// failure's schedule can be replayed).
pub fn probe_seed() -> u64 {
    crate::common::env::env_u64("AGENTWAL_PG_PROBE_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    })
}

/// The probes' step `n`: its number as a message and a variable, so a state shows exactly
/// which steps it holds.
pub fn probe_step(n: u64) -> agentwal::AgentDelta {
    agentwal::AgentDelta::default()
        .message(agentwal::Message::user(n.to_string()))
        .set("n", n as i64)
}

/// Runs `scripts/pg-cluster.sh` with `args` and returns what it printed; fails the test
/// (with the script's error) if it fails.
pub fn cluster(args: &[&str]) -> String {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-cluster.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .expect("run scripts/pg-cluster.sh");
    assert!(
        out.status.success(),
        "pg-cluster.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends `sig` (e.g. `-KILL`) to `pids`. A process may have exited since it was listed:
/// not an error, so the outcome is not checked.
pub fn signal<P: AsRef<std::ffi::OsStr>>(sig: &str, pids: &[P]) {
    let _ = std::process::Command::new("kill")
        .arg(sig)
        .args(pids)
        .stderr(std::process::Stdio::null())
        .status();
}
