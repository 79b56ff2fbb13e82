//! The snapshot policy as a pure function of a task's counters, shared by every backend
//! (the local store's commit path and the PostgreSQL backend's), so both write snapshots at
//! the same points (docs/store.md §2).

use super::types::{SNAPSHOT_DELTA_BYTES_FLOOR, SNAPSHOT_DELTA_RATIO};

/// What the policy reads of a task: its last snapshot and the deltas since.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SnapshotCounters {
    /// Bytes of the last snapshot (0: none yet).
    pub snapshot_bytes: u64,
    /// Deltas committed since the last snapshot.
    pub deltas_since_snapshot: u32,
    /// Their bytes.
    pub delta_bytes_since_snapshot: u64,
}

/// Whether the next commit, of a delta of `next_delta_bytes`, writes a snapshot: once the
/// deltas since the last one outweigh it `SNAPSHOT_DELTA_RATIO` times over (bytes written
/// stay within about 1.7 times the deltas, a cold load reads at most about 3 times the
/// state), and after at most `snapshot_every` deltas whatever their size (bounds the records
/// a cold load folds).
pub(crate) fn snapshot_due(
    c: SnapshotCounters,
    next_delta_bytes: u64,
    snapshot_every: u32,
) -> bool {
    let count_due = c.deltas_since_snapshot + 1 >= snapshot_every;
    let delta_bytes = c.delta_bytes_since_snapshot + next_delta_bytes;
    let outweighed = (c.snapshot_bytes * SNAPSHOT_DELTA_RATIO).max(SNAPSHOT_DELTA_BYTES_FLOOR);
    count_due || delta_bytes > outweighed
}
