//! Plain data types of the store's API: options, checkpoints, reports and stats.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::log::{LogOptions, RecoveryMode, SkippedRange, SyncMode, format::SEGMENT_BYTES_DEFAULT};

/// Longest task id accepted, in bytes.
pub const TASK_ID_BYTES_MAX: usize = 512;
/// Longest tool-call id accepted, in bytes.
pub const CALL_ID_BYTES_MAX: usize = 512;
/// Longest tool name accepted, in bytes.
pub const TOOL_NAME_BYTES_MAX: usize = 512;
/// Default for [`Options::snapshot_every`]: at most this many deltas between a task's full
/// snapshots. The size rule (see [`SNAPSHOT_DELTA_RATIO`]) usually fires first; this
/// bounds the records a cold load folds for a large state that changes little per commit.
pub const SNAPSHOT_EVERY_DEFAULT: u32 = 1024;
/// The size rule: a snapshot is written once the deltas since the last one outweigh it
/// this many times over. With 2, bytes written stay within about 1.7 times the deltas for
/// a state that grows every commit, and a cold load reads at most about 3 times the state.
pub const SNAPSHOT_DELTA_RATIO: u64 = 2;
/// The size rule compares the deltas against at least this many bytes; keeps tiny states
/// from snapshotting on every commit.
pub const SNAPSHOT_DELTA_BYTES_FLOOR: u64 = 4096;
/// Default for [`Options::cache_bytes`].
pub const CACHE_BYTES_DEFAULT: u64 = 64 << 20;
/// Checkpoint bodies (encoded states and deltas) smaller than this are never compressed:
/// below it zstd saves little or nothing for a fixed cost of about 2.5 µs per frame, and
/// below 64 bytes it makes the body larger (bench-results/compression.md).
pub const COMPRESSION_BODY_BYTES_MIN: usize = 512;
/// The largest body, uncompressed, that is stored compressed (64 MiB); a larger one is
/// stored as encoded. A reader refuses a compressed body that claims more, before it
/// allocates anything, so a damaged or hostile record makes it allocate at most this much
/// to decompress.
pub const COMPRESSED_BODY_BYTES_MAX: usize = 64 << 20;
/// The zstd level of the default [`Compression`]: level 1, which measured within 5 % of
/// level 3's output on agent text for a third of its time on some inputs
/// (bench-results/compression.md).
pub const ZSTD_LEVEL_DEFAULT: i32 = 1;

/// How a store stores checkpoint bodies (docs/format.md §8): [`Options::compression`].
///
/// Compression changes only the bytes on disk. Which commits succeed, where snapshots fall
/// (the snapshot policy and the record size limit count uncompressed bytes) and what loads
/// return are the same under every setting, and a store reads bodies of every codec
/// whatever it writes (a compressed one needs the `zstd` cargo feature).
///
/// Where the CPU goes is the choice: [`ZstdAtCompaction`](Self::ZstdAtCompaction) (the
/// default) keeps it off the commit path, and the records a commit writes stay raw until
/// a compaction pass copies them; [`Zstd`](Self::Zstd) compresses as it commits, which
/// makes the files smaller at once but costs commits/s and tail latency where commits are
/// CPU-bound (with 64 committing threads on 2 cores, compressing snapshots took the p99 to
/// 1.4–2.0× that of raw bodies, and compressing deltas too cost a quarter to a third of the
/// commits/s: docs/format.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Compression {
    /// Every body as encoded, compaction included.
    None,
    /// Bodies compressed as they are committed (and forked): one zstd frame per body, at
    /// `level` (zstd's levels, 1 to 22; negative levels are faster and weaker): every
    /// snapshot body, and with `deltas` every delta body, of at least
    /// [`COMPRESSION_BODY_BYTES_MIN`] and at most [`COMPRESSED_BODY_BYTES_MAX`] bytes. A
    /// body whose frame would not be at least 1/8 smaller is stored as encoded. Compaction
    /// compresses as well the raw bodies it copies that this setting would compress.
    /// Needs the `zstd` cargo feature (default): without it, opening a store with this
    /// setting is an [`InvalidArgument`](crate::Error::InvalidArgument) error.
    Zstd {
        /// The zstd compression level ([`ZSTD_LEVEL_DEFAULT`] by default).
        level: i32,
        /// Whether delta bodies are compressed too, not only snapshots. Deltas are most
        /// of the bytes and cost about 5 µs of CPU per 2 KB delta to compress.
        deltas: bool,
    },
    /// Commits write bodies as encoded; each compaction pass stores the bodies it copies
    /// as [`Zstd`](Self::Zstd) with the same fields would. Besides the passes retention
    /// and deletions call for, the background compactor runs one once the sealed segments
    /// no pass has written hold a segment's worth and as much as the compacted segment
    /// (docs/store.md §7). The active segment is never compacted, so the newest records, and
    /// all of a store smaller than a segment, stay raw; [`Store::compact`] compresses every
    /// sealed segment at once. Needs the `zstd` cargo feature, as `Zstd` does.
    ///
    /// [`Store::compact`]: crate::Store::compact
    ZstdAtCompaction {
        /// The zstd compression level ([`ZSTD_LEVEL_DEFAULT`] by default).
        level: i32,
        /// Whether delta bodies are compressed too, not only snapshots (the default is
        /// `true`: compaction has the CPU to spare that commits lack).
        deltas: bool,
    },
}

impl Default for Compression {
    /// `ZstdAtCompaction { level: ZSTD_LEVEL_DEFAULT, deltas: true }` with the `zstd`
    /// feature (the default), `None` without it.
    fn default() -> Self {
        if cfg!(feature = "zstd") {
            Compression::ZstdAtCompaction {
                level: ZSTD_LEVEL_DEFAULT,
                deltas: true,
            }
        } else {
            Compression::None
        }
    }
}

impl Compression {
    /// What a commit or a fork writes under this setting.
    pub(crate) fn at_commit(self) -> Compression {
        match self {
            Compression::ZstdAtCompaction { .. } => Compression::None,
            other => other,
        }
    }

    /// What a compaction pass writes of the raw bodies it copies under this setting.
    pub(crate) fn at_compaction(self) -> Compression {
        match self {
            Compression::ZstdAtCompaction { level, deltas } => Compression::Zstd { level, deltas },
            other => other,
        }
    }
}

/// How a [`Store`](crate::Store) is opened. Every field is public; start from `default()`.
///
/// ```
/// use agentwal::{Options, SyncMode};
/// let options = Options { segment_bytes: 1 << 20, ..Options::default() };
/// assert_eq!(options.sync, SyncMode::Always);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// When a commit counts as done (default: durable on return).
    pub sync: SyncMode,
    /// Segment files rotate at this size (default 64 MiB).
    pub segment_bytes: u64,
    /// At most this many deltas between a task's full snapshots (default 1024; ≥ 1).
    pub snapshot_every: u32,
    /// Memory for the latest-state cache, in encoded bytes of state (default 64 MiB; 0
    /// turns it off). `load_latest` of a cached task copies the state from memory instead
    /// of reading and folding its records, and a snapshot needs no fold.
    pub cache_bytes: u64,
    /// Retention: keep the last N checkpoints per task (None: all).
    pub keep_checkpoints: Option<u32>,
    /// Retention by age.
    pub max_age: Option<Duration>,
    /// What recovery tolerates.
    pub recovery: RecoveryMode,
    /// Run compaction on a background thread when segments rotate (default true);
    /// `Store::compact` works either way.
    pub auto_compact: bool,
    /// How checkpoint bodies are stored (default: as encoded at commit, compressed with
    /// zstd level 1 by compaction, with the `zstd` feature; see [`Compression`]). Records
    /// already written keep their codec until a compaction pass copies them.
    pub compression: Compression,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sync: SyncMode::Always,
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            snapshot_every: SNAPSHOT_EVERY_DEFAULT,
            cache_bytes: CACHE_BYTES_DEFAULT,
            keep_checkpoints: None,
            max_age: None,
            recovery: RecoveryMode::TolerateTornTail,
            auto_compact: true,
            compression: Compression::default(),
        }
    }
}

impl Options {
    pub(crate) fn log_options(&self) -> LogOptions {
        LogOptions {
            sync: self.sync,
            segment_bytes: self.segment_bytes,
            recovery: self.recovery,
        }
    }
}

/// A task's state as of one checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint<S> {
    /// The task id.
    pub task: String,
    /// The checkpoint's seq (1, 2, 3, ... per task).
    pub seq: u64,
    /// When it was committed (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// The state exactly as of this checkpoint, shared with the store's latest-state cache
    /// (read it through the `Arc`; `Arc::unwrap_or_clone(cp.state)` gives an owned copy,
    /// cloned only if the cache still holds it).
    pub state: Arc<S>,
}

/// Metadata of one retained checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// The seq.
    pub seq: u64,
    /// When it was committed (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// Bytes of its record on disk.
    pub bytes: u64,
    /// Whether the record holds the full state (a snapshot) rather than a delta.
    pub snapshot: bool,
    /// For the first checkpoint of a fork: the task and seq it was forked from.
    pub forked_from: Option<(String, u64)>,
}

/// A tool call that began and never finished: its side effects are uncertain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCall {
    /// The call id.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments recorded by `begin_call`.
    pub args: Vec<u8>,
}

/// Checkpoints of a task that recovery could not restore (salvage mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostCheckpoints {
    /// The task.
    pub task: String,
    /// Seqs whose records were corrupt or no longer chain.
    pub seqs: Vec<u64>,
}

/// What `open` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Records replayed.
    pub records: u64,
    /// Bytes of valid records scanned.
    pub bytes: u64,
    /// Segment files scanned.
    pub segments: u64,
    /// Bytes of a torn tail discarded (a crash cut the last batch).
    pub torn_bytes: u64,
    /// Corrupt ranges skipped (salvage mode only).
    pub skipped: Vec<SkippedRange>,
    /// Checkpoints lost to skipped corruption (salvage mode only).
    pub lost: Vec<LostCheckpoints>,
    /// Tasks in the store after recovery.
    pub tasks: u64,
    /// Wall time of the recovery, in milliseconds.
    pub elapsed_ms: u64,
}

/// Counters a service would export. Counts are since this handle opened; sizes are now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Checkpoints committed through this handle.
    pub commits: u64,
    /// Log records appended (checkpoints, tool calls, deletions).
    pub appends: u64,
    /// fdatasync calls.
    pub fsyncs: u64,
    /// Group-commit batches written.
    pub batches: u64,
    /// Mean records per batch (how many commits shared one fsync).
    pub mean_batch_records: f64,
    /// Bytes appended to the log.
    pub bytes_written: u64,
    /// Bytes of zeros written ahead of the log's data, so that small batches land on
    /// already-written blocks (docs/format.md §6). Also sent to the disk, on top of
    /// `bytes_written`.
    pub zero_bytes_written: u64,
    /// Bytes of zeros that end batches on a block boundary where the blocks were written
    /// before (a recycled segment file's earlier life), so that a write needs no read of
    /// an uncached block (docs/format.md §6). Handed to `write` on top of `bytes_written`;
    /// the disk writes those blocks either way.
    pub fill_bytes_written: u64,
    /// Bytes of compacted segments written by compaction passes (docs/store.md §7), on top
    /// of `bytes_written`: `(bytes_written + compaction_bytes_written) / bytes_written` is
    /// the write amplification compaction adds.
    pub compaction_bytes_written: u64,
    /// Segments this handle started (rotations), new files and recycled ones.
    pub segments_created: u64,
    /// Of [`segments_created`](Self::segments_created), those made from a retired file
    /// (docs/format.md §6): no zeros to write ahead, no extents to convert.
    pub segments_recycled: u64,
    /// Bytes of the records the index holds (checkpoints and tool calls). Checkpoints that
    /// retention no longer serves count here until a compaction pass forgets them (as in
    /// [`checkpoints`](Self::checkpoints)).
    pub live_bytes: u64,
    /// Bytes of records in the log that the index no longer holds (an estimate once
    /// compaction has run: DESIGN.md §3.1, not done yet).
    pub dead_bytes: u64,
    /// Segment files.
    pub segments: u64,
    /// Retired segment files waiting to be recycled: after a forced pass
    /// [`RECYCLE_FILES_MIN`](crate::log::RECYCLE_FILES_MIN) at most, after a background
    /// pass as many as the rotations since the pass before it
    /// ([`recycle_files_max`](crate::log::recycle_files_max); docs/format.md §6).
    pub free_segments: u64,
    /// Bytes of segment files on disk (including preallocated space), and of the retired
    /// files waiting to be recycled.
    pub disk_bytes: u64,
    /// Tasks.
    pub tasks: u64,
    /// Checkpoint records the index holds over all tasks: the retained ones, plus older
    /// ones retention no longer serves until a compaction pass forgets them (a reopened
    /// store indexes again every checkpoint the log still holds).
    pub checkpoints: u64,
    /// Compaction passes run by this handle.
    pub compactions: u64,
}

/// What a compaction pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Segments deleted.
    pub segments_deleted: u64,
    /// Records rewritten forward.
    pub records_rewritten: u64,
    /// Bytes reclaimed on disk.
    pub bytes_reclaimed: u64,
    /// Wall time in milliseconds.
    pub elapsed_ms: u64,
    /// Segment files removed (paths), oldest first.
    pub removed: Vec<PathBuf>,
}
