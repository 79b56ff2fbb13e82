//! The throwaway PostgreSQL cluster the PostgreSQL peers run against: started once per run
//! through `scripts/pg-cluster.sh start` (initdb in a temporary directory, a unix socket
//! there, no TCP port, every other setting at its default: `fsync = on`,
//! `synchronous_commit = on`, so a COMMIT returns once its WAL is flushed, durable per
//! commit like agentwal's `SyncMode::Always`), and stopped and removed when the [`Cluster`]
//! guard drops, which `main` holds, so also when the run panics.
//!
//! Also the few administrative statements the peers need (sizes, VACUUM, WAL position),
//! on a connection of their own.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use tokio_postgres::{Client, NoTls};

/// The cluster's connection string, set by [`Cluster::start`].
static URL: OnceLock<String> = OnceLock::new();

/// The running cluster; dropping it stops the server and removes its directory.
pub struct Cluster {
    base: String,
    script: String,
    pub version: String,
    pub settings: String,
}

/// The connection string of the running cluster (libpq key-value words).
pub fn url() -> &'static str {
    URL.get()
        .expect("the PostgreSQL cluster was not started (main starts it for a PG peer)")
}

impl Cluster {
    pub fn start() -> Cluster {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scripts/pg-cluster.sh")
            .display()
            .to_string();
        let out = Command::new("bash")
            .args([&script, "start"])
            .output()
            .expect("run scripts/pg-cluster.sh");
        assert!(
            out.status.success(),
            "scripts/pg-cluster.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env = String::from_utf8_lossy(&out.stdout);
        let base = env
            .split_whitespace()
            .find_map(|w| w.strip_prefix("AGENTWAL_PG_HOST="))
            .expect("pg-cluster.sh prints AGENTWAL_PG_HOST")
            .trim_matches('\'')
            .to_string();
        let url = format!("host={base} user=postgres dbname=postgres");
        URL.set(url).expect("one cluster per run");
        let mut cluster = Cluster {
            base,
            script,
            version: String::new(),
            settings: String::new(),
        };
        let admin = Admin::connect();
        cluster.version = admin.text("SHOW server_version");
        let show = |name: &str| format!("{name} = {}", admin.text(&format!("SHOW {name}")));
        cluster.settings = [
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "full_page_writes",
            "shared_buffers",
            "max_wal_size",
            "max_connections",
            "default_toast_compression",
        ]
        .map(show)
        .join(", ");
        eprintln!(
            "PostgreSQL {} cluster at {} ({})",
            cluster.version, cluster.base, cluster.settings
        );
        cluster
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let ok = Command::new("bash")
            .args([&self.script, "stop", &self.base])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            eprintln!("PostgreSQL cluster at {} stopped and removed", self.base);
        } else {
            eprintln!("could not stop the PostgreSQL cluster at {}", self.base);
        }
    }
}

/// A connection for the benchmark's own statements, on a runtime of its own.
pub struct Admin {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl Admin {
    pub fn connect() -> Admin {
        let (rt, client) = connect();
        Admin { rt, client }
    }

    pub fn exec(&self, sql: &str) {
        self.rt
            .block_on(self.client.batch_execute(sql))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    pub fn text(&self, sql: &str) -> String {
        let row = self
            .rt
            .block_on(self.client.query_one(sql, &[]))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        row.get(0)
    }

    pub fn float(&self, sql: &str) -> f64 {
        let row = self
            .rt
            .block_on(self.client.query_one(sql, &[]))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        row.get(0)
    }

    /// The WAL insert position, for [`Admin::wal_since`].
    pub fn wal_lsn(&self) -> String {
        self.text("SELECT pg_current_wal_insert_lsn()::text")
    }

    /// WAL bytes the server generated since `lsn` (every session's, autovacuum's too).
    pub fn wal_since(&self, lsn: &str) -> f64 {
        self.float(&format!(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '{lsn}'::pg_lsn)::float8"
        ))
    }

    /// VACUUMs and ANALYZEs every table of `schema` (what autovacuum does to a live table;
    /// the statistics also give the loads after it their index plans), CHECKPOINTs, and returns the bytes its tables take
    /// (`pg_total_relation_size`: heap, TOAST, indexes, free-space and visibility maps).
    pub fn schema_bytes(&self, schema: &str) -> f64 {
        let tables: Vec<String> = self
            .rt
            .block_on(self.client.query(
                "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables \
                 WHERE schemaname = $1",
                &[&schema],
            ))
            .expect("list tables")
            .iter()
            .map(|r| r.get(0))
            .collect();
        for t in &tables {
            self.exec(&format!("VACUUM (ANALYZE) {t}"));
        }
        self.exec("CHECKPOINT");
        self.float(&format!(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::float8 FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = '{schema}' AND c.relkind = 'r'"
        ))
    }

    /// Two numbers from one row of `sql`.
    pub fn floats2(&self, sql: &str) -> (f64, f64) {
        let row = self
            .rt
            .block_on(self.client.query_one(sql, &[]))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        (row.get(0), row.get(1))
    }

    /// With `AGENTWAL_BENCH_PG_EXPLAIN=1` (profiling), prints `EXPLAIN (ANALYZE, BUFFERS)`
    /// of `sql`: how much of a load is the server's.
    pub fn explain(&self, what: &str, sql: &str) {
        if std::env::var_os("AGENTWAL_BENCH_PG_EXPLAIN").is_none() {
            return;
        }
        let rows = self
            .rt
            .block_on(
                self.client
                    .query(&format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"), &[]),
            )
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        eprintln!("EXPLAIN ANALYZE of {what}:");
        for r in rows {
            eprintln!("    {}", r.get::<_, String>(0));
        }
    }

    pub fn drop_schema(&self, schema: &str) {
        self.exec(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    }
}

/// A new connection to the cluster on a current-thread runtime of its own: the runtime
/// drives the connection whenever the caller blocks on it.
pub fn connect() -> (tokio::runtime::Runtime, Client) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (client, conn) = rt
        .block_on(
            url()
                .parse::<tokio_postgres::Config>()
                .expect("url")
                .connect(NoTls),
        )
        .expect("connect to the PostgreSQL cluster");
    rt.spawn(async move {
        if let Err(e) = conn.await {
            eprintln!("postgres connection: {e}");
        }
    });
    (rt, client)
}

/// A fresh schema name for one run of one peer.
pub fn fresh_schema(peer: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("bench_{peer}_{}", N.fetch_add(1, Ordering::Relaxed))
}
