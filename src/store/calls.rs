//! The tool-call journal: durable intent before a tool runs, durable result after, so a
//! restarted agent never runs a finished tool twice and knows which calls are uncertain.

use super::codec::{self, CallBeginRec, CallFinishRec, Decoded};
use super::index::CallEntry;
use super::{PendingCall, Store, TASK_ID_BYTES_MAX, now_ms, validate_id};
use crate::error::Result;
use crate::log::RecordPos;
use crate::rules::journal::{self, Known, Step};
use crate::state::State;

impl<S: State> Store<S> {
    /// Checks a `begin_call`'s arguments before it takes the task's gate.
    pub(crate) fn check_begin_call(&self, task: &str, call_id: &str, tool: &str) -> Result<()> {
        self.writable()?;
        journal::check_begin_args(task, call_id, tool)
    }

    /// Checks a `finish_call`'s arguments before it takes the task's gate: the task must
    /// exist.
    pub(crate) fn check_finish_call(&self, task: &str, call_id: &str) -> Result<()> {
        self.writable()?;
        journal::check_call_args(task, call_id)?;
        match self.inner.index.get(task) {
            Some(_) => Ok(()),
            None => Err(journal::unknown_task(task)),
        }
    }

    /// Durably records that `call_id` of `tool` with `args` is about to run (call it
    /// before the tool's side effect). Beginning the same call again with the same tool
    /// and args is a no-op (an agent resuming after a crash); with different ones, or
    /// after it finished (also once retention pruned it, see
    /// [`call_result`](Self::call_result)), it is an error.
    pub fn begin_call(&self, task: &str, call_id: &str, tool: &str, args: &[u8]) -> Result<()> {
        self.check_begin_call(task, call_id, tool)?;
        self.with_task_lock(task, |slot| {
            let step = {
                let _reading = self.inner.relocation.read();
                // Pruned calls count: their id stays taken while their records are on disk.
                let existing = slot.data.read().calls.entry(call_id).copied();
                journal::begin(task, call_id, known(existing), |begin| {
                    self.read_begin(task, call_id, begin, |b| b.tool == tool && b.args == args)
                })?
            };
            if step == Step::Repeat {
                return Ok(());
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

    /// Durably records the result of a begun call. Finishing an unknown call, or finishing
    /// again with a different result, is an error; the same result again is a no-op
    /// (an error too once retention pruned the call, see [`call_result`](Self::call_result)).
    pub fn finish_call(&self, task: &str, call_id: &str, result: &[u8]) -> Result<()> {
        self.check_finish_call(task, call_id)?;
        self.with_task_lock(task, |slot| {
            let step = {
                let _reading = self.inner.relocation.read();
                let existing = slot.data.read().calls.entry(call_id).copied();
                journal::finish(task, call_id, known(existing), result, |finish| {
                    self.read_result(task, call_id, finish)
                })?
            };
            if step == Step::Repeat {
                return Ok(());
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
    ///
    /// With retention configured (`keep_checkpoints` or `max_age`), a call that finished
    /// before its task's oldest retained checkpoint is no longer kept: from the first
    /// compaction pass after that (a pass prunes the index as it starts, as it does
    /// checkpoints), this returns `None` for it, `calls` and `task_infos` leave it out, and
    /// `begin_call` and `finish_call` of its id fail with `InvalidArgument`. Once the
    /// pass that drops its records from disk has installed (often the same one), the id
    /// is free again. A store reopened before that serves the call again until its next
    /// pass. Pending calls are kept whatever their age. docs/store.md §4.
    pub fn call_result(&self, task: &str, call_id: &str) -> Result<Option<Vec<u8>>> {
        journal::check_call_args(task, call_id)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Ok(None);
        };
        let _reading = self.inner.relocation.read();
        let finish = slot.data.read().calls.get(call_id).and_then(|c| c.finish);
        finish
            .map(|pos| self.read_result(task, call_id, pos))
            .transpose()
    }

    /// Calls of the task that began and never finished, in the order they began.
    pub fn pending_calls(&self, task: &str) -> Result<Vec<PendingCall>> {
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Ok(Vec::new());
        };
        let _reading = self.inner.relocation.read();
        let mut begins: Vec<(RecordPos, Box<str>)> = slot
            .data
            .read()
            .calls
            .iter()
            .filter(|(_, c)| c.finish.is_none())
            .map(|(id, c)| (c.begin, id.into()))
            .collect();
        begins.sort_unstable();
        begins
            .into_iter()
            .map(|(pos, call_id)| {
                self.read_begin(task, &call_id, pos, |b| PendingCall {
                    call_id: b.call_id.to_string(),
                    tool: b.tool.to_string(),
                    args: b.args.to_vec(),
                })
            })
            .collect()
    }

    /// The result in the finish record of `call_id` of `task`, indexed at `pos`.
    pub(super) fn read_result(&self, task: &str, call_id: &str, pos: RecordPos) -> Result<Vec<u8>> {
        self.read_call(task, call_id, pos, |d| match d {
            Decoded::CallFinish(f) => Some(f.result.to_vec()),
            _ => None,
        })
    }

    /// Hands the begin record of `call_id` of `task`, indexed at `pos`, to `f`.
    pub(super) fn read_begin<T>(
        &self,
        task: &str,
        call_id: &str,
        pos: RecordPos,
        f: impl FnOnce(&CallBeginRec<'_>) -> T,
    ) -> Result<T> {
        self.read_call(task, call_id, pos, |d| match d {
            Decoded::CallBegin(b) => Some(f(&b)),
            _ => None,
        })
    }

    /// Reads the record indexed at `pos` as a record of `call_id` of `task`; `f` picks
    /// what it needs, or `None` when the record is of the other kind. A record of another
    /// call, or of the wrong kind, is an error, never an answer.
    fn read_call<T>(
        &self,
        task: &str,
        call_id: &str,
        pos: RecordPos,
        f: impl FnOnce(Decoded<'_>) -> Option<T>,
    ) -> Result<T> {
        self.inner.log.read_with(pos, |rec| {
            let decoded = codec::decode(&rec)?;
            let found = match &decoded {
                Decoded::CallBegin(b) => Some((b.task, b.call_id)),
                Decoded::CallFinish(f) => Some((f.task, f.call_id)),
                _ => None,
            };
            if found != Some((task, call_id)) {
                let why = format!(
                    "index of call {call_id:?} of task {task:?} points at another record ({found:?})"
                );
                return Err(codec::decode_error(&rec, why));
            }
            f(decoded).ok_or_else(|| {
                let why = format!(
                    "index of call {call_id:?} of task {task:?} points at the wrong kind of record"
                );
                codec::decode_error(&rec, why)
            })
        })
    }
}

/// What the index knows of a call, as the journal's rules name it: the positions of its
/// begin record (pending) or finish record (finished).
pub(super) fn known(call: Option<CallEntry>) -> Known<RecordPos, RecordPos> {
    match call {
        None => Known::Unknown,
        Some(c) if c.pruned => Known::Pruned,
        Some(c) => match c.finish {
            Some(finish) => Known::Finished(finish),
            None => Known::Pending(c.begin),
        },
    }
}
