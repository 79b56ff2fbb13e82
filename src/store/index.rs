//! The in-memory index: per task, only positions and small metadata (states stay on disk).
//!
//! Memory: a task costs its id, a `TaskSlot` (~200 B with its map entry and locks) and
//! 32 B per indexed checkpoint ([`CpEntry`]); a tool call costs its id plus about 60 B
//! (a `CallEntry` and its hash-map slot).

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
    /// Bytes on disk of the begin and finish records together.
    pub bytes: u32,
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

    /// Records checkpoint `seq`; it must follow the latest. A task's first record is seq 1,
    /// or any seq once compaction dropped the checkpoints retention no longer needs: the
    /// log keeps every record of a prefix of segments it did not compact, so a task's
    /// surviving history may start mid-chain ("headless") until its next snapshot.
    pub fn push_checkpoint(&mut self, seq: u64, entry: CpEntry) -> Result<(), String> {
        let expected = self.latest_seq() + 1;
        if seq != expected && !(self.checkpoints.is_empty() && seq > 0) {
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

    /// Oldest seq that retention still serves: the last `keep` checkpoints, those younger
    /// than `max_age_ms`, and always the latest. 0 for a task without checkpoints.
    pub fn retained_from(&self, keep: Option<u32>, max_age_ms: Option<u64>, now_ms: u64) -> u64 {
        let latest = self.latest_seq();
        if latest == 0 {
            return 0;
        }
        let mut from = self.first_loadable_seq();
        if let Some(keep) = keep {
            from = from.max(latest.saturating_sub(u64::from(keep).saturating_sub(1)));
        }
        if let Some(age) = max_age_ms {
            // created_at_ms never decreases within a task (commit enforces it).
            let cutoff = now_ms.saturating_sub(age);
            let young = self
                .checkpoints
                .partition_point(|c| c.created_at_ms < cutoff);
            from = from.max(self.first_seq + young as u64);
        }
        from.min(latest)
    }

    /// Oldest seq that can be rebuilt: the first, unless the history is headless (starts
    /// with a delta after seq 1), then its first snapshot.
    pub fn first_loadable_seq(&self) -> u64 {
        if self.first_seq <= 1 || self.checkpoints.first().is_none_or(|c| c.snapshot) {
            return self.first_seq;
        }
        let first_snapshot = self.checkpoints.iter().position(|c| c.snapshot);
        self.first_seq
            + first_snapshot.map_or(self.checkpoints.len().saturating_sub(1), |i| i) as u64
    }

    /// Oldest seq whose record is still needed to rebuild `retained_from` (its fold base).
    pub fn needed_from(&self, retained_from: u64) -> u64 {
        let Some(end) = retained_from.checked_sub(self.first_seq) else {
            return self.first_seq;
        };
        if self.checkpoints.is_empty() {
            return self.first_seq;
        }
        let end = (end as usize).min(self.checkpoints.len().saturating_sub(1));
        let base = self.checkpoints[..=end]
            .iter()
            .rposition(|c| c.snapshot)
            .unwrap_or(0);
        self.first_seq + base as u64
    }

    /// Forgets the checkpoints below `seq` (they are no longer needed).
    pub fn prune_before(&mut self, seq: u64) {
        let n = (seq.saturating_sub(self.first_seq) as usize).min(self.checkpoints.len());
        if n > 0 {
            self.checkpoints.drain(..n);
            self.first_seq += n as u64;
        }
    }

    /// The time of the latest checkpoint (0 if none).
    pub fn latest_created_at_ms(&self) -> u64 {
        self.checkpoints.last().map_or(0, |c| c.created_at_ms)
    }

    /// Bytes of live records (checkpoints and calls) this task holds.
    pub fn live_bytes(&self) -> u64 {
        let checkpoints: u64 = self.checkpoints.iter().map(|c| u64::from(c.bytes)).sum();
        checkpoints + self.calls.values().map(|c| u64::from(c.bytes)).sum::<u64>()
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
    /// The task's slot, if the task exists: it has a checkpoint or a tool call. A slot a
    /// failed write created (`commit_if` conflicting on a new task) stays empty and is no
    /// task, as `task_ids` and a reopened store agree.
    pub fn get(&self, task: &str) -> Option<Arc<TaskSlot>> {
        let tasks = self.tasks.read();
        let slot = tasks.get(task)?;
        let d = slot.data.read();
        (!d.checkpoints.is_empty() || !d.calls.is_empty()).then(|| slot.clone())
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

    /// Calls `f` on every task's data, mutably (used by compaction).
    pub fn for_each_mut(&self, mut f: impl FnMut(&str, &mut TaskData)) {
        for (k, s) in self.tasks.read().iter() {
            f(k, &mut s.data.write());
        }
    }

    /// Calls `f` on every task.
    pub fn for_each(&self, mut f: impl FnMut(&str, &TaskData)) {
        for (k, s) in self.tasks.read().iter() {
            f(k, &s.data.read());
        }
    }
}
