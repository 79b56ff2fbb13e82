//! `sqlite-seed`, what most agent code does today: one `INSERT OR REPLACE` of the full
//! state as JSON per step into `checkpoints(task_id, checkpoint_seq, state, created_at)`.

use std::path::Path;
use std::sync::atomic::AtomicU64;

use agentwal::{AgentDelta, AgentState, State};
use plotters::style::RGBColor;
use rusqlite::{Connection, params};

use super::Backend;
use super::sqlite::{self, Design};
use crate::config::Config;
use crate::measurement::Measurement;

pub struct SqliteSeed;

pub const SQLITE_SEED: SqliteSeed = SqliteSeed;

impl Design for SqliteSeed {
    const TABLE: &'static str = "checkpoints";
    const SCHEMA: &'static str = "CREATE TABLE checkpoints (task_id TEXT, checkpoint_seq INTEGER, \
                                  state TEXT, created_at TEXT, \
                                  PRIMARY KEY (task_id, checkpoint_seq))";

    fn insert(
        conn: &Connection,
        state: &mut AgentState,
        task: &str,
        seq: u64,
        delta: &AgentDelta,
        busy_retries: &AtomicU64,
    ) {
        state.apply(delta);
        let json = serde_json::to_string(&*state).expect("encode state");
        let mut stmt = conn
            .prepare_cached(
                "INSERT OR REPLACE INTO checkpoints VALUES \
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
            .prepare_cached(
                "SELECT state FROM checkpoints WHERE task_id = ?1 \
                 ORDER BY checkpoint_seq DESC LIMIT 1",
            )
            .expect("prepare");
        let json: String = stmt.query_row(params![task], |r| r.get(0)).expect("select");
        serde_json::from_str(&json).expect("decode state")
    }
}

impl Backend for SqliteSeed {
    fn name(&self) -> &'static str {
        "sqlite-seed"
    }

    fn color(&self) -> RGBColor {
        RGBColor(0x1F, 0x77, 0xB4)
    }

    fn run(&self, cfg: &Config, dir: &Path, threads: usize) -> Measurement {
        sqlite::run::<Self>(cfg, dir, threads)
    }
}
