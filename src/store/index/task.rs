//! What the index remembers about one task: its checkpoints, calls and fork origin, and
//! the rules that read them (latest seq, fold plans, retention bounds).

use std::time::Duration;

use super::TaskSlot;
use super::calls::Calls;
use super::checkpoints::{CpEntry, CpList, PackedCp};
use crate::rules::retention;

/// Everything the store remembers about one task.
#[derive(Debug, Default)]
pub(crate) struct TaskData {
    /// Set once the task is deleted; a committer holding a stale slot retries.
    pub deleted: bool,
    /// Seq of `checkpoints[0]`.
    pub first_seq: u64,
    pub checkpoints: CpList,
    /// The task and seq this task was forked from; boxed, as few tasks are forks.
    pub origin: Option<Box<(Box<str>, u64)>>,
    pub calls: Calls,
    /// Snapshot policy inputs: deltas and their bytes since the last snapshot, and the
    /// last snapshot's bytes. Bytes of whole records as if their bodies were uncompressed
    /// (`CheckpointRec::uncompressed_bytes`), so compression moves no snapshot; the index
    /// entries' `bytes` are the records' sizes on disk.
    pub deltas_since_snapshot: u32,
    pub delta_bytes_since_snapshot: u64,
    pub snapshot_bytes: u64,
    /// Whether a record the latest state folds from (the last snapshot or a delta since)
    /// was written under another schema version than the index's: the next commit must
    /// rebuild (migrate) the state before it writes, or it would append a delta to a
    /// history this program cannot read.
    pub foreign_schema: bool,
}

// With the `Arc` counts, 168 B: one 176 B heap chunk per task (glibc).
const _: () = assert!(std::mem::size_of::<TaskData>() == 136);
const _: () = assert!(std::mem::size_of::<TaskSlot>() == 152);

impl TaskData {
    /// Whether the task exists: it has a checkpoint or a tool call.
    pub fn exists(&self) -> bool {
        !self.checkpoints.is_empty() || !self.calls.is_empty()
    }

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
    /// `policy_bytes`: what the snapshot policy counts of the record (its size with its
    /// body uncompressed). `foreign_schema`: the record's schema version is not the
    /// index's.
    pub fn push_checkpoint(
        &mut self,
        seq: u64,
        entry: CpEntry,
        policy_bytes: u64,
        foreign_schema: bool,
    ) -> Result<(), String> {
        let expected = self.latest_seq() + 1;
        if seq != expected && !(self.checkpoints.is_empty() && seq > 0) {
            return Err(format!(
                "checkpoint seq {seq} where {expected} was expected"
            ));
        }
        let packed = PackedCp::pack(&entry).map_err(|e| format!("checkpoint seq {seq}: {e}"))?;
        if self.checkpoints.is_empty() {
            self.first_seq = seq;
        }
        self.checkpoints.push(packed);
        assert_eq!(
            self.latest_seq(),
            seq,
            "the checkpoint pushed is the latest"
        );
        if entry.snapshot {
            self.deltas_since_snapshot = 0;
            self.delta_bytes_since_snapshot = 0;
            self.snapshot_bytes = policy_bytes;
            self.foreign_schema = foreign_schema;
        } else {
            self.deltas_since_snapshot += 1;
            self.delta_bytes_since_snapshot += policy_bytes;
            self.foreign_schema |= foreign_schema;
        }
        Ok(())
    }

    /// The entry of checkpoint `seq`, if retained.
    pub fn checkpoint(&self, seq: u64) -> Option<CpEntry> {
        let i = seq.checked_sub(self.first_seq)?;
        self.checkpoints.get(usize::try_from(i).ok()?)
    }

    /// Records to read to rebuild `seq`: its fold base (the newest snapshot at or before
    /// it, or the task's first checkpoint) and every delta after that, oldest first.
    /// `None` if it is not retained or cannot be rebuilt (no fold base).
    pub fn fold_plan(&self, seq: u64) -> Option<Vec<CpEntry>> {
        let cps = self.checkpoints.as_slice();
        let end = usize::try_from(seq.checked_sub(self.first_seq)?).ok()?;
        if end >= cps.len() {
            return None;
        }
        let start = retention::fold_base(cps[..=end].iter().map(|c| c.snapshot()));
        if !retention::fold_can_start(self.first_seq + start as u64, cps[start].snapshot()) {
            return None;
        }
        Some(cps[start..=end].iter().map(|c| c.unpack()).collect())
    }

    /// Oldest seq that retention still serves: the last `keep` checkpoints, those younger
    /// than `max_age` at `now_ms`, and always the latest. 0 for a task without checkpoints.
    pub fn retained_from(&self, keep: Option<u32>, max_age: Option<Duration>, now_ms: u64) -> u64 {
        let young_from = retention::age_cutoff_ms(max_age, now_ms).map(|cutoff| {
            // created_at_ms never decreases within a task (commit enforces it).
            let cps = self.checkpoints.as_slice();
            self.first_seq + cps.partition_point(|c| c.created_at_ms() < cutoff) as u64
        });
        let latest = self.latest_seq();
        retention::retained_from(latest, self.first_loadable_seq(), keep, young_from)
    }

    /// Oldest seq that can be rebuilt: the first, unless the history is headless (starts
    /// with a delta after seq 1), then its first snapshot.
    pub fn first_loadable_seq(&self) -> u64 {
        let cps = self.checkpoints.as_slice();
        let can_start = |c: &PackedCp| retention::fold_can_start(self.first_seq, c.snapshot());
        if cps.first().is_none_or(can_start) {
            return self.first_seq;
        }
        let first_snapshot = cps.iter().position(|c| c.snapshot());
        self.first_seq + first_snapshot.map_or(cps.len().saturating_sub(1), |i| i) as u64
    }

    /// Oldest seq whose record is still needed to rebuild `retained_from` (its fold base).
    pub fn needed_from(&self, retained_from: u64) -> u64 {
        let Some(end) = retained_from.checked_sub(self.first_seq) else {
            return self.first_seq;
        };
        let cps = self.checkpoints.as_slice();
        if cps.is_empty() {
            return self.first_seq;
        }
        let end = (end as usize).min(cps.len().saturating_sub(1));
        self.first_seq + retention::fold_base(cps[..=end].iter().map(|c| c.snapshot())) as u64
    }

    /// Forgets the checkpoints below `seq` (they are no longer needed).
    pub fn prune_before(&mut self, seq: u64) {
        let n = (seq.saturating_sub(self.first_seq) as usize).min(self.checkpoints.len());
        if n > 0 {
            self.checkpoints.drop_front(n);
            self.first_seq += n as u64;
        }
    }

    /// Prunes the finished tool calls retention no longer keeps: those whose finish record
    /// lies before the record of checkpoint `retained_from`, the oldest retained (no
    /// retained checkpoint can resume from before them). Pending calls stay. Nothing is
    /// pruned from a task without that checkpoint (none at all: only calls).
    /// docs/store.md §4.
    pub fn prune_calls(&mut self, retained_from: u64) {
        if let Some(oldest) = self.checkpoint(retained_from) {
            self.calls.prune_finished_before(oldest.pos);
        }
    }

    /// The time of the latest checkpoint (0 if none).
    pub fn latest_created_at_ms(&self) -> u64 {
        self.checkpoints.last().map_or(0, |c| c.created_at_ms)
    }

    /// Bytes of live records (checkpoints, and calls retention keeps) this task holds.
    pub fn live_bytes(&self) -> u64 {
        let checkpoints = self.checkpoints.as_slice().iter();
        let checkpoints: u64 = checkpoints.map(|c| u64::from(c.bytes())).sum();
        checkpoints + self.calls.values().map(|c| u64::from(c.bytes)).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::index::checkpoints::tests::entry;

    #[test]
    fn a_snapshot_of_this_version_clears_the_foreign_schema_mark() {
        let mut d = TaskData::default();
        d.push_checkpoint(1, entry(1, 40, 0, 10, true), 10, false)
            .unwrap();
        d.push_checkpoint(2, entry(1, 80, 0, 10, false), 10, true)
            .unwrap();
        d.push_checkpoint(3, entry(1, 120, 0, 10, false), 10, false)
            .unwrap();
        assert!(d.foreign_schema, "a delta since the snapshot is foreign");
        d.push_checkpoint(4, entry(1, 160, 0, 10, true), 10, false)
            .unwrap();
        assert!(!d.foreign_schema);
        d.push_checkpoint(5, entry(1, 200, 0, 10, true), 10, true)
            .unwrap();
        assert!(d.foreign_schema, "a foreign snapshot is the new fold base");
    }
}
