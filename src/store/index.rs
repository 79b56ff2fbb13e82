//! The in-memory index: per task, only positions and small metadata (states stay on disk).
//!
//! Memory: a task costs its id, a `TaskSlot` (~200 B with its map entry and locks) and
//! 32 B per retained checkpoint ([`CpEntry`]); a tool call costs its id and 40 B.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::log::RecordPos;

/// Index entry of one checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpEntry {
    pub pos: RecordPos,
    pub created_at_ms: u64,
    /// Bytes of the record on disk (header + payload).
    pub bytes: u32,
    pub snapshot: bool,
}

const _: () = assert!(std::mem::size_of::<CpEntry>() == 32);

/// Index entry of one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallEntry {
    pub begin: RecordPos,
    pub finish: Option<RecordPos>,
}

/// Everything the store remembers about one task.
#[derive(Debug, Default)]
pub(crate) struct TaskData {
    /// Set once the task is deleted; a committer holding a stale slot retries.
    pub deleted: bool,
    /// Seq of `checkpoints[0]`.
    pub first_seq: u64,
    pub checkpoints: Vec<CpEntry>,
    pub origin: Option<(Box<str>, u64)>,
    pub calls: HashMap<Box<str>, CallEntry>,
    /// Snapshot policy inputs: deltas and their bytes since the last snapshot.
    pub deltas_since_snapshot: u32,
    pub delta_bytes_since_snapshot: u64,
    pub snapshot_bytes: u64,
}

impl TaskData {
    /// The newest seq (0: no checkpoint yet).
    pub fn latest_seq(&self) -> u64 {
        if self.checkpoints.is_empty() {
            0
        } else {
            self.first_seq + self.checkpoints.len() as u64 - 1
        }
    }

    /// Records checkpoint `seq`; it must follow the latest (a fork starts at seq 1).
    pub fn push_checkpoint(&mut self, seq: u64, entry: CpEntry) -> Result<(), String> {
        let expected = self.latest_seq() + 1;
        if seq != expected {
            return Err(format!(
                "checkpoint seq {seq} where {expected} was expected"
            ));
        }
        if self.checkpoints.is_empty() {
            self.first_seq = seq;
        }
        self.checkpoints.push(entry);
        if entry.snapshot {
            self.deltas_since_snapshot = 0;
            self.delta_bytes_since_snapshot = 0;
            self.snapshot_bytes = u64::from(entry.bytes);
        } else {
            self.deltas_since_snapshot += 1;
            self.delta_bytes_since_snapshot += u64::from(entry.bytes);
        }
        Ok(())
    }

    /// The entry of checkpoint `seq`, if retained.
    pub fn checkpoint(&self, seq: u64) -> Option<&CpEntry> {
        let i = seq.checked_sub(self.first_seq)?;
        self.checkpoints.get(usize::try_from(i).ok()?)
    }

    /// Records to read to rebuild `seq`: the newest snapshot at or before it (if any)
    /// and every delta after that, oldest first.
    pub fn fold_plan(&self, seq: u64) -> Option<Vec<CpEntry>> {
        let end = usize::try_from(seq.checked_sub(self.first_seq)?).ok()?;
        if end >= self.checkpoints.len() {
            return None;
        }
        let start = self.checkpoints[..=end]
            .iter()
            .rposition(|c| c.snapshot)
            .unwrap_or(0);
        // Without a snapshot the fold must start from the task's very first checkpoint.
        if !self.checkpoints[start].snapshot && self.first_seq != 1 {
            return None;
        }
        Some(self.checkpoints[start..=end].to_vec())
    }

    /// Bytes of live records (checkpoints and calls) this task holds.
    pub fn live_bytes(&self) -> u64 {
        self.checkpoints.iter().map(|c| u64::from(c.bytes)).sum()
    }
}

/// One task's slot: a lock that serializes its commits, and its data.
#[derive(Debug, Default)]
pub(crate) struct TaskSlot {
    pub commit: Mutex<()>,
    pub data: RwLock<TaskData>,
}

/// All tasks.
#[derive(Debug, Default)]
pub(crate) struct Index {
    tasks: RwLock<HashMap<Box<str>, Arc<TaskSlot>>>,
}

impl Index {
    /// The task's slot, if it exists.
    pub fn get(&self, task: &str) -> Option<Arc<TaskSlot>> {
        self.tasks.read().get(task).cloned()
    }

    /// The task's slot, created empty if missing.
    pub fn get_or_create(&self, task: &str) -> Arc<TaskSlot> {
        if let Some(slot) = self.get(task) {
            return slot;
        }
        self.tasks.write().entry(task.into()).or_default().clone()
    }

    /// Forgets a task (after its deletion record is durable).
    pub fn remove(&self, task: &str) {
        if let Some(slot) = self.tasks.write().remove(task) {
            slot.data.write().deleted = true;
        }
    }

    /// Ids of tasks with at least one checkpoint or tool call, sorted.
    pub fn task_ids(&self) -> Vec<String> {
        let tasks = self.tasks.read();
        let mut ids: Vec<String> = tasks
            .iter()
            .filter(|(_, s)| {
                let d = s.data.read();
                !d.checkpoints.is_empty() || !d.calls.is_empty()
            })
            .map(|(k, _)| k.to_string())
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Calls `f` on every task.
    pub fn for_each(&self, mut f: impl FnMut(&str, &TaskData)) {
        for (k, s) in self.tasks.read().iter() {
            f(k, &s.data.read());
        }
    }
}
