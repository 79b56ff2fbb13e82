//! Fault injection on the plain log: a cut at every byte offset, zeroed tails, every bit
//! flip of acknowledged records, damaged segment chains, malformed segment files, and
//! read-only opens racing a writer. Every test asserts exact outcomes: which records
//! come back, how many torn bytes, and which segment and offset an error names.
//!
//! Not covered here: poisoning after a failed fsync, which needs a storage seam to inject
//! the failure.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use agentwal::log::SegmentHeader;
use agentwal::log::record::{self, DecodeError, Salt};
use agentwal::log::{
    FLAG_BATCH_END, FLAG_BATCH_START, FLAG_DURABLE_BEFORE, FORMAT_VERSION, KIND_SEAL,
    LOCK_FILE_NAME, PREALLOCATE_BYTES, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, mask_crc,
    segment_file_name,
};
use agentwal::log::{Log, LogOptions, RecordRef, RecoveryMode, SkippedRange, SyncMode};
use agentwal::{CorruptionReason, Error};
use tempfile::TempDir;

const HEADER: u64 = SEGMENT_HEADER_BYTES as u64;
const RECORD_HEADER: u64 = RECORD_HEADER_BYTES as u64;
/// Segment size of the single-segment sweeps. A segment is preallocated up to 4 MiB and
/// recovery reads and scans all of it, which costs ~100 ms per open in a debug build;
/// 8 KiB keeps thousands of opens fast and still holds every record in one segment.
const SWEEP_SEGMENT_BYTES: u64 = 8 << 10;
/// Byte range of the version field in a segment header (magic is 0..8).
const HEADER_VERSION_BYTES: std::ops::Range<u64> = 8..12;
/// Header bytes covered by the header checksum (the checksum itself sits right after):
/// in format v3, magic to store id.
const HEADER_CRC_COVERED: usize = SEGMENT_HEADER_BYTES - 4;

/// A record as appended, or as recovery delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    lsn: u64,
    segment_id: u64,
    offset: u64,
    kind: u8,
    payload: Vec<u8>,
}

impl Rec {
    fn from_ref(r: &RecordRef<'_>) -> Rec {
        Rec {
            lsn: r.lsn,
            segment_id: r.segment_id,
            offset: r.offset,
            kind: r.kind,
            payload: r.payload.to_vec(),
        }
    }

    /// Offset just past the record (20-byte header + payload).
    fn end(&self) -> u64 {
        self.offset + RECORD_HEADER + self.payload.len() as u64
    }

    fn contains(&self, offset: u64) -> bool {
        (self.offset..self.end()).contains(&offset)
    }
}

/// Payload of the `i`th sequential record: varied lengths and bytes, including an empty
/// payload (a bare header) and an all-zero one (zeroing it changes nothing).
fn payload(i: u64) -> Vec<u8> {
    match i % 10 {
        3 => Vec::new(),
        5 => vec![0; 24],
        _ => {
            let len = 6 + (i * 13 % 37) as usize;
            (0..len)
                .map(|j| (i as usize * 7 + j * 13 + 1) as u8)
                .collect()
        }
    }
}

fn kind(i: u64) -> u8 {
    1 + (i % 5) as u8
}

/// A scratch directory: tmpfs when there is one (fsync and unlink on a real disk would
/// dominate the sweeps' run time), else the default temporary directory.
fn scratch() -> TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("agentwal-faults")
            .tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("temporary directory")
}

fn sweep_options(sync: SyncMode) -> LogOptions {
    LogOptions {
        sync,
        segment_bytes: SWEEP_SEGMENT_BYTES,
        recovery: RecoveryMode::TolerateTornTail,
    }
}

fn with_sync(opts: LogOptions, sync: SyncMode) -> LogOptions {
    LogOptions { sync, ..opts }
}

fn with_mode(opts: LogOptions, recovery: RecoveryMode) -> LogOptions {
    LogOptions { recovery, ..opts }
}

/// Opens for writing and collects every recovered record.
fn open_collect(dir: &Path, opts: LogOptions) -> agentwal::Result<(Log, Vec<Rec>)> {
    let mut seen = Vec::new();
    let log = Log::open_with(dir, opts, |r| {
        seen.push(Rec::from_ref(&r));
        Ok(())
    })?;
    Ok((log, seen))
}

/// Opens read-only and collects every recovered record.
fn open_read_only_collect(dir: &Path, opts: LogOptions) -> agentwal::Result<(Log, Vec<Rec>)> {
    let mut seen = Vec::new();
    let log = Log::open_read_only(dir, opts, |r| {
        seen.push(Rec::from_ref(&r));
        Ok(())
    })?;
    Ok((log, seen))
}

/// Asserts `result` is `Error::Corruption` naming `segment` and `offset`; returns the reason.
#[track_caller]
fn expect_corruption<T>(
    result: agentwal::Result<T>,
    segment: &Path,
    offset: u64,
    what: &str,
) -> CorruptionReason {
    match result {
        Err(Error::Corruption {
            segment: s,
            offset: o,
            reason,
        }) => {
            assert_eq!(
                (s.as_path(), o),
                (segment, offset),
                "{what}: corruption reported at the wrong place ({reason})"
            );
            reason
        }
        Err(e) => panic!(
            "{what}: expected corruption in {} at {offset}, got: {e}",
            segment.display()
        ),
        Ok(_) => panic!(
            "{what}: expected corruption in {} at {offset}, but the open succeeded",
            segment.display()
        ),
    }
}

/// Every file of a store but the lock file, by name.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("list store")
        .map(|e| e.expect("dir entry"))
        .filter(|e| e.file_name() != LOCK_FILE_NAME)
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("read store file"))
        })
        .collect()
}

/// Copies the segment files of `from` into `to`.
fn copy_store(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("list store") {
        let entry = entry.expect("dir entry");
        if entry.file_name().to_string_lossy().ends_with(".wal") {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy segment");
        }
    }
}

/// Length of `bytes` up to and including its last non-zero byte.
fn nonzero_len(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i as u64 + 1)
}

fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.write_all_at(bytes, offset))
        .expect("patch segment");
}

/// A log held in one segment, as its writer left it.
struct OneSegment {
    what: &'static str,
    /// The options it was written with.
    opts: LogOptions,
    records: Vec<Rec>,
    /// The whole segment file (header, records, preallocated zeros).
    bytes: Vec<u8>,
    /// End offset of each batch, in order.
    batch_ends: Vec<u64>,
    data_end: u64,
}

/// One batch as found on disk.
struct Batch {
    records: usize,
    end: u64,
    durable_before: bool,
}

/// Reads the batch layout of a segment back and checks it against what was appended:
/// same LSNs, offsets, kinds and payloads, consecutive, no gaps, then unwritten space.
/// The salt of the segment whose bytes start at `bytes[0]`.
fn salt(bytes: &[u8]) -> Salt {
    SegmentHeader::decode(bytes, Path::new("segment"))
        .expect("segment header")
        .salt
}

fn layout(bytes: &[u8], records: &[Rec]) -> Vec<Batch> {
    let mut batches = Vec::new();
    let mut pos = HEADER;
    let mut in_batch = 0;
    let mut durable_before = false;
    for rec in records {
        assert_eq!(rec.offset, pos, "records are not back to back");
        let (h, p) =
            record::decode(&bytes[pos as usize..], salt(bytes)).expect("written record decodes");
        assert_eq!((h.lsn, h.kind, p), (rec.lsn, rec.kind, &rec.payload[..]));
        if in_batch == 0 {
            assert_ne!(h.flags & FLAG_BATCH_START, 0, "batch start flag");
            durable_before = h.flags & FLAG_DURABLE_BEFORE != 0;
        }
        in_batch += 1;
        pos = rec.end();
        if h.flags & FLAG_BATCH_END != 0 {
            batches.push(Batch {
                records: in_batch,
                end: pos,
                durable_before,
            });
            in_batch = 0;
        }
    }
    assert_eq!(in_batch, 0, "the last batch is complete");
    assert_eq!(
        record::decode(&bytes[pos as usize..], salt(bytes)).unwrap_err(),
        DecodeError::Unwritten,
        "nothing follows the last record"
    );
    batches
}

fn one_segment(what: &'static str, opts: LogOptions, dir: &Path, records: Vec<Rec>) -> OneSegment {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".wal"))
        .collect();
    assert_eq!(files.len(), 1, "{what}: expected one segment");
    let bytes = std::fs::read(dir.join(segment_file_name(1))).expect("read segment");
    assert!(records.iter().all(|r| r.segment_id == 1));
    let batches = layout(&bytes, &records);
    OneSegment {
        what,
        opts,
        data_end: records.last().map_or(HEADER, Rec::end),
        batch_ends: batches.iter().map(|b| b.end).collect(),
        records,
        bytes,
    }
}

/// `n` sequential appends. Every append is a batch of its own; `flush_every` flushes
/// after that many appends (for `SyncMode::Never`, whose batches carry
/// `FLAG_DURABLE_BEFORE` only right after a flush).
fn build_sequential(
    what: &'static str,
    opts: LogOptions,
    n: u64,
    flush_every: Option<u64>,
) -> OneSegment {
    let dir = scratch();
    let log = Log::open(dir.path(), opts).expect("open");
    let mut records = Vec::new();
    for i in 0..n {
        let p = payload(i);
        let a = log.append(kind(i), &p).expect("append");
        records.push(Rec {
            lsn: a.lsn,
            segment_id: a.pos.segment_id,
            offset: a.pos.offset,
            kind: kind(i),
            payload: p,
        });
        if flush_every.is_some_and(|k| (i + 1).is_multiple_of(k)) {
            log.flush().expect("flush");
        }
    }
    log.flush().expect("flush");
    drop(log);
    let built = one_segment(what, opts, dir.path(), records);
    let batches = layout(&built.bytes, &built.records);
    assert!(
        batches.iter().all(|b| b.records == 1),
        "{what}: one record per batch"
    );
    for (i, b) in batches.iter().enumerate() {
        let durable_before = flush_every.is_none_or(|k| (i as u64).is_multiple_of(k));
        assert_eq!(b.durable_before, durable_before, "{what}: batch {i}");
    }
    built
}

/// Appends from 8 threads under `SyncMode::Always`, so records queued during a leader's
/// fsync share a batch. Built on the real temporary directory (a real fsync takes long
/// enough for batches to form) and retried until some batch holds several records.
fn build_concurrent() -> OneSegment {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 6;
    for _attempt in 0..10 {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path(), sweep_options(SyncMode::Always)).expect("open");
        let records = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (log, records) = (&log, &records);
                s.spawn(move || {
                    for i in 0..PER_THREAD {
                        let p = payload(t * PER_THREAD + i);
                        let k = kind(t);
                        let a = log.append(k, &p).expect("append");
                        records.lock().unwrap().push(Rec {
                            lsn: a.lsn,
                            segment_id: a.pos.segment_id,
                            offset: a.pos.offset,
                            kind: k,
                            payload: p,
                        });
                    }
                });
            }
        });
        drop(log);
        let mut records = records.into_inner().unwrap();
        records.sort_by_key(|r| r.lsn);
        let built = one_segment(
            "concurrent batches",
            sweep_options(SyncMode::Always),
            dir.path(),
            records,
        );
        let batches = layout(&built.bytes, &built.records);
        assert!(batches.iter().all(|b| b.durable_before));
        if batches.iter().any(|b| b.records > 1) {
            return built;
        }
    }
    panic!("no batch of several records formed in 10 attempts");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// The file ends at the cut (`set_len`).
    Truncate,
    /// The bytes from the cut to the end of the data read as zeros; the file keeps its
    /// preallocated length (a lost sector, or a write that never reached the disk).
    ZeroTail,
}

/// For every cut from the end of the segment header to the end of the data: damages a
/// copy, then checks strict, read-only and writing opens, an append and a reopen.
/// Returns the number of cuts checked.
fn sweep(built: &OneSegment, damage: Damage) -> u64 {
    sweep_cuts(built, damage, HEADER..=built.data_end)
}

/// [`sweep`] over the given cuts only.
fn sweep_cuts(built: &OneSegment, damage: Damage, cuts: impl IntoIterator<Item = u64>) -> u64 {
    let work = scratch();
    let dir = work.path();
    let path = dir.join(segment_file_name(1));
    // The writing handles need no fsync to prove anything here; reopens read the page cache.
    let opts = with_sync(built.opts, SyncMode::Never);
    let mut file = Vec::with_capacity(built.bytes.len());
    let mut checked = 0;
    for cut in cuts {
        let what = format!("{} / {damage:?} at {cut}", built.what);
        file.clear();
        match damage {
            Damage::Truncate => file.extend_from_slice(&built.bytes[..cut as usize]),
            Damage::ZeroTail => {
                file.extend_from_slice(&built.bytes);
                file[cut as usize..built.data_end as usize].fill(0);
            }
        }
        std::fs::write(&path, &file).expect("write damaged segment");

        // Zeroing bytes that already are zero damages nothing: the first changed byte
        // is the first non-zero one at or after the cut.
        let first_damaged = match damage {
            Damage::Truncate => cut,
            Damage::ZeroTail => (cut..built.data_end)
                .find(|&o| built.bytes[o as usize] != 0)
                .unwrap_or(built.data_end),
        };
        let committed = built
            .batch_ends
            .iter()
            .copied()
            .filter(|&e| e <= first_damaged)
            .max()
            .unwrap_or(HEADER);
        let kept = built
            .records
            .iter()
            .take_while(|r| r.end() <= committed)
            .count();
        let expected = &built.records[..kept];
        let torn = nonzero_len(&file[committed as usize..]);

        if torn > 0 {
            let strict = Log::open(dir, with_mode(opts, RecoveryMode::Strict));
            let reason = expect_corruption(strict, &path, committed, &what);
            assert_eq!(
                reason,
                CorruptionReason::TornTail { torn_bytes: torn },
                "{what}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), file, "{what}: strict wrote");
        }

        let (ro, seen) = open_read_only_collect(dir, opts).expect(&what);
        assert_eq!(seen, expected, "{what}: read-only");
        assert_eq!(ro.recovery().torn_bytes, torn, "{what}: read-only");
        drop(ro);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            file,
            "{what}: read-only wrote"
        );

        let (log, seen) = open_collect(dir, opts).expect(&what);
        assert_eq!(seen, expected, "{what}");
        let r = log.recovery();
        assert_eq!((r.records, r.torn_bytes), (kept as u64, torn), "{what}");
        assert!(r.skipped.is_empty(), "{what}");
        let a = log.append(7, b"appended after the damage").expect(&what);
        assert_eq!(
            (a.lsn, a.pos.segment_id, a.pos.offset),
            (kept as u64 + 1, 1, committed),
            "{what}: append position"
        );
        drop(log);

        let (log, seen) = open_collect(dir, opts).expect(&what);
        assert_eq!(seen.len(), kept + 1, "{what}: after append");
        assert_eq!(&seen[..kept], expected, "{what}: after append");
        assert_eq!(
            (seen[kept].lsn, seen[kept].offset, &seen[kept].payload[..]),
            (a.lsn, committed, &b"appended after the damage"[..]),
            "{what}: after append"
        );
        assert_eq!(log.recovery().torn_bytes, 0, "{what}: after append");
        checked += 1;
    }
    checked
}

#[test]
fn truncation_at_every_offset_recovers_complete_batches() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        50,
        None,
    );
    let cuts = sweep(&built, Damage::Truncate);
    assert_eq!(cuts, built.data_end - HEADER + 1);
    eprintln!("{}: {cuts} truncation offsets", built.what);
}

#[test]
fn zeroed_tail_at_every_offset_recovers_complete_batches() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        50,
        None,
    );
    let cuts = sweep(&built, Damage::ZeroTail);
    eprintln!("{}: {cuts} zeroed-tail offsets", built.what);
}

#[test]
fn truncation_and_zeroing_with_the_default_segment_size() {
    // Default segment_bytes: the segment is preallocated to 4 MiB of zeros. Each open
    // scans all of it (slow in debug builds), so only a few cuts in the last records.
    let built = build_sequential("default size", LogOptions::default(), 12, None);
    assert_eq!(built.bytes.len() as u64, PREALLOCATE_BYTES);
    let last = built.records.last().unwrap();
    let cuts = [last.offset + 3, built.data_end - 1];
    let checked =
        sweep_cuts(&built, Damage::Truncate, cuts) + sweep_cuts(&built, Damage::ZeroTail, cuts);
    assert_eq!(checked, 4);
}

#[test]
fn truncation_and_zeroing_without_durable_flags_recover_complete_batches() {
    // SyncMode::Never: only the batch after each flush carries FLAG_DURABLE_BEFORE.
    let built = build_sequential(
        "never, flush every 5",
        sweep_options(SyncMode::Never),
        50,
        Some(5),
    );
    let cuts = sweep(&built, Damage::Truncate) + sweep(&built, Damage::ZeroTail);
    eprintln!("{}: {cuts} offsets (truncated and zeroed)", built.what);
}

#[test]
fn truncation_and_zeroing_inside_multi_record_batches_drop_the_whole_batch() {
    let built = build_concurrent();
    let cuts = sweep(&built, Damage::Truncate) + sweep(&built, Damage::ZeroTail);
    eprintln!(
        "{}: {} batches, {cuts} offsets (truncated and zeroed)",
        built.what,
        built.batch_ends.len()
    );
}

/// Flips every bit of `region` in a copy of `built`, one at a time, and opens it.
/// Returns (corruption errors, unsupported-format errors, torn tails) seen.
fn flip_sweep(built: &OneSegment, region: std::ops::Range<u64>) -> (u64, u64, u64) {
    let work = scratch();
    let dir = work.path();
    let path = dir.join(segment_file_name(1));
    std::fs::write(&path, &built.bytes).expect("write segment");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open segment");
    let opts = with_sync(built.opts, SyncMode::Never);
    let final_batch_start = built
        .batch_ends
        .iter()
        .rev()
        .nth(1)
        .copied()
        .unwrap_or(HEADER);
    let mut counts = (0, 0, 0);
    let mut after = Vec::with_capacity(built.bytes.len());
    for byte in region {
        let owner = built.records.iter().position(|r| r.contains(byte));
        let expected_offset = owner.map_or(0, |i| built.records[i].offset);
        for bit in 0..8 {
            let what = format!("{}: flip of byte {byte} bit {bit}", built.what);
            let flipped = built.bytes[byte as usize] ^ (1 << bit);
            file.write_all_at(&[flipped], byte).expect("flip");
            match open_collect(dir, opts) {
                Err(Error::Corruption {
                    segment, offset, ..
                }) => {
                    assert_eq!(
                        (segment.as_path(), offset),
                        (path.as_path(), expected_offset),
                        "{what}"
                    );
                    counts.0 += 1;
                }
                Err(Error::UnsupportedFormat {
                    segment,
                    found,
                    supported,
                }) if HEADER_VERSION_BYTES.contains(&byte) => {
                    let shift = 8 * (byte - HEADER_VERSION_BYTES.start) + bit;
                    assert_eq!(
                        (segment.as_path(), found, supported),
                        (
                            path.as_path(),
                            FORMAT_VERSION ^ (1 << shift),
                            FORMAT_VERSION
                        ),
                        "{what}"
                    );
                    counts.1 += 1;
                }
                Ok((log, seen)) if byte >= final_batch_start => {
                    // The final batch may be a torn write: dropped whole, nothing else lost.
                    let kept = built
                        .records
                        .iter()
                        .take_while(|r| r.end() <= final_batch_start)
                        .count();
                    assert_eq!(seen, &built.records[..kept], "{what}");
                    let r = log.recovery();
                    assert_eq!(r.records, kept as u64, "{what}");
                    assert!(r.torn_bytes > 0, "{what}: {r:?}");
                    drop(log);
                    // The writer zeroed the torn bytes: restore the segment.
                    file.write_all_at(&built.bytes, 0).expect("restore");
                    counts.2 += 1;
                    file.write_all_at(&[built.bytes[byte as usize]], byte)
                        .expect("unflip");
                    continue;
                }
                Err(e) => panic!("{what}: unexpected error {e}"),
                Ok((log, seen)) => panic!(
                    "{what}: opened, recovering {} records ({:?})",
                    seen.len(),
                    log.recovery()
                ),
            }
            // A failed open leaves the segment as it found it.
            after.clear();
            after.resize(built.bytes.len(), 0);
            file.read_exact_at(&mut after, 0).expect("read back");
            assert_eq!(
                after[byte as usize], flipped,
                "{what}: open modified the file"
            );
            after[byte as usize] = built.bytes[byte as usize];
            assert!(after == built.bytes, "{what}: open modified the file");
            file.write_all_at(&[built.bytes[byte as usize]], byte)
                .expect("unflip");
        }
    }
    counts
}

#[test]
fn every_bit_flip_in_acknowledged_records_is_corruption_at_that_record() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        20,
        None,
    );
    let (corrupt, unsupported, torn) = flip_sweep(&built, 0..built.data_end);
    let last = built.records.last().unwrap();
    let final_batch_bits = 8 * (last.end() - last.offset);
    assert_eq!(corrupt + unsupported + torn, 8 * built.data_end);
    // Every flip outside the final batch is an error; flips inside it are torn tails.
    assert_eq!(torn, final_batch_bits);
    eprintln!(
        "{}: {} flips over {} bytes: {corrupt} corruption, {unsupported} unsupported \
         format, {torn} torn tails",
        built.what,
        8 * built.data_end,
        built.data_end
    );
}

#[test]
fn every_bit_flip_inside_multi_record_batches_is_corruption_at_that_record() {
    let built = build_concurrent();
    let (corrupt, unsupported, torn) = flip_sweep(&built, HEADER..built.data_end);
    let final_batch_start = built.batch_ends[built.batch_ends.len() - 2];
    assert_eq!(unsupported, 0);
    assert_eq!(torn, 8 * (built.data_end - final_batch_start));
    eprintln!(
        "{}: {} flips: {corrupt} corruption, {torn} torn tails",
        built.what,
        8 * (built.data_end - HEADER)
    );
}

#[test]
fn strict_recovery_reports_a_torn_tail_and_changes_nothing() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        20,
        None,
    );
    let work = scratch();
    let dir = work.path();
    let path = dir.join(segment_file_name(1));
    let last = built.records.last().unwrap();
    let cut = last.offset + 7;
    std::fs::write(&path, &built.bytes[..cut as usize]).unwrap();
    let torn = nonzero_len(&built.bytes[last.offset as usize..cut as usize]);
    let strict = with_mode(sweep_options(SyncMode::Always), RecoveryMode::Strict);
    for read_only in [false, true] {
        let result = if read_only {
            Log::open_read_only(dir, strict, |_| Ok(()))
        } else {
            Log::open(dir, strict)
        };
        let reason = expect_corruption(result, &path, last.offset, "strict");
        assert_eq!(reason, CorruptionReason::TornTail { torn_bytes: torn });
        assert_eq!(std::fs::read(&path).unwrap(), &built.bytes[..cut as usize]);
    }
    // The default mode discards the same tail.
    let (log, seen) = open_collect(dir, sweep_options(SyncMode::Always)).unwrap();
    assert_eq!(seen, &built.records[..built.records.len() - 1]);
    assert_eq!(log.recovery().torn_bytes, torn);
}

#[test]
fn salvage_skips_a_corrupt_middle_record_and_reports_the_range() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        20,
        None,
    );
    let work = scratch();
    let dir = work.path();
    let path = dir.join(segment_file_name(1));
    let mut bytes = built.bytes.clone();
    let (bad, next) = (&built.records[7], &built.records[8]);
    bytes[bad.offset as usize + 21] ^= 0x10; // a payload byte
    std::fs::write(&path, &bytes).unwrap();

    let default = sweep_options(SyncMode::Always);
    let reason = expect_corruption(Log::open(dir, default), &path, bad.offset, "default");
    assert_eq!(
        reason,
        CorruptionReason::ValidDataAfter {
            later_offset: next.offset
        }
    );

    let salvage = with_mode(default, RecoveryMode::Salvage);
    let mut expected = built.records.clone();
    expected.remove(7);
    // The skipped range says why the record there was rejected: its checksum.
    let (header, _) =
        record::decode(&built.bytes[bad.offset as usize..], salt(&built.bytes)).unwrap();
    let damaged_payload = &bytes[(bad.offset + RECORD_HEADER) as usize..bad.end() as usize];
    let stored_crc = &bytes[bad.offset as usize..bad.offset as usize + 4];
    let expected_skip = SkippedRange {
        segment: path.clone(),
        offset: bad.offset,
        bytes: next.offset - bad.offset,
        reason: CorruptionReason::ChecksumMismatch {
            stored: u32::from_le_bytes(stored_crc.try_into().unwrap()),
            computed: header.checksum(
                salt(&bytes),
                record::payload_crc(damaged_payload),
                damaged_payload.len() as u64,
            ),
        },
    };
    let check = |log: &Log, seen: &[Rec], what: &str| {
        assert_eq!(seen, expected, "{what}");
        let r = log.recovery();
        assert_eq!(r.records, 19, "{what}");
        assert_eq!(r.torn_bytes, 0, "{what}");
        assert_eq!(r.skipped, std::slice::from_ref(&expected_skip), "{what}");
    };
    let (ro, seen) = open_read_only_collect(dir, salvage).unwrap();
    check(&ro, &seen, "salvage, read-only");
    drop(ro);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "read-only salvage wrote"
    );
    let (log, seen) = open_collect(dir, salvage).unwrap();
    check(&log, &seen, "salvage");
    // Salvage leaves the damage in place and appends after the last record.
    let a = log.append(1, b"after salvage").unwrap();
    assert_eq!((a.lsn, a.pos.offset), (21, built.data_end));
    drop(log);
    let (_log, seen) = open_collect(dir, salvage).unwrap();
    assert_eq!(seen.len(), 20);
    assert_eq!(seen[19].payload, b"after salvage");
}

/// A writer that salvages past a bad last record appends over it: whatever is left of the
/// skipped bytes past its new data must be zeroed, or the next open finds them after the
/// new records (a torn tail in the default mode, an error in `Strict`). Here the skipped
/// record is a seal that claims durable predecessors but names the wrong segment, which
/// no mode accepts.
#[test]
fn salvage_zeroes_the_skipped_tail_it_appends_over() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        20,
        None,
    );
    // On the disk, not in /dev/shm: tmpfs keeps no extent map, so there the writer zeroes
    // ahead of the data anyway and would hide what this test looks for.
    let work = tempfile::tempdir().expect("temporary directory");
    let dir = work.path();
    let path = dir.join(segment_file_name(1));
    let mut bytes = built.bytes.clone();
    let last = &built.records[19];
    let wrong_next = 5u64.to_le_bytes();
    let header = record::RecordHeader {
        payload_len: wrong_next.len() as u32,
        lsn: last.lsn,
        kind: KIND_SEAL,
        flags: FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE,
    };
    let mut seal = Vec::new();
    record::encode_into(
        &mut seal,
        salt(&bytes),
        &header,
        record::payload_crc(&wrong_next),
        &wrong_next,
    );
    // The rest of the old last record stays behind the seal.
    bytes[last.offset as usize..][..seal.len()].copy_from_slice(&seal);
    std::fs::write(&path, &bytes).unwrap();

    let salvage = with_mode(sweep_options(SyncMode::Always), RecoveryMode::Salvage);
    let (log, seen) = open_collect(dir, salvage).unwrap();
    assert_eq!(seen, &built.records[..19]);
    assert_eq!(log.recovery().skipped.len(), 1, "{:?}", log.recovery());
    let a = log.append(1, b"short").unwrap();
    assert_eq!(a.pos.offset, last.offset, "appends over the skipped record");
    drop(log);
    let strict = with_mode(sweep_options(SyncMode::Always), RecoveryMode::Strict);
    let (log, seen) = open_collect(dir, strict).expect("nothing left past the new record");
    assert_eq!(seen.len(), 20);
    assert_eq!(seen[19].payload, b"short");
    assert_eq!(log.recovery().torn_bytes, 0);
}

const SMALL_SEGMENT_BYTES: u64 = 4096;

/// A log spread over several 4 KiB segments, written under `SyncMode::Always`.
struct MultiSegment {
    _dir: TempDir,
    records: Vec<Rec>,
    /// Per segment: id, index range into `records`, seal offset (None for the last).
    segments: Vec<(u64, std::ops::Range<usize>, Option<u64>)>,
}

impl MultiSegment {
    fn dir(&self) -> &Path {
        self._dir.path()
    }

    fn opts() -> LogOptions {
        LogOptions {
            sync: SyncMode::Never,
            segment_bytes: SMALL_SEGMENT_BYTES,
            recovery: RecoveryMode::TolerateTornTail,
        }
    }
}

fn multi_payload(i: u64) -> Vec<u8> {
    let len = 60 + (i * 37 % 80) as usize;
    (0..len).map(|j| (i as usize + j * 3 + 1) as u8).collect()
}

fn build_multi_segment() -> MultiSegment {
    let dir = scratch();
    let opts = LogOptions {
        sync: SyncMode::Always,
        ..MultiSegment::opts()
    };
    let log = Log::open(dir.path(), opts).expect("open");
    let mut records = Vec::new();
    for i in 0..150 {
        let p = multi_payload(i);
        let a = log.append(kind(i), &p).expect("append");
        records.push(Rec {
            lsn: a.lsn,
            segment_id: a.pos.segment_id,
            offset: a.pos.offset,
            kind: kind(i),
            payload: p,
        });
    }
    drop(log);
    let last_id = records.last().unwrap().segment_id;
    assert!(last_id >= 4, "expected several segments, got {last_id}");
    let mut segments = Vec::new();
    for id in 1..=last_id {
        let first = records.iter().position(|r| r.segment_id == id).unwrap();
        let end = first
            + records[first..]
                .iter()
                .take_while(|r| r.segment_id == id)
                .count();
        let bytes = std::fs::read(dir.path().join(segment_file_name(id))).unwrap();
        assert_eq!(
            bytes.len() as u64,
            SMALL_SEGMENT_BYTES,
            "preallocated in full"
        );
        let seal = (id < last_id).then(|| {
            let at = records[end - 1].end();
            let (h, p) = record::decode(&bytes[at as usize..], salt(&bytes)).expect("seal decodes");
            assert_eq!((h.kind, p), (KIND_SEAL, &(id + 1).to_le_bytes()[..]));
            assert_eq!(
                h.flags,
                FLAG_BATCH_START | FLAG_BATCH_END | FLAG_DURABLE_BEFORE
            );
            at
        });
        segments.push((id, first..end, seal));
    }
    MultiSegment {
        _dir: dir,
        records,
        segments,
    }
}

/// Opens for writing and read-only: both must fail as `check` expects, and neither may
/// change, add or remove a file of the store.
#[track_caller]
fn assert_open_fails_untouched(
    dir: &Path,
    opts: LogOptions,
    read_only_too: bool,
    what: &str,
    check: impl Fn(&Error) -> bool,
) {
    let before = snapshot(dir);
    let mut results = vec![("writer", open_collect(dir, opts).map(|_| ()))];
    if read_only_too {
        results.push(("read-only", open_read_only_collect(dir, opts).map(|_| ())));
    }
    for (how, result) in results {
        match result {
            Err(e) => assert!(check(&e), "{what} ({how}): unexpected error: {e}"),
            Ok(()) => panic!("{what} ({how}): the open succeeded"),
        }
        assert!(snapshot(dir) == before, "{what} ({how}): the store changed");
    }
}

#[test]
fn corruption_in_a_sealed_segment_names_it_even_in_its_last_batch() {
    let built = build_multi_segment();
    let work = scratch();
    let dir = work.path();
    copy_store(built.dir(), dir);
    let opts = MultiSegment::opts();
    let mut flips = 0;
    for (id, range, seal) in &built.segments {
        let path = dir.join(segment_file_name(*id));
        let original = std::fs::read(&path).unwrap();
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        let last = &built.records[range.end - 1];
        // The first record, the last record (its own last batch) and the seal.
        let first = &built.records[range.start];
        let region = (first.offset..first.end()).chain(last.offset..seal.unwrap_or(last.offset));
        for byte in region {
            for bit in 0..8 {
                let what = format!("segment {id}: flip of byte {byte} bit {bit}");
                file.write_all_at(&[original[byte as usize] ^ (1 << bit)], byte)
                    .unwrap();
                let result = open_collect(dir, opts);
                if last.contains(byte) || first.contains(byte) {
                    let owner = if last.contains(byte) { last } else { first };
                    let reason = expect_corruption(result, &path, owner.offset, &what);
                    if owner == last {
                        let later_offset = seal.unwrap();
                        assert_eq!(reason, CorruptionReason::ValidDataAfter { later_offset });
                    }
                } else {
                    expect_corruption(result, &path, seal.unwrap(), &what);
                }
                file.write_all_at(&original[byte as usize..=byte as usize], byte)
                    .unwrap();
                flips += 1;
            }
        }
    }
    // In the final segment the same damage to the last record is a torn tail.
    let (id, range, _) = built.segments.last().unwrap();
    let path = dir.join(segment_file_name(*id));
    let last = &built.records[range.end - 1];
    let original = std::fs::read(&path).unwrap();
    write_at(
        &path,
        last.offset + 30,
        &[original[last.offset as usize + 30] ^ 1],
    );
    let (log, seen) = open_collect(dir, opts).unwrap();
    assert_eq!(seen, &built.records[..built.records.len() - 1]);
    assert_eq!(log.recovery().torn_bytes, last.end() - last.offset);
    eprintln!(
        "{} segments, {flips} flips in sealed segments",
        built.segments.len()
    );
}

#[test]
fn missing_middle_segment_is_a_broken_chain() {
    let built = build_multi_segment();
    for missing in [2, built.segments.len() as u64 - 1] {
        let work = scratch();
        let dir = work.path();
        copy_store(built.dir(), dir);
        std::fs::remove_file(dir.join(segment_file_name(missing))).unwrap();
        let next = dir.join(segment_file_name(missing + 1));
        assert_open_fails_untouched(
            dir,
            MultiSegment::opts(),
            true,
            &format!("segment {missing} deleted"),
            |e| {
                matches!(e, Error::Corruption {
                    segment,
                    offset: 0,
                    reason: CorruptionReason::BrokenChain(_),
                } if *segment == next)
            },
        );
    }
}

#[test]
fn sealed_segment_without_its_seal_is_corruption() {
    let built = build_multi_segment();
    let (penultimate, ..) = built.segments[built.segments.len() - 2];
    for id in [1, penultimate] {
        let (_, range, seal) = &built.segments[id as usize - 1];
        let seal = seal.unwrap();
        let last = &built.records[range.end - 1];
        // (what, first byte zeroed or cut, expected error offset)
        let cases = [
            ("seal zeroed", seal, seal),
            ("last record and seal zeroed", last.offset, last.offset),
            ("truncated before the seal", seal, seal),
            ("truncated inside the seal", seal + 10, seal),
        ];
        for (how, from, offset) in cases {
            let what = format!("segment {id}: {how}");
            let work = scratch();
            let dir = work.path();
            copy_store(built.dir(), dir);
            let path = dir.join(segment_file_name(id));
            if how.starts_with("truncated") {
                let file = OpenOptions::new().write(true).open(&path).unwrap();
                file.set_len(from).unwrap();
            } else {
                write_at(&path, from, &vec![0; (seal + 28 - from) as usize]);
            }
            assert_open_fails_untouched(dir, MultiSegment::opts(), true, &what, |e| {
                matches!(e, Error::Corruption { segment, offset: o, .. }
                    if *segment == path && *o == offset)
            });
            let reason = expect_corruption(
                open_collect(dir, MultiSegment::opts()),
                &path,
                offset,
                &what,
            );
            if how.ends_with("zeroed") || how == "truncated before the seal" {
                assert!(
                    matches!(reason, CorruptionReason::BrokenChain(_)),
                    "{what}: {reason:?}"
                );
            }
        }
    }
}

#[test]
fn malformed_segment_files_are_clear_errors_and_left_untouched() {
    let built = build_sequential(
        "always, sequential",
        sweep_options(SyncMode::Always),
        10,
        None,
    );
    let opts = sweep_options(SyncMode::Always);
    let name = segment_file_name(1);
    let fresh = |bytes: &[u8]| {
        let work = scratch();
        std::fs::write(work.path().join(&name), bytes).unwrap();
        work
    };
    let header_with_version = |version: u32| {
        let mut b = built.bytes.clone();
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = mask_crc(crc32fast::hash(&b[..HEADER_CRC_COVERED]));
        b[HEADER_CRC_COVERED..HEADER_CRC_COVERED + 4].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let corrupt_at = |path: PathBuf, offset: u64, reason: fn(&CorruptionReason) -> bool| {
        move |e: &Error| {
            matches!(e, Error::Corruption { segment, offset: o, reason: r }
                if *segment == path && *o == offset && reason(r))
        }
    };

    // Bad magic.
    let mut b = built.bytes.clone();
    b[..8].copy_from_slice(b"NOTAWAL!");
    let work = fresh(&b);
    let path = work.path().join(&name);
    assert_open_fails_untouched(
        work.path(),
        opts,
        true,
        "bad magic",
        corrupt_at(path, 0, |r| matches!(r, CorruptionReason::BadHeader(_))),
    );

    // A newer (and an older, unknown) version with a correct header checksum.
    for version in [FORMAT_VERSION + 1, 0] {
        let b = header_with_version(version);
        // Sanity: the rewritten header is otherwise valid.
        let work = fresh(&b);
        let path = work.path().join(&name);
        assert_open_fails_untouched(
            work.path(),
            opts,
            true,
            &format!("version {version}"),
            |e| {
                matches!(e, Error::UnsupportedFormat { segment, found, supported }
                if *segment == path && *found == version && *supported == FORMAT_VERSION)
            },
        );
    }
    // The same rewrite with version 1 is accepted: the test above changed only the version.
    let work = fresh(&header_with_version(FORMAT_VERSION));
    let (_log, seen) = open_collect(work.path(), opts).unwrap();
    assert_eq!(seen, built.records);
    let decoded = SegmentHeader::decode(&built.bytes, Path::new("x")).unwrap();
    assert_eq!((decoded.id, decoded.first_lsn), (1, 1));

    // A segment file cut inside its header (it is renamed into place only once complete).
    for len in 0..HEADER {
        let work = fresh(&built.bytes[..len as usize]);
        let path = work.path().join(&name);
        let read_only_too = len % 13 == 0;
        assert_open_fails_untouched(
            work.path(),
            opts,
            read_only_too,
            &format!("header cut at {len}"),
            corrupt_at(path, 0, |r| matches!(r, CorruptionReason::BadHeader(_))),
        );
    }

    // A header naming another segment than its file name.
    let work = scratch();
    std::fs::write(work.path().join(segment_file_name(3)), &built.bytes).unwrap();
    let path = work.path().join(segment_file_name(3));
    assert_open_fails_untouched(
        work.path(),
        opts,
        true,
        "header names segment 1",
        corrupt_at(path, 0, |r| matches!(r, CorruptionReason::BrokenChain(_))),
    );

    // A record length running past the end of the segment (the checksum cannot even be
    // computed). In the middle of the log the error names the record; its reason says
    // why it cannot be a torn tail: the durable batch after it.
    let file_len = built.bytes.len() as u64;
    let (rec, next) = (&built.records[4], &built.records[5]);
    for length in [u32::MAX, (file_len - rec.offset - RECORD_HEADER + 1) as u32] {
        let mut b = built.bytes.clone();
        b[rec.offset as usize + 4..][..4].copy_from_slice(&length.to_le_bytes());
        let work = fresh(&b);
        let path = work.path().join(&name);
        for mode in [RecoveryMode::TolerateTornTail, RecoveryMode::Strict] {
            assert_open_fails_untouched(
                work.path(),
                with_mode(opts, mode),
                true,
                &format!("record length {length}, {mode:?}"),
                corrupt_at(path.clone(), rec.offset, |r| {
                    matches!(r, CorruptionReason::ValidDataAfter { .. })
                }),
            );
        }
        let reason = expect_corruption(open_collect(work.path(), opts), &path, rec.offset, "");
        assert_eq!(
            reason,
            CorruptionReason::ValidDataAfter {
                later_offset: next.offset
            }
        );
    }
    // In the final batch the same damage is a torn tail: strict refuses it, the default
    // mode drops that one record.
    let last = built.records.last().unwrap();
    let mut b = built.bytes.clone();
    b[last.offset as usize + 4..][..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let torn = nonzero_len(&b[last.offset as usize..]);
    let work = fresh(&b);
    let path = work.path().join(&name);
    assert_open_fails_untouched(
        work.path(),
        with_mode(opts, RecoveryMode::Strict),
        true,
        "final record length, strict",
        move |e| {
            matches!(e, Error::Corruption { segment, offset, reason: CorruptionReason::TornTail { torn_bytes } }
                if *segment == path && *offset == last.offset && *torn_bytes == torn)
        },
    );
    let (log, seen) = open_collect(work.path(), opts).unwrap();
    assert_eq!(seen, &built.records[..9]);
    assert_eq!(log.recovery().torn_bytes, torn);
}

/// Payload of record `i` in the concurrent read test: its index, then filler.
fn indexed_payload(i: u64) -> Vec<u8> {
    let mut p = i.to_le_bytes().to_vec();
    p.resize(8 + (i % 50) as usize, (i % 251) as u8 + 1);
    p
}

#[test]
fn read_only_opens_during_appends_see_every_acknowledged_record() {
    for (sync, appends) in [(SyncMode::Always, 400), (SyncMode::Never, 3000)] {
        // A real disk: page-cache reads racing writes are the point here.
        let dir = tempfile::tempdir().unwrap();
        let opts = LogOptions {
            sync,
            segment_bytes: SMALL_SEGMENT_BYTES,
            recovery: RecoveryMode::TolerateTornTail,
        };
        let log = Log::open(dir.path(), opts).unwrap();
        let acknowledged = AtomicU64::new(0);
        let done = AtomicBool::new(false);
        let (opens, max_seen) = std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..appends {
                    let a = log.append(1, &indexed_payload(i)).unwrap();
                    assert_eq!(a.lsn, i + 1);
                    acknowledged.store(i + 1, Ordering::SeqCst);
                }
                done.store(true, Ordering::SeqCst);
            });
            let (mut opens, mut max_seen) = (0u64, 0u64);
            loop {
                let finished = done.load(Ordering::SeqCst);
                let before = acknowledged.load(Ordering::SeqCst);
                let what = format!("{sync:?}: read-only open {opens} (after {before} acks)");
                let (ro, seen) = open_read_only_collect(dir.path(), opts).expect(&what);
                assert!(
                    seen.len() as u64 >= before,
                    "{what}: saw only {}",
                    seen.len()
                );
                for (i, r) in seen.iter().enumerate() {
                    assert_eq!(
                        (r.lsn, &r.payload),
                        (i as u64 + 1, &indexed_payload(i as u64)),
                        "{what}"
                    );
                }
                assert_eq!(ro.recovery().records, seen.len() as u64, "{what}");
                max_seen = max_seen.max(seen.len() as u64);
                opens += 1;
                if finished {
                    assert_eq!(seen.len() as u64, appends, "{what}: after the last append");
                    break (opens, max_seen);
                }
            }
        });
        assert!(log.stats().rotations > 3, "{sync:?}: {:?}", log.stats());
        eprintln!(
            "{sync:?}: {opens} read-only opens during {appends} appends (max seen {max_seen})"
        );
    }
}
