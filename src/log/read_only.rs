//! Opening a log read-only, beside a writer that may be appending, rotating and compacting
//! meanwhile: a scan without the lock, retried while what it reads keeps changing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::open::{check_is_store, log_recovery, not_a_directory};
use super::recovery::{self, Scan};
use super::segment::segment_path;
use super::{Inner, Log, LogOptions, RecordPos, RecordRef, RecoveryMode};
use crate::error::{Error, Result};
use crate::storage::{RealStorage, Storage};

/// How many times a read-only open scans at most while what it sees keeps changing.
const READ_ONLY_SCAN_ATTEMPTS: usize = 10;
/// Pause after the first failed read-only scan; it doubles after each further one.
const READ_ONLY_RETRY_FIRST_MS: u64 = 10;
/// Longest pause between two read-only scans.
const READ_ONLY_RETRY_MAX_MS: u64 = 160;

impl Log {
    /// Opens the log read-only: takes no lock, modifies nothing, ignores an unfinished tail.
    /// Works while a writer (in this or another process) appends, rotates and compacts:
    /// the handle serves the records that were complete when it opened, from the bytes its
    /// scan read, for as long as it lives (docs/log.md §3.4). [`Error::StoreChanged`] if the
    /// store kept changing under every attempt to scan it: open again.
    pub fn open_read_only(
        dir: impl AsRef<Path>,
        options: LogOptions,
        visit: impl FnMut(RecordRef<'_>) -> Result<()>,
    ) -> Result<Log> {
        Log::open_read_only_on(Arc::new(RealStorage), dir, options, visit)
    }

    /// Like [`open_read_only`](Self::open_read_only), on the given storage.
    pub fn open_read_only_on(
        storage: Arc<dyn Storage>,
        dir: impl AsRef<Path>,
        options: LogOptions,
        mut visit: impl FnMut(RecordRef<'_>) -> Result<()>,
    ) -> Result<Log> {
        let dir = dir.as_ref().to_path_buf();
        let started = Instant::now();
        let scan = scan_read_only(&*storage, &dir, options.recovery, &mut visit)?;
        log_recovery(&dir, &scan.report, started);
        Ok(Log {
            #[cfg(feature = "tokio")]
            _syncer: Arc::default(),
            _flusher: Arc::new(None),
            inner: Arc::new(Inner {
                storage,
                dir,
                writer: None,
                recovery: scan.report,
                options,
                maps: RwLock::new(Default::default()),
                rotations_at_last_pass: Default::default(),
                pins: Some(scan.pins.into_iter().collect()),
                _lock: None,
            }),
        })
    }

    /// Re-reads every complete record from disk, in LSN order. The positions it hands out
    /// are those of this new scan: on a read-only handle, [`read`](Self::read) serves only
    /// the positions its own open found.
    pub fn replay(&self, mut visit: impl FnMut(RecordRef<'_>) -> Result<()>) -> Result<()> {
        let inner = &self.inner;
        scan_read_only(
            &*inner.storage,
            &inner.dir,
            inner.options.recovery,
            &mut visit,
        )
        .map(|_| ())
    }
}

/// Scans `dir` without its lock until a scan sees a consistent log, then hands `visit`
/// that scan's records.
fn scan_read_only(
    fs: &dyn Storage,
    dir: &Path,
    mode: RecoveryMode,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<Scan> {
    if !fs.is_dir(dir) {
        return Err(not_a_directory(fs, dir).unwrap_or_else(|| {
            Error::io(
                format!("opening store directory {}", dir.display()),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            )
        }));
    }
    check_is_store(fs, dir, false)?;
    let mut previous: Option<String> = None;
    let mut pause_ms = READ_ONLY_RETRY_FIRST_MS;
    for _ in 0..READ_ONLY_SCAN_ATTEMPTS {
        // Records are buffered per attempt so the visitor sees each exactly once, from
        // the attempt that succeeded.
        let mut records: Vec<(RecordPos, u64, u8, Vec<u8>)> = Vec::new();
        // No lock: a writer (in this process or another) may append and compact meanwhile.
        let result = recovery::scan(fs, dir, mode, false, &mut |r| {
            records.push((r.pos(), r.lsn, r.kind, r.payload.to_vec()));
            Ok(())
        });
        match result {
            Ok(scan) => {
                // Records come segment by segment: one path per segment, not per record.
                let (mut path_id, mut path) = (None, PathBuf::new());
                for (pos, lsn, kind, payload) in &records {
                    if path_id != Some(pos.segment_id) {
                        (path_id, path) = (Some(pos.segment_id), segment_path(dir, pos.segment_id));
                    }
                    visit(RecordRef {
                        segment_id: pos.segment_id,
                        offset: pos.offset,
                        lsn: *lsn,
                        kind: *kind,
                        payload,
                        segment: &path,
                    })?;
                }
                return Ok(scan);
            }
            Err(e) if may_be_concurrent_change(&e) => {
                // A writer's half-written batch, or a segment compaction replaced or
                // deleted between listing and reading, looks like damage once; the race
                // moves on as the writer does. Damage on disk reads the same every time.
                let seen = e.to_string();
                if previous.as_deref() == Some(seen.as_str()) {
                    return Err(e);
                }
                previous = Some(seen);
                std::thread::sleep(Duration::from_millis(pause_ms));
                pause_ms = (pause_ms * 2).min(READ_ONLY_RETRY_MAX_MS);
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::StoreChanged {
        dir: dir.to_path_buf(),
    })
}

/// Whether a failed read-only scan may only have raced a writer (docs/log.md §3.4).
fn may_be_concurrent_change(e: &Error) -> bool {
    match e {
        Error::Corruption { .. } => true,
        Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}
