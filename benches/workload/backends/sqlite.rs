//! What the two SQLite backends share: the connection (`journal_mode=WAL`,
//! `synchronous=FULL`, busy_timeout 10 s, one per thread), the retry of an `SQLITE_BUSY`
//! that still escapes, and the run; each design brings its table, insert and load.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agentwal::{AgentDelta, AgentState};
use rusqlite::{Connection, ErrorCode};

use crate::config::Config;
use crate::generator::{delta_payload, expected_state, task_id};
use crate::harness::{drive, time_loads};
use crate::measurement::Measurement;
use crate::metering::{io_counters, io_since};

/// How a design keeps agent state in SQLite.
pub trait Design {
    /// The table recovery's first query reads.
    const TABLE: &'static str;
    /// Its `CREATE TABLE` statement.
    const SCHEMA: &'static str;

    /// Makes one step durable; `state` is the thread's task state before the step, for a
    /// design that stores more than the delta.
    fn insert(
        conn: &Connection,
        state: &mut AgentState,
        task: &str,
        seq: u64,
        delta: &AgentDelta,
        busy_retries: &AtomicU64,
    );

    /// The latest state of `task`.
    fn load(conn: &Connection, task: &str) -> AgentState;
}

pub fn open(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("open sqlite");
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode, "wal");
    conn.execute_batch("PRAGMA synchronous=FULL")
        .expect("synchronous");
    conn.busy_timeout(Duration::from_secs(10))
        .expect("busy_timeout");
    conn
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if matches!(f.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// Runs `stmt` until it does not fail with SQLITE_BUSY; counts the retries.
pub fn execute_retrying(
    mut run: impl FnMut() -> rusqlite::Result<usize>,
    busy_retries: &AtomicU64,
) {
    loop {
        match run() {
            Ok(_) => return,
            Err(e) if is_busy(&e) => {
                busy_retries.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("sqlite insert: {e}"),
        }
    }
}

/// Opens a connection the way recovery is timed: the pragmas and a first query.
fn reopen<D: Design>(db: &Path) -> Connection {
    let conn = open(db);
    let _: Option<i64> = conn
        .query_row(&format!("SELECT 1 FROM {} LIMIT 1", D::TABLE), [], |r| {
            r.get(0)
        })
        .expect("first query");
    conn
}

pub fn run<D: Design>(cfg: &Config, dir: &Path, threads: usize) -> Measurement {
    let payload = delta_payload(threads, cfg.steps);
    let db = dir.join("agents.db");
    let io = io_counters();
    let setup = open(&db);
    setup.execute_batch(D::SCHEMA).expect("create table");
    drop(setup);
    let busy_retries = AtomicU64::new(0);
    let times = drive(
        threads,
        cfg.steps,
        |_| (open(&db), AgentState::default()),
        |(conn, state), task, seq, delta| {
            D::insert(conn, state, task, seq, delta, &busy_retries);
        },
    );
    // Every connection is closed: the last one checkpointed the WAL into the database.
    let mut m = Measurement::from_run(&times, io_since(io), dir, payload);
    m.busy_retries = Some(busy_retries.load(Ordering::Relaxed) as f64);
    let probe = task_id(0);
    let (warm, cold, recovery) = time_loads(
        cfg,
        || reopen::<D>(&db),
        |conn| D::load(conn, &probe),
        &expected_state(0, cfg.steps),
    );
    m.load_warm_us = Some(warm);
    m.load_cold_us = Some(cold);
    m.recovery_ms = Some(recovery);
    m
}
