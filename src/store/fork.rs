//! Fork: a new task that starts from another task's state at a seq.

use super::*;

impl<S: State> Store<S> {
    /// Starts `new_task` from `task`'s state at `seq` (its checkpoint 1 is a snapshot of
    /// that state, which remembers where it came from). Later commits to either task do
    /// not affect the other. Returns the new task's seq (1).
    pub fn fork(&self, task: &str, seq: u64, new_task: &str) -> Result<u64> {
        self.writable()?;
        validate_id("task id", new_task, TASK_ID_BYTES_MAX)?;
        let Some(source) = self.load(task, seq)? else {
            let exists = self.inner.index.get(task).is_some();
            return Err(crate::rules::journal::fork_source_gone(task, seq, exists));
        };
        let body = self.stored_snapshot(codec::encode(&*source.state)?);
        self.with_task_lock(new_task, |slot| {
            if slot.data.read().latest_seq() != 0 {
                return Err(Error::TaskExists {
                    task: new_task.to_string(),
                });
            }
            self.append_live(
                codec::KIND_CHECKPOINT,
                codec::Decoded::Checkpoint(CheckpointRec {
                    task: new_task,
                    seq: 1,
                    created_at_ms: now_ms(),
                    schema_version: S::VERSION,
                    body_kind: body.kind,
                    origin: Some(Origin { task, seq }),
                    body: &body.bytes,
                }),
            )?;
            Ok(1)
        })
    }
}
