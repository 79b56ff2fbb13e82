//! `postgres-floor`: the least a durable commit on PostgreSQL costs, on the same server:
//! each step's delta (postcard, the bytes `agentwal-postgres` stores) as one `INSERT` in its
//! own (autocommit) transaction, one round trip and one WAL flush, into
//! `floor (task text, seq bigint, body bytea, primary key (task, seq))`, by a statement
//! prepared once per connection. Nothing is read back: it has no loads, and no state.

use std::path::Path;

use plotters::style::RGBColor;

use super::Backend;
use super::pg_cluster::{self, Admin};
use super::postgres_seed::Conn;
use crate::config::Config;
use crate::generator::delta_payload;
use crate::harness::drive;
use crate::measurement::Measurement;
use crate::metering::{io_counters, io_since};

pub struct PostgresFloor;

pub const POSTGRES_FLOOR: PostgresFloor = PostgresFloor;

const INSERT: &str = "INSERT INTO floor (task, seq, body) VALUES ($1, $2, $3)";

impl Backend for PostgresFloor {
    fn name(&self) -> &'static str {
        "postgres-floor"
    }

    fn color(&self) -> RGBColor {
        RGBColor(0x66, 0x66, 0x66)
    }

    fn needs_postgres(&self) -> bool {
        true
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        let payload = delta_payload(threads, cfg.steps);
        let schema = pg_cluster::fresh_schema("floor");
        let admin = Admin::connect();
        admin.exec(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.floor (task text, seq bigint, \
             body bytea, PRIMARY KEY (task, seq))"
        ));
        let io = io_counters();
        let lsn = admin.wal_lsn();
        let times = drive(
            threads,
            cfg.steps,
            |_| Conn::open(&schema, INSERT),
            |conn, task, seq, delta| {
                let body = postcard::to_allocvec(delta).expect("encode delta");
                let n = conn
                    .rt
                    .block_on(
                        conn.client
                            .execute(&conn.stmt, &[&task, &(seq as i64), &body]),
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
        admin.drop_schema(&schema);
        m
    }
}
