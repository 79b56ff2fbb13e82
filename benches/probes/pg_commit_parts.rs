//! Where the time of a `PgStore::commit` goes, next to the least a durable commit costs on
//! the same server. Three writers, each on its own task, interleaved round by round (the
//! order rotates, because a shared disk's fsync latency drifts):
//!
//! - `agentwal`: `PgStore::commit` of the workload benchmark's deltas (one handle, default
//!   `PgOptions`), split into the commits that wrote a snapshot, the commits after which the
//!   handle pruned `writes` (every 64th write of a handle, docs/postgres.md §4) and the rest;
//! - `insert`: the delta's bytes as one prepared autocommit `INSERT` (the workload
//!   benchmark's `postgres-floor`);
//! - `row+insert`: what the data model needs at least: one prepared statement that updates
//!   the task's row (its latest seq) and inserts the checkpoint, as agentwal's commit does
//!   with its checks and counters.
//!
//! ```text
//! eval "$(bash scripts/pg-cluster.sh start)"
//! cargo bench --features tokio,postgres --bench pg_commit_parts
//! ```
//!
//! Environment: `AGENTWAL_PG_HOST` (the socket directory; required), `ROUNDS` (default 8),
//! `STEPS` per task and round (default 200). Prints each writer's mean and median commit,
//! the ratios to `insert` per round and their median, and the share of agentwal's time in
//! snapshot and prune commits.

use std::time::Instant;

use agentwal::postgres::{PgOptions, PgStore};
use tokio_postgres::{Client, NoTls, Statement};

#[path = "../workload/generator.rs"]
#[allow(dead_code)] // the probe uses only the deltas and the task ids
mod generator;

/// Every this many writes a handle prunes `writes` (`PRUNE_EVERY` in
/// src/postgres/protocol.rs): the probe counts the commits after which it did.
const PRUNE_EVERY: usize = 64;

fn url() -> String {
    let host = std::env::var("AGENTWAL_PG_HOST").unwrap_or_else(|_| {
        panic!(
            "AGENTWAL_PG_HOST is not set: run `eval \"$(bash scripts/pg-cluster.sh start)\"` first"
        )
    });
    format!("host={host} user=postgres dbname=postgres")
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

/// Mean and median of `v`, in µs.
fn mean_p50(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (
        s.iter().sum::<f64>() / s.len().max(1) as f64,
        s[s.len() / 2],
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The two plain writers' connection and statements.
struct Plain {
    rt: tokio::runtime::Runtime,
    client: Client,
    insert: Statement,
    row_insert: Statement,
}

impl Plain {
    fn open(schema: &str) -> Plain {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (client, conn) = rt
            .block_on(tokio_postgres::connect(&url(), NoTls))
            .expect("connect");
        rt.spawn(conn);
        let ddl = format!(
            "CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.floor (task text, seq bigint, body bytea); \
             CREATE TABLE {schema}.tasks (task text PRIMARY KEY, latest_seq bigint NOT NULL); \
             CREATE TABLE {schema}.checkpoints (task text, seq bigint, body bytea, \
               PRIMARY KEY (task, seq))"
        );
        rt.block_on(client.batch_execute(&ddl))
            .expect("create the plain tables");
        let insert = format!("INSERT INTO {schema}.floor (task, seq, body) VALUES ($1, $2, $3)");
        let row_insert = format!(
            "WITH u AS (UPDATE {schema}.tasks SET latest_seq = latest_seq + 1 \
               WHERE task = $1 AND latest_seq = $2::int8 - 1 RETURNING latest_seq) \
             INSERT INTO {schema}.checkpoints (task, seq, body) SELECT $1, latest_seq, $3 FROM u"
        );
        let insert = rt.block_on(client.prepare(&insert)).expect("prepare");
        let row_insert = rt.block_on(client.prepare(&row_insert)).expect("prepare");
        Plain {
            rt,
            client,
            insert,
            row_insert,
        }
    }

    /// One durable commit of `body` as seq `seq` of `task`, by `stmt`; its time in µs.
    fn commit(&self, stmt: &Statement, task: &str, seq: i64, body: &[u8]) -> f64 {
        let t = Instant::now();
        let n = self
            .rt
            .block_on(self.client.execute(stmt, &[&task, &seq, &body]))
            .expect("plain commit");
        assert_eq!(n, 1, "one row written");
        t.elapsed().as_secs_f64() * 1e6
    }
}

/// One writer's commit times, agentwal's by kind.
#[derive(Default)]
struct Times {
    all: Vec<f64>,
    snapshot: Vec<f64>,
    prune: Vec<f64>,
}

fn main() {
    let rounds = env_usize("ROUNDS", 8);
    let steps = env_usize("STEPS", 200);
    let schema = format!("commit_parts_{}", std::process::id());
    let plain = Plain::open(&format!("{schema}_plain"));
    let options = PgOptions {
        schema: schema.clone(),
        ..PgOptions::default()
    };
    let store: PgStore = PgStore::open(&url(), options).expect("open PgStore");
    let (mut agentwal, mut insert, mut row_insert) = (Times::default(), vec![], vec![]);
    let (mut ratio_mean, mut ratio_p50, mut model_mean) = (vec![], vec![], vec![]);
    let mut writes = 0;
    for round in 0..rounds {
        let task = generator::task_id(round);
        let deltas: Vec<_> = (0..steps)
            .map(|s| generator::make_delta(round, s))
            .collect();
        let bodies: Vec<Vec<u8>> = deltas
            .iter()
            .map(|d| postcard::to_allocvec(d).expect("encode"))
            .collect();
        plain
            .rt
            .block_on(plain.client.execute(
                &format!("INSERT INTO {schema}_plain.tasks VALUES ($1, 0)"),
                &[&task],
            ))
            .expect("the plain task row");
        let (mut a, mut i, mut r) = (vec![], vec![], vec![]);
        for turn in 0..3 {
            match (round + turn) % 3 {
                0 => {
                    for d in &deltas {
                        let t = Instant::now();
                        store.commit(&task, d).expect("PgStore commit");
                        a.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
                1 => {
                    for (s, b) in bodies.iter().enumerate() {
                        i.push(plain.commit(&plain.insert, &task, s as i64 + 1, b));
                    }
                }
                _ => {
                    for (s, b) in bodies.iter().enumerate() {
                        r.push(plain.commit(&plain.row_insert, &task, s as i64 + 1, b));
                    }
                }
            }
        }
        let snapshots: Vec<u64> = store
            .list_checkpoints(&task)
            .expect("list")
            .iter()
            .filter(|c| c.snapshot)
            .map(|c| c.seq)
            .collect();
        for (s, t) in a.iter().enumerate() {
            writes += 1;
            if snapshots.contains(&(s as u64 + 1)) {
                agentwal.snapshot.push(*t);
            } else if writes % PRUNE_EVERY == 0 {
                agentwal.prune.push(*t);
            }
        }
        let ((am, ap), (im, ip), (rm, _)) = (mean_p50(&a), mean_p50(&i), mean_p50(&r));
        ratio_mean.push(am / im);
        ratio_p50.push(ap / ip);
        model_mean.push(rm / im);
        agentwal.all.extend(a);
        insert.extend(i);
        row_insert.extend(r);
    }
    let report = |name: &str, v: &[f64]| {
        let (m, p) = mean_p50(v);
        println!(
            "{name:<24} n={:<6} mean {m:>7.0} µs  p50 {p:>7.0} µs",
            v.len()
        );
    };
    println!("{rounds} rounds of {steps} commits per writer, interleaved");
    report("insert", &insert);
    report("row+insert", &row_insert);
    report("agentwal", &agentwal.all);
    report("agentwal: snapshots", &agentwal.snapshot);
    report("agentwal: prunes", &agentwal.prune);
    let total: f64 = agentwal.all.iter().sum();
    let share = |v: &[f64]| 100.0 * v.iter().sum::<f64>() / total;
    println!(
        "agentwal's time in snapshot commits {:.1}%, in prune commits {:.1}%",
        share(&agentwal.snapshot),
        share(&agentwal.prune)
    );
    println!(
        "per-round medians: agentwal/insert mean {:.2}x, p50 {:.2}x; row+insert/insert mean {:.2}x",
        median(ratio_mean),
        median(ratio_p50),
        median(model_mean)
    );
    drop(store);
    plain
        .rt
        .block_on(plain.client.batch_execute(&format!(
            "DROP SCHEMA {schema} CASCADE; DROP SCHEMA {schema}_plain CASCADE"
        )))
        .expect("drop the schemas");
}
