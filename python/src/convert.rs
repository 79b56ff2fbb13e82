//! Conversions between Python data and agentwal's types: `Value`, `AgentDelta` (a dict in
//! Python), `Message`, and `AgentState` (a dict of plain data).
//!
//! Python to Rust never panics on user input: a value of an unsupported type is a
//! `TypeError` naming where it was (`delta["set"]["x"][2]`), a malformed delta (an unknown
//! key, an unknown role) an `InvalidArgumentError`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use agentwal::{AgentDelta, AgentState, Message, Role, ToolCall, Value};
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};

use crate::errors::invalid_argument;

/// Deepest nesting of lists and dicts accepted in a value (a guard against runaway
/// recursion: a list that contains itself, say).
pub const DEPTH_MAX: usize = 200;

/// One step of the path to a value inside a delta, for error messages.
enum Seg<'py> {
    /// A dict key (a Python object, formatted with `repr` only on error).
    Key(Bound<'py, PyAny>),
    /// A key known in Rust (`"set"`, `"messages"`, ...).
    Name(&'static str),
    /// A list index.
    Index(usize),
}

/// Where in the argument a conversion is, for error messages.
pub struct Path<'py> {
    root: &'static str,
    segs: Vec<Seg<'py>>,
}

impl<'py> Path<'py> {
    /// A path at the root of the argument named `root` (`"delta"`, `"value"`).
    pub fn new(root: &'static str) -> Self {
        Path {
            root,
            segs: Vec::new(),
        }
    }

    fn render(&self) -> String {
        let mut s = self.root.to_string();
        for seg in &self.segs {
            match seg {
                Seg::Key(k) => {
                    let r = k.repr().map_or_else(|_| "?".to_string(), |r| r.to_string());
                    let _ = write!(s, "[{r}]");
                }
                Seg::Name(n) => {
                    let _ = write!(s, "[{n:?}]");
                }
                Seg::Index(i) => {
                    let _ = write!(s, "[{i}]");
                }
            }
        }
        s
    }

    fn type_error(&self, what: impl std::fmt::Display) -> PyErr {
        PyTypeError::new_err(format!("{}: {what}", self.render()))
    }

    fn invalid(&self, py: Python<'py>, what: impl std::fmt::Display) -> PyErr {
        invalid_argument(py, format!("{}: {what}", self.render()))
    }

    fn with<T>(&mut self, seg: Seg<'py>, f: impl FnOnce(&mut Self) -> PyResult<T>) -> PyResult<T> {
        self.segs.push(seg);
        let r = f(self);
        self.segs.pop();
        r
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .fully_qualified_name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}

/// Converts a Python value to a [`Value`]: None, bool, int (64-bit signed), float, str,
/// bytes (or bytearray), list (or tuple), dict with str keys. Anything else is a
/// `TypeError`; an int out of range an `OverflowError`.
pub fn to_value<'py>(obj: &Bound<'py, PyAny>, path: &mut Path<'py>) -> PyResult<Value> {
    to_value_at(obj, path, 0)
}

fn to_value_at<'py>(
    obj: &Bound<'py, PyAny>,
    path: &mut Path<'py>,
    depth: usize,
) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        return match obj.extract::<i64>() {
            Ok(i) => Ok(Value::Int(i)),
            Err(_) => Err(PyOverflowError::new_err(format!(
                "{}: int {} does not fit in a 64-bit signed integer",
                path.render(),
                obj.repr()
                    .map_or_else(|_| "?".to_string(), |r| r.to_string())
            ))),
        };
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::Str(s.to_cow()?.into_owned()));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Value::Bytes(b.as_bytes().to_vec()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Value::Bytes(b.to_vec()));
    }
    let nested = obj.is_instance_of::<PyList>()
        || obj.is_instance_of::<PyTuple>()
        || obj.is_instance_of::<PyDict>();
    if nested && depth >= DEPTH_MAX {
        return Err(path.invalid(
            obj.py(),
            format!("nested deeper than {DEPTH_MAX} levels (does a list or dict contain itself?)"),
        ));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        let mut out = Vec::with_capacity(l.len());
        for (i, item) in l.iter().enumerate() {
            out.push(path.with(Seg::Index(i), |p| to_value_at(&item, p, depth + 1))?);
        }
        return Ok(Value::List(out));
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        let mut out = Vec::with_capacity(t.len());
        for (i, item) in t.iter().enumerate() {
            out.push(path.with(Seg::Index(i), |p| to_value_at(&item, p, depth + 1))?);
        }
        return Ok(Value::List(out));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        return Ok(Value::Map(to_map_at(d, path, depth + 1)?));
    }
    Err(path.type_error(format!(
        "unsupported type {}; agentwal values are None, bool, int, float, str, bytes, \
         list (or tuple) and dict with str keys",
        type_name(obj)
    )))
}

fn to_map_at<'py>(
    d: &Bound<'py, PyDict>,
    path: &mut Path<'py>,
    depth: usize,
) -> PyResult<BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    for (k, v) in d.iter() {
        let Ok(key) = k.cast::<PyString>() else {
            return Err(path.type_error(format!(
                "dict key {} is a {}; agentwal maps have str keys",
                k.repr().map_or_else(|_| "?".to_string(), |r| r.to_string()),
                type_name(&k)
            )));
        };
        let key = key.to_cow()?.into_owned();
        let value = path.with(Seg::Key(k.clone()), |p| to_value_at(&v, p, depth))?;
        out.insert(key, value);
    }
    Ok(out)
}

/// Converts a dict with str keys to a map of [`Value`]s.
fn to_map<'py>(obj: &Bound<'py, PyAny>, path: &mut Path<'py>) -> PyResult<BTreeMap<String, Value>> {
    let d = obj
        .cast::<PyDict>()
        .map_err(|_| path.type_error(format!("expected a dict, got {}", type_name(obj))))?;
    to_map_at(d, path, 1)
}

fn to_string<'py>(obj: &Bound<'py, PyAny>, path: &Path<'py>) -> PyResult<String> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| path.type_error(format!("expected a str, got {}", type_name(obj))))?;
    Ok(s.to_cow()?.into_owned())
}

fn to_list<'py>(obj: &Bound<'py, PyAny>, path: &Path<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(l) = obj.cast::<PyList>() {
        return Ok(l.iter().collect());
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return Ok(t.iter().collect());
    }
    Err(path.type_error(format!("expected a list, got {}", type_name(obj))))
}

/// Iterates a dict that must have only the given str keys, calling `f` for each.
fn for_fields<'py>(
    obj: &Bound<'py, PyAny>,
    path: &mut Path<'py>,
    what: &str,
    keys: &[&'static str],
    mut f: impl FnMut(&'static str, &Bound<'py, PyAny>, &mut Path<'py>) -> PyResult<()>,
) -> PyResult<()> {
    let d = obj.cast::<PyDict>().map_err(|_| {
        path.type_error(format!("expected a dict ({what}), got {}", type_name(obj)))
    })?;
    for (k, v) in d.iter() {
        let name = k
            .cast::<PyString>()
            .ok()
            .and_then(|s| s.to_cow().ok().map(|c| c.into_owned()));
        let Some(key) = name.and_then(|n| keys.iter().find(|k| **k == n).copied()) else {
            return Err(path.invalid(
                obj.py(),
                format!(
                    "unknown key {} in {what}; the keys are {}",
                    k.repr().map_or_else(|_| "?".to_string(), |r| r.to_string()),
                    keys.join(", ")
                ),
            ));
        };
        path.with(Seg::Name(key), |p| f(key, &v, p))?;
    }
    Ok(())
}

fn to_role<'py>(obj: &Bound<'py, PyAny>, path: &Path<'py>) -> PyResult<Role> {
    let s = to_string(obj, path)?;
    match s.as_str() {
        "system" => Ok(Role::System),
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        "tool" => Ok(Role::Tool),
        other => Err(path.invalid(
            obj.py(),
            format!("unknown role {other:?}; the roles are system, user, assistant, tool"),
        )),
    }
}

fn to_tool_call<'py>(obj: &Bound<'py, PyAny>, path: &mut Path<'py>) -> PyResult<ToolCall> {
    let mut call = ToolCall::default();
    for_fields(
        obj,
        path,
        "a tool call",
        &["id", "name", "args"],
        |key, v, p| {
            match key {
                "id" => call.id = to_string(v, p)?,
                "name" => call.name = to_string(v, p)?,
                _ => call.args = to_value(v, p)?,
            }
            Ok(())
        },
    )?;
    Ok(call)
}

/// Converts a message dict (`role`, `content`, `tool_calls`, `tool_call_id`, `data`; every
/// key optional, as in `Message::default()`: role "user", empty content) to a [`Message`].
pub fn to_message<'py>(obj: &Bound<'py, PyAny>, path: &mut Path<'py>) -> PyResult<Message> {
    let mut m = Message::default();
    for_fields(
        obj,
        path,
        "a message",
        &["role", "content", "tool_calls", "tool_call_id", "data"],
        |key, v, p| {
            match key {
                "role" => m.role = to_role(v, p)?,
                "content" => m.content = to_string(v, p)?,
                "tool_calls" => {
                    for (i, c) in to_list(v, p)?.iter().enumerate() {
                        let call = p.with(Seg::Index(i), |p| to_tool_call(c, p))?;
                        m.tool_calls.push(call);
                    }
                }
                "tool_call_id" => {
                    m.tool_call_id = if v.is_none() {
                        None
                    } else {
                        Some(to_string(v, p)?)
                    }
                }
                _ => {
                    m.data = if v.is_none() {
                        None
                    } else {
                        Some(to_value(v, p)?)
                    }
                }
            }
            Ok(())
        },
    )?;
    Ok(m)
}

/// Converts a delta dict (`messages`, `set`, `unset`, `metadata`; every key optional) to an
/// [`AgentDelta`].
pub fn to_delta(obj: &Bound<'_, PyAny>) -> PyResult<AgentDelta> {
    let mut path = Path::new("delta");
    let mut delta = AgentDelta::default();
    for_fields(
        obj,
        &mut path,
        "a delta",
        &["messages", "set", "unset", "metadata"],
        |key, v, p| {
            match key {
                "messages" => {
                    for (i, m) in to_list(v, p)?.iter().enumerate() {
                        let msg = p.with(Seg::Index(i), |p| to_message(m, p))?;
                        delta.messages.push(msg);
                    }
                }
                "set" => delta.set = to_map(v, p)?,
                "unset" => {
                    for (i, k) in to_list(v, p)?.iter().enumerate() {
                        let key = p.with(Seg::Index(i), |p| to_string(k, p))?;
                        delta.unset.push(key);
                    }
                }
                _ => delta.metadata = to_map(v, p)?,
            }
            Ok(())
        },
    )?;
    Ok(delta)
}

/// Converts a [`Value`] to plain Python data (maps become dicts, in key order).
pub fn from_value<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::Float(f) => PyFloat::new(py, *f).into_any(),
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::Bytes(b) => PyBytes::new(py, b).into_any(),
        Value::List(l) => {
            let out = PyList::empty(py);
            for item in l {
                out.append(from_value(py, item)?)?;
            }
            out.into_any()
        }
        Value::Map(m) => from_map(py, m)?.into_any(),
    })
}

fn from_map<'py>(py: Python<'py>, m: &BTreeMap<String, Value>) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (k, v) in m {
        out.set_item(k, from_value(py, v)?)?;
    }
    Ok(out)
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// Converts a [`Message`] to a dict with all five keys (the shape of `agentwal show
/// --json`, with bytes as `bytes`).
pub fn from_message<'py>(py: Python<'py>, m: &Message) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("role", role_name(m.role))?;
    out.set_item("content", &m.content)?;
    let calls = PyList::empty(py);
    for c in &m.tool_calls {
        let call = PyDict::new(py);
        call.set_item("id", &c.id)?;
        call.set_item("name", &c.name)?;
        call.set_item("args", from_value(py, &c.args)?)?;
        calls.append(call)?;
    }
    out.set_item("tool_calls", calls)?;
    out.set_item("tool_call_id", m.tool_call_id.as_deref())?;
    match &m.data {
        Some(d) => out.set_item("data", from_value(py, d)?)?,
        None => out.set_item("data", py.None())?,
    }
    Ok(out)
}

/// Converts an [`AgentState`] to `{"messages": [...], "vars": {...}, "metadata": {...}}`.
pub fn from_state<'py>(py: Python<'py>, s: &AgentState) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let messages = PyList::empty(py);
    for m in &s.messages {
        messages.append(from_message(py, m)?)?;
    }
    out.set_item("messages", messages)?;
    out.set_item("vars", from_map(py, &s.vars)?)?;
    out.set_item("metadata", from_map(py, &s.metadata)?)?;
    Ok(out)
}

/// Converts a Python value to a [`Value`] and back: what a commit would store. For the
/// tests of the conversions, and for callers who want to check a value before committing.
#[pyfunction]
pub fn round_trip<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let v = to_value(value, &mut Path::new("value"))?;
    from_value(value.py(), &v)
}
