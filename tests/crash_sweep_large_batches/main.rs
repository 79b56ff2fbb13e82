//! Crash-point sweep over large batches: power loss after every storage operation of a
//! plain-log workload whose batches are large enough that the writer stops zeroing ahead
//! of the data (docs/format.md §6, `src/log/zeroing.rs`), recovered and judged.
//!
//! `tests/crash_sweep.rs` uses 4 KiB segments and tiny batches, so it only ever sees the
//! writer zeroing ahead. docs/format.md §6 argues that batches landing on preallocated,
//! never-written space change nothing recovery can see; this checks it under crashes. One
//! thread appends with `SyncMode::Always` (one batch and one fdatasync per record) a
//! phase of large records, 80 KiB and more: the moving average of bytes per sync passes
//! 48 KiB within a few batches and the writer stops zeroing ahead. Two workloads:
//!
//! - [`ROTATING`]: 1.5 MiB segments, then a phase of small records. The large phase
//!   rotates twice while not zeroing (the new segments get no zeros at all), the small one
//!   brings the average below 24 KiB and the zeros back. Every crash point is swept.
//! - [`EXTENDING`]: a segment past one 4 MiB preallocation step, filled by the large
//!   phase. Without zeros ahead, the writer extends the file in the same batch (and the
//!   same fdatasync) as the data written past the old end, instead of batches earlier.
//!   Images are several MiB each here, so only the crash points of that batch and the two
//!   after it (through the rotation that follows) are swept.
//!
//! - [`RECYCLED`]: 256 KiB segments on a disk whose earlier segments a compaction
//!   retired, so the large phase's rotations recycle those files: their blocks hold an
//!   earlier life's bytes (written already, so not zeroed ahead), and the large batches
//!   land over them; one record of the phase is larger than a segment and gets a segment
//!   of its own. Every crash point is swept; the recording asserts that rotations
//!   recycled files, that appends left an earlier life's bytes right past them, and that
//!   a segment was sized for the large record.
//!
//! The recording of the first two asserts that the path was taken: `LogStats::zero_bytes_written` stops
//! growing within the first large batches and stays put while MiBs are appended (and a
//! rotation, or the extension, happens), and in [`ROTATING`] grows again in the small
//! phase.
//!
//! The run is recorded on `SimStorage` (one thread: the same operations every time), then
//! replayed operation by operation; the disk after operations `0..n` is what a crash
//! before operation `n` leaves (only points before a mutating operation are swept). Of
//! the images `SimStorage::crash_images` lists there (durable state, everything written,
//! the last write cut at every sector, directory-change subsets, random mixes of dropped,
//! cut, lost, zeroed and garbled sectors), the durable and volatile ones, at most [`CUTS`]
//! systematic ones (the first, the last, where directory subsets sit, and an even spread
//! between: a 100 KiB write alone has 200 sector cuts) and [`SAMPLES`] random mixes are
//! opened and checked:
//!
//! - no panic, and the open succeeds (`Error::Corruption` fails the test: under this
//!   fault model a correct engine never leaves mid-log corruption), skipping nothing;
//! - the recovered records are a prefix of the appended ones (same LSN, kind and exact
//!   payload; no gap, nothing whose append had not started), holding every record
//!   acknowledged before the crash point;
//! - appending after recovery works (the next LSN, readable back), and is durable: the
//!   durable image after it recovers the same prefix and the new record.
//!
//! `AGENTWAL_CRASH_POINT=<n>` sweeps only point `n` (failures print it).

#[path = "../common/mod.rs"]
mod common;

use agentwal::storage::sim::SimOp;

mod judge;
mod workload;

use judge::sweep;
use workload::{Appended, EXTENDING, RECYCLED, ROTATING, record, record_recycled};

#[test]
fn rotating() {
    let w = &ROTATING;
    let rec = record(w);
    let rotations_skipping = rec.after_large.rotations;
    assert!(
        rotations_skipping >= 2,
        "the large phase rotated {rotations_skipping} times"
    );
    // Every rotation of the large phase happened while not zeroing: its new segment got
    // no zeros (`Io::rotate` zeroes ahead only if the policy says so).
    let creates = rec.ops[..rec.skipping.start as usize]
        .iter()
        .filter(|op| matches!(op, SimOp::Create(..)));
    assert!(
        creates.count() <= 2,
        "a segment was created before the writer stopped zeroing (only LOCK and the first \
         segment were expected)"
    );
    assert!(
        rec.after_all.zero_bytes_written > rec.after_large.zero_bytes_written,
        "small batches did not bring the zeros back"
    );
    sweep(w, &rec, 0..u64::MAX);
}

#[test]
fn extending() {
    let w = &EXTENDING;
    let rec = record(w);
    // The append whose batch extends the segment: it allocates, and creates no file.
    let extends = |a: &&Appended| {
        let ops = &rec.ops[a.start as usize..a.end as usize];
        ops.iter().any(|op| matches!(op, SimOp::Allocate(..)))
            && !ops.iter().any(|op| matches!(op, SimOp::Create(..)))
    };
    let i = rec.appends.iter().position(|a| extends(&a));
    let i = i.expect("no batch extended a segment");
    let extending = &rec.appends[i];
    assert!(
        rec.skipping.contains(&extending.start),
        "the segment was extended while the writer still zeroed ahead"
    );
    // Through the batch after it, and the one after that (which rotates).
    let last = &rec.appends[(i + 2).min(rec.appends.len() - 1)];
    let swept = &rec.ops[extending.start as usize..last.end as usize];
    assert!(
        swept.iter().any(|op| matches!(op, SimOp::Create(..))),
        "no rotation within two batches of the extension"
    );
    sweep(w, &rec, extending.start..last.end + 1);
}

#[test]
fn recycled() {
    let w = &RECYCLED;
    let rec = record_recycled(w);
    sweep(w, &rec, 0..u64::MAX);
}
