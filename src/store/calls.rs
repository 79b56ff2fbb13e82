//! The tool-call journal: durable intent before a tool runs, durable result after, so a
//! restarted agent never runs a finished tool twice and knows which calls are uncertain.

use super::codec::{self, CallBeginRec, CallFinishRec, Decoded};
use super::index::CallEntry;
use super::{
    CALL_ID_BYTES_MAX, PendingCall, Store, TASK_ID_BYTES_MAX, TOOL_NAME_BYTES_MAX, now_ms,
    validate_id,
};
use crate::error::{Error, Result};
use crate::log::RecordPos;
use crate::state::State;

impl<S: State> Store<S> {
    /// Durably records that `call_id` of `tool` with `args` is about to run (call it
    /// before the tool's side effect). Beginning the same call again with the same tool
    /// and args is a no-op (an agent resuming after a crash); with different ones, or
    /// after it finished, it is an error.
    pub fn begin_call(&self, task: &str, call_id: &str, tool: &str, args: &[u8]) -> Result<()> {
        self.writable()?;
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        validate_id("call id", call_id, CALL_ID_BYTES_MAX)?;
        validate_id("tool name", tool, TOOL_NAME_BYTES_MAX)?;
        self.with_task_lock(task, |slot| {
            {
                let _reading = self.inner.relocation.read();
                let existing = slot.data.read().calls.get(call_id).copied();
                if let Some(call) = existing {
                    return self.check_same_begin(task, call_id, tool, args, call);
                }
            }
            let rec = CallBeginRec {
                task,
                call_id,
                tool,
                created_at_ms: now_ms(),
                args,
            };
            self.append_live(codec::KIND_CALL_BEGIN, Decoded::CallBegin(rec))
        })
    }

    fn check_same_begin(
        &self,
        task: &str,
        call_id: &str,
        tool: &str,
        args: &[u8],
        call: CallEntry,
    ) -> Result<()> {
        if call.finish.is_some() {
            return Err(Error::InvalidArgument(format!(
                "call {call_id:?} of task {task:?} already finished; read it with call_result"
            )));
        }
        let same = self.read_call(call.begin, |d| match d {
            Decoded::CallBegin(b) => Ok(b.tool == tool && b.args == args),
            _ => Ok(false),
        })?;
        if same {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "call {call_id:?} of task {task:?} already began with another tool or arguments"
            )))
        }
    }

    /// Durably records the result of a begun call. Finishing an unknown call, or finishing
    /// again with a different result, is an error; the same result again is a no-op.
    pub fn finish_call(&self, task: &str, call_id: &str, result: &[u8]) -> Result<()> {
        self.writable()?;
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        validate_id("call id", call_id, CALL_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Err(Error::UnknownTask {
                task: task.to_string(),
            });
        };
        drop(slot);
        self.with_task_lock(task, |slot| {
            let finished = {
                let _reading = self.inner.relocation.read();
                let call = slot.data.read().calls.get(call_id).copied();
                let Some(call) = call else {
                    return Err(Error::InvalidArgument(format!(
                        "call {call_id:?} of task {task:?} was never begun; call begin_call first"
                    )));
                };
                call.finish.map(|done| self.read_result(done)).transpose()?
            };
            if let Some(previous) = finished {
                return match previous == result {
                    true => Ok(()),
                    false => Err(Error::InvalidArgument(format!(
                        "call {call_id:?} of task {task:?} already finished with a different result"
                    ))),
                };
            }
            let rec = CallFinishRec {
                task,
                call_id,
                created_at_ms: now_ms(),
                result,
            };
            self.append_live(codec::KIND_CALL_FINISH, Decoded::CallFinish(rec))
        })
    }

    /// The recorded result of a finished call (`None` if unknown or still pending).
    pub fn call_result(&self, task: &str, call_id: &str) -> Result<Option<Vec<u8>>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        validate_id("call id", call_id, CALL_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Ok(None);
        };
        let _reading = self.inner.relocation.read();
        let finish = slot.data.read().calls.get(call_id).and_then(|c| c.finish);
        finish.map(|pos| self.read_result(pos)).transpose()
    }

    /// Calls of the task that began and never finished, in the order they began.
    pub fn pending_calls(&self, task: &str) -> Result<Vec<PendingCall>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Ok(Vec::new());
        };
        let _reading = self.inner.relocation.read();
        let mut begins: Vec<RecordPos> = slot
            .data
            .read()
            .calls
            .values()
            .filter(|c| c.finish.is_none())
            .map(|c| c.begin)
            .collect();
        begins.sort_unstable();
        begins
            .into_iter()
            .map(|pos| {
                self.read_call(pos, |d| match d {
                    Decoded::CallBegin(b) => Ok(PendingCall {
                        call_id: b.call_id.to_string(),
                        tool: b.tool.to_string(),
                        args: b.args.to_vec(),
                    }),
                    _ => Err(Error::InvalidArgument(
                        "index points at a non-call record".into(),
                    )),
                })
            })
            .collect()
    }

    pub(super) fn read_result(&self, pos: RecordPos) -> Result<Vec<u8>> {
        self.read_call(pos, |d| match d {
            Decoded::CallFinish(f) => Ok(f.result.to_vec()),
            _ => Err(Error::InvalidArgument(
                "index points at a non-result record".into(),
            )),
        })
    }

    pub(super) fn read_call<T>(
        &self,
        pos: RecordPos,
        f: impl FnOnce(Decoded<'_>) -> Result<T>,
    ) -> Result<T> {
        let dir = self.inner.log.dir();
        self.inner
            .log
            .read_with(pos, |rec| f(codec::decode(dir, &rec)?))
    }
}
