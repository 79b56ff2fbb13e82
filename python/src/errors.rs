//! `agentwal::Error` to Python exceptions: the classes live in `agentwal._errors` (pure
//! Python, so that `InvalidArgumentError` can also be a `ValueError` and `IoError` an
//! `OSError`); each error's fields become attributes of the exception.

use agentwal::{Error, NotAStoreReason};
use pyo3::BoundObject;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::types::path;

/// The module defining the exception classes.
const ERRORS_MODULE: &str = "agentwal._errors";

/// Builds an exception of class `class` (from `agentwal._errors`) with `message` and the
/// keyword attributes in `attrs`. If the class cannot be had (the module was not
/// importable), the import's error is returned instead: still an exception, never a panic.
pub fn raise(
    py: Python<'_>,
    class: &str,
    message: String,
    attrs: &[(&str, Bound<'_, PyAny>)],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import(ERRORS_MODULE)?.getattr(class)?;
        let kwargs = PyDict::new(py);
        for (k, v) in attrs {
            kwargs.set_item(k, v)?;
        }
        let exc = cls.call((message.clone(),), Some(&kwargs))?;
        Ok(PyErr::from_value(exc))
    };
    match build() {
        Ok(e) => e,
        // Not reachable from the package (it imports `_errors` first): the import's error.
        Err(import) => import,
    }
}

/// A `CorruptionError` naming where the damage is: both damaged framing (`Corruption`) and
/// a payload whose checksum holds but which does not decode (`Decode`) raise it.
fn corruption(
    py: Python<'_>,
    message: String,
    segment: &std::path::Path,
    offset: u64,
    reason: String,
) -> PyErr {
    raise(
        py,
        "CorruptionError",
        message,
        &[
            ("segment", obj(py, path(segment))),
            ("offset", obj(py, offset)),
            ("reason", obj(py, reason)),
        ],
    )
}

/// An `InvalidArgumentError` with `message`.
pub fn invalid_argument(py: Python<'_>, message: String) -> PyErr {
    raise(py, "InvalidArgumentError", message, &[])
}

fn obj<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> Bound<'py, PyAny> {
    match v.into_pyobject(py) {
        Ok(o) => o.into_any().into_bound(),
        // Strings, ints and paths do not fail to convert; None keeps the error an error.
        Err(_) => py.None().into_bound(py),
    }
}

/// Maps an engine error to its exception class, with its fields as attributes.
pub fn to_py_err(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    match e {
        Error::Io { context, source } => {
            let cls = py.import(ERRORS_MODULE).and_then(|m| m.getattr("IoError"));
            let build = cls.and_then(|cls| {
                let kwargs = PyDict::new(py);
                kwargs.set_item("errno", source.raw_os_error())?;
                kwargs.set_item("context", context)?;
                cls.call((message.clone(),), Some(&kwargs))
            });
            match build {
                Ok(exc) => PyErr::from_value(exc),
                Err(err) => err,
            }
        }
        Error::Corruption {
            segment,
            offset,
            reason,
        } => corruption(py, message, &segment, offset, reason.to_string()),
        Error::Decode {
            segment,
            offset,
            reason,
        } => corruption(py, message, &segment, offset, reason),
        Error::Locked { dir } => raise(py, "LockedError", message, &[("dir", obj(py, path(&dir)))]),
        Error::ReadOnly => raise(py, "ReadOnlyError", message, &[]),
        Error::StoreChanged { dir } => raise(
            py,
            "StoreChangedError",
            message,
            &[("dir", obj(py, path(&dir)))],
        ),
        Error::NotAStore { dir, reason } => {
            let reason = match reason {
                NotAStoreReason::NotADirectory => "not a directory".to_string(),
                NotAStoreReason::NoSegments => "no segment files".to_string(),
                other => other.to_string(),
            };
            raise(
                py,
                "NotAStoreError",
                message,
                &[("dir", obj(py, path(&dir))), ("reason", obj(py, reason))],
            )
        }
        Error::UnsupportedFormat {
            segment,
            found,
            supported,
        } => raise(
            py,
            "UnsupportedFormatError",
            message,
            &[
                ("segment", obj(py, path(&segment))),
                ("found", obj(py, found)),
                ("supported", obj(py, supported)),
            ],
        ),
        Error::Poisoned { cause } => {
            raise(py, "PoisonedError", message, &[("cause", obj(py, cause))])
        }
        Error::RecordTooLarge {
            payload_bytes,
            limit_bytes,
        } => raise(
            py,
            "RecordTooLargeError",
            message,
            &[
                ("payload_bytes", obj(py, payload_bytes)),
                ("limit_bytes", obj(py, limit_bytes)),
            ],
        ),
        Error::Conflict {
            task,
            expected,
            actual,
        } => raise(
            py,
            "ConflictError",
            message,
            &[
                ("task", obj(py, task)),
                ("expected", obj(py, expected)),
                ("actual", obj(py, actual)),
            ],
        ),
        Error::TaskExists { task } => {
            raise(py, "TaskExistsError", message, &[("task", obj(py, task))])
        }
        Error::UnknownTask { task } => {
            raise(py, "UnknownTaskError", message, &[("task", obj(py, task))])
        }
        Error::UnknownSeq { task, seq, latest } => raise(
            py,
            "UnknownSeqError",
            message,
            &[
                ("task", obj(py, task)),
                ("seq", obj(py, seq)),
                ("latest", obj(py, latest)),
            ],
        ),
        Error::InvalidArgument(_) => raise(py, "InvalidArgumentError", message, &[]),
        Error::SchemaMismatch { found, expected } => raise(
            py,
            "SchemaMismatchError",
            message,
            &[("found", obj(py, found)), ("expected", obj(py, expected))],
        ),
        Error::BodyDecode {
            location,
            task,
            seq,
            schema_version,
            reason,
        } => raise(
            py,
            "BodyDecodeError",
            message,
            &[
                ("segment", obj(py, body_segment(&location))),
                ("offset", obj(py, body_offset(&location))),
                ("task", obj(py, task)),
                ("seq", obj(py, seq)),
                ("schema_version", obj(py, schema_version)),
                ("reason", obj(py, reason)),
            ],
        ),
        Error::Postgres {
            context,
            message: detail,
        } => raise(
            py,
            "PostgresError",
            message,
            &[("context", obj(py, context)), ("detail", obj(py, detail))],
        ),
        Error::Indeterminate {
            task,
            write_id,
            cause,
        } => raise(
            py,
            "IndeterminateError",
            message,
            &[
                ("task", obj(py, task)),
                ("write_id", obj(py, write_id)),
                ("cause", obj(py, cause)),
            ],
        ),
        Error::Fenced {
            task,
            epoch,
            current_epoch,
        } => raise(
            py,
            "FencedError",
            message,
            &[
                ("task", obj(py, task)),
                ("epoch", obj(py, epoch)),
                ("current_epoch", obj(py, current_epoch)),
            ],
        ),
        Error::LeaseHeld {
            task,
            holder,
            epoch,
            expires_in_ms,
        } => raise(
            py,
            "LeaseHeldError",
            message,
            &[
                ("task", obj(py, task)),
                ("holder", obj(py, holder)),
                ("epoch", obj(py, epoch)),
                ("expires_in_ms", obj(py, expires_in_ms)),
            ],
        ),
        // `Error` is non-exhaustive: a variant added later is still an AgentwalError.
        _ => raise(py, "AgentwalError", message, &[]),
    }
}

/// The segment file of a body stored in the log (`None` on PostgreSQL).
fn body_segment(location: &agentwal::BodyLocation) -> Option<String> {
    match location {
        agentwal::BodyLocation::Log { segment, .. } => Some(path(segment)),
        _ => None,
    }
}

/// The record offset of a body stored in the log (`None` on PostgreSQL).
fn body_offset(location: &agentwal::BodyLocation) -> Option<u64> {
    match location {
        agentwal::BodyLocation::Log { offset, .. } => Some(*offset),
        _ => None,
    }
}
