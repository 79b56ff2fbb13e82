//! A handle's hints of its tasks' rows: what the row was after this handle's last commit of
//! the task (or at its last `load_latest`), so that the next commit can decide delta or snapshot without reading the row
//! first (docs/postgres.md §2). A hint is never the truth: the commit function writes only
//! if the row is still the hint, and otherwise returns the row, which becomes the hint.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::load::TaskRow;
use crate::store::policy::SnapshotCounters;

/// At most this many tasks' hints are kept; past it, all are forgotten (a commit without
/// a hint costs one more round trip, nothing else).
const HINTS_MAX: usize = 65_536;

/// A task's row as a commit decides on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Hint {
    pub latest_seq: u64,
    pub latest_created_at_ms: u64,
    pub counters: SnapshotCounters,
    /// The schema versions the latest state folds from (`versions_since_snapshot`).
    pub versions: Vec<i32>,
}

impl Hint {
    /// Whether the latest state folds from a record of another schema version than
    /// `version` (then a commit rebuilds it through the migration hooks and writes it as a
    /// snapshot, as on a local store, docs/store.md §6).
    pub fn foreign_schema(&self, version: u32) -> bool {
        self.versions.iter().any(|v| *v as u32 != version)
    }
}

impl From<&TaskRow> for Hint {
    fn from(row: &TaskRow) -> Self {
        Hint {
            latest_seq: row.latest_seq,
            latest_created_at_ms: row.latest_created_at_ms,
            counters: row.counters,
            versions: row.versions.clone(),
        }
    }
}

/// The hints of one handle (and its clones), by task.
#[derive(Default)]
pub(super) struct Hints {
    rows: Mutex<HashMap<String, Hint>>,
}

impl Hints {
    /// The task's hint; without one, the row of a task that does not exist yet (the
    /// commit function creates it).
    pub fn get(&self, task: &str) -> Hint {
        self.rows.lock().get(task).cloned().unwrap_or_default()
    }

    /// Records the task's row as last seen.
    pub fn put(&self, task: &str, hint: Hint) {
        let mut rows = self.rows.lock();
        if rows.len() >= HINTS_MAX && !rows.contains_key(task) {
            rows.clear();
        }
        rows.insert(task.to_string(), hint);
    }

    /// Forgets the task's hint.
    pub fn forget(&self, task: &str) {
        self.rows.lock().remove(task);
    }
}
