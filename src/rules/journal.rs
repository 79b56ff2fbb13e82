//! Argument checks, the errors writes share, and the tool-call journal's state machine
//! (docs/store.md §4): what beginning or finishing a call again means, given what the
//! backend knows of it, and the errors (and their messages) both backends return.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::store::{CALL_ID_BYTES_MAX, TASK_ID_BYTES_MAX, TOOL_NAME_BYTES_MAX};

/// Milliseconds since the Unix epoch by this machine's clock (0 if it is set before it):
/// the time every checkpoint and call is stamped with.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Checks an id (`what` names it in the error): not empty, at most `max_bytes` long.
pub(crate) fn validate_id(what: &str, id: &str, max_bytes: usize) -> Result<()> {
    if id.is_empty() {
        return Err(Error::InvalidArgument(format!("{what} is empty")));
    }
    if id.len() > max_bytes {
        return Err(Error::InvalidArgument(format!(
            "{what} is {} bytes; the limit is {max_bytes}",
            id.len()
        )));
    }
    Ok(())
}

/// Checks the ids of a `begin_call`.
pub(crate) fn check_begin_args(task: &str, call_id: &str, tool: &str) -> Result<()> {
    validate_id("task id", task, TASK_ID_BYTES_MAX)?;
    validate_id("call id", call_id, CALL_ID_BYTES_MAX)?;
    validate_id("tool name", tool, TOOL_NAME_BYTES_MAX)
}

/// Checks the ids of a `finish_call` (or of a read of one call).
pub(crate) fn check_call_args(task: &str, call_id: &str) -> Result<()> {
    validate_id("task id", task, TASK_ID_BYTES_MAX)?;
    validate_id("call id", call_id, CALL_ID_BYTES_MAX)
}

/// What a backend knows of a call when it is begun or finished: `P` and `F` are how it
/// finds the recorded begin of a pending call and the recorded finish of a finished one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known<P, F> {
    /// Never begun (or its id is free again).
    Unknown,
    /// Finished before the task's oldest retained checkpoint: its result is no longer
    /// kept, and its id stays taken while its records are.
    Pruned,
    /// Begun and not finished.
    Pending(P),
    /// Finished.
    Finished(F),
}

/// What a write of the journal does once the rules allow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Step {
    /// Record it.
    Write,
    /// It repeats what is recorded: a no-op (an agent resuming after a crash).
    Repeat,
}

/// The rule for `begin_call` of a call in state `known`. `same_begin` tells whether the
/// recorded begin has the same tool and arguments; it is asked only of a pending call
/// (a backend may have to read it first).
pub(crate) fn begin<P, F>(
    task: &str,
    call_id: &str,
    known: Known<P, F>,
    same_begin: impl FnOnce(P) -> Result<bool>,
) -> Result<Step> {
    match known {
        Known::Unknown => Ok(Step::Write),
        Known::Pruned => Err(pruned(task, call_id)),
        Known::Finished(_) => Err(Error::InvalidArgument(format!(
            "call {call_id:?} of task {task:?} already finished; read it with call_result"
        ))),
        Known::Pending(begun) => match same_begin(begun)? {
            true => Ok(Step::Repeat),
            false => Err(Error::InvalidArgument(format!(
                "call {call_id:?} of task {task:?} already began with another tool or arguments"
            ))),
        },
    }
}

/// The rule for `finish_call` with `result` of a call in state `known`. `recorded` reads
/// the recorded result; it is asked only of a finished call.
pub(crate) fn finish<P, F, R: AsRef<[u8]>>(
    task: &str,
    call_id: &str,
    known: Known<P, F>,
    result: &[u8],
    recorded: impl FnOnce(F) -> Result<R>,
) -> Result<Step> {
    match known {
        Known::Unknown => Err(never_begun(task, call_id)),
        // Its result is not read again: its records may be gone already.
        Known::Pruned => Err(pruned(task, call_id)),
        Known::Pending(_) => Ok(Step::Write),
        Known::Finished(finished) => match recorded(finished)?.as_ref() == result {
            true => Ok(Step::Repeat),
            false => Err(Error::InvalidArgument(format!(
                "call {call_id:?} of task {task:?} already finished with a different result"
            ))),
        },
    }
}

/// The error for finishing a call that was never begun.
pub(crate) fn never_begun(task: &str, call_id: &str) -> Error {
    Error::InvalidArgument(format!(
        "call {call_id:?} of task {task:?} was never begun; call begin_call first"
    ))
}

/// The error for beginning or finishing again a call retention no longer keeps.
fn pruned(task: &str, call_id: &str) -> Error {
    Error::InvalidArgument(format!(
        "call {call_id:?} of task {task:?} finished before the task's oldest retained \
         checkpoint and its result is no longer kept; a new call needs a new id"
    ))
}

/// The error for a write that needs the task to exist (a `finish_call`, a delete).
pub(crate) fn unknown_task(task: &str) -> Error {
    Error::UnknownTask {
        task: task.to_string(),
    }
}

/// The error for forking from checkpoint `seq` of `task` when it cannot be loaded:
/// `exists` tells whether the task does (then retention dropped that checkpoint).
pub(crate) fn fork_source_gone(task: &str, seq: u64, exists: bool) -> Error {
    match exists {
        false => unknown_task(task),
        true => Error::InvalidArgument(format!(
            "checkpoint {seq} of task {task:?} is no longer retained"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type K = Known<(), ()>;

    fn unread<T>(_: ()) -> Result<T> {
        panic!("the recorded call is not read in this state")
    }

    #[test]
    fn begin_reads_the_recorded_call_only_when_pending() {
        assert_eq!(begin("t", "c", K::Unknown, unread).unwrap(), Step::Write);
        assert!(begin("t", "c", K::Finished(()), unread).is_err());
        assert!(begin("t", "c", K::Pruned, unread).is_err());
        let same = begin("t", "c", K::Pending(()), |()| Ok(true));
        assert_eq!(same.unwrap(), Step::Repeat);
        assert!(begin("t", "c", K::Pending(()), |()| Ok(false)).is_err());
    }

    #[test]
    fn finish_reads_the_recorded_result_only_when_finished() {
        let write = finish("t", "c", K::Pending(()), b"r", unread::<Vec<u8>>);
        assert_eq!(write.unwrap(), Step::Write);
        assert!(finish("t", "c", K::Unknown, b"r", unread::<Vec<u8>>).is_err());
        assert!(finish("t", "c", K::Pruned, b"r", unread::<Vec<u8>>).is_err());
        let same = finish("t", "c", K::Finished(()), b"r", |()| Ok(b"r".to_vec()));
        assert_eq!(same.unwrap(), Step::Repeat);
        assert!(finish("t", "c", K::Finished(()), b"r", |()| Ok(b"x".to_vec())).is_err());
    }
}
