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

mod common;

use std::collections::HashSet;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agentwal::log::PREALLOCATE_BYTES;
use agentwal::log::{Log, LogOptions, LogStats, RecoveryMode, SyncMode};
use agentwal::storage::Storage;
use agentwal::storage::sim::{SimImage, SimOp, SimStorage};
use common::env::env_u64;
use common::hooks::NothingLive;
use common::panic_text;
use common::rng::Rng;

/// The log's directory on the simulated disk.
const DIR: &str = "/agents/wal";
/// Systematic images (cuts, directory subsets) per crash point, at most.
const CUTS: usize = 8;
/// Random images per crash point.
const SAMPLES: usize = 4;
/// The sweep stops after this many failures.
const MAX_FAILURES: usize = 20;
/// `ZERO_AHEAD_MAX_BYTES` of `src/log/writer.rs`: how far ahead zeroing writes.
const ZERO_AHEAD_BYTES: u64 = 1 << 20;
/// By this large batch (counted from 0) the writer must have stopped zeroing ahead.
const FLIP_BY: usize = 8;

/// A workload: the segment size, and the records appended.
struct Workload {
    name: &'static str,
    seed: u64,
    segment_bytes: u64,
    /// Large records: how many, and their payload sizes.
    large: usize,
    large_bytes: Range<u64>,
    /// Small records after them (at most 2 KiB).
    small: usize,
}

/// Rotates while not zeroing, then zeroes again.
const ROTATING: Workload = Workload {
    name: "rotating",
    seed: 0x1A46_E2B0,
    segment_bytes: 3 << 19,
    large: 32,
    large_bytes: (80 << 10)..(128 << 10),
    small: 20,
};

/// Extends a segment past its first preallocation while not zeroing.
const EXTENDING: Workload = Workload {
    name: "extending",
    seed: 0xE47E_11D5,
    segment_bytes: PREALLOCATE_BYTES + (256 << 10),
    large: 24,
    large_bytes: (160 << 10)..(224 << 10),
    small: 0,
};

/// Rotates onto recycled files, and writes a record larger than a segment, in the large
/// phase.
const RECYCLED: Workload = Workload {
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
    fn options(&self) -> LogOptions {
        LogOptions {
            sync: SyncMode::Always,
            segment_bytes: self.segment_bytes,
            recovery: RecoveryMode::TolerateTornTail,
        }
    }
}

/// A record as appended, and the storage operations its `append` ran (`start..end`): it
/// is acknowledged at crash point `n` if `end <= n`, and not begun if `n <= start`.
struct Appended {
    lsn: u64,
    kind: u8,
    payload: Vec<u8>,
    start: u64,
    end: u64,
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
struct Recording {
    ops: Vec<SimOp>,
    /// Records on the disk before the recording began (recovered first).
    base: Recovered,
    /// That disk.
    start: SimImage,
    appends: Vec<Appended>,
    /// Operations of the large batches after the writer stopped zeroing.
    skipping: Range<u64>,
    /// Stats after the last large record, and at the end.
    after_large: LogStats,
    after_all: LogStats,
}

/// Opens the log on `sim`, collecting the recovered records as (lsn, kind, payload).
type Recovered = Vec<(u64, u8, Vec<u8>)>;

fn open(sim: &SimStorage, w: &Workload) -> agentwal::Result<(Log, Recovered)> {
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
fn record(w: &Workload) -> Recording {
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

/// Indices (into `crash_images`) of the images checked when there are `len`: the durable
/// and volatile ones, at most `CUTS` systematic ones, and the `SAMPLES` random mixes.
fn selected(len: usize) -> Vec<usize> {
    if len <= 2 + CUTS + SAMPLES {
        return (0..len).collect();
    }
    let systematic = 2..len - SAMPLES;
    let mut picked: Vec<usize> = (0..2).chain(len - SAMPLES..len).collect();
    // The first cuts (a write torn near its start), the last ones (directory subsets come
    // last; else the end of the write), and an even spread between.
    let (head, tail) = (2, CUTS / 2);
    picked.extend(systematic.start..systematic.start + head);
    picked.extend(systematic.end - tail..systematic.end);
    let middle = (systematic.start + head)..(systematic.end - tail);
    let spread = CUTS - head - tail;
    let step = middle.len() / (spread + 1);
    picked.extend((1..=spread).map(|k| middle.start + k * step));
    picked.sort_unstable();
    picked.dedup();
    picked
}

/// Recovers `image` (a crash before operation `n`) and judges it; then appends and judges
/// the durable image after that.
fn check_image(
    image: &SimImage,
    n: u64,
    w: &Workload,
    rec: &Recording,
    seed: u64,
) -> Result<(), String> {
    let (appends, base) = (&rec.appends, &rec.base);
    let sim = SimStorage::from_image(image);
    let (log, all) = open(&sim, w).map_err(|e| format!("open: {e}"))?;
    if !log.recovery().skipped.is_empty() {
        return Err(format!("recovery skipped: {:?}", log.recovery().skipped));
    }
    if all.get(..base.len()) != Some(&base[..]) {
        return Err("the records from before the recording are not all there".into());
    }
    let got = &all[base.len()..];
    let acked = appends.iter().take_while(|a| a.end <= n).count();
    let begun = appends.iter().take_while(|a| a.start < n).count();
    for (i, (lsn, kind, payload)) in got.iter().enumerate() {
        let Some(a) = appends.get(i) else {
            return Err(format!("record {i} (lsn {lsn}) was never appended"));
        };
        if (*lsn, *kind, payload) != (a.lsn, a.kind, &a.payload) {
            let same = if payload == &a.payload {
                "same"
            } else {
                "other"
            };
            return Err(format!(
                "record {i}: lsn {lsn} kind {kind} with {} bytes ({same} payload), appended \
                 as lsn {} kind {} with {} bytes",
                payload.len(),
                a.lsn,
                a.kind,
                a.payload.len()
            ));
        }
    }
    if got.len() < acked {
        let lost = appends[got.len()].lsn;
        let found = got.len();
        return Err(format!(
            "{found} records recovered, {acked} acknowledged: lsn {lost} is lost"
        ));
    }
    if got.len() > begun {
        let found = got.len();
        return Err(format!(
            "{found} records recovered, only {begun} appends had begun"
        ));
    }

    // Append after recovery; it must read back, and be durable.
    let mut rng = Rng(seed);
    let len = match rng.below(2) {
        0 => 1 + rng.below(512),
        _ => w.large_bytes.start + rng.below(64 << 10),
    };
    let payload = rng.bytes(len as usize);
    let a = log
        .append(1, &payload)
        .map_err(|e| format!("append after recovery: {e}"))?;
    let next = appends[0].lsn + got.len() as u64;
    if a.lsn != next {
        return Err(format!("append after recovery: lsn {}, not {next}", a.lsn));
    }
    match log.read(a.pos) {
        Ok(p) if p == payload => {}
        Ok(_) => return Err("the record appended after recovery reads back wrong".into()),
        Err(e) => return Err(format!("reading the record appended after recovery: {e}")),
    }
    let durable = SimStorage::from_image(&sim.durable_image());
    drop(log);
    let (_, mut again) = open(&durable, w).map_err(|e| format!("open after appending: {e}"))?;
    if again.pop() != Some((a.lsn, 1, payload)) {
        return Err("the record appended after recovery is not durable".into());
    }
    if again != all {
        return Err("appending after recovery changed the recovered records".into());
    }
    Ok(())
}

/// A 64-bit hash of `image`'s files (not its label), to recognise an image seen before.
fn fingerprint(image: &SimImage) -> u64 {
    let mut h = 0u64;
    let mut mix = |word: u64| {
        h = (h ^ word).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
    };
    for (path, bytes) in &image.files {
        path.as_os_str()
            .as_encoded_bytes()
            .iter()
            .for_each(|&b| mix(b.into()));
        mix(bytes.len() as u64);
        let words = bytes.chunks_exact(8);
        let rest = words
            .remainder()
            .iter()
            .fold(0, |r, &b| r << 8 | u64::from(b));
        words.for_each(|w| mix(u64::from_le_bytes(w.try_into().unwrap())));
        mix(rest);
    }
    h
}

/// Checks the selected crash images of the crash points of `rec` in `points` (or, with
/// `AGENTWAL_CRASH_POINT` set, of that one); prints and asserts the outcome. An image
/// already checked with the same records acknowledged and begun (the durable image stays
/// the same until the next fdatasync, and zeros written over zeros change no byte) is
/// not checked again.
fn sweep(w: &Workload, rec: &Recording, points: Range<u64>) {
    let started = Instant::now();
    let only = env_u64("AGENTWAL_CRASH_POINT");
    let (images, repeats, swept) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let seen = Mutex::new(HashSet::<(u64, usize, usize)>::new());
    let failures = Mutex::new(Vec::<String>::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (tx, rx) = sync_channel::<(u64, usize, SimImage)>(workers);
    let rx = Mutex::new(rx);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                while let Ok((n, i, image)) = rx.lock().unwrap().recv() {
                    let acked = rec.appends.iter().take_while(|a| a.end <= n).count();
                    let begun = rec.appends.iter().take_while(|a| a.start < n).count();
                    let key = (fingerprint(&image), acked, begun);
                    if !seen.lock().unwrap().insert(key) {
                        repeats.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let seed = w.seed ^ n.wrapping_mul(0x9E37_79B9) ^ (i as u64) << 40;
                    let check = || check_image(&image, n, w, rec, seed);
                    images.fetch_add(1, Ordering::Relaxed);
                    let why = match catch_unwind(AssertUnwindSafe(check)) {
                        Ok(Ok(())) => continue,
                        Ok(Err(why)) => why,
                        Err(panic) => format!("panic: {:?}", panic_text(&panic)),
                    };
                    let label = &image.label;
                    let msg = format!("{}: crash point {n}, image {i} ({label}): {why}", w.name);
                    eprintln!("FAILED {msg}");
                    failures.lock().unwrap().push(msg);
                }
            });
        }
        let replay = SimStorage::from_image(&rec.start);
        for n in 0..=rec.ops.len() as u64 {
            let next = rec.ops.get(n as usize);
            let wanted = only.map_or(points.contains(&n), |p| p == n);
            let swept_here = next.is_none_or(SimOp::mutates) && wanted;
            if swept_here && failures.lock().unwrap().len() < MAX_FAILURES {
                swept.fetch_add(1, Ordering::Relaxed);
                let mut all = replay.crash_images(w.seed ^ n, SAMPLES);
                let mut at = 0;
                for i in selected(all.len()) {
                    let image = all.nth(i - at).expect("an image");
                    at = i + 1;
                    tx.send((n, i, image)).unwrap();
                }
            }
            if let Some(op) = next {
                replay.apply(op);
            }
        }
        drop(tx);
    });
    let (images, repeats) = (images.into_inner(), repeats.into_inner());
    let points = swept.into_inner();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "crash sweep (large batches, {}): {images} images checked at {points} crash points \
         ({repeats} repeated images skipped) in {secs:.1} s",
        w.name
    );
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures (replay one: AGENTWAL_CRASH_POINT=<n> cargo test --release --test \
         crash_sweep_large_batches {} -- --nocapture):\n{}",
        failures.len(),
        w.name,
        failures.join("\n")
    );
}

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

/// [`RECYCLED`]'s recording: a prelude fills segments and compacts them all away (their
/// files retired for reuse), then the recorded run appends the large phase (one record
/// larger than a segment) and the small one.
fn record_recycled(w: &Workload) -> Recording {
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

#[test]
fn recycled() {
    let w = &RECYCLED;
    let rec = record_recycled(w);
    sweep(w, &rec, 0..u64::MAX);
}
