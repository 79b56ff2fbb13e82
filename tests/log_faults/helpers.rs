//! Shared fixtures: record payloads, options, opening a log and collecting what it
//! delivers, copying and damaging files, and checking a `Corruption`.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use agentwal::log::{LOCK_FILE_NAME, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use agentwal::log::{Log, LogOptions, RecordRef, RecoveryMode, SyncMode};
use agentwal::{CorruptionReason, Error};
use tempfile::TempDir;

pub(crate) const HEADER: u64 = SEGMENT_HEADER_BYTES as u64;

pub(crate) const RECORD_HEADER: u64 = RECORD_HEADER_BYTES as u64;

/// Segment size of the single-segment sweeps. A segment is preallocated up to 4 MiB and
/// recovery reads and scans all of it, which costs ~100 ms per open in a debug build;
/// 8 KiB keeps thousands of opens fast and still holds every record in one segment.
const SWEEP_SEGMENT_BYTES: u64 = 8 << 10;

/// Byte range of the version field in a segment header (magic is 0..8).
pub(crate) const HEADER_VERSION_BYTES: std::ops::Range<u64> = 8..12;

/// Header bytes covered by the header checksum (the checksum itself sits right after):
/// in format v3, magic to store id.
pub(crate) const HEADER_CRC_COVERED: usize = SEGMENT_HEADER_BYTES - 4;

/// A record as appended, or as recovery delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rec {
    pub(crate) lsn: u64,
    pub(crate) segment_id: u64,
    pub(crate) offset: u64,
    pub(crate) kind: u8,
    pub(crate) payload: Vec<u8>,
}

impl Rec {
    pub(crate) fn from_ref(r: &RecordRef<'_>) -> Rec {
        Rec {
            lsn: r.lsn,
            segment_id: r.segment_id,
            offset: r.offset,
            kind: r.kind,
            payload: r.payload.to_vec(),
        }
    }

    /// Offset just past the record (20-byte header + payload).
    pub(crate) fn end(&self) -> u64 {
        self.offset + RECORD_HEADER + self.payload.len() as u64
    }

    pub(crate) fn contains(&self, offset: u64) -> bool {
        (self.offset..self.end()).contains(&offset)
    }
}

/// Payload of the `i`th sequential record: varied lengths and bytes, including an empty
/// payload (a bare header) and an all-zero one (zeroing it changes nothing).
pub(crate) fn payload(i: u64) -> Vec<u8> {
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

pub(crate) fn kind(i: u64) -> u8 {
    1 + (i % 5) as u8
}

/// A scratch directory: tmpfs when there is one (fsync and unlink on a real disk would
/// dominate the sweeps' run time), else the default temporary directory.
pub(crate) fn scratch() -> TempDir {
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

pub(crate) fn sweep_options(sync: SyncMode) -> LogOptions {
    LogOptions {
        sync,
        segment_bytes: SWEEP_SEGMENT_BYTES,
        recovery: RecoveryMode::TolerateTornTail,
    }
}

pub(crate) fn with_sync(opts: LogOptions, sync: SyncMode) -> LogOptions {
    LogOptions { sync, ..opts }
}

pub(crate) fn with_mode(opts: LogOptions, recovery: RecoveryMode) -> LogOptions {
    LogOptions { recovery, ..opts }
}

/// Opens for writing and collects every recovered record.
pub(crate) fn open_collect(dir: &Path, opts: LogOptions) -> agentwal::Result<(Log, Vec<Rec>)> {
    let mut seen = Vec::new();
    let log = Log::open_with(dir, opts, |r| {
        seen.push(Rec::from_ref(&r));
        Ok(())
    })?;
    Ok((log, seen))
}

/// Opens read-only and collects every recovered record.
pub(crate) fn open_read_only_collect(
    dir: &Path,
    opts: LogOptions,
) -> agentwal::Result<(Log, Vec<Rec>)> {
    let mut seen = Vec::new();
    let log = Log::open_read_only(dir, opts, |r| {
        seen.push(Rec::from_ref(&r));
        Ok(())
    })?;
    Ok((log, seen))
}

/// Asserts `result` is `Error::Corruption` naming `segment` and `offset`; returns the reason.
#[track_caller]
pub(crate) fn expect_corruption<T>(
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
pub(crate) fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
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
pub(crate) fn copy_store(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("list store") {
        let entry = entry.expect("dir entry");
        if entry.file_name().to_string_lossy().ends_with(".wal") {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy segment");
        }
    }
}

/// Length of `bytes` up to and including its last non-zero byte.
pub(crate) fn nonzero_len(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i as u64 + 1)
}

pub(crate) fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.write_all_at(bytes, offset))
        .expect("patch segment");
}
