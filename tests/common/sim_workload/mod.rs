//! Shared by `tests/crash_sweep.rs` and `tests/io_errors/`: an agent workload planned
//! from a seed and run on the simulated storage, the log of what each call returned and
//! between which storage operations, and the oracle that judges a recovered store
//! against that log.
//!
//! The workload covers format v2's segment kinds (docs/format.md §5, §6): with 4 KiB
//! segments, one task slot grows a state of several segments (up to
//! [`BULK_BYTES_MAX`], 10 segments) by big deltas, so its snapshots and big deltas are
//! records larger than a segment, each in a segment of its own; tasks are forked (the
//! fork's first checkpoint is a snapshot of the source's state: of a big state, another
//! oversized record); compaction retires segment files and later rotations recycle them.
//! [`Coverage`] counts all of that in a recording, so a sweep can assert it was covered.

use std::sync::Arc;

use agentwal::storage::Storage;
use agentwal::storage::sim::SimStorage;
use agentwal::{Options, Store};

mod coverage;
mod oracle;
mod plan;
mod run;

// One path for the tests, `common::sim_workload::NAME`, whichever module holds it. Every
// test binary compiles this module, and most use none of it.
#[allow(unused_imports)]
pub use {coverage::*, oracle::*, plan::*, run::*};

/// The store's directory on the simulated disk.
pub const DIR: &str = "/agents/db";

/// Deltas at least this long are kept in the state (`Tally::bulk`), so a task committing
/// them grows a state larger than a segment.
pub const BULK_DELTA_MIN: usize = 1024;

/// `Tally::bulk` keeps at most this many of the latest bulk bytes: 10 segments.
pub const BULK_BYTES_MAX: usize = 10 * 4096;

/// Big deltas (committed to the big slot): from one segment to three.
pub const BIG_DELTA_BYTES: std::ops::Range<u64> = 4096..12288;

/// Small segments (many rotations), frequent snapshots, retention, no background
/// compaction (its timing is not deterministic; the workload compacts explicitly).
pub fn options() -> Options {
    Options {
        segment_bytes: 4096,
        snapshot_every: 3,
        keep_checkpoints: Some(3),
        auto_compact: false,
        ..Options::default()
    }
}

pub fn open(sim: &SimStorage) -> agentwal::Result<Store<Tally>> {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    Store::open_on(storage, DIR, options())
}
