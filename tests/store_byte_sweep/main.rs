//! Byte sweeps at the store level: a small store (one record per operation, every record
//! kind, some snapshots) on the simulated storage, then
//!
//! - its segment cut at every byte offset, and zeroed from every byte offset on (the
//!   file keeps its length, as preallocated space does): a writable open recovers exactly
//!   the operations whose records are intact, writing after the repair works, and a
//!   reopen from the durable image sees that write;
//! - every single-bit flip over the data and the 64 bytes after it: a flip in an
//!   acknowledged record before the last one is `Error::Corruption` naming the segment
//!   and an offset between that record's start and the flipped byte; a flip in the header
//!   is `Corruption` or `UnsupportedFormat`; a flip in the last record drops that record
//!   (it looks exactly like a torn tail, docs/log.md §4.1) and a flip past the data is
//!   ignored (garbage in preallocated space).
//!
//! Twice: in a fresh segment, and in a recycled one (format v2, docs/format.md §6). For the
//! latter, a prelude retires segment files (a task's records, deleted and compacted
//! away) and commits a record larger than a segment (it gets a segment of its own), so
//! the operations land in the next segment, which reuses a retired file: past its data
//! lie the bytes of its earlier life, and since the store closed cleanly its data ends
//! with a close record. There the close record is what a flip may drop (the last user
//! record has a valid record claiming durable predecessors after it, so a flip in it is
//! corruption), the sweeps run through the close record, and the 64 bytes flipped past
//! it are old-life bytes.
//!
//! The expected answers (task ids, latest seq and state, checkpoints, pending calls, call
//! results) after each prefix of operations come from the same operations run live on a
//! second store with `SyncMode::Never`. Every open runs under `catch_unwind`; a panic is a
//! failure. The log-level sweeps are in `tests/log_faults/`.

#[path = "../common/mod.rs"]
mod common;

use std::time::Instant;

mod image;
mod sweeps;
mod workload;

use image::{Segment, build};
use sweeps::{Damage, flip_sweep, prefix_sweep};
use workload::FAILURES_SHOWN;

#[test]
fn store_survives_truncation_zeroing_and_bit_flips_at_every_byte() {
    sweep_all(Segment::Fresh);
}

#[test]
fn store_in_a_recycled_segment_survives_truncation_zeroing_and_bit_flips_at_every_byte() {
    sweep_all(Segment::Recycled);
}

fn sweep_all(kind: Segment) {
    let started = Instant::now();
    let built = build(kind);
    let data_end = built.data_end();
    let truncated = prefix_sweep(&built, Damage::Truncate);
    let zeroed = prefix_sweep(&built, Damage::Zero);
    let (counts, flipped) = flip_sweep(&built);
    let classified = counts.corruption + counts.unsupported + counts.ignored;
    assert_eq!(
        classified + flipped.len() as u64,
        counts.flips,
        "every flip is judged"
    );
    let failures: Vec<String> = [truncated, zeroed, flipped].concat();
    let swept_end = built.records_end();
    println!(
        "store byte sweep ({kind:?} segment): {} records in {data_end} bytes (swept to \
         {swept_end}); {} truncation offsets, {} zeroed offsets, {} flips: {} corruption, {} \
         unsupported, {} torn/ignored; {} wrong states or panics; {:.1} s",
        built.spans.len(),
        swept_end + 1,
        swept_end + 1,
        counts.flips,
        counts.corruption,
        counts.unsupported,
        counts.ignored,
        failures.len(),
        started.elapsed().as_secs_f64(),
    );
    assert!(
        failures.is_empty(),
        "{} failures; the first {}:\n{}",
        failures.len(),
        FAILURES_SHOWN.min(failures.len()),
        failures[..FAILURES_SHOWN.min(failures.len())].join("\n")
    );
}
