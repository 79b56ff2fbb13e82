//! `PgStore` as a [`TaskStore`]: the same calls as its inherent methods.

use super::PgStore;
use crate::error::Result;
use crate::state::State;
use crate::store::{Checkpoint, CheckpointInfo, PendingCall};
use crate::task_store::TaskStore;

impl<S: State> TaskStore<S> for PgStore<S> {
    fn commit(&self, task: &str, delta: &S::Delta) -> Result<u64> {
        PgStore::commit(self, task, delta)
    }
    fn commit_if(&self, task: &str, expected_seq: u64, delta: &S::Delta) -> Result<u64> {
        PgStore::commit_if(self, task, expected_seq, delta)
    }
    fn load_latest(&self, task: &str) -> Result<Option<Checkpoint<S>>> {
        PgStore::load_latest(self, task)
    }
    fn load(&self, task: &str, seq: u64) -> Result<Option<Checkpoint<S>>> {
        PgStore::load(self, task, seq)
    }
    fn load_latest_matching(
        &self,
        task: &str,
        accept: &dyn Fn(&S) -> bool,
    ) -> Result<Option<Checkpoint<S>>> {
        PgStore::load_latest_matching(self, task, accept)
    }
    fn list_checkpoints(&self, task: &str) -> Result<Vec<CheckpointInfo>> {
        PgStore::list_checkpoints(self, task)
    }
    fn latest_info(&self, task: &str) -> Result<Option<CheckpointInfo>> {
        PgStore::latest_info(self, task)
    }
    fn tasks(&self) -> Result<Vec<String>> {
        PgStore::tasks(self)
    }
    fn tasks_with_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        PgStore::tasks_with_prefix(self, prefix)
    }
    fn fork(&self, task: &str, seq: u64, new_task: &str) -> Result<u64> {
        PgStore::fork(self, task, seq, new_task)
    }
    fn delete_task(&self, task: &str) -> Result<()> {
        PgStore::delete_task(self, task)
    }
    fn begin_call(&self, task: &str, call_id: &str, tool: &str, args: &[u8]) -> Result<()> {
        PgStore::begin_call(self, task, call_id, tool, args)
    }
    fn finish_call(&self, task: &str, call_id: &str, result: &[u8]) -> Result<()> {
        PgStore::finish_call(self, task, call_id, result)
    }
    fn call_result(&self, task: &str, call_id: &str) -> Result<Option<Vec<u8>>> {
        PgStore::call_result(self, task, call_id)
    }
    fn pending_calls(&self, task: &str) -> Result<Vec<PendingCall>> {
        PgStore::pending_calls(self, task)
    }
}
