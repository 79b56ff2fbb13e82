//! The log: a segmented, checksummed, group-committed write-ahead log of byte payloads.
//!
//! Usable on its own as a plain WAL; the typed [`Store`](crate::Store) is built on it.
//!
//! ```
//! use agentwal::log::{Log, LogOptions};
//! # let dir = tempfile::tempdir().unwrap();
//! let log = Log::open(dir.path(), LogOptions::default())?;
//! let appended = log.append(1, b"hello")?; // durable when it returns
//! drop(log);
//!
//! let mut seen = Vec::new();
//! let log = Log::open_with(dir.path(), LogOptions::default(), |rec| {
//!     seen.push(rec.payload.to_vec());
//!     Ok(())
//! })?;
//! assert_eq!(seen, vec![b"hello".to_vec()]);
//! assert_eq!(log.read(appended.pos)?, b"hello");
//! # Ok::<(), agentwal::Error>(())
//! ```

mod compact;
pub mod format;
mod lock;
pub mod record;
mod recovery;
pub mod segment;
mod writer;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::RwLock;

pub use compact::{COMPACTION_DEAD_BYTES_MIN, CompactionHooks, LogCompaction};
pub use recovery::{LogRecovery, SkippedRange};

use self::format::*;
use self::lock::DirLock;
use self::recovery::{Scan, SegmentPin, SegmentState};
use self::segment::{create_segment, segment_path, sync_dir};
use self::writer::{Writer, WriterStart};
use crate::background::Periodic;
use crate::error::{CorruptionReason, Error, NotAStoreReason, Result};
use crate::storage::{FileView, RealStorage, Storage, StorageFile};

/// When an append counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Durable when `append`/`commit` returns: one fdatasync per group-commit batch.
    #[default]
    Always,
    /// Written to the OS when it returns; a background thread fsyncs at this interval and
    /// `flush()` forces one. A crash may lose up to one interval of acknowledged writes.
    Periodic(Duration),
    /// Never fsynced except by `flush()`. For tests and throwaway data only.
    Never,
}

/// What recovery tolerates when it finds bad bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Discard a torn tail (the last batch cut short by a crash); fail on any other damage.
    #[default]
    TolerateTornTail,
    /// Fail even on a torn tail (forensics: nothing is discarded or modified silently).
    Strict,
    /// Skip corrupt ranges, report them in the recovery report, and go on.
    Salvage,
}

/// Options of a [`Log`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// Durability of appends.
    pub sync: SyncMode,
    /// Segment files rotate at this size.
    pub segment_bytes: u64,
    /// What recovery tolerates.
    pub recovery: RecoveryMode,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            sync: SyncMode::Always,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            recovery: RecoveryMode::TolerateTornTail,
        }
    }
}

/// Where a record lives: its segment and byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordPos {
    /// Segment id (the file name's number).
    pub segment_id: u64,
    /// Byte offset of the record header in that file.
    pub offset: u64,
}

/// A record handed out by recovery or a read.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// Segment id.
    pub segment_id: u64,
    /// Byte offset in the segment.
    pub offset: u64,
    /// Log sequence number.
    pub lsn: u64,
    /// Record kind (1..=`KIND_USER_MAX`).
    pub kind: u8,
    /// The payload.
    pub payload: &'a [u8],
    /// The segment file holding it: what an error about this record names.
    pub segment: &'a Path,
}

impl RecordRef<'_> {
    /// The record's position.
    pub fn pos(&self) -> RecordPos {
        RecordPos {
            segment_id: self.segment_id,
            offset: self.offset,
        }
    }

    /// Bytes the record takes in the log, header included.
    pub fn bytes(&self) -> u32 {
        record_bytes(self.payload.len())
    }
}

/// Bytes a record with `payload_bytes` of payload takes in the log. Payloads are limited
/// to less than `SEGMENT_BYTES_MAX` (2 GiB), so this fits.
fn record_bytes(payload_bytes: usize) -> u32 {
    let bytes = RECORD_HEADER_BYTES + payload_bytes;
    assert!(
        bytes as u64 <= SEGMENT_BYTES_MAX,
        "record larger than a segment"
    );
    bytes as u32
}

/// What `append` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The record's LSN.
    pub lsn: u64,
    /// The record's position (for [`Log::read`]).
    pub pos: RecordPos,
    /// Bytes the record takes in the log, header included.
    pub bytes: u32,
}

/// Counters of a log handle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Records appended through this handle.
    pub appends: u64,
    /// Group-commit batches written.
    pub batches: u64,
    /// fdatasync calls.
    pub fsyncs: u64,
    /// Bytes written (records and seals).
    pub bytes_written: u64,
    /// Bytes of zeros written ahead of the data into preallocated space (DESIGN.md §2.6).
    pub zero_bytes_written: u64,
    /// Segments created by rotation.
    pub rotations: u64,
}

/// A handle to a log directory. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct Log {
    // Declared first so it drops first: the last handle stops and joins the `Periodic`
    // flusher before the writer (and the directory lock) goes, so a reopen right after
    // the drop does not find the directory still locked by a flush in progress.
    _flusher: Arc<Option<Periodic>>,
    inner: Arc<Inner>,
}

struct Inner {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    writer: Option<Writer>,
    recovery: LogRecovery,
    options: LogOptions,
    /// A writer's maps of segment files, made on first read and dropped when compaction
    /// replaces the files (it holds the store's relocation lock meanwhile).
    maps: RwLock<HashMap<u64, FileView>>,
    /// A read-only handle's view: the bytes of every segment its scan read, pinned for
    /// its lifetime; reads never look a segment up by name again (DESIGN.md §5.4).
    pins: Option<HashMap<u64, SegmentPin>>,
    _lock: Option<DirLock>,
}

impl Drop for Inner {
    /// In `Periodic` mode the last handle's drop makes what is written durable (its
    /// flusher has stopped by now), so records appended just before a clean shutdown do not
    /// wait for the OS to write them back. `Never` leaves that to the caller's `flush`.
    fn drop(&mut self) {
        if let (Some(writer), SyncMode::Periodic(_)) = (&self.writer, self.options.sync)
            && let Err(e) = writer.flush()
        {
            tracing::warn!(dir = %self.dir.display(), error = %e,
                "could not flush the log on close");
        }
    }
}

/// How many times a read-only open scans at most while what it sees keeps changing.
const READ_ONLY_SCAN_ATTEMPTS: usize = 10;
/// Pause after the first failed read-only scan; it doubles after each further one.
const READ_ONLY_RETRY_FIRST_MS: u64 = 10;
/// Longest pause between two read-only scans.
const READ_ONLY_RETRY_MAX_MS: u64 = 160;

impl Log {
    /// Opens (or creates) the log in `dir` for writing, discarding the recovered records.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> Result<Log> {
        Log::open_with(dir, options, |_| Ok(()))
    }

    /// Opens (or creates) the log in `dir` for writing; `visit` sees every recovered record
    /// in LSN order (complete batches only). An error from `visit` aborts the open.
    pub fn open_with(
        dir: impl AsRef<Path>,
        options: LogOptions,
        visit: impl FnMut(RecordRef<'_>) -> Result<()>,
    ) -> Result<Log> {
        Log::open_on(Arc::new(RealStorage), dir, options, visit)
    }

    /// Like [`open_with`](Self::open_with), on the given storage (tests use a simulated
    /// one to inject crashes and I/O errors).
    pub fn open_on(
        storage: Arc<dyn Storage>,
        dir: impl AsRef<Path>,
        options: LogOptions,
        mut visit: impl FnMut(RecordRef<'_>) -> Result<()>,
    ) -> Result<Log> {
        let dir = dir.as_ref().to_path_buf();
        let fs = &*storage;
        validate_options(&options)?;
        prepare_dir(fs, &dir)?;
        let lock = DirLock::acquire(fs, &dir)?;
        remove_temp_files(fs, &dir)?;
        let started = Instant::now();
        // The lock is held and the writer starts after the scan: nothing changes meanwhile.
        let scan = recovery::scan(fs, &dir, options.recovery, true, &mut visit)?;
        log_recovery(&dir, &scan.report, started);
        remove_superseded_files(fs, &dir, &scan.superseded)?;
        let start = writer_start(&storage, &dir, &scan, options.segment_bytes)?;
        let writer = Writer::new(start, options.sync);
        writer.prepare()?;
        let inner = Arc::new(Inner {
            storage,
            dir,
            writer: Some(writer),
            recovery: scan.report,
            options,
            maps: RwLock::new(HashMap::new()),
            pins: None,
            _lock: Some(lock),
        });
        let flusher = match options.sync {
            SyncMode::Periodic(interval) => spawn_flusher(Arc::downgrade(&inner), interval),
            _ => None,
        };
        Ok(Log {
            _flusher: Arc::new(flusher),
            inner,
        })
    }

    /// Opens the log read-only: takes no lock, modifies nothing, ignores an unfinished tail.
    /// Works while a writer (in this or another process) appends, rotates and compacts:
    /// the handle serves the records that were complete when it opened, from the bytes its
    /// scan read, for as long as it lives (DESIGN.md §5.4). [`Error::StoreChanged`] if the
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
            _flusher: Arc::new(None),
            inner: Arc::new(Inner {
                storage,
                dir,
                writer: None,
                recovery: scan.report,
                options,
                maps: RwLock::new(HashMap::new()),
                pins: Some(scan.pins.into_iter().collect()),
                _lock: None,
            }),
        })
    }

    /// Appends one record of `kind` (1..=`KIND_USER_MAX`). With `SyncMode::Always` it is
    /// durable when this returns; concurrent appends share one write and one fsync.
    pub fn append(&self, kind: u8, payload: &[u8]) -> Result<Appended> {
        let writer = self.writer()?;
        if kind == KIND_UNWRITTEN || kind > KIND_USER_MAX {
            return Err(Error::InvalidArgument(format!(
                "record kind {kind} is reserved; use 1..={KIND_USER_MAX}"
            )));
        }
        let (lsn, pos) = writer.append(kind, payload)?;
        Ok(Appended {
            lsn,
            pos,
            bytes: record_bytes(payload.len()),
        })
    }

    /// Makes every record appended so far durable (a no-op cost under `SyncMode::Always`).
    pub fn flush(&self) -> Result<()> {
        self.writer()?.flush()
    }

    /// Reads the payload of the record at `pos`, verifying its checksum.
    pub fn read(&self, pos: RecordPos) -> Result<Vec<u8>> {
        self.read_with(pos, |rec| Ok(rec.payload.to_vec()))
    }

    /// Reads the record at `pos` and hands it to `f` without copying the payload when the
    /// segment is memory-mapped.
    pub fn read_with<T>(
        &self,
        pos: RecordPos,
        f: impl FnOnce(RecordRef<'_>) -> Result<T>,
    ) -> Result<T> {
        let path = segment_path(&self.inner.dir, pos.segment_id);
        if let Some(pins) = &self.inner.pins {
            return match pins.get(&pos.segment_id) {
                Some(SegmentPin::Bytes(bytes)) => f(decode_in(bytes, pos, &path)?),
                Some(SegmentPin::File(file)) => read_from_file(&**file, pos, &path, f),
                // Not a segment this handle scanned: the position came from elsewhere.
                None => Err(Error::StoreChanged {
                    dir: self.inner.dir.clone(),
                }),
            };
        }
        if let Some(view) = self.view(pos, &path)? {
            return f(decode_in(&view, pos, &path)?);
        }
        let file = self
            .inner
            .storage
            .open(&path, false)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        read_from_file(&*file, pos, &path, f)
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

    /// The file holding the record at `pos`, for naming it in an error.
    pub fn path_of(&self, pos: RecordPos) -> PathBuf {
        segment_path(&self.inner.dir, pos.segment_id)
    }

    /// Salvage: what is left of the record at the start of a range recovery skipped, if
    /// its header still parses: its kind and the bytes after the header (cut off at the
    /// range's end, the checksum unchecked). A damaged record's leading fields often
    /// survive, which lets a report name what was lost. Best effort: `None` otherwise.
    pub fn skipped_record(&self, range: &SkippedRange) -> Option<(u8, Vec<u8>)> {
        let file = self.inner.storage.open(&range.segment, false).ok()?;
        let len = usize::try_from(range.bytes).ok()?;
        let mut region = vec![0u8; len];
        file.read_exact_at(&mut region, range.offset).ok()?;
        let header = record::parse_header(&region).ok()?;
        region.drain(..RECORD_HEADER_BYTES.min(region.len()));
        Some((header.kind, region))
    }

    /// What recovery found when this handle opened.
    pub fn recovery(&self) -> &LogRecovery {
        &self.inner.recovery
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The storage this handle runs on.
    pub fn storage(&self) -> &dyn Storage {
        &*self.inner.storage
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &LogOptions {
        &self.inner.options
    }

    /// Whether this handle can write.
    pub fn is_read_only(&self) -> bool {
        self.inner.writer.is_none()
    }

    /// Largest payload one record may carry with this handle's `segment_bytes`.
    pub fn payload_bytes_max(&self) -> u64 {
        writer::max_payload_bytes(self.inner.options.segment_bytes)
    }

    /// Counters since this handle opened.
    pub fn stats(&self) -> LogStats {
        let Some(w) = &self.inner.writer else {
            return LogStats::default();
        };
        let c = &w.counters;
        LogStats {
            appends: c.appends.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            zero_bytes_written: c.zero_bytes_written.load(Ordering::Relaxed),
            rotations: c.rotations.load(Ordering::Relaxed),
        }
    }

    fn writer(&self) -> Result<&Writer> {
        self.inner.writer.as_ref().ok_or(Error::ReadOnly)
    }

    /// Drops cached maps of segments `<= through_id` (replaced or about to be deleted).
    fn forget_maps(&self, through_id: u64) {
        self.inner.maps.write().retain(|id, _| *id > through_id);
    }

    /// A map of the segment that holds the whole record at `pos`, if the storage can map
    /// (writers only; a read-only handle reads its pins). The active segment is mapped
    /// too: bytes below its write position never change, and a map made before the file
    /// grew is made again when a record lies past its end.
    fn view(&self, pos: RecordPos, path: &Path) -> Result<Option<FileView>> {
        let cached = self.inner.maps.read().get(&pos.segment_id).cloned();
        if let Some(view) = cached
            && holds_record(&view, pos.offset)
        {
            return Ok(Some(view));
        }
        let Some(view) = self
            .inner
            .storage
            .view(path)
            .map_err(|e| Error::io(format!("mapping {}", path.display()), e))?
        else {
            return Ok(None);
        };
        self.inner.maps.write().insert(pos.segment_id, view.clone());
        // Not whole even in a fresh map: let the copying path report what is wrong.
        Ok(holds_record(&view, pos.offset).then_some(view))
    }
}

/// Whether `view` holds a whole record (as its header says) at `offset`.
fn holds_record(view: &FileView, offset: u64) -> bool {
    let Some(head) = usize::try_from(offset)
        .ok()
        .and_then(|at| view.get(at..at.checked_add(RECORD_HEADER_BYTES)?))
    else {
        return false;
    };
    let Ok(header) = record::parse_header(head) else {
        return false;
    };
    offset.saturating_add(header.record_bytes()) <= view.len() as u64
}

/// Decodes the record at `pos` inside the whole segment `segment`.
fn decode_in<'a>(segment: &'a [u8], pos: RecordPos, path: &'a Path) -> Result<RecordRef<'a>> {
    let bytes = usize::try_from(pos.offset)
        .ok()
        .and_then(|at| segment.get(at..))
        .unwrap_or(&[]);
    decode_at(bytes, pos, path)
}

/// Reads the record at `pos` from an open segment file: its header, then all of it.
fn read_from_file<T>(
    file: &dyn StorageFile,
    pos: RecordPos,
    path: &Path,
    f: impl FnOnce(RecordRef<'_>) -> Result<T>,
) -> Result<T> {
    let mut head = [0u8; RECORD_HEADER_BYTES];
    read_exact_at(file, &mut head, pos.offset, path)?;
    let header = record::parse_header(&head).map_err(|e| decode_error(e, pos, path))?;
    if header.record_bytes() > SEGMENT_BYTES_MAX {
        return Err(decode_error(
            record::DecodeError::Invalid(CorruptionReason::BadLength {
                length: u64::from(header.payload_len),
            }),
            pos,
            path,
        ));
    }
    let mut buf = vec![0u8; header.record_bytes() as usize];
    read_exact_at(file, &mut buf, pos.offset, path)?;
    f(decode_at(&buf, pos, path)?)
}

fn decode_at<'a>(bytes: &'a [u8], pos: RecordPos, path: &'a Path) -> Result<RecordRef<'a>> {
    let (h, payload) = record::decode(bytes).map_err(|e| decode_error(e, pos, path))?;
    if h.kind == KIND_SEAL {
        return Err(Error::Corruption {
            segment: path.to_path_buf(),
            offset: pos.offset,
            reason: CorruptionReason::UnknownKind(h.kind),
        });
    }
    Ok(RecordRef {
        segment_id: pos.segment_id,
        offset: pos.offset,
        lsn: h.lsn,
        kind: h.kind,
        payload,
        segment: path,
    })
}

fn decode_error(e: record::DecodeError, pos: RecordPos, path: &Path) -> Error {
    let reason = match e {
        record::DecodeError::Invalid(r) => r,
        record::DecodeError::Unwritten => CorruptionReason::UnknownKind(KIND_UNWRITTEN),
        record::DecodeError::Truncated => CorruptionReason::BadLength { length: 0 },
    };
    Error::Corruption {
        segment: path.to_path_buf(),
        offset: pos.offset,
        reason,
    }
}

fn read_exact_at(file: &dyn StorageFile, buf: &mut [u8], offset: u64, path: &Path) -> Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::Corruption {
                segment: path.to_path_buf(),
                offset,
                reason: CorruptionReason::BadLength {
                    length: buf.len() as u64,
                },
            }
        } else {
            Error::io(format!("reading {}", path.display()), e)
        }
    })
}

fn validate_options(options: &LogOptions) -> Result<()> {
    if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&options.segment_bytes) {
        return Err(Error::InvalidArgument(format!(
            "segment_bytes {} is outside {SEGMENT_BYTES_MIN}..={SEGMENT_BYTES_MAX}",
            options.segment_bytes
        )));
    }
    if let SyncMode::Periodic(d) = options.sync
        && d.is_zero()
    {
        return Err(Error::InvalidArgument(
            "SyncMode::Periodic needs a non-zero interval; use SyncMode::Always".into(),
        ));
    }
    Ok(())
}

/// Creates `dir` if missing; refuses a non-empty directory that holds no store.
fn prepare_dir(fs: &dyn Storage, dir: &Path) -> Result<()> {
    if !fs.is_dir(dir) {
        fs.create_dir_all(dir).map_err(|e| {
            not_a_directory(fs, dir)
                .unwrap_or_else(|| Error::io(format!("creating {}", dir.display()), e))
        })?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(fs, parent)?;
        }
        return Ok(());
    }
    check_is_store(fs, dir, true)
}

/// The error for a store path that is no directory but opens as a file, once using it
/// as a directory failed: the OS's own error ("file exists", "not found") would not say
/// what is wrong with it. Asked only after a failure, so the probe adds no operation
/// (and no error to swallow) to an open that works.
fn not_a_directory(fs: &dyn Storage, dir: &Path) -> Option<Error> {
    fs.open(dir, false).ok().map(|_| Error::NotAStore {
        dir: dir.to_path_buf(),
        reason: NotAStoreReason::NotADirectory,
    })
}

/// A store holds segment files. A directory without any may become one when opened for
/// writing if it is empty or holds only what the engine itself names (its lock and
/// temporary files, left by a crash before the first segment was in place); anything
/// else is someone else's directory, named in the error.
fn check_is_store(fs: &dyn Storage, dir: &Path, may_create: bool) -> Result<()> {
    let mut names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    if names.iter().any(|n| parse_segment_file_name(n).is_some()) {
        return Ok(());
    }
    // Sorted, so the file the error names does not depend on the listing order.
    names.sort_unstable();
    let foreign = names.iter().find(|name| {
        let ours = name.as_str() == LOCK_FILE_NAME || is_temp_file_name(name);
        // A directory is never something the engine made, whatever its name.
        !ours || fs.is_dir(&dir.join(name))
    });
    let reason = match foreign {
        Some(name) => NotAStoreReason::ForeignFile(dir.join(name)),
        None if may_create => return Ok(()),
        None => NotAStoreReason::NoSegments,
    };
    Err(Error::NotAStore {
        dir: dir.to_path_buf(),
        reason,
    })
}

/// Deletes the temporary files a crash left: only names the engine writes
/// (`is_temp_file_name`), and never a directory.
fn remove_temp_files(fs: &dyn Storage, dir: &Path) -> Result<()> {
    let names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    let mut removed = false;
    for name in names.iter().filter(|n| is_temp_file_name(n)) {
        let path = dir.join(name);
        if fs.is_dir(&path) {
            continue;
        }
        fs.remove(&path)
            .map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
        removed = true;
    }
    if removed {
        sync_dir(fs, dir)?;
    }
    Ok(())
}

/// Finishes a compaction a crash interrupted: the superseded segments go.
fn remove_superseded_files(fs: &dyn Storage, dir: &Path, superseded: &[PathBuf]) -> Result<()> {
    for path in superseded {
        fs.remove(path)
            .map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
    }
    if !superseded.is_empty() {
        sync_dir(fs, dir)?;
        tracing::info!(
            segments = superseded.len(),
            "removed segments superseded by compaction"
        );
    }
    Ok(())
}

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
                for (pos, lsn, kind, payload) in &records {
                    visit(RecordRef {
                        segment_id: pos.segment_id,
                        offset: pos.offset,
                        lsn: *lsn,
                        kind: *kind,
                        payload,
                        segment: &segment_path(dir, pos.segment_id),
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

/// Whether a failed read-only scan may only have raced a writer (DESIGN.md §5.4).
fn may_be_concurrent_change(e: &Error) -> bool {
    match e {
        Error::Corruption { .. } => true,
        Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

/// Decides where the writer appends next; repairs a torn tail first.
fn writer_start(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    scan: &Scan,
    segment_bytes: u64,
) -> Result<WriterStart> {
    let fs = &**storage;
    // A writer killed before its fsync (or before its directory fsync, just after creating
    // a segment) leaves data only the page cache holds. Make it durable before new
    // batches claim that everything before them is durable.
    if let Some(last) = scan.segments.last() {
        fs.open(&last.path, false)
            .and_then(|f| f.sync_data())
            .map_err(|e| Error::io(format!("fsyncing {}", last.path.display()), e))?;
        sync_dir(fs, dir)?;
    }
    let prealloc = PREALLOCATE_BYTES.min(segment_bytes) - SEGMENT_HEADER_BYTES as u64;
    let fresh = |id: u64| -> Result<WriterStart> {
        let file = create_segment(fs, dir, id, scan.next_lsn, prealloc)?;
        Ok(WriterStart {
            storage: storage.clone(),
            dir: dir.to_path_buf(),
            file: Some(file),
            segment_id: id,
            write_pos: SEGMENT_HEADER_BYTES as u64,
            file_bytes: SEGMENT_HEADER_BYTES as u64 + prealloc,
            zeroed_end: SEGMENT_HEADER_BYTES as u64,
            next_lsn: scan.next_lsn,
            segment_bytes,
        })
    };
    match scan.segments.last() {
        None => fresh(1),
        // The next segment is created at the first append, not here: an open must not
        // need free space, or a full disk (whose last rotation failed after the seal)
        // could never be opened to compact it. The seal is durable (fdatasynced above),
        // so the log ends there until then, exactly as after a crash during rotation.
        Some(last) if last.sealed => Ok(WriterStart {
            storage: storage.clone(),
            dir: dir.to_path_buf(),
            file: None,
            segment_id: last.id,
            write_pos: last.data_end,
            file_bytes: last.file_bytes,
            zeroed_end: last.data_end,
            next_lsn: scan.next_lsn,
            segment_bytes,
        }),
        Some(last) => reopen_tail(storage, dir, last, scan.next_lsn, segment_bytes),
    }
}

fn reopen_tail(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    last: &SegmentState,
    next_lsn: u64,
    segment_bytes: u64,
) -> Result<WriterStart> {
    let file = storage
        .open(&last.path, true)
        .map_err(|e| Error::io(format!("opening {}", last.path.display()), e))?;
    if last.dirty_end > last.data_end {
        // Zero the torn bytes before appending: a stale record left past new data could
        // otherwise validate later with a reused LSN.
        let zeros = vec![0u8; (last.dirty_end - last.data_end) as usize];
        file.write_all_at(&zeros, last.data_end)
            .and_then(|()| file.sync_data())
            .map_err(|e| {
                Error::io(
                    format!("zeroing the torn tail of {}", last.path.display()),
                    e,
                )
            })?;
        tracing::warn!(segment = %last.path.display(), offset = last.data_end,
            bytes = last.dirty_end - last.data_end, "discarded a torn tail");
    }
    // Space a previous writer zeroed ahead is written already; zeroing it again at every
    // open would cost a megabyte of writes and an fdatasync per open.
    let zeroed_end = file.written_end(last.data_end);
    Ok(WriterStart {
        storage: storage.clone(),
        dir: dir.to_path_buf(),
        file: Some(file),
        segment_id: last.id,
        write_pos: last.data_end,
        // A segment written under a larger segment_bytes stays valid; the writer seals it
        // at the next append and new segments take the current segment_bytes.
        file_bytes: last.file_bytes,
        zeroed_end,
        next_lsn,
        segment_bytes,
    })
}

fn log_recovery(dir: &Path, r: &LogRecovery, started: Instant) {
    tracing::info!(
        dir = %dir.display(),
        segments = r.segments,
        records = r.records,
        bytes = r.bytes,
        torn_bytes = r.torn_bytes,
        skipped_ranges = r.skipped.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "log recovered"
    );
}

fn spawn_flusher(inner: Weak<Inner>, interval: Duration) -> Option<Periodic> {
    Periodic::spawn("agentwal-flusher", interval, move || {
        let Some(inner) = inner.upgrade() else {
            return ControlFlow::Break(());
        };
        match &inner.writer {
            // Poisoned: appends report it.
            Some(w) if w.flush().is_err() => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    })
}
