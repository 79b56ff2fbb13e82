//! Recycled segments (format v2, docs/format.md §6) in the corners the sweeps reach only by
//! chance: what lies past a recycled segment's data (an earlier life's bytes, which
//! never validate under the new salt), with and without a close record. On the simulated
//! disk (its extent map counts everything up to a file's last non-zero byte as written,
//! so a writer does not zero an earlier life's bytes ahead of its data).
//!
//! - The final segment of a log killed while appending to a recycled file, cut at every
//!   offset and zeroed from every offset on: exactly the whole records before the damage
//!   come back, the bytes past them are torn (strict recovery refuses them), a writer
//!   seals the segment and appends to the next; with only the close record left, nothing
//!   is torn and the writer appends after it.
//! - A writer ends each write in a recycled file on a block boundary (zeros after the
//!   data), so that a small batch does not wait for the read of a block the page cache
//!   does not hold.
//! - Regression: strict recovery took the earlier life's bytes past a close record for a
//!   torn tail, and refused every cleanly closed recycled segment.
//! - Regression: a writer appended after the close record of a recycled segment whatever
//!   its sync mode, over the bytes there without zeroing them (in a recycled file they
//!   cannot be bounded). Under `SyncMode::Periodic` (or `Never`) two batches B1 and B2 of
//!   that writer may both be unsynced when the power goes, and the disk may keep B2 and
//!   lose B1. The next writer found the close record as the last complete batch and
//!   appended again after it: when its record X took exactly B1's bytes, B2 followed X
//!   with the very LSN X hands on, and the open after the next crash delivered B2, a
//!   record of a history that was lost, as if it came after X. A writer now appends
//!   after a close record only with `SyncMode::Always` (at most one unsynced batch, whose
//!   records after the first carry no batch start), and otherwise seals the segment at
//!   open and appends to a new one.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentwal::log::{
    Log, LogOptions, RECORD_HEADER_BYTES, SEGMENT_FLAG_RECYCLED, SyncMode, segment_path,
};
use agentwal::storage::Storage;
use agentwal::storage::sim::SimStorage;
use common::hooks::NothingLive;

const DIR: &str = "/agents/wal";
/// Larger than a block: a writer fills the rest of the block its data ends in with zeros
/// (`a_writer_fills_the_last_block_of_each_batch_in_a_recycled_file`), so only past that
/// block do the earlier life's bytes remain for these tests to meet.
const SEGMENT_BYTES: u64 = 16 << 10;

/// Opens the log on `sim`, collecting (lsn, payload) of every recovered record.
fn open(sim: &SimStorage, sync: SyncMode) -> (Log, Vec<(u64, Vec<u8>)>) {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let options = LogOptions {
        sync,
        segment_bytes: SEGMENT_BYTES,
        ..LogOptions::default()
    };
    let mut got = Vec::new();
    let log = Log::open_on(storage, DIR, options, |r| {
        got.push((r.lsn, r.payload.to_vec()));
        Ok(())
    })
    .expect("open");
    (log, got)
}

/// A log whose active segment is a recycled file, closed cleanly: the LSN of its last
/// record, that segment's id, and where its data (the close record) ends.
fn closed_recycled_log() -> (SimStorage, u64, u64, usize) {
    let sim = SimStorage::new();
    let (log, _) = open(&sim, SyncMode::Always);
    for i in 0..40u8 {
        log.append(1, &[i + 1; 1000]).unwrap();
    }
    log.compact(true, &NothingLive::default()).unwrap();
    while log.stats().segments_recycled == 0 {
        log.append(1, &[0xAA; 1000]).unwrap();
    }
    let last = log.append(1, b"last").unwrap();
    let header = sim.volatile_image().files[&segment_path(Path::new(DIR), last.pos.segment_id)]
        [12..16]
        .to_vec();
    let flags = u32::from_le_bytes(header.try_into().unwrap());
    assert!(
        flags & SEGMENT_FLAG_RECYCLED != 0,
        "the last segment is recycled"
    );
    drop(log); // a clean close: a close record after `last`
    let close_end = last.pos.offset + u64::from(last.bytes) + RECORD_HEADER_BYTES as u64;
    (sim, last.lsn, last.pos.segment_id, close_end as usize)
}

#[test]
fn a_batch_lost_after_a_close_record_does_not_bring_back_the_batch_after_it() {
    let (sim, last_lsn, _, _) = closed_recycled_log();
    // Writer 2: two batches, neither synced; then a power loss keeps B2's write, not B1's.
    let (log2, got) = open(&sim, SyncMode::Periodic(Duration::from_secs(3600)));
    assert_eq!(got.last().map(|r| r.0), Some(last_lsn));
    let durable = sim.durable_image();
    let b1 = log2.append(1, &[0xB1; 100]).unwrap();
    let b2 = log2.append(1, &[0xB2; 100]).unwrap();
    let mut image = sim.volatile_image();
    std::mem::forget(log2); // killed: no flush, no close
    let seg = segment_path(Path::new(DIR), b1.pos.segment_id);
    let (start, end) = (
        b1.pos.offset as usize,
        (b1.pos.offset + u64::from(b1.bytes)) as usize,
    );
    let before = durable.files.get(&seg).map(|f| f[start..end].to_vec());
    let file = image.files.get_mut(&seg).expect("B1's segment");
    file[start..end].copy_from_slice(&before.unwrap_or_else(|| vec![0; end - start]));

    // Writer 3: recovers, appends X of B1's size (the same LSN), and loses power after
    // it is durable.
    let sim3 = SimStorage::from_image(&image);
    let (log3, got3) = open(&sim3, SyncMode::Always);
    assert_eq!(
        got3.last().map(|r| r.0),
        Some(last_lsn),
        "B1 and B2 are lost"
    );
    let x = log3.append(1, &[0xCC; 100]).unwrap();
    assert_eq!(x.lsn, b1.lsn);
    let after = sim3.durable_image();
    drop(log3);

    let (_, got4) = open(&SimStorage::from_image(&after), SyncMode::Always);
    let tail: Vec<(u64, u8)> = got4
        .iter()
        .map(|(l, p)| (*l, p[0]))
        .skip(got3.len())
        .collect();
    assert_eq!(
        tail,
        vec![(x.lsn, 0xCC)],
        "after X (lsn {}) only X: B2 (lsn {}, written by writer 2 after the lost B1) must \
         not come back",
        x.lsn,
        b2.lsn
    );
}

/// With `SyncMode::Always` a writer still appends after a close record, in place.
#[test]
fn an_always_writer_appends_after_a_close_record() {
    let (sim, last_lsn, closed, _) = closed_recycled_log();
    let (log, got) = open(&sim, SyncMode::Always);
    assert_eq!(got.last().map(|r| r.0), Some(last_lsn));
    let a = log.append(1, b"after").unwrap();
    assert_eq!(a.pos.segment_id, closed, "appended in the closed segment");
    assert_eq!(log.recovery().torn_bytes, 0);
}

/// With `SyncMode::Periodic` too: in place of the close record, which the open zeroed
/// (and made durable so) before the first append, so that it cannot outlive a batch
/// appended after it (the test above shows what that would let back).
#[test]
fn a_periodic_writer_appends_in_place_of_the_close_record() {
    let (sim, last_lsn, closed, close_end) = closed_recycled_log();
    let (log, got) = open(&sim, SyncMode::Periodic(Duration::from_secs(3600)));
    assert_eq!(got.last().map(|r| r.0), Some(last_lsn));
    let a = log.append(1, b"after").unwrap();
    assert_eq!(
        (a.pos.segment_id, a.pos.offset as usize),
        (closed, close_end - agentwal::log::RECORD_HEADER_BYTES),
        "the first record goes where the close record was"
    );
    drop(log);
    let (_, got) = open(&sim, SyncMode::Always);
    assert_eq!(got.last(), Some(&(a.lsn, b"after".to_vec())));
}

/// The final segment of a log killed while appending to a recycled file (after the close
/// record of the writer before it), cut at every offset of the new records and zeroed
/// from every offset on: recovery keeps exactly the records wholly before the damage.
/// With one of the new records left, the segment was not closed: every byte past them
/// is reported torn (an earlier life's bytes lie there: no bound on a torn batch is
/// known), `RecoveryMode::Strict` fails, and a writer seals the segment and appends to
/// the next. With none left, the same: the close record was zeroed before the first
/// append, so the segment is not closed either. A reopen after that append sees it.
#[test]
fn a_recycled_final_segment_cut_or_zeroed_at_every_offset() {
    let (sim, _, _, close_end) = closed_recycled_log();
    let (log, before) = open(&sim, SyncMode::Always);
    let mut appended = Vec::new();
    for i in 0..16u8 {
        let payload = vec![0x40 + i; usize::from(i) * 13 % 60];
        appended.push((log.append(1 + i % 3, &payload).unwrap(), payload));
    }
    let segment = appended[0].0.pos.segment_id;
    assert!(appended.iter().all(|(a, _)| a.pos.segment_id == segment));
    let image = sim.volatile_image(); // killed: no close record
    drop(log);
    let path = segment_path(Path::new(DIR), segment);
    let bytes = image.files[&path].clone();
    let spans: Vec<(usize, usize)> = appended
        .iter()
        .map(|(a, _)| {
            (
                a.pos.offset as usize,
                (a.pos.offset + u64::from(a.bytes)) as usize,
            )
        })
        .collect();
    // The earlier writer's close record was zeroed by this one's open: the data starts
    // where it was.
    let data_start = spans[0].0;
    assert_eq!(data_start, close_end - agentwal::log::RECORD_HEADER_BYTES);
    let data_end = spans.last().unwrap().1;
    assert!(
        bytes[data_end..].iter().any(|&b| b != 0),
        "an earlier life's bytes past the data"
    );
    let mut failures = Vec::new();
    for zero in [false, true] {
        for k in data_start..=data_end {
            let mut damaged = bytes.clone();
            match zero {
                true => damaged[k..].fill(0),
                false => damaged.truncate(k),
            }
            // Zeroing a record's zero bytes leaves it whole: compare.
            let intact = spans
                .iter()
                .take_while(|s| damaged.get(s.0..s.1) == Some(&bytes[s.0..s.1]))
                .count();
            let what = format!("{} at {k}", if zero { "zeroed" } else { "cut" });
            let outcome = check_damaged(
                &image,
                &path,
                damaged,
                &before,
                &appended[..intact],
                data_start as u64,
            );
            if let Err(why) = outcome {
                failures.push(format!("{what} ({intact} records intact): {why}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures, the first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

/// Opens `image` with `path` replaced by `damaged`: strict, then writable; checks what
/// comes back, an append after it, and a reopen.
fn check_damaged(
    image: &agentwal::storage::sim::SimImage,
    path: &Path,
    damaged: Vec<u8>,
    before: &[(u64, Vec<u8>)],
    intact: &[(agentwal::log::Appended, Vec<u8>)],
    data_start: u64,
) -> Result<(), String> {
    let len = damaged.len() as u64;
    // The writer that appended these zeroed the earlier close record first (docs/log.md
    // §3.3): however many of its records are left, the segment is not closed.
    let closed = false;
    let mut image = image.clone();
    image.files.insert(path.to_path_buf(), damaged);
    let storage = |sim: &SimStorage| -> Arc<dyn Storage> { Arc::new(sim.clone()) };
    let strict = LogOptions {
        segment_bytes: SEGMENT_BYTES,
        recovery: agentwal::log::RecoveryMode::Strict,
        ..LogOptions::default()
    };
    let sim = SimStorage::from_image(&image);
    match Log::open_on(storage(&sim), DIR, strict, |_| Ok(())) {
        Err(agentwal::Error::Corruption { segment, .. }) if segment == path && !closed => {}
        Ok(_) if closed => {}
        Err(e) => return Err(format!("strict open: {e}")),
        Ok(_) => return Err("a strict open accepted a recycled segment not closed".into()),
    }
    let sim = SimStorage::from_image(&image);
    let (log, got) = open(&sim, SyncMode::Always);
    let want: Vec<(u64, Vec<u8>)> = before
        .iter()
        .cloned()
        .chain(intact.iter().map(|(a, p)| (a.lsn, p.clone())))
        .collect();
    if got != want {
        return Err(format!(
            "recovered {} records, want {}",
            got.len(),
            want.len()
        ));
    }
    // With no new record intact, the data ends where the close record was.
    let end = intact
        .last()
        .map_or(data_start, |(a, _)| a.pos.offset + u64::from(a.bytes));
    let torn = log.recovery().torn_bytes;
    let want_torn = if closed { 0 } else { len.saturating_sub(end) };
    if torn != want_torn {
        return Err(format!("torn bytes {torn}, not {want_torn}"));
    }
    let a = log
        .append(1, b"after")
        .map_err(|e| format!("append: {e}"))?;
    let damaged_id = path
        .file_name()
        .and_then(|n| agentwal::log::parse_segment_file_name(&n.to_string_lossy()))
        .unwrap();
    let want_id = damaged_id + u64::from(!closed);
    if a.pos.segment_id != want_id {
        return Err(format!(
            "appended in segment {}, not {want_id}",
            a.pos.segment_id
        ));
    }
    let durable = SimStorage::from_image(&sim.durable_image());
    drop(log);
    let (_, again) = open(&durable, SyncMode::Always);
    let mut want = want;
    want.push((a.lsn, b"after".to_vec()));
    match again == want {
        true => Ok(()),
        false => Err("after the append, a reopen sees other records".into()),
    }
}

/// A recycled segment closed cleanly has an earlier life's bytes past its close record:
/// nothing torn, so a strict open accepts it. (Regression: strict recovery judged those
/// bytes a torn tail before it looked for the close record, and refused every cleanly
/// closed recycled segment.)
#[test]
fn a_strict_open_accepts_a_cleanly_closed_recycled_segment() {
    let (sim, last_lsn, id, data_end) = closed_recycled_log();
    let image = sim.volatile_image();
    let bytes = &image.files[&segment_path(Path::new(DIR), id)];
    let (log, got) = open(&SimStorage::from_image(&image), SyncMode::Always);
    assert_eq!(got.last().map(|r| r.0), Some(last_lsn));
    assert_eq!(log.recovery().torn_bytes, 0);
    drop(log);
    assert!(
        bytes[data_end..].iter().any(|&b| b != 0),
        "an earlier life's bytes past the close record"
    );
    let strict = LogOptions {
        segment_bytes: SEGMENT_BYTES,
        recovery: agentwal::log::RecoveryMode::Strict,
        ..LogOptions::default()
    };
    let sim = SimStorage::from_image(&image);
    let log = Log::open_on(Arc::new(sim), DIR, strict, |_| Ok(()))
        .unwrap_or_else(|e| panic!("a strict open of a cleanly closed recycled segment: {e}"));
    assert_eq!(log.recovery().torn_bytes, 0);
}

/// In a recycled file a writer ends each write on a block boundary, with zeros after the
/// data: a write covering part of a block the page cache does not hold (the earlier life's,
/// written, so the cache cannot make it up) would first read it from the device, on the
/// commit's path. Past every batch, the rest of its block holds zeros, not the earlier
/// life's bytes.
#[test]
fn a_writer_fills_the_last_block_of_each_batch_in_a_recycled_file() {
    const BIG_SEGMENT_BYTES: u64 = 4 << 20;
    const RECORD_BYTES: usize = 60_000;
    const BLOCK_BYTES: usize = 4096;
    let sim = SimStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let options = LogOptions {
        segment_bytes: BIG_SEGMENT_BYTES,
        ..LogOptions::default()
    };
    let log = Log::open_on(storage, DIR, options, |_| Ok(())).expect("open");
    let record = [0x5Au8; RECORD_BYTES];
    let mut last = log.append(1, &record).unwrap();
    // Two sealed segments: the pass retires the first and puts its (empty) compacted
    // segment in the second's file.
    while last.pos.segment_id < 3 {
        last = log.append(1, &record).unwrap();
    }
    assert_eq!(
        log.stats().fill_bytes_written,
        0,
        "fresh segments are not filled"
    );
    log.compact(true, &NothingLive::default()).unwrap();
    let appends_per_segment = BIG_SEGMENT_BYTES as usize / RECORD_BYTES + 1;
    for _ in 0..appends_per_segment {
        if log.stats().segments_recycled > 0 {
            break;
        }
        last = log.append(1, &record).unwrap();
    }
    assert_eq!(
        log.stats().segments_recycled,
        1,
        "the next segment is recycled"
    );
    let recycled = segment_path(Path::new(DIR), last.pos.segment_id);
    let mut filled = 0;
    for _ in 0..20 {
        let end = (last.pos.offset + u64::from(last.bytes)) as usize;
        let block_end = end.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        let file = &sim.volatile_image().files[&recycled];
        assert!(
            file[end..block_end].iter().all(|&b| b == 0),
            "past the batch ending at {end}: the earlier life's bytes, not zeros"
        );
        assert!(
            file[block_end..].iter().any(|&b| b != 0),
            "the earlier life past it"
        );
        filled += usize::from(end < block_end);
        last = log.append(1, &record).unwrap();
        assert_eq!(last.pos.segment_id, 4, "still the recycled file");
    }
    assert!(filled >= 15, "{filled} of 20 batches ended inside a block");
    let stats = log.stats();
    assert!(
        stats.fill_bytes_written > 0 && stats.fill_bytes_written < 20 * BLOCK_BYTES as u64,
        "{stats:?}"
    );
}
