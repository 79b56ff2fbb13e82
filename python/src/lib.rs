//! Python bindings of agentwal: `agentwal.Store` over `Store<AgentState>`.
//!
//! Every call that touches the disk releases the GIL (`Python::detach`) for the engine's
//! work, so Python threads committing to different tasks share fsyncs through group
//! commit. Conversions to and from Python data happen with the GIL held, before and after.
//! Errors are the exceptions of `agentwal._errors` (see `errors`); nothing here unwraps
//! user input, so no panic crosses into Python.

mod convert;
mod errors;
mod list_chain;
mod ops;
mod pg;
mod types;
mod view;

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Duration;

use agentwal::{AgentState, Options, RecoveryMode, SyncMode};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use crate::errors::{invalid_argument, raise};
use crate::ops::run;
use crate::types::{
    Checkpoint, CheckpointInfo, CompactionReport, LostCheckpoints, PendingCall, RecoveryReport,
    SkippedRange, Stats, VerifyReport,
};
use crate::view::StateView;

/// The engine's store of agent state.
type Engine = agentwal::Store<AgentState>;

/// Default interval of `sync="periodic"`, in milliseconds.
const PERIODIC_MS_DEFAULT: u64 = 100;

/// Options given to `open` / `open_read_only`, resolved against `Options::default()`.
#[allow(clippy::too_many_arguments)]
fn options(
    py: Python<'_>,
    sync: &str,
    periodic_ms: Option<u64>,
    segment_bytes: Option<u64>,
    keep_checkpoints: Option<u32>,
    max_age_s: Option<f64>,
    recovery: &str,
    cache_bytes: Option<u64>,
    snapshot_every: Option<u32>,
    auto_compact: bool,
) -> PyResult<Options> {
    let d = Options::default();
    let sync = match sync {
        "always" => SyncMode::Always,
        "periodic" => SyncMode::Periodic(Duration::from_millis(
            periodic_ms.unwrap_or(PERIODIC_MS_DEFAULT),
        )),
        "never" => SyncMode::Never,
        other => {
            return Err(invalid_argument(
                py,
                format!("sync={other:?}; expected \"always\", \"periodic\" or \"never\""),
            ));
        }
    };
    if periodic_ms.is_some() && !matches!(sync, SyncMode::Periodic(_)) {
        return Err(invalid_argument(
            py,
            "periodic_ms is only meaningful with sync=\"periodic\"".to_string(),
        ));
    }
    if periodic_ms == Some(0) {
        return Err(invalid_argument(
            py,
            "periodic_ms must be at least 1".to_string(),
        ));
    }
    let recovery = match recovery {
        "tolerate_torn_tail" => RecoveryMode::TolerateTornTail,
        "strict" => RecoveryMode::Strict,
        "salvage" => RecoveryMode::Salvage,
        other => {
            return Err(invalid_argument(
                py,
                format!(
                    "recovery={other:?}; expected \"tolerate_torn_tail\", \"strict\" or \"salvage\""
                ),
            ));
        }
    };
    let max_age = match max_age_s {
        None => None,
        Some(s) => Some(Duration::try_from_secs_f64(s).map_err(|_| {
            invalid_argument(
                py,
                format!("max_age_s={s}: expected a finite number of seconds >= 0"),
            )
        })?),
    };
    Ok(Options {
        sync,
        segment_bytes: segment_bytes.unwrap_or(d.segment_bytes),
        snapshot_every: snapshot_every.unwrap_or(d.snapshot_every),
        cache_bytes: cache_bytes.unwrap_or(d.cache_bytes),
        keep_checkpoints,
        max_age,
        recovery,
        auto_compact,
        compression: d.compression,
    })
}

/// A PostgreSQL URL given as a local store's path: an `InvalidArgumentError` naming
/// `PgStore.open`, rather than a directory called `postgresql:`.
fn reject_url(py: Python<'_>, path: &std::path::Path) -> PyResult<()> {
    let p = path.to_string_lossy();
    if p.starts_with("postgres://") || p.starts_with("postgresql://") {
        return Err(invalid_argument(
            py,
            format!(
                "{p:?} is a PostgreSQL URL, not a directory: open it with agentwal.PgStore.open"
            ),
        ));
    }
    Ok(())
}

/// A store of agent tasks and their checkpoints (``agentwal::Store<AgentState>``).
///
/// Open it with :meth:`Store.open` (one writer per store: it takes the store's lock) or
/// :meth:`Store.open_read_only` (any number, also while a writer runs). A handle is safe to
/// share between threads; the GIL is released while it reads, writes and fsyncs, so
/// threads committing to different tasks share fsyncs (group commit). Close it with
/// :meth:`close` or a ``with`` block to release the lock before the handle is collected.
#[pyclass(module = "agentwal", frozen)]
struct Store {
    /// The engine's handle; `None` once closed.
    engine: RwLock<Option<Engine>>,
    /// Calls `once` is running now, so that two threads never run one call together.
    in_flight: Mutex<HashSet<(String, String)>>,
}

impl Store {
    fn new(engine: Engine) -> Self {
        Store {
            engine: RwLock::new(Some(engine)),
            in_flight: Mutex::new(HashSet::new()),
        }
    }

    /// A clone of the engine's handle (cheap: shared), or `ClosedError`.
    fn engine(&self, py: Python<'_>) -> PyResult<Engine> {
        self.engine
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| raise(py, "ClosedError", "this store handle is closed".into(), &[]))
    }
}

#[pymethods]
impl Store {
    /// Opens the store in ``path``, creating it if needed, and recovers every durable
    /// commit. See the stub (``_agentwal.pyi``) for the options.
    #[staticmethod]
    #[pyo3(signature = (path, *, sync="always".to_owned(), periodic_ms=None, segment_bytes=None,
        keep_checkpoints=None, max_age_s=None, recovery="tolerate_torn_tail".to_owned(),
        cache_bytes=None, snapshot_every=None, auto_compact=true),
        text_signature = "(path, *, sync='always', periodic_ms=None, segment_bytes=None, \
            keep_checkpoints=None, max_age_s=None, recovery='tolerate_torn_tail', \
            cache_bytes=None, snapshot_every=None, auto_compact=True)")]
    #[allow(clippy::too_many_arguments)]
    fn open(
        py: Python<'_>,
        path: std::path::PathBuf,
        sync: String,
        periodic_ms: Option<u64>,
        segment_bytes: Option<u64>,
        keep_checkpoints: Option<u32>,
        max_age_s: Option<f64>,
        recovery: String,
        cache_bytes: Option<u64>,
        snapshot_every: Option<u32>,
        auto_compact: bool,
    ) -> PyResult<Self> {
        let opts = options(
            py,
            &sync,
            periodic_ms,
            segment_bytes,
            keep_checkpoints,
            max_age_s,
            &recovery,
            cache_bytes,
            snapshot_every,
            auto_compact,
        )?;
        reject_url(py, &path)?;
        run(py, || Engine::open_with(&path, opts)).map(Store::new)
    }

    /// Opens the store in ``path`` read-only: no lock taken, nothing written; it sees what
    /// was durable when it opened. Writes raise ``ReadOnlyError``.
    #[staticmethod]
    #[pyo3(signature = (path, *, recovery="tolerate_torn_tail".to_owned(), keep_checkpoints=None,
        max_age_s=None, cache_bytes=None),
        text_signature = "(path, *, recovery='tolerate_torn_tail', keep_checkpoints=None, \
            max_age_s=None, cache_bytes=None)")]
    fn open_read_only(
        py: Python<'_>,
        path: std::path::PathBuf,
        recovery: String,
        keep_checkpoints: Option<u32>,
        max_age_s: Option<f64>,
        cache_bytes: Option<u64>,
    ) -> PyResult<Self> {
        let opts = options(
            py,
            "always",
            None,
            None,
            keep_checkpoints,
            max_age_s,
            &recovery,
            cache_bytes,
            None,
            false,
        )?;
        reject_url(py, &path)?;
        run(py, || Engine::open_read_only_with(&path, opts)).map(Store::new)
    }

    /// The store's directory.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<std::path::PathBuf> {
        Ok(self.engine(py)?.dir().to_path_buf())
    }

    /// Whether :meth:`close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.engine
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    /// Closes this handle: the store's lock is released once calls running on other
    /// threads return. Later calls raise ``ClosedError``; closing twice is a no-op.
    fn close(&self, py: Python<'_>) {
        let engine = self
            .engine
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Dropping the last handle joins the background compactor: without the GIL.
        py.detach(move || drop(engine));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    /// Appends ``delta`` to ``task`` (creating the task) and returns the new checkpoint's
    /// seq; durable on return with ``sync="always"``.
    fn commit(&self, py: Python<'_>, task: String, delta: &Bound<'_, PyAny>) -> PyResult<u64> {
        let delta = convert::to_delta(delta)?;
        let engine = self.engine(py)?;
        // The converted delta is ours alone: the store's cache takes it over.
        run(py, || engine.commit_owned(&task, None, delta))
    }

    /// Like :meth:`commit`, only if the task's latest seq is ``expected_seq`` (0: the task
    /// does not exist yet); else ``ConflictError``.
    fn commit_if(
        &self,
        py: Python<'_>,
        task: String,
        expected_seq: u64,
        delta: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let delta = convert::to_delta(delta)?;
        let engine = self.engine(py)?;
        run(py, || engine.commit_owned(&task, Some(expected_seq), delta))
    }

    /// The task's newest checkpoint, or ``None`` if the task has none.
    fn load_latest(&self, py: Python<'_>, task: String) -> PyResult<Option<Checkpoint>> {
        let engine = self.engine(py)?;
        run(py, || engine.load_latest(&task))?
            .map(|cp| ops::checkpoint(py, cp))
            .transpose()
    }

    /// The task's newest checkpoint as a :class:`StateView` (variables converted on
    /// demand), or ``None`` if the task has none.
    fn load_latest_view(&self, py: Python<'_>, task: String) -> PyResult<Option<StateView>> {
        let engine = self.engine(py)?;
        Ok(run(py, || engine.load_latest(&task))?.map(StateView::new))
    }

    /// The task's state exactly as of checkpoint ``seq``; ``None`` if the task does not
    /// exist or retention dropped that checkpoint. Seq 0 or beyond the latest raises
    /// ``UnknownSeqError``.
    fn load(&self, py: Python<'_>, task: String, seq: u64) -> PyResult<Option<Checkpoint>> {
        let engine = self.engine(py)?;
        run(py, || engine.load(&task, seq))?
            .map(|cp| ops::checkpoint(py, cp))
            .transpose()
    }

    /// The newest retained checkpoint whose state passes ``accept(state) -> bool`` (falls
    /// back past unhealthy ones); ``None`` if none does. ``accept`` runs with the GIL held
    /// and its exceptions propagate.
    fn load_latest_matching(
        &self,
        py: Python<'_>,
        task: String,
        accept: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Checkpoint>> {
        let engine = self.engine(py)?;
        ops::load_latest_matching(py, &engine, &task, accept)
    }

    /// The task's retained checkpoints, oldest first (empty for an unknown task).
    fn list_checkpoints(&self, py: Python<'_>, task: String) -> PyResult<Vec<CheckpointInfo>> {
        let engine = self.engine(py)?;
        let infos = run(py, || engine.list_checkpoints(&task))?;
        Ok(infos.into_iter().map(CheckpointInfo::from).collect())
    }

    /// The newest checkpoint's info, without its state (see the stub).
    fn latest_info(&self, py: Python<'_>, task: String) -> PyResult<Option<CheckpointInfo>> {
        let engine = self.engine(py)?;
        Ok(run(py, || engine.latest_info(&task))?.map(CheckpointInfo::from))
    }

    /// Ids of the store's tasks, sorted.
    fn tasks(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let engine = self.engine(py)?;
        run(py, || engine.tasks())
    }

    /// Ids of the tasks whose id starts with ``prefix``, sorted (every task for ``""``).
    fn tasks_with_prefix(&self, py: Python<'_>, prefix: String) -> PyResult<Vec<String>> {
        let engine = self.engine(py)?;
        run(py, || engine.tasks_with_prefix(&prefix))
    }

    /// Starts task ``new_task`` as a copy of ``task`` at checkpoint ``seq`` and returns
    /// the new task's seq (1). ``TaskExistsError`` if ``new_task`` exists.
    fn fork(&self, py: Python<'_>, task: String, seq: u64, new_task: String) -> PyResult<u64> {
        let engine = self.engine(py)?;
        run(py, || engine.fork(&task, seq, &new_task))
    }

    /// Deletes the task, its checkpoints and its call journal (space is reclaimed by
    /// compaction). ``UnknownTaskError`` if there is no such task.
    fn delete_task(&self, py: Python<'_>, task: String) -> PyResult<()> {
        let engine = self.engine(py)?;
        run(py, || engine.delete_task(&task))
    }

    /// Durably records that ``call_id`` of ``tool`` with ``args`` is about to run: call it
    /// before the tool's side effect. Beginning it again with the same tool and args is a
    /// no-op; with other ones, or after it finished, ``InvalidArgumentError``.
    fn begin_call(
        &self,
        py: Python<'_>,
        task: String,
        call_id: String,
        tool: String,
        args: PyBackedBytes,
    ) -> PyResult<()> {
        let engine = self.engine(py)?;
        run(py, || engine.begin_call(&task, &call_id, &tool, &args))
    }

    /// Durably records the result of a begun call (after its side effect).
    fn finish_call(
        &self,
        py: Python<'_>,
        task: String,
        call_id: String,
        result: PyBackedBytes,
    ) -> PyResult<()> {
        let engine = self.engine(py)?;
        run(py, || engine.finish_call(&task, &call_id, &result))
    }

    /// The recorded result of a finished call; ``None`` if unknown or still pending.
    fn call_result<'py>(
        &self,
        py: Python<'py>,
        task: String,
        call_id: String,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let engine = self.engine(py)?;
        let r = run(py, || engine.call_result(&task, &call_id))?;
        Ok(r.map(|b| PyBytes::new(py, &b)))
    }

    /// Calls of the task that began and never finished, in the order they began.
    fn pending_calls(&self, py: Python<'_>, task: String) -> PyResult<Vec<PendingCall>> {
        let engine = self.engine(py)?;
        let calls = run(py, || engine.pending_calls(&task))?;
        Ok(calls.into_iter().map(PendingCall::from).collect())
    }

    /// Runs a tool call at most once, across crashes: returns the recorded result if
    /// ``call_id`` finished; raises ``PendingCallError`` if it began and never finished
    /// (its side effect's outcome is unknown) unless ``retry_pending``, or unless
    /// ``reconcile(pending_call)`` settles it (bytes: it happened, that is its result,
    /// recorded and returned; None: it did not, and runs now); else records the
    /// begin, runs ``fn()`` (GIL held; it must return bytes), records its result and
    /// returns it. If ``fn`` raises, the call stays pending and the exception propagates.
    #[pyo3(signature = (task, call_id, tool, args, r#fn, *, retry_pending=false, reconcile=None))]
    #[allow(clippy::too_many_arguments)]
    fn once<'py>(
        &self,
        py: Python<'py>,
        task: String,
        call_id: String,
        tool: String,
        args: PyBackedBytes,
        r#fn: &Bound<'py, PyAny>,
        retry_pending: bool,
        reconcile: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let engine = self.engine(py)?;
        ops::once(
            py,
            &engine,
            &self.in_flight,
            task,
            call_id,
            tool,
            args,
            r#fn,
            retry_pending,
            reconcile,
        )
    }

    /// Runs a compaction pass now (retention, deleted tasks, dead segments).
    fn compact(&self, py: Python<'_>) -> PyResult<CompactionReport> {
        let engine = self.engine(py)?;
        run(py, || engine.compact()).map(CompactionReport::from)
    }

    /// Makes everything committed so far durable (needed only with ``sync="periodic"``
    /// or ``"never"``).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let engine = self.engine(py)?;
        run(py, || engine.flush())
    }

    /// Counters of this handle (commits, fsyncs, group-commit batches, sizes).
    fn stats(&self, py: Python<'_>) -> PyResult<Stats> {
        let engine = self.engine(py)?;
        Ok(Stats::from(py.detach(|| engine.stats())))
    }

    /// What ``open`` found: records replayed, torn bytes discarded, corruption skipped.
    fn recovery_report(&self, py: Python<'_>) -> PyResult<RecoveryReport> {
        let engine = self.engine(py)?;
        RecoveryReport::new(py, engine.recovery_report())
    }

    /// Re-reads and checks every record and decodes every checkpoint body; raises
    /// ``CorruptionError`` (or another error) on the first problem.
    fn verify(&self, py: Python<'_>) -> PyResult<VerifyReport> {
        let engine = self.engine(py)?;
        run(py, || engine.verify()).map(VerifyReport::from)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.engine(py) {
            Ok(e) => format!("agentwal.Store({:?})", e.dir().display().to_string()),
            Err(_) => "agentwal.Store(<closed>)".to_string(),
        }
    }
}

/// The native part of the `agentwal` package (import `agentwal`, not this module).
#[pymodule]
fn _agentwal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Store>()?;
    m.add_class::<pg::PgStore>()?;
    m.add_class::<pg::Lease>()?;
    m.add_class::<pg::Resolution>()?;
    m.add_class::<Checkpoint>()?;
    m.add_class::<StateView>()?;
    m.add_class::<CheckpointInfo>()?;
    m.add_class::<PendingCall>()?;
    m.add_class::<RecoveryReport>()?;
    m.add_class::<SkippedRange>()?;
    m.add_class::<LostCheckpoints>()?;
    m.add_class::<Stats>()?;
    m.add_class::<CompactionReport>()?;
    m.add_class::<VerifyReport>()?;
    m.add_function(wrap_pyfunction!(convert::round_trip, m)?)?;
    m.add("TASK_ID_BYTES_MAX", agentwal::TASK_ID_BYTES_MAX)?;
    m.add("CALL_ID_BYTES_MAX", agentwal::CALL_ID_BYTES_MAX)?;
    m.add("TOOL_NAME_BYTES_MAX", agentwal::TOOL_NAME_BYTES_MAX)?;
    Ok(())
}
