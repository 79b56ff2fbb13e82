//! The plain result types: read-only Python objects mirroring agentwal's structs.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A path as Python gets it: text (lossy where the name is not UTF-8).
pub(crate) fn path(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A task's state as of one checkpoint. `state` is plain data:
/// ``{"messages": [message dicts], "vars": {...}, "metadata": {...}}``.
#[pyclass(module = "agentwal", frozen, get_all)]
pub struct Checkpoint {
    /// The task id.
    pub task: String,
    /// The checkpoint's seq (1, 2, 3, ... per task).
    pub seq: u64,
    /// When it was committed (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// The state as of this checkpoint (a new dict on every load: yours to change).
    pub state: Py<PyAny>,
}

#[pymethods]
impl Checkpoint {
    fn __repr__(&self) -> String {
        format!(
            "Checkpoint(task={:?}, seq={}, created_at_ms={})",
            self.task, self.seq, self.created_at_ms
        )
    }
}

/// Metadata of one retained checkpoint.
#[pyclass(module = "agentwal", frozen, get_all)]
pub struct CheckpointInfo {
    /// The seq.
    pub seq: u64,
    /// When it was committed (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// Bytes of its record on disk.
    pub bytes: u64,
    /// Whether the record holds the full state (a snapshot) rather than a delta.
    pub snapshot: bool,
    /// For the first checkpoint of a fork: `(task, seq)` it was forked from.
    pub forked_from: Option<(String, u64)>,
}

impl From<agentwal::CheckpointInfo> for CheckpointInfo {
    fn from(c: agentwal::CheckpointInfo) -> Self {
        CheckpointInfo {
            seq: c.seq,
            created_at_ms: c.created_at_ms,
            bytes: c.bytes,
            snapshot: c.snapshot,
            forked_from: c.forked_from,
        }
    }
}

/// A tool call that began and never finished: its side effect is uncertain.
#[pyclass(module = "agentwal", frozen)]
pub struct PendingCall {
    /// The call id.
    #[pyo3(get)]
    pub call_id: String,
    /// The tool's name.
    #[pyo3(get)]
    pub tool: String,
    /// The arguments recorded by `begin_call`.
    pub args: Vec<u8>,
}

#[pymethods]
impl PendingCall {
    /// The arguments recorded by `begin_call`, as bytes.
    #[getter]
    fn args<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.args)
    }

    fn __repr__(&self) -> String {
        format!(
            "PendingCall(call_id={:?}, tool={:?}, args={} bytes)",
            self.call_id,
            self.tool,
            self.args.len()
        )
    }
}

impl From<agentwal::PendingCall> for PendingCall {
    fn from(c: agentwal::PendingCall) -> Self {
        PendingCall {
            call_id: c.call_id,
            tool: c.tool,
            args: c.args,
        }
    }
}

/// A corrupt range that salvage recovery skipped.
#[pyclass(module = "agentwal", frozen, get_all)]
pub struct SkippedRange {
    /// The segment file.
    pub segment: String,
    /// First byte skipped.
    pub offset: u64,
    /// Bytes skipped.
    pub bytes: u64,
    /// Why the first record there was rejected.
    pub reason: String,
}

/// Checkpoints of a task that salvage recovery could not restore.
#[pyclass(module = "agentwal", frozen, get_all)]
pub struct LostCheckpoints {
    /// The task.
    pub task: String,
    /// Seqs whose records were corrupt or no longer chain.
    pub seqs: Vec<u64>,
}

/// What `open` found.
#[pyclass(module = "agentwal", frozen, get_all)]
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
    pub skipped: Vec<Py<SkippedRange>>,
    /// Checkpoints lost to skipped corruption (salvage mode only).
    pub lost: Vec<Py<LostCheckpoints>>,
    /// Tasks in the store after recovery.
    pub tasks: u64,
    /// Wall time of the recovery, in milliseconds.
    pub elapsed_ms: u64,
}

impl RecoveryReport {
    /// Converts the engine's report.
    pub fn new(py: Python<'_>, r: agentwal::RecoveryReport) -> PyResult<Self> {
        let skipped = r
            .skipped
            .into_iter()
            .map(|s| {
                Py::new(
                    py,
                    SkippedRange {
                        segment: path(&s.segment),
                        offset: s.offset,
                        bytes: s.bytes,
                        reason: s.reason.to_string(),
                    },
                )
            })
            .collect::<PyResult<_>>()?;
        let lost = r
            .lost
            .into_iter()
            .map(|l| {
                Py::new(
                    py,
                    LostCheckpoints {
                        task: l.task,
                        seqs: l.seqs,
                    },
                )
            })
            .collect::<PyResult<_>>()?;
        Ok(RecoveryReport {
            records: r.records,
            bytes: r.bytes,
            segments: r.segments,
            torn_bytes: r.torn_bytes,
            skipped,
            lost,
            tasks: r.tasks,
            elapsed_ms: r.elapsed_ms,
        })
    }
}

#[pymethods]
impl RecoveryReport {
    fn __repr__(&self) -> String {
        format!(
            "RecoveryReport(records={}, bytes={}, segments={}, torn_bytes={}, skipped={}, lost={}, tasks={}, elapsed_ms={})",
            self.records,
            self.bytes,
            self.segments,
            self.torn_bytes,
            self.skipped.len(),
            self.lost.len(),
            self.tasks,
            self.elapsed_ms
        )
    }
}

/// Counters a service would export. Counts are since this handle opened; sizes are now.
#[pyclass(module = "agentwal", frozen, get_all)]
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
    /// Bytes of zeros written ahead of the log's data (docs/format.md §6).
    pub zero_bytes_written: u64,
    /// Bytes of zeros ending batches on a block boundary in a recycled segment file
    /// (docs/format.md §6).
    pub fill_bytes_written: u64,
    /// Bytes of the records the index holds (checkpoints and tool calls).
    pub live_bytes: u64,
    /// Bytes of records in the log that the index no longer holds (an estimate once
    /// compaction has run).
    pub dead_bytes: u64,
    /// Segment files.
    pub segments: u64,
    /// Bytes of segment files on disk (including preallocated space).
    pub disk_bytes: u64,
    /// Tasks.
    pub tasks: u64,
    /// Checkpoint records the index holds over all tasks.
    pub checkpoints: u64,
    /// Compaction passes run by this handle.
    pub compactions: u64,
}

impl From<agentwal::Stats> for Stats {
    fn from(s: agentwal::Stats) -> Self {
        Stats {
            commits: s.commits,
            appends: s.appends,
            fsyncs: s.fsyncs,
            batches: s.batches,
            mean_batch_records: s.mean_batch_records,
            bytes_written: s.bytes_written,
            zero_bytes_written: s.zero_bytes_written,
            fill_bytes_written: s.fill_bytes_written,
            live_bytes: s.live_bytes,
            dead_bytes: s.dead_bytes,
            segments: s.segments,
            disk_bytes: s.disk_bytes,
            tasks: s.tasks,
            checkpoints: s.checkpoints,
            compactions: s.compactions,
        }
    }
}

/// What a compaction pass did.
#[pyclass(module = "agentwal", frozen, get_all)]
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
    pub removed: Vec<String>,
}

impl From<agentwal::CompactionReport> for CompactionReport {
    fn from(r: agentwal::CompactionReport) -> Self {
        CompactionReport {
            segments_deleted: r.segments_deleted,
            records_rewritten: r.records_rewritten,
            bytes_reclaimed: r.bytes_reclaimed,
            elapsed_ms: r.elapsed_ms,
            removed: r.removed.iter().map(|p| path(p)).collect(),
        }
    }
}

/// What `verify` checked (it raises instead of returning on any damage).
#[pyclass(module = "agentwal", frozen, get_all)]
pub struct VerifyReport {
    /// Tasks checked.
    pub tasks: u64,
    /// Checkpoint records checked.
    pub checkpoints: u64,
    /// Tool calls checked.
    pub calls: u64,
    /// Checkpoint bodies that decoded as the agent state (or its delta).
    pub bodies_decoded: u64,
}

impl From<agentwal::VerifyReport> for VerifyReport {
    fn from(r: agentwal::VerifyReport) -> Self {
        VerifyReport {
            tasks: r.tasks,
            checkpoints: r.checkpoints,
            calls: r.calls,
            bodies_decoded: r.bodies_decoded,
        }
    }
}

/// `__repr__` as `Name(field=value, ...)`, each value in its `Debug` form.
macro_rules! repr {
    ($t:ident { $($f:ident),* }) => {
        #[pymethods]
        impl $t {
            fn __repr__(&self) -> String {
                let fields: Vec<String> = vec![$(format!(concat!(stringify!($f), "={:?}"), self.$f)),*];
                format!(concat!(stringify!($t), "({})"), fields.join(", "))
            }
        }
    };
}
#[pymethods]
impl CheckpointInfo {
    fn __repr__(&self) -> String {
        let forked_from = match &self.forked_from {
            Some((task, seq)) => format!("({task:?}, {seq})"),
            None => "None".to_string(),
        };
        format!(
            "CheckpointInfo(seq={}, created_at_ms={}, bytes={}, snapshot={}, forked_from={forked_from})",
            self.seq,
            self.created_at_ms,
            self.bytes,
            if self.snapshot { "True" } else { "False" }
        )
    }
}
repr!(SkippedRange {
    segment,
    offset,
    bytes,
    reason
});
repr!(LostCheckpoints { task, seqs });
repr!(Stats {
    commits,
    appends,
    fsyncs,
    batches,
    mean_batch_records,
    bytes_written,
    zero_bytes_written,
    fill_bytes_written,
    live_bytes,
    dead_bytes,
    segments,
    disk_bytes,
    tasks,
    checkpoints,
    compactions
});
repr!(CompactionReport {
    segments_deleted,
    records_rewritten,
    bytes_reclaimed,
    elapsed_ms,
    removed
});
repr!(VerifyReport {
    tasks,
    checkpoints,
    calls,
    bodies_decoded
});
