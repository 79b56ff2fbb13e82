//! `agentwal-postgres`: agentwal on PostgreSQL (`agentwal::postgres::PgStore`, default
//! `PgOptions` but for the pool), in a fresh schema of the run's cluster. One handle shared
//! by every worker thread, its pool keeping up to T idle connections (the default keeps 8;
//! a user running T workers on one handle would raise it to T).

use std::path::Path;

use agentwal::AgentState;
use agentwal::postgres::{PgOptions, PgStore};
use plotters::style::RGBColor;

use super::Backend;
use super::pg_cluster::{self, Admin};
use crate::config::Config;
use crate::generator::{delta_payload, expected_state, task_id};
use crate::harness::{drive, time_loads};
use crate::measurement::Measurement;
use crate::metering::{io_counters, io_since};

pub struct AgentwalPostgres;

pub const AGENTWAL_POSTGRES: AgentwalPostgres = AgentwalPostgres;

impl Backend for AgentwalPostgres {
    fn name(&self) -> &'static str {
        "agentwal-postgres"
    }

    fn color(&self) -> RGBColor {
        RGBColor(0x94, 0x67, 0xBD)
    }

    fn needs_postgres(&self) -> bool {
        true
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        let payload = delta_payload(threads, cfg.steps);
        let schema = pg_cluster::fresh_schema("agentwal");
        let options = PgOptions {
            schema: schema.clone(),
            pool_idle_max: threads.max(1),
            ..PgOptions::default()
        };
        let url = pg_cluster::url();
        let admin = Admin::connect();
        let store: PgStore = PgStore::open(url, options.clone()).expect("open PgStore");
        let io = io_counters();
        let lsn = admin.wal_lsn();
        let times = drive(
            threads,
            cfg.steps,
            |_| (),
            |_, task, seq, delta| {
                let committed = store.commit(task, delta).expect("PgStore commit");
                debug_assert_eq!(committed, seq);
            },
        );
        let wal = admin.wal_since(&lsn);
        drop(store);
        let mut m = Measurement::from_run(&times, io_since(io), dir, payload);
        m.wal_bytes = Some(wal);
        let bytes = admin.schema_bytes(&schema);
        m.disk_bytes = bytes;
        m.disk_allocated = bytes;
        let probe = task_id(0);
        // What a load of task 0 reads: the rows from its newest snapshot on (docs/postgres.md §2).
        let (rows, read) = admin.floats2(&format!(
            "SELECT count(*)::float8, coalesce(sum(octet_length(body)), 0)::float8 \
             FROM {schema}.checkpoints WHERE task = '{probe}'::bytea AND seq >= coalesce( \
             (SELECT max(seq) FROM {schema}.checkpoints WHERE task = '{probe}'::bytea AND snapshot), 0)"
        ));
        admin.explain(
            "agentwal-postgres's fold",
            &format!(
                "SELECT seq, snapshot, schema_version, body, created_at_ms FROM {schema}.checkpoints \
                 WHERE task = '{probe}'::bytea AND seq <= {s} AND seq >= coalesce((SELECT max(seq) \
                 FROM {schema}.checkpoints WHERE task = '{probe}'::bytea AND seq <= {s} AND snapshot), 0) \
                 ORDER BY seq",
                s = cfg.steps
            ),
        );
        m.load_rows = Some(rows);
        m.load_read_bytes = Some(read);
        let (warm, cold, recovery) = time_loads(
            cfg,
            || PgStore::<AgentState>::open(url, options.clone()).expect("reopen PgStore"),
            |store| {
                store
                    .load_latest(&probe)
                    .expect("load_latest")
                    .expect("task 0 exists")
                    .state
            },
            &expected_state(0, cfg.steps),
        );
        m.load_warm_us = Some(warm);
        m.load_cold_us = Some(cold);
        m.recovery_ms = Some(recovery);
        admin.drop_schema(&schema);
        m
    }
}
