//! Deleting a task.

use super::*;

impl<S: State> Store<S> {
    /// Deletes a task durably: its checkpoints and tool calls are gone when this returns;
    /// compaction reclaims their space.
    pub fn delete_task(&self, task: &str) -> Result<()> {
        self.writable()?;
        validate_id("task id", task, TASK_ID_BYTES_MAX)?;
        let Some(slot) = self.inner.index.get(task) else {
            return Err(Error::UnknownTask {
                task: task.to_string(),
            });
        };
        let _gate = self.inner.gates.lock(&slot);
        if slot.data.read().deleted {
            return Err(Error::UnknownTask {
                task: task.to_string(),
            });
        }
        let rec = DeleteRec {
            task,
            created_at_ms: now_ms(),
        };
        self.cache.remove(task);
        self.append_live(codec::KIND_DELETE, codec::Decoded::Delete(rec))
    }
}
