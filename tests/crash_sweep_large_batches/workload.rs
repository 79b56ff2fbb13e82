//! The workloads swept (rotating, extending, in a recycled file) and the recording of
//! every storage operation they make.

use std::ops::Range;
use std::sync::Arc;

use crate::common::hooks::NothingLive;
use crate::common::rng::Rng;
use agentwal::log::PREALLOCATE_BYTES;
use agentwal::log::{Log, LogOptions, LogStats, RecoveryMode, SyncMode};
use agentwal::storage::Storage;
use agentwal::storage::sim::{SimImage, SimOp, SimStorage};

/// The log's directory on the simulated disk.
const DIR: &str = "/agents/wal";

/// Systematic images (cuts, directory subsets) per crash point, at most.
pub(crate) const CUTS: usize = 8;

/// Random images per crash point.
pub(crate) const SAMPLES: usize = 4;

/// The sweep stops after this many failures.
pub(crate) const MAX_FAILURES: usize = 20;

/// `ZERO_AHEAD_MAX_BYTES` of `src/log/writer.rs`: how far ahead zeroing writes.
const ZERO_AHEAD_BYTES: u64 = 1 << 20;

/// By this large batch (counted from 0) the writer must have stopped zeroing ahead.
const FLIP_BY: usize = 8;

/// A workload: the segment size, and the records appended.
pub(crate) struct Workload {
    pub(crate) name: &'static str,
    pub(crate) seed: u64,
    pub(crate) segment_bytes: u64,
    /// Large records: how many, and their payload sizes.
    pub(crate) large: usize,
    pub(crate) large_bytes: Range<u64>,
    /// Small records after them (at most 2 KiB).
    pub(crate) small: usize,
}

/// Rotates while not zeroing, then zeroes again.
pub(crate) const ROTATING: Workload = Workload {
    name: "rotating",
    seed: 0x1A46_E2B0,
    segment_bytes: 3 << 19,
    large: 32,
    large_bytes: (80 << 10)..(128 << 10),
    small: 20,
};

/// Extends a segment past its first preallocation while not zeroing.
pub(crate) const EXTENDING: Workload = Workload {
    name: "extending",
    seed: 0xE47E_11D5,
    segment_bytes: PREALLOCATE_BYTES + (256 << 10),
    large: 24,
    large_bytes: (160 << 10)..(224 << 10),
    small: 0,
};

/// Rotates onto recycled files, and writes a record larger than a segment, in the large
/// phase.
pub(crate) const RECYCLED: Workload = Workload {
    name: "recycled",
    seed: 0x2EC7_C1ED,
    segment_bytes: 256 << 10,
    large: 12,
    large_bytes: (80 << 10)..(128 << 10),
    small: 8,
};

/// In [`RECYCLED`], the large record at this index is larger than a segment.
const JUMBO_AT: usize = 6;

impl Workload {
    pub(crate) fn options(&self) -> LogOptions {
        LogOptions {
            sync: SyncMode::Always,
            segment_bytes: self.segment_bytes,
            recovery: RecoveryMode::TolerateTornTail,
        }
    }
}

/// A record as appended, and the storage operations its `append` ran (`start..end`): it
/// is acknowledged at crash point `n` if `end <= n`, and not begun if `n <= start`.
pub(crate) struct Appended {
    pub(crate) lsn: u64,
    pub(crate) kind: u8,
    pub(crate) payload: Vec<u8>,
    pub(crate) start: u64,
    pub(crate) end: u64,
}

/// Appends `payload` (without faults) and notes the storage operations the append ran.
fn append_recorded(
    sim: &SimStorage,
    log: &Log,
    kind: u8,
    payload: Vec<u8>,
) -> (agentwal::log::Appended, Appended) {
    let start = sim.ops();
    let a = log.append(kind, &payload).expect("append without faults");
    let end = sim.ops();
    let appended = Appended {
        lsn: a.lsn,
        kind,
        payload,
        start,
        end,
    };
    (a, appended)
}

/// A recorded run.
pub(crate) struct Recording {
    pub(crate) ops: Vec<SimOp>,
    /// Records on the disk before the recording began (recovered first).
    pub(crate) base: Recovered,
    /// That disk.
    pub(crate) start: SimImage,
    pub(crate) appends: Vec<Appended>,
    /// Operations of the large batches after the writer stopped zeroing.
    pub(crate) skipping: Range<u64>,
    /// Stats after the last large record, and at the end.
    pub(crate) after_large: LogStats,
    pub(crate) after_all: LogStats,
}

/// Opens the log on `sim`, collecting the recovered records as (lsn, kind, payload).
pub(crate) type Recovered = Vec<(u64, u8, Vec<u8>)>;

pub(crate) fn open(sim: &SimStorage, w: &Workload) -> agentwal::Result<(Log, Recovered)> {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let mut got = Vec::new();
    let log = Log::open_on(storage, DIR, w.options(), |r| {
        got.push((r.lsn, r.kind, r.payload.to_vec()));
        Ok(())
    })?;
    Ok((log, got))
}

/// Runs the workload on a fresh `SimStorage`, recording it, and asserts that the writer
/// stopped zeroing ahead early in the large phase and did not zero again in it.
pub(crate) fn record(w: &Workload) -> Recording {
    let sim = SimStorage::new();
    sim.record();
    let (log, got) = open(&sim, w).expect("open on an empty disk");
    assert!(got.is_empty());
    let mut rng = Rng(w.seed);
    let mut appends = Vec::new();
    let mut zeros = Vec::new(); // zero_bytes_written after each large record
    let mut after_large = LogStats::default();
    for i in 0..w.large + w.small {
        let len = match i < w.large {
            true => w.large_bytes.start + rng.below(w.large_bytes.end - w.large_bytes.start),
            false => 1 + rng.below(2 << 10),
        };
        let kind = 1 + (i % 5) as u8;
        let (_, appended) = append_recorded(&sim, &log, kind, rng.bytes(len as usize));
        appends.push(appended);
        if i < w.large {
            after_large = log.stats();
            zeros.push(after_large.zero_bytes_written);
        }
    }
    let after_all = log.stats();
    drop(log);
    let ops = sim.take_recording();
    assert_eq!(ops.len() as u64, sim.ops(), "recording numbered from 0");

    // The last large batch that wrote zeros; none after it did.
    let flip = (1..w.large).rev().find(|&i| zeros[i] != zeros[i - 1]);
    let flip = flip.unwrap_or(0);
    println!(
        "{}: zeros ahead through large batch {flip} ({} bytes), none in the {} after; \
         {} zero bytes at the end ({} fsyncs, {} rotations, {} operations)",
        w.name,
        zeros[flip],
        w.large - 1 - flip,
        after_all.zero_bytes_written,
        after_all.fsyncs,
        after_all.rotations,
        ops.len(),
    );
    assert!(
        flip <= FLIP_BY,
        "{}: the writer still zeroed ahead at large batch {flip}: the path without zeros is \
         not tested",
        w.name
    );
    let unzeroed: usize = appends[flip + 1..w.large]
        .iter()
        .map(|a| a.payload.len())
        .sum();
    assert!(
        unzeroed as u64 > 2 * ZERO_AHEAD_BYTES,
        "{}: only {unzeroed} bytes appended without zeroing",
        w.name
    );
    let skipping = appends[flip + 1].start..appends[w.large - 1].end;
    Recording {
        ops,
        base: Vec::new(),
        start: SimImage::default(),
        appends,
        skipping,
        after_large,
        after_all,
    }
}

/// [`RECYCLED`]'s recording: a prelude fills segments and compacts them all away (their
/// files retired for reuse), then the recorded run appends the large phase (one record
/// larger than a segment) and the small one.
pub(crate) fn record_recycled(w: &Workload) -> Recording {
    let prelude = SimStorage::new();
    let (log, _) = open(&prelude, w).expect("open on an empty disk");
    let mut rng = Rng(w.seed);
    while log.stats().rotations < 5 {
        log.append(9, &rng.bytes(60 << 10)).expect("prelude append");
    }
    log.compact(true, &NothingLive::default())
        .expect("prelude compaction")
        .expect("a compaction pass");
    drop(log);
    let start = prelude.volatile_image();
    let free = start
        .files
        .keys()
        .filter(|p| p.to_string_lossy().ends_with(".wal.free"))
        .count();
    assert!(free >= 3, "the prelude retired {free} files");

    let sim = SimStorage::from_image(&start);
    sim.record();
    let (log, base) = open(&sim, w).expect("open after the prelude");
    let mut appends = Vec::new();
    // Appends that left an earlier life's bytes right past them (in a recycled file).
    let mut over_old_bytes = 0;
    for i in 0..w.large + w.small {
        let len = match i {
            JUMBO_AT => w.segment_bytes + (64 << 10),
            _ if i < w.large => {
                w.large_bytes.start + rng.below(w.large_bytes.end - w.large_bytes.start)
            }
            _ => 1 + rng.below(2 << 10),
        };
        let kind = 1 + (i % 5) as u8;
        let (a, appended) = append_recorded(&sim, &log, kind, rng.bytes(len as usize));
        let path = agentwal::log::segment_path(std::path::Path::new(DIR), a.pos.segment_id);
        let file = &sim.volatile_image().files[&path];
        let past = (a.pos.offset + u64::from(a.bytes)) as usize;
        let header = agentwal::log::SegmentHeader::decode(file, &path).expect("a header");
        if header.is_recycled() && file[past..].iter().take(4096).any(|&b| b != 0) {
            over_old_bytes += 1;
        }
        appends.push(appended);
    }
    let stats = log.stats();
    drop(log);
    let ops = sim.take_recording();
    let oversized = ops
        .iter()
        .any(|op| matches!(op, SimOp::Allocate(_, len) if *len > w.segment_bytes));
    println!(
        "{}: {} records from before, {} appended ({over_old_bytes} with an earlier life's \
         bytes right past them); {} rotations, {} onto recycled files, {} zero bytes; a \
         segment sized for the large record: {oversized} ({} operations)",
        w.name,
        base.len(),
        appends.len(),
        stats.rotations,
        stats.segments_recycled,
        stats.zero_bytes_written,
        ops.len(),
    );
    assert!(
        stats.segments_recycled >= 2,
        "{}: {} rotations recycled a file",
        w.name,
        stats.segments_recycled
    );
    // The writer zeroes ahead only what the extent map says is unwritten (the simulated
    // one: past the last non-zero byte), so an earlier life's bytes stay past the data.
    assert!(
        over_old_bytes > 0,
        "{}: no append left an earlier life's bytes right past it",
        w.name
    );
    assert!(
        oversized,
        "{}: no segment sized for the large record",
        w.name
    );
    Recording {
        ops,
        base,
        start,
        appends,
        skipping: 0..0,
        after_large: stats,
        after_all: stats,
    }
}
