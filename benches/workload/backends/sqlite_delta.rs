//! `sqlite-delta`: one row per step holding the step's delta as JSON; a load folds the
//! task's rows.

use std::path::Path;
use std::sync::atomic::AtomicU64;

use agentwal::{AgentDelta, AgentState, State};
use plotters::style::RGBColor;
use rusqlite::{Connection, params};

use super::Backend;
use super::sqlite::{self, Design};
use crate::config::Config;
use crate::measurement::Measurement;

pub struct SqliteDelta;

pub const SQLITE_DELTA: SqliteDelta = SqliteDelta;

impl Design for SqliteDelta {
    const TABLE: &'static str = "deltas";
    const SCHEMA: &'static str = "CREATE TABLE deltas (task_id TEXT, seq INTEGER, delta TEXT, \
                                  created_at TEXT, PRIMARY KEY (task_id, seq))";

    fn insert(
        conn: &Connection,
        _state: &mut AgentState,
        task: &str,
        seq: u64,
        delta: &AgentDelta,
        busy_retries: &AtomicU64,
    ) {
        let json = serde_json::to_string(delta).expect("encode delta");
        let mut stmt = conn
            .prepare_cached(
                "INSERT INTO deltas VALUES \
                 (?1, ?2, ?3, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
            )
            .expect("prepare");
        sqlite::execute_retrying(
            || stmt.execute(params![task, seq as i64, json]),
            busy_retries,
        );
    }

    fn load(conn: &Connection, task: &str) -> AgentState {
        let mut stmt = conn
            .prepare_cached("SELECT delta FROM deltas WHERE task_id = ?1 ORDER BY seq")
            .expect("prepare");
        let mut rows = stmt.query(params![task]).expect("select");
        let mut state = AgentState::default();
        while let Some(row) = rows.next().expect("row") {
            let json = row.get_ref(0).expect("column").as_str().expect("text");
            let delta: AgentDelta = serde_json::from_str(json).expect("decode delta");
            state.apply(&delta);
        }
        state
    }
}

impl Backend for SqliteDelta {
    fn name(&self) -> &'static str {
        "sqlite-delta"
    }

    fn color(&self) -> RGBColor {
        RGBColor(0x6B, 0xAE, 0xD6)
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        sqlite::run::<Self>(cfg, dir, threads)
    }
}
