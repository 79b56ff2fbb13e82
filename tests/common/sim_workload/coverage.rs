//! Coverage: the segment kinds and records a recording reached, so a sweep can assert
//! it covered them all.

use std::collections::BTreeMap;

use agentwal::storage::sim::SimOp;
use agentwal::{State, Store};

use super::super::rng::Rng;

use super::options;
use super::oracle::fork_bases;
use super::plan::{Step, Tally};
use super::run::Event;

/// What a recorded run exercised of format v2's segment kinds, from its storage
/// operations and events: the sweeps print it and assert that none is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Segment files retired for reuse (renamed to a `.free` name).
    pub retired: u64,
    /// Rotations that made a segment from a retired file (renamed from a `.free` name).
    pub recycled: u64,
    /// Segments sized for a record larger than `segment_bytes` (preallocated past it).
    pub oversized: u64,
    /// Compacted segments installed.
    pub compactions: u64,
    /// Forks that succeeded, and of those, forks of a state larger than a segment.
    pub forks: u64,
    pub big_forks: u64,
    /// Snapshots larger than a segment the store held at the end (set by the caller,
    /// [`big_snapshots`]).
    pub big_snapshots: u64,
    /// Bytes of the largest state acknowledged (its `bulk`).
    pub max_state_bytes: u64,
    /// Checkpoint bodies the store held compressed at the end (set by the caller,
    /// [`compressed_bodies`]): compaction rewrote records with new payloads.
    pub compressed: u64,
}

/// `len` bytes from an alphabet of 16 letters: zstd stores them in about half the space.
/// Draws one number per byte, as `Rng::bytes` does.
pub fn compressible_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| b'a' + rng.below(16) as u8).collect()
}

/// Checkpoint bodies that `store` holds compressed (compaction compressed them).
pub fn compressed_bodies(store: &Store<Tally>) -> u64 {
    store.verify().expect("verify").bodies_compressed
}

/// Snapshot checkpoints larger than a segment that `store` holds.
pub fn big_snapshots(store: &Store<Tally>) -> u64 {
    let tasks = store.tasks().expect("tasks");
    let infos = tasks
        .iter()
        .flat_map(|t| store.list_checkpoints(t).expect("list_checkpoints"));
    infos
        .filter(|i| i.snapshot && i.bytes > options().segment_bytes)
        .count() as u64
}

impl Coverage {
    pub fn of(ops: &[SimOp], events: &[Event]) -> Coverage {
        let ends = |p: &std::path::Path, suffix: &str| p.to_string_lossy().ends_with(suffix);
        let mut c = Coverage::default();
        for op in ops {
            match op {
                SimOp::Rename(from, _) if ends(from, ".wal.free") => c.recycled += 1,
                SimOp::Rename(_, to) if ends(to, ".wal.free") => c.retired += 1,
                SimOp::Rename(from, _) | SimOp::Exchange(from, _) if ends(from, ".compact.tmp") => {
                    c.compactions += 1
                }
                SimOp::Allocate(_, len) if *len > options().segment_bytes => c.oversized += 1,
                _ => {}
            }
        }
        let bases = fork_bases(events).unwrap_or_default();
        let mut states: BTreeMap<&str, Tally> = BTreeMap::new();
        for (i, e) in events.iter().enumerate() {
            let state = match (&e.step, &e.outcome, bases.get(&i)) {
                (Step::Commit(task, delta), Ok(()), _) => {
                    let state = states.entry(task).or_default();
                    state.apply(delta);
                    state
                }
                (Step::Fork(_, task), Ok(()), Some(Some(base))) => {
                    states.entry(task).insert_entry(base.clone()).into_mut()
                }
                _ => continue,
            };
            c.max_state_bytes = c.max_state_bytes.max(state.bulk.len() as u64);
        }
        for (i, e) in events.iter().enumerate() {
            if matches!(e.step, Step::Fork(..)) && e.outcome.is_ok() {
                c.forks += 1;
                let big = bases.get(&i).and_then(|b| b.as_ref());
                let state_bytes = big.map_or(0, |b| b.bulk.len() as u64);
                c.big_forks += u64::from(state_bytes > options().segment_bytes);
            }
        }
        c
    }

    pub fn add(&mut self, o: &Coverage) {
        self.retired += o.retired;
        self.recycled += o.recycled;
        self.oversized += o.oversized;
        self.compactions += o.compactions;
        self.forks += o.forks;
        self.big_forks += o.big_forks;
        self.big_snapshots += o.big_snapshots;
        self.max_state_bytes = self.max_state_bytes.max(o.max_state_bytes);
        self.compressed += o.compressed;
    }

    /// Fails naming what was not covered (a sweep that stopped covering recycling,
    /// oversized records or forks of big states must not pass silently).
    pub fn assert_all(&self, what: &str) {
        let missing: Vec<&str> = [
            ("retired files", self.retired),
            ("recycled segments", self.recycled),
            ("oversized segments", self.oversized),
            ("compactions", self.compactions),
            ("forks", self.forks),
            ("forks of states larger than a segment", self.big_forks),
            ("snapshots larger than a segment", self.big_snapshots),
            ("bodies compressed by compaction", self.compressed),
        ]
        .into_iter()
        .filter(|(_, n)| *n == 0)
        .map(|(name, _)| name)
        .collect();
        assert!(
            missing.is_empty(),
            "{what}: the workload no longer covers {missing:?} ({self:?})"
        );
    }
}
