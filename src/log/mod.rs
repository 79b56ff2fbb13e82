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
pub(crate) mod format;
mod lock;
mod open;
mod read;
mod read_only;
pub mod record;
mod recovery;
mod recycle;
pub(crate) mod segment;
#[cfg(feature = "tokio")]
mod syncer;
mod writer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use parking_lot::RwLock;

pub use compact::{COMPACTION_DEAD_BYTES_MIN, CompactionHooks, LogCompaction, Moved};
pub use format::{
    FLAG_BATCH_END, FLAG_BATCH_START, FLAG_DURABLE_BEFORE, FORMAT_VERSION, FORMAT_VERSION_V1,
    FORMAT_VERSION_V2, KIND_CLOSE, KIND_SEAL, KIND_UNWRITTEN, KIND_USER_MAX, LOCK_FILE_NAME,
    PREALLOCATE_BYTES, RECORD_BYTES_MAX, RECORD_HEADER_BYTES, RECORD_PAYLOAD_BYTES_MAX,
    SEGMENT_FLAG_COMPACTED, SEGMENT_FLAG_RECYCLED, SEGMENT_HEADER_BYTES, SEGMENT_HEADER_BYTES_V2,
    free_file_name, mask_crc, parse_free_file_name, parse_segment_file_name, segment_file_name,
};
pub use recovery::{LogRecovery, SkippedRange};
pub use recycle::{RECYCLE_BYTES_MAX, RECYCLE_FILES_MIN, recycle_files_max};
pub use segment::{Chain, SegmentHeader, segment_path};

use self::format::{SEGMENT_BYTES_DEFAULT, SEGMENT_BYTES_MAX};
use self::lock::DirLock;
use self::recovery::SegmentPin;
use self::writer::Writer;
use crate::background::Periodic;
use crate::error::{Error, Result};
use crate::storage::{FileView, Storage};

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

/// A record for [`Log::append_then`]: its payload, and what to do once it is done.
pub(crate) trait AppendThen: Send {
    /// The record's payload (copied into the batch when queued).
    #[cfg(feature = "tokio")]
    fn payload(&self) -> &[u8];
    /// Told once: where the record is, once it is as durable as the sync mode promises,
    /// or why it failed. Runs on the thread that finished the batch, with no lock of the
    /// log held.
    fn done(self: Box<Self>, outcome: Result<Appended>);
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
    /// Bytes of zeros written ahead of the data into preallocated space (docs/format.md §6).
    pub zero_bytes_written: u64,
    /// Bytes of zeros written after batches to the end of their last block, where the
    /// blocks were written before (a recycled file's earlier life; docs/format.md §6).
    pub fill_bytes_written: u64,
    /// Segments created by rotation.
    pub rotations: u64,
    /// Of those, segments made from a retired file rather than a new one (docs/format.md §6).
    pub segments_recycled: u64,
    /// Bytes of compacted segments that compaction passes wrote (§2.9), on top of
    /// `bytes_written`: the write amplification compaction adds.
    pub compaction_bytes_written: u64,
}

/// A handle to a log directory. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct Log {
    // Declared first so it drops first: the last handle stops and joins the syncer (which
    // holds the log's `Inner`) before anything else goes.
    #[cfg(feature = "tokio")]
    _syncer: Arc<syncer::SyncerSlot>,
    // Declared next so it drops first: the last handle stops and joins the `Periodic`
    // flusher before the writer (and the directory lock) goes, so a reopen right after
    // the drop does not find the directory still locked by a flush in progress.
    _flusher: Arc<Option<Periodic>>,
    inner: Arc<Inner>,
}

/// What all clones of a [`Log`] share.
///
/// Locks, outermost first; a thread holding one takes only those after it:
/// 1. The store's positions lock ([`CompactionHooks::positions_lock`], not the log's):
///    appenders hold it shared from `append` until the record is indexed, readers while
///    they resolve and read positions; compaction holds it exclusively around the switch
///    to new positions, and calls `forget_maps` (so takes `maps`) under it.
/// 2. `Writer::shared` (a mutex, with the `Writer::wake` condvars waiting on it): every
///    append and flush, briefly; never held across I/O nor while taking another lock.
/// 3. `Writer::io` (a mutex): the group-commit leader, for a batch's write and
///    fdatasync, taken only after it released `shared`; compaction takes it alone
///    (`uncreated_segment`). Under it only the storage's own locks are taken.
/// 4. `maps` (a rwlock): a leaf, held only to look up, insert or drop a map, never
///    across a storage call.
///
/// Besides: the `Periodic` flusher's stop mutex is never held while it flushes, and the
/// directory lock (`_lock`, an OS file lock) is held for the handle's life, not nested.
struct Inner {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// `None` on a read-only handle. Its locks: see above and [`Writer`].
    writer: Option<Writer>,
    recovery: LogRecovery,
    options: LogOptions,
    /// A writer's maps of segment files, made on first read and dropped when compaction
    /// replaces the files (it holds the store's positions lock meanwhile). Lock order:
    /// innermost (4. above).
    maps: RwLock<HashMap<u64, FileView>>,
    /// The writer's rotations when the last compaction pass ran: the rotations since tell
    /// the next pass how many retired files to keep ([`recycle::recycle_files_max`]).
    rotations_at_last_pass: std::sync::atomic::AtomicU64,
    /// A read-only handle's view: the bytes of every segment its scan read, pinned for
    /// its lifetime; reads never look a segment up by name again (docs/log.md §3.4).
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
        if let Some(writer) = &self.writer
            && let Err(e) = writer.close()
        {
            tracing::warn!(dir = %self.dir.display(), error = %e,
                "could not write the close record; the next open seals the segment");
        }
    }
}

impl Log {
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

    /// Queues a record without blocking: `then` learns the outcome from the thread that
    /// finishes its batch (a syncer thread, started at the first call, leads the batches
    /// no blocking appender leads). The async API's append.
    #[cfg(feature = "tokio")]
    pub(crate) fn append_then(&self, kind: u8, then: Box<dyn AppendThen>) {
        let writer = match self.writer() {
            Ok(writer) => writer,
            Err(e) => return then.done(Err(e)),
        };
        if kind == KIND_UNWRITTEN || kind > KIND_USER_MAX {
            return then.done(Err(Error::InvalidArgument(format!(
                "record kind {kind} is reserved; use 1..={KIND_USER_MAX}"
            ))));
        }
        if let Err(e) = self._syncer.ensure(&self.inner) {
            return then.done(Err(e));
        }
        writer.append_then(kind, then);
    }

    /// Seals the active segment if it holds a record, so that the next compaction pass
    /// covers every record appended so far; the next append makes the next segment.
    /// Returns whether it sealed one.
    pub fn seal_active(&self) -> Result<bool> {
        self.writer()?.seal_active()
    }

    /// Makes every record appended so far durable (a no-op cost under `SyncMode::Always`).
    pub fn flush(&self) -> Result<()> {
        self.writer()?.flush()
    }

    /// The file holding the record at `pos`, for naming it in an error.
    pub fn path_of(&self, pos: RecordPos) -> PathBuf {
        segment_path(&self.inner.dir, pos.segment_id)
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

    /// Largest payload one record may carry. A record larger than `segment_bytes` allows
    /// gets a segment of its own, so this is the format's limit, whatever the options.
    pub fn payload_bytes_max(&self) -> u64 {
        format::RECORD_PAYLOAD_BYTES_MAX
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
            fill_bytes_written: c.fill_bytes_written.load(Ordering::Relaxed),
            rotations: c.rotations.load(Ordering::Relaxed),
            segments_recycled: c.recycled.load(Ordering::Relaxed),
            compaction_bytes_written: c.compacted_bytes.load(Ordering::Relaxed),
        }
    }

    fn writer(&self) -> Result<&Writer> {
        self.inner.writer.as_ref().ok_or(Error::ReadOnly)
    }
}
