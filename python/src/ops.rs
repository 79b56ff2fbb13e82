//! What `agentwal.Store` and `agentwal.PgStore` do alike, written once over the core's
//! `TaskStore` trait: the conversions of results, `load_latest_matching` (the predicate is
//! Python, so it runs here with the GIL held, between loads made without it) and `once`.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use agentwal::{AgentState, TaskStore};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use crate::errors::{raise, to_py_err};
use crate::types::{Checkpoint, PendingCall};

/// Either backend, as the shared code sees it.
pub type Dyn = dyn TaskStore<AgentState>;

/// Runs `f` with the GIL released and maps its error to the matching exception.
pub fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> agentwal::Result<T> + Send) -> PyResult<T> {
    py.detach(f).map_err(|e| to_py_err(py, e))
}

/// The Python object of a loaded checkpoint.
pub fn checkpoint(py: Python<'_>, cp: agentwal::Checkpoint<AgentState>) -> PyResult<Checkpoint> {
    Ok(Checkpoint {
        task: cp.task,
        seq: cp.seq,
        created_at_ms: cp.created_at_ms,
        state: crate::convert::from_state(py, &cp.state)?
            .into_any()
            .unbind(),
    })
}

/// The newest retained checkpoint whose state passes `accept` (called with the GIL held;
/// its exceptions propagate). Each load runs without the GIL.
pub fn load_latest_matching(
    py: Python<'_>,
    engine: &Dyn,
    task: &str,
    accept: &Bound<'_, PyAny>,
) -> PyResult<Option<Checkpoint>> {
    let infos = run(py, || engine.list_checkpoints(task))?;
    for info in infos.iter().rev() {
        let Some(cp) = run(py, || engine.load(task, info.seq))? else {
            continue;
        };
        let cp = checkpoint(py, cp)?;
        if accept.call1((cp.state.clone_ref(py),))?.is_truthy()? {
            return Ok(Some(cp));
        }
    }
    Ok(None)
}

/// Removes a `(task, call_id)` from the in-flight set of `once` when dropped.
struct InFlight<'a> {
    set: &'a Mutex<HashSet<(String, String)>>,
    key: Option<(String, String)>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.set
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key);
        }
    }
}

/// `Store.once` / `PgStore.once`: runs a tool call at most once, across crashes (see the
/// stub). `in_flight` is the handle's set of calls running now.
#[allow(clippy::too_many_arguments)]
pub fn once<'py>(
    py: Python<'py>,
    engine: &Dyn,
    in_flight: &Mutex<HashSet<(String, String)>>,
    task: String,
    call_id: String,
    tool: String,
    args: PyBackedBytes,
    r#fn: &Bound<'py, PyAny>,
    retry_pending: bool,
    reconcile: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let pending_error = |tool: &str, args: &[u8], in_flight: bool| {
        let how = if in_flight {
            "is running on another thread of this process"
        } else {
            "began and never finished (a crash or an exception came between begin and finish), \
             so whether its side effect happened is unknown; pass reconcile= (a callable that \
             checks the effect and returns its result, or None if it did not happen), or \
             check it yourself, then pass retry_pending=True or call finish_call"
        };
        Ok::<_, PyErr>(raise(
            py,
            "PendingCallError",
            format!("call {call_id:?} of task {task:?} {how}"),
            &[
                ("task", task.clone().into_pyobject(py)?.into_any()),
                ("call_id", call_id.clone().into_pyobject(py)?.into_any()),
                ("tool", tool.into_pyobject(py)?.into_any()),
                ("call_args", PyBytes::new(py, args).into_any()),
                (
                    "in_flight",
                    pyo3::types::PyBool::new(py, in_flight)
                        .to_owned()
                        .into_any(),
                ),
            ],
        ))
    };
    let key = (task.clone(), call_id.clone());
    let _guard = {
        let mut set = in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        if !set.insert(key.clone()) {
            drop(set);
            return Err(pending_error(&tool, &args, true)?);
        }
        InFlight {
            set: in_flight,
            key: Some(key),
        }
    };
    if let Some(r) = run(py, || engine.call_result(&task, &call_id))? {
        return Ok(PyBytes::new(py, &r));
    }
    if !retry_pending {
        let pending = run(py, || engine.pending_calls(&task))?;
        if let Some(p) = pending.into_iter().find(|p| p.call_id == call_id) {
            let Some(reconcile) = reconcile else {
                return Err(pending_error(&p.tool, &p.args, false)?);
            };
            // The effect's own record (an idempotency key it was sent with) settles it:
            // bytes, it happened and that is its result; None, it did not and runs now.
            let settled = reconcile.call1((PendingCall::from(p),))?;
            if !settled.is_none() {
                let result: PyBackedBytes = settled.extract().map_err(|_| {
                    pyo3::exceptions::PyTypeError::new_err(format!(
                        "once: reconcile returned {}, expected bytes or None (the call stays \
                         pending)",
                        type_name(&settled)
                    ))
                })?;
                run(py, || engine.finish_call(&task, &call_id, &result))?;
                return Ok(PyBytes::new(py, &result));
            }
        }
    }
    run(py, || engine.begin_call(&task, &call_id, &tool, &args))?;
    let out = r#fn.call0()?;
    let result: PyBackedBytes = out.extract().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "once: fn returned {}, expected bytes (the call stays pending)",
            type_name(&out)
        ))
    })?;
    run(py, || engine.finish_call(&task, &call_id, &result))?;
    Ok(PyBytes::new(py, &result))
}

/// The name of `value`'s type, for an error message.
fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}
