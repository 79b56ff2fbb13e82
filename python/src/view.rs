//! `agentwal.StateView`: a task's latest state kept in Rust, its variables converted to
//! Python one query at a time. A state that holds a long history (the LangGraph saver's
//! tasks keep every checkpoint, blob and write) costs a reader only what it asks for, where
//! `Checkpoint.state` converts every variable and message.

use std::ops::Bound as Edge;
use std::sync::Arc;

use agentwal::{AgentState, Value};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyString, PyTuple};

use crate::convert::{from_state, from_value};
use crate::list_chain;

/// A loaded checkpoint whose state stays in the engine's memory (shared with its cache,
/// not copied) until a variable is asked for.
#[pyclass(module = "agentwal", frozen)]
pub struct StateView {
    /// The task id.
    #[pyo3(get)]
    pub task: String,
    /// The checkpoint's seq.
    #[pyo3(get)]
    pub seq: u64,
    /// When it was committed (ms since the Unix epoch).
    #[pyo3(get)]
    pub created_at_ms: u64,
    state: Arc<AgentState>,
}

impl StateView {
    /// The view of a loaded checkpoint.
    pub fn new(cp: agentwal::Checkpoint<AgentState>) -> Self {
        StateView {
            task: cp.task,
            seq: cp.seq,
            created_at_ms: cp.created_at_ms,
            state: cp.state,
        }
    }

    /// The checkpoint this view shows (its state shared, not copied).
    pub fn checkpoint(&self) -> agentwal::Checkpoint<AgentState> {
        agentwal::Checkpoint {
            task: self.task.clone(),
            seq: self.seq,
            created_at_ms: self.created_at_ms,
            state: Arc::clone(&self.state),
        }
    }

    /// The variables whose key starts with `prefix`, in key order.
    fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a String, &'a Value)> {
        self.state
            .vars
            .range::<str, _>((Edge::Included(prefix), Edge::Unbounded))
            .take_while(move |(k, _)| k.starts_with(prefix))
    }
}

#[pymethods]
impl StateView {
    /// The variable ``key`` as plain Python data (a new object per call); ``None`` if absent.
    fn var<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.state
            .vars
            .get(key)
            .map(|v| from_value(py, v))
            .transpose()
    }

    /// The keys of the variables starting with ``prefix`` (all by default), sorted.
    #[pyo3(signature = (prefix = ""))]
    fn var_keys(&self, prefix: &str) -> Vec<String> {
        self.with_prefix(prefix).map(|(k, _)| k.clone()).collect()
    }

    /// The greatest key starting with ``prefix`` (of all keys by default); ``None`` if no
    /// key does. One lookup, whatever the number of keys under the prefix.
    #[pyo3(signature = (prefix = ""))]
    fn last_key(&self, prefix: &str) -> Option<String> {
        let end = prefix_end(prefix);
        let upper = end.as_deref().map_or(Edge::Unbounded, Edge::Excluded);
        self.state
            .vars
            .range::<str, _>((Edge::Included(prefix), upper))
            .next_back()
            .map(|(k, _)| k.clone())
    }

    /// The variables whose key starts with ``prefix`` (all by default), as a new dict.
    #[pyo3(signature = (prefix = ""))]
    fn vars<'py>(&self, py: Python<'py>, prefix: &str) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (k, v) in self.with_prefix(prefix) {
            out.set_item(k, from_value(py, v)?)?;
        }
        Ok(out)
    }

    /// The items of the LangGraph saver's list blob ``(channel, version)`` (``version``
    /// a ``str`` or ``int``), following its chain of bases, oldest first, as a tuple of
    /// ``(type, bytes)`` tuples; ``None`` if the chain cannot be resolved here (a blob
    /// absent or of another form than ``[marker, base, items]``, another version type, a
    /// loop): the saver then walks it in Python.
    fn list_items<'py>(
        &self,
        py: Python<'py>,
        channel: &str,
        version: &Bound<'py, PyAny>,
        marker: &str,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let text;
        let version = if version.is_exact_instance_of::<PyString>() {
            text = version.extract::<String>()?;
            list_chain::Version::Str(&text)
        } else if let Some(n) = version
            .is_exact_instance_of::<PyInt>()
            .then(|| version.extract::<i64>().ok())
            .flatten()
        {
            list_chain::Version::Int(n)
        } else {
            return Ok(None);
        };
        let Some(items) = list_chain::items(&self.state.vars, channel, version, marker) else {
            return Ok(None);
        };
        let items = items
            .into_iter()
            .map(|(t, b)| {
                PyTuple::new(
                    py,
                    [
                        t.into_pyobject(py)?.into_any(),
                        PyBytes::new(py, b).into_any(),
                    ],
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Some(PyTuple::new(py, items)?))
    }

    /// The whole state, as ``Checkpoint.state`` has it (a new dict).
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        from_state(py, &self.state)
    }

    fn __contains__(&self, key: &str) -> bool {
        self.state.vars.contains_key(key)
    }

    fn __len__(&self) -> usize {
        self.state.vars.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "StateView(task={:?}, seq={}, created_at_ms={}, vars={})",
            self.task,
            self.seq,
            self.created_at_ms,
            self.state.vars.len()
        )
    }
}

/// The least string above every string that starts with `prefix`: `prefix` with its last
/// character that can be raised raised by one, and what follows it dropped; `None` if
/// there is no such string (empty prefix, or only `char::MAX`s), i.e. no upper bound.
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(c) = chars.pop() {
        // Raising past the surrogate gap: the next scalar value after U+D7FF is U+E000.
        let next = match c as u32 {
            0xD7FF => Some('\u{E000}'),
            n => char::from_u32(n + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}
