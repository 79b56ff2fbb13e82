//! `agentwal.PgStore`: the store's API on a PostgreSQL database (`agentwal::postgres`,
//! docs/postgres.md), with the same method names and meanings as `agentwal.Store` for what
//! both backends serve (the core's `TaskStore`), plus leases and `resolve`.
//!
//! Every call that talks to the server releases the GIL (the backend blocks the calling
//! thread on its own small tokio runtime, within its deadline), so Python threads' calls
//! overlap on the network as local ones do on the disk.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use agentwal::AgentState;
use agentwal::postgres::{PgOptions, Resolution as CoreResolution};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use crate::errors::raise;
use crate::ops::{self, run};
use crate::types::{Checkpoint, CheckpointInfo, PendingCall};
use crate::view::StateView;

/// The engine's PostgreSQL store of agent state.
type PgEngine = agentwal::postgres::PgStore<AgentState>;

/// A worker's lease on one task (``PgStore.acquire``): write under it with
/// ``PgStore.with_lease``. Compares equal to a lease of the same task, holder and epoch.
#[pyclass(module = "agentwal", frozen, eq)]
#[derive(PartialEq)]
pub struct Lease {
    inner: agentwal::postgres::Lease,
}

#[pymethods]
impl Lease {
    /// The task.
    #[getter]
    fn task(&self) -> &str {
        &self.inner.task
    }

    /// Who holds it (a name for people; it plays no part in fencing).
    #[getter]
    fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// The epoch: 1 for a task's first lease, one more at each acquisition after.
    #[getter]
    fn epoch(&self) -> u64 {
        self.inner.epoch
    }

    fn __repr__(&self) -> String {
        format!(
            "Lease(task={:?}, holder={:?}, epoch={})",
            self.inner.task, self.inner.holder, self.inner.epoch
        )
    }
}

/// What became of a write whose outcome was unknown (``PgStore.resolve``).
#[pyclass(module = "agentwal", frozen, get_all)]
pub struct Resolution {
    /// Whether it committed. ``False``: it did not, and now never will (safe to redo).
    pub landed: bool,
    /// For a commit or fork that landed: the checkpoint's seq; else ``None``.
    pub seq: Option<u64>,
}

#[pymethods]
impl Resolution {
    fn __repr__(&self) -> String {
        match (self.landed, self.seq) {
            (true, Some(s)) => format!("Resolution(landed=True, seq={s})"),
            (true, None) => "Resolution(landed=True, seq=None)".to_string(),
            (false, _) => "Resolution(landed=False, seq=None)".to_string(),
        }
    }
}

/// A store of agent tasks in a PostgreSQL database (``agentwal::postgres::PgStore``).
///
/// The same methods, with the same meanings, as ``agentwal.Store`` for checkpoints, loads,
/// forks, deletes and the tool-call journal; any number of handles in any number of
/// processes and hosts may use one database at once. Plus leases (``acquire``, ``renew``,
/// ``release``, ``with_lease``) and ``resolve``. See the stub (``_agentwal.pyi``).
#[pyclass(module = "agentwal", frozen)]
pub struct PgStore {
    /// The engine's handle; `None` once closed.
    engine: RwLock<Option<PgEngine>>,
    /// Calls `once` is running now (shared with the handles of `with_lease`).
    in_flight: Arc<Mutex<HashSet<(String, String)>>>,
    /// The lease this handle writes under (from `with_lease`).
    lease: Option<agentwal::postgres::Lease>,
}

impl PgStore {
    fn engine(&self, py: Python<'_>) -> PyResult<PgEngine> {
        self.engine
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| raise(py, "ClosedError", "this store handle is closed".into(), &[]))
    }
}

fn ttl(ttl_ms: u64) -> Duration {
    Duration::from_millis(ttl_ms)
}

#[pymethods]
impl PgStore {
    /// Connects to the database at ``url``, creates or migrates the schema, and returns
    /// the store. See the stub for the options.
    #[staticmethod]
    #[pyo3(signature = (url, *, schema="agentwal".to_owned(), deadline_ms=None,
        pool_idle_max=None, pool_idle_time_max_ms=None, snapshot_every=None,
        keep_checkpoints=None, max_age_ms=None),
        text_signature = "(url, *, schema='agentwal', deadline_ms=10000, pool_idle_max=32, \
            pool_idle_time_max_ms=300000, snapshot_every=None, keep_checkpoints=None, \
            max_age_ms=None)")]
    #[allow(clippy::too_many_arguments)]
    fn open(
        py: Python<'_>,
        url: String,
        schema: String,
        deadline_ms: Option<u64>,
        pool_idle_max: Option<usize>,
        pool_idle_time_max_ms: Option<u64>,
        snapshot_every: Option<u32>,
        keep_checkpoints: Option<u32>,
        max_age_ms: Option<u64>,
    ) -> PyResult<Self> {
        let d = PgOptions::default();
        let options = PgOptions {
            deadline: deadline_ms.map_or(d.deadline, Duration::from_millis),
            pool_idle_max: pool_idle_max.unwrap_or(d.pool_idle_max),
            pool_idle_time_max: pool_idle_time_max_ms
                .map_or(d.pool_idle_time_max, Duration::from_millis),
            schema,
            snapshot_every: snapshot_every.unwrap_or(d.snapshot_every),
            keep_checkpoints,
            max_age: max_age_ms.map(Duration::from_millis),
            ..d
        };
        let engine = run(py, || PgEngine::open(&url, options))?;
        Ok(PgStore {
            engine: RwLock::new(Some(engine)),
            in_flight: Arc::new(Mutex::new(HashSet::new())),
            lease: None,
        })
    }

    /// The PostgreSQL schema (namespace) holding the store's tables.
    #[getter]
    fn schema(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.engine(py)?.options().schema.clone())
    }

    /// Each call's deadline, in milliseconds.
    #[getter]
    fn deadline_ms(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.engine(py)?.options().deadline.as_millis() as u64)
    }

    /// Whether :meth:`close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.engine
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    /// Closes this handle; the connections close with the last handle sharing them (see
    /// :meth:`with_lease`). Later calls raise ``ClosedError``; closing twice is a no-op.
    fn close(&self, py: Python<'_>) {
        let engine = self
            .engine
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Dropping the last handle shuts its runtime and connections down: without the GIL.
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

    /// Appends ``delta`` to ``task`` (creating the task); returns the new checkpoint's seq.
    fn commit(&self, py: Python<'_>, task: String, delta: &Bound<'_, PyAny>) -> PyResult<u64> {
        let delta = crate::convert::to_delta(delta)?;
        let engine = self.engine(py)?;
        run(py, || engine.commit(&task, &delta))
    }

    /// Like :meth:`commit`, only if the task's latest seq is ``expected_seq``.
    fn commit_if(
        &self,
        py: Python<'_>,
        task: String,
        expected_seq: u64,
        delta: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let delta = crate::convert::to_delta(delta)?;
        let engine = self.engine(py)?;
        run(py, || engine.commit_if(&task, expected_seq, &delta))
    }

    /// The task's newest checkpoint, or ``None``.
    fn load_latest(&self, py: Python<'_>, task: String) -> PyResult<Option<Checkpoint>> {
        let engine = self.engine(py)?;
        run(py, || engine.load_latest(&task))?
            .map(|cp| ops::checkpoint(py, cp))
            .transpose()
    }

    /// The task's newest checkpoint as a `StateView`, or ``None``.
    fn load_latest_view(&self, py: Python<'_>, task: String) -> PyResult<Option<StateView>> {
        let engine = self.engine(py)?;
        Ok(run(py, || engine.load_latest(&task))?.map(StateView::new))
    }

    /// The newest checkpoint of ``view``'s task, built from ``view`` and the deltas
    /// committed after it (the same checkpoint if none was), or ``None`` if it cannot be built
    /// that way: then ``load_latest_view`` reads it.
    fn catch_up_view(&self, py: Python<'_>, view: &StateView) -> PyResult<Option<StateView>> {
        let engine = self.engine(py)?;
        let base = view.checkpoint();
        Ok(run(py, || engine.catch_up(&base))?.map(StateView::new))
    }

    /// The task's state as of checkpoint ``seq``.
    fn load(&self, py: Python<'_>, task: String, seq: u64) -> PyResult<Option<Checkpoint>> {
        let engine = self.engine(py)?;
        run(py, || engine.load(&task, seq))?
            .map(|cp| ops::checkpoint(py, cp))
            .transpose()
    }

    /// The newest retained checkpoint whose state passes ``accept``.
    fn load_latest_matching(
        &self,
        py: Python<'_>,
        task: String,
        accept: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Checkpoint>> {
        let engine = self.engine(py)?;
        ops::load_latest_matching(py, &engine, &task, accept)
    }

    /// The task's retained checkpoints, oldest first.
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

    /// Starts ``new_task`` as a copy of ``task`` at checkpoint ``seq``.
    fn fork(&self, py: Python<'_>, task: String, seq: u64, new_task: String) -> PyResult<u64> {
        let engine = self.engine(py)?;
        run(py, || engine.fork(&task, seq, &new_task))
    }

    /// Deletes the task, its checkpoints and its call journal (not its lease).
    fn delete_task(&self, py: Python<'_>, task: String) -> PyResult<()> {
        let engine = self.engine(py)?;
        run(py, || engine.delete_task(&task))
    }

    /// Records that ``call_id`` of ``tool`` with ``args`` is about to run.
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

    /// Records the result of a begun call.
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

    /// Runs a tool call at most once, across crashes (as ``Store.once``).
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

    /// Acquires ``task`` for ``ttl_ms`` milliseconds (by the server's clock) unless a live
    /// lease holds it (``LeaseHeldError``); fences every earlier lease of the task.
    fn acquire(
        &self,
        py: Python<'_>,
        task: String,
        holder: String,
        ttl_ms: u64,
    ) -> PyResult<Lease> {
        let engine = self.engine(py)?;
        run(py, || engine.acquire(&task, &holder, ttl(ttl_ms))).map(|inner| Lease { inner })
    }

    /// Extends ``lease`` to ``ttl_ms`` from now; ``FencedError`` if it was taken over.
    fn renew(&self, py: Python<'_>, lease: PyRef<'_, Lease>, ttl_ms: u64) -> PyResult<()> {
        let engine = self.engine(py)?;
        let lease = lease.inner.clone();
        run(py, || engine.renew(&lease, ttl(ttl_ms)))
    }

    /// Ends ``lease`` now; ``FencedError`` if it was already taken over.
    fn release(&self, py: Python<'_>, lease: PyRef<'_, Lease>) -> PyResult<()> {
        let engine = self.engine(py)?;
        let lease = lease.inner.clone();
        run(py, || engine.release(&lease))
    }

    /// A handle sharing this one's connections whose writes to ``lease.task`` carry the
    /// lease's epoch (``FencedError`` once it was taken over); other tasks' are unleased.
    fn with_lease(&self, py: Python<'_>, lease: PyRef<'_, Lease>) -> PyResult<PgStore> {
        let engine = self.engine(py)?.with_lease(&lease.inner);
        Ok(PgStore {
            engine: RwLock::new(Some(engine)),
            in_flight: self.in_flight.clone(),
            lease: Some(lease.inner.clone()),
        })
    }

    /// The lease this handle writes under (``None`` for a handle from :meth:`open`).
    #[getter]
    fn lease(&self) -> Option<Lease> {
        self.lease.clone().map(|inner| Lease { inner })
    }

    /// Settles a write whose outcome was unknown (``IndeterminateError.write_id``).
    fn resolve(&self, py: Python<'_>, write_id: String) -> PyResult<Resolution> {
        let engine = self.engine(py)?;
        Ok(match run(py, || engine.resolve(&write_id))? {
            CoreResolution::Landed { seq } => Resolution { landed: true, seq },
            CoreResolution::NotLanded => Resolution {
                landed: false,
                seq: None,
            },
        })
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.engine(py) {
            Ok(e) => match &self.lease {
                None => format!("agentwal.PgStore(schema={:?})", e.options().schema),
                Some(l) => format!(
                    "agentwal.PgStore(schema={:?}, lease=Lease(task={:?}, epoch={}))",
                    e.options().schema,
                    l.task,
                    l.epoch
                ),
            },
            Err(_) => "agentwal.PgStore(<closed>)".to_string(),
        }
    }
}
