//! `postgres-seed`: the common design (LangGraph's savers do the same), on the same server: the
//! full state as JSON per step, one row per checkpoint, in
//! `checkpoints (task text, seq bigint, state jsonb, primary key (task, seq))`; a commit is
//! one `INSERT` in its own (autocommit) transaction, one round trip; `load_latest` is
//! `SELECT state ... ORDER BY seq DESC LIMIT 1`, then parsing the JSON. The client is
//! `tokio-postgres`, the crate `PgStore` uses, one connection per worker thread (each on a
//! current-thread runtime of its own), statements prepared once per connection.

use std::path::Path;

use agentwal::{AgentState, State};
use plotters::style::RGBColor;
use tokio_postgres::{Client, Statement};

use super::Backend;
use super::pg_cluster::{self, Admin};
use crate::config::Config;
use crate::generator::{delta_payload, expected_state, task_id};
use crate::harness::{drive, time_loads};
use crate::measurement::Measurement;
use crate::metering::{io_counters, io_since};

pub struct PostgresSeed;

pub const POSTGRES_SEED: PostgresSeed = PostgresSeed;

/// One worker's connection, its runtime and its prepared statement (`postgres-floor` uses
/// it too).
pub(super) struct Conn {
    pub rt: tokio::runtime::Runtime,
    pub client: Client,
    pub stmt: Statement,
}

impl Conn {
    /// Connects, sets the run's schema and prepares `sql`.
    pub(super) fn open(schema: &str, sql: &str) -> Conn {
        let (rt, client) = pg_cluster::connect();
        rt.block_on(client.batch_execute(&format!("SET search_path = {schema}")))
            .expect("search_path");
        let stmt = rt.block_on(client.prepare(sql)).expect("prepare");
        Conn { rt, client, stmt }
    }
}

const INSERT: &str = "INSERT INTO checkpoints (task, seq, state) VALUES ($1, $2, $3::text::jsonb)";
/// The conversion to text is outside the `LIMIT 1`, so it runs on one row whatever the plan
/// (on a table without statistics the planner may sort all of the task's rows).
const LOAD: &str = "SELECT state::text FROM (SELECT state FROM checkpoints WHERE task = $1 \
                    ORDER BY seq DESC LIMIT 1) latest";

fn load(conn: &Conn, task: &str) -> AgentState {
    let row = conn
        .rt
        .block_on(conn.client.query_one(&conn.stmt, &[&task]))
        .expect("select");
    let json: &str = row.get(0);
    serde_json::from_str(json).expect("decode state")
}

impl Backend for PostgresSeed {
    fn name(&self) -> &'static str {
        "postgres-seed"
    }

    fn color(&self) -> RGBColor {
        RGBColor(0x17, 0xBE, 0xCF)
    }

    fn needs_postgres(&self) -> bool {
        true
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        let payload = delta_payload(threads, cfg.steps);
        let schema = pg_cluster::fresh_schema("seed");
        let admin = Admin::connect();
        admin.exec(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.checkpoints (task text, seq bigint, \
             state jsonb, PRIMARY KEY (task, seq))"
        ));
        let io = io_counters();
        let lsn = admin.wal_lsn();
        let times = drive(
            threads,
            cfg.steps,
            |_| (Conn::open(&schema, INSERT), AgentState::default()),
            |(conn, state), task, seq, delta| {
                state.apply(delta);
                let json = serde_json::to_string(&*state).expect("encode state");
                let n = conn
                    .rt
                    .block_on(
                        conn.client
                            .execute(&conn.stmt, &[&task, &(seq as i64), &json]),
                    )
                    .expect("insert");
                assert_eq!(n, 1);
            },
        );
        let wal = admin.wal_since(&lsn);
        let mut m = Measurement::from_run(&times, io_since(io), dir, payload);
        m.wal_bytes = Some(wal);
        let bytes = admin.schema_bytes(&schema);
        m.disk_bytes = bytes;
        m.disk_allocated = bytes;
        let probe = task_id(0);
        let (rows, read) = admin.floats2(&format!(
            "SELECT 1::float8, octet_length(state::text)::float8 FROM {schema}.checkpoints \
             WHERE task = '{probe}' ORDER BY seq DESC LIMIT 1"
        ));
        admin.explain(
            "postgres-seed's load",
            &format!(
                "SELECT state::text FROM (SELECT state FROM {schema}.checkpoints \
                 WHERE task = '{probe}' ORDER BY seq DESC LIMIT 1) latest"
            ),
        );
        m.load_rows = Some(rows);
        m.load_read_bytes = Some(read);
        let (warm, cold, recovery) = time_loads(
            cfg,
            || Conn::open(&schema, LOAD),
            |conn| load(conn, &probe),
            &expected_state(0, cfg.steps),
        );
        m.load_warm_us = Some(warm);
        m.load_cold_us = Some(cold);
        m.recovery_ms = Some(recovery);
        admin.drop_schema(&schema);
        m
    }
}
