//! The interface between the store's rules and where its records live, and the local
//! segmented log's implementation of it. Everything above this file (validation, the
//! snapshot policy, retention, the journal's rules, schema versions, the latest-state
//! cache, the in-memory index) is the same for every backend; DESIGN.md §7.9 says why the
//! interface has this shape.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::log::{
    AppendThen, Appended, CompactionHooks, Log, LogCompaction, LogRecovery, RecordPos, RecordRef,
    SkippedRange,
};

/// Counters and sizes of a backend, for [`Stats`](super::Stats).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BackendStats {
    pub appends: u64,
    pub batches: u64,
    pub fsyncs: u64,
    pub bytes_written: u64,
    pub zero_bytes_written: u64,
    pub fill_bytes_written: u64,
    pub compaction_bytes_written: u64,
    pub segments_created: u64,
    pub segments_recycled: u64,
    /// Files (segments) holding records; retired files waiting for reuse; the bytes of
    /// both on disk.
    pub files: u64,
    pub free_files: u64,
    pub disk_bytes: u64,
}

/// Durable storage of store records: opaque, checksummed payloads with a kind, each
/// named by a position that stays valid until a compaction moves it (and tells the store
/// through [`CompactionHooks::remap`]). A backend knows nothing of tasks, seqs or states.
///
/// What the rules rely on:
/// - `append` returns only once the record is as durable as the sync mode promises, and
///   records appended by one thread are replayed in the order appended;
/// - `read` of a position the store was given returns exactly that record, or an error;
/// - a compaction keeps every record the hooks call live, and removes a record only
///   after [`CompactionHooks::orphan`] said no index entry reaches it.
pub(crate) trait Backend: Send + Sync {
    /// Appends one record of `kind`.
    fn append(&self, kind: u8, payload: &[u8]) -> Result<Appended>;
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    /// Queues one record of `kind` without blocking; `then` learns the outcome, with
    /// the same promise as `append` (the async API's append).
    fn append_then(&self, kind: u8, then: Box<dyn AppendThen>);
    /// Reads the record at `pos` and hands it to `f`.
    fn read(&self, pos: RecordPos, f: &mut dyn FnMut(RecordRef<'_>) -> Result<()>) -> Result<()>;
    /// Makes every record appended so far durable.
    fn flush(&self) -> Result<()>;
    /// Runs a compaction pass (`None`: none was worth running).
    fn compact(&self, force: bool, hooks: &dyn CompactionHooks) -> Result<Option<LogCompaction>>;
    /// Whether this handle can write.
    fn is_read_only(&self) -> bool;
    /// Largest payload one record may carry.
    fn payload_bytes_max(&self) -> u64;
    /// Where the store lives (its directory).
    fn location(&self) -> &Path;
    /// What names the record at `pos` in an error.
    fn path_of(&self, pos: RecordPos) -> PathBuf;
    /// Counters and sizes.
    fn stats(&self) -> BackendStats;
    /// How many times the backend started a new file: the background compactor looks
    /// again after each.
    fn rotations(&self) -> u64;
    /// What recovery found at open.
    fn recovery(&self) -> &LogRecovery;
    /// Salvage: the kind and remaining bytes of the record a skipped range begins with.
    fn skipped_record(&self, range: &SkippedRange) -> Option<(u8, Vec<u8>)>;
}

impl Backend for Log {
    fn append(&self, kind: u8, payload: &[u8]) -> Result<Appended> {
        Log::append(self, kind, payload)
    }

    fn append_then(&self, kind: u8, then: Box<dyn AppendThen>) {
        Log::append_then(self, kind, then)
    }

    fn read(&self, pos: RecordPos, f: &mut dyn FnMut(RecordRef<'_>) -> Result<()>) -> Result<()> {
        self.read_with(pos, f)
    }

    fn flush(&self) -> Result<()> {
        Log::flush(self)
    }

    fn compact(&self, force: bool, hooks: &dyn CompactionHooks) -> Result<Option<LogCompaction>> {
        Log::compact(self, force, hooks)
    }

    fn is_read_only(&self) -> bool {
        Log::is_read_only(self)
    }

    fn payload_bytes_max(&self) -> u64 {
        Log::payload_bytes_max(self)
    }

    fn location(&self) -> &Path {
        self.dir()
    }

    fn path_of(&self, pos: RecordPos) -> PathBuf {
        Log::path_of(self, pos)
    }

    fn stats(&self) -> BackendStats {
        let s = Log::stats(self);
        // A directory listing; on error the sizes are unknown, not fatal to `stats`.
        let sizes = self.segment_sizes().unwrap_or_default();
        let free = self.free_file_sizes().unwrap_or_default();
        BackendStats {
            appends: s.appends,
            batches: s.batches,
            fsyncs: s.fsyncs,
            bytes_written: s.bytes_written,
            zero_bytes_written: s.zero_bytes_written,
            fill_bytes_written: s.fill_bytes_written,
            compaction_bytes_written: s.compaction_bytes_written,
            segments_created: s.rotations,
            segments_recycled: s.segments_recycled,
            files: sizes.len() as u64,
            free_files: free.len() as u64,
            disk_bytes: sizes.iter().chain(&free).map(|(_, b)| b).sum(),
        }
    }

    fn rotations(&self) -> u64 {
        Log::stats(self).rotations
    }

    fn recovery(&self) -> &LogRecovery {
        Log::recovery(self)
    }

    fn skipped_record(&self, range: &SkippedRange) -> Option<(u8, Vec<u8>)> {
        Log::skipped_record(self, range)
    }
}

/// Reads the record at `pos` from `backend` and maps it with `f` (the generic form of
/// [`Backend::read`]).
pub(crate) fn read_record<T>(
    backend: &dyn Backend,
    pos: RecordPos,
    f: impl FnOnce(RecordRef<'_>) -> Result<T>,
) -> Result<T> {
    let (mut f, mut out) = (Some(f), None);
    backend.read(pos, &mut |rec| {
        if let Some(f) = f.take() {
            out = Some(f(rec)?);
        }
        Ok(())
    })?;
    // A backend calls `f` exactly once for a read that succeeds.
    Ok(out.expect("a successful read hands over its record"))
}
