//! [`TaskStore`]: the store API written once, served by the local [`Store`] and, with the
//! `postgres` feature, by `PgStore` (docs/postgres.md). Application code, tests and tools
//! written against this trait run on either backend unchanged.

use crate::error::Result;
use crate::state::State;
use crate::store::{Checkpoint, CheckpointInfo, PendingCall, Store};

/// The operations every backend serves with the same meaning: checkpoints, loads, fork,
/// delete and the tool-call journal. Each method's contract is the one documented on the
/// [`Store`] method of the same name; a backend adds only its own errors (for PostgreSQL:
/// `Error::Postgres`, `Error::Indeterminate`, `Error::Fenced`).
///
/// Narrow on purpose: what only one backend has (the local store's `flush`, `compact`,
/// read-only opens and recovery report; PostgreSQL's leases and `resolve`) stays on that
/// backend's type.
///
/// ```
/// use agentwal::{AgentDelta, AgentState, Message, Store, TaskStore};
/// fn one_step(store: &impl TaskStore<AgentState>, task: &str) -> agentwal::Result<u64> {
///     store.commit(task, &AgentDelta::default().message(Message::user("hi")))
/// }
/// # let dir = tempfile::tempdir().unwrap();
/// let store: Store = Store::open(dir.path())?;
/// assert_eq!(one_step(&store, "t")?, 1);
/// # Ok::<(), agentwal::Error>(())
/// ```
pub trait TaskStore<S: State>: Send + Sync {
    /// See [`Store::commit`].
    fn commit(&self, task: &str, delta: &S::Delta) -> Result<u64>;
    /// See [`Store::commit_if`].
    fn commit_if(&self, task: &str, expected_seq: u64, delta: &S::Delta) -> Result<u64>;
    /// See [`Store::load_latest`].
    fn load_latest(&self, task: &str) -> Result<Option<Checkpoint<S>>>;
    /// See [`Store::load`].
    fn load(&self, task: &str, seq: u64) -> Result<Option<Checkpoint<S>>>;
    /// See [`Store::load_latest_matching`].
    fn load_latest_matching(
        &self,
        task: &str,
        accept: &dyn Fn(&S) -> bool,
    ) -> Result<Option<Checkpoint<S>>>;
    /// See [`Store::list_checkpoints`].
    fn list_checkpoints(&self, task: &str) -> Result<Vec<CheckpointInfo>>;
    /// See [`Store::latest_info`].
    fn latest_info(&self, task: &str) -> Result<Option<CheckpointInfo>>;
    /// See [`Store::tasks`].
    fn tasks(&self) -> Result<Vec<String>>;
    /// See [`Store::tasks_with_prefix`]. By default [`tasks`](Self::tasks) filtered; the
    /// crate's stores answer it themselves (PostgreSQL: a range of the key).
    fn tasks_with_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        let mut ids = self.tasks()?;
        ids.retain(|id| id.starts_with(prefix));
        Ok(ids)
    }
    /// See [`Store::fork`].
    fn fork(&self, task: &str, seq: u64, new_task: &str) -> Result<u64>;
    /// See [`Store::delete_task`].
    fn delete_task(&self, task: &str) -> Result<()>;
    /// See [`Store::begin_call`].
    fn begin_call(&self, task: &str, call_id: &str, tool: &str, args: &[u8]) -> Result<()>;
    /// See [`Store::finish_call`].
    fn finish_call(&self, task: &str, call_id: &str, result: &[u8]) -> Result<()>;
    /// See [`Store::call_result`].
    fn call_result(&self, task: &str, call_id: &str) -> Result<Option<Vec<u8>>>;
    /// See [`Store::pending_calls`].
    fn pending_calls(&self, task: &str) -> Result<Vec<PendingCall>>;
}

impl<S: State> TaskStore<S> for Store<S> {
    fn commit(&self, task: &str, delta: &S::Delta) -> Result<u64> {
        Store::commit(self, task, delta)
    }
    fn commit_if(&self, task: &str, expected_seq: u64, delta: &S::Delta) -> Result<u64> {
        Store::commit_if(self, task, expected_seq, delta)
    }
    fn load_latest(&self, task: &str) -> Result<Option<Checkpoint<S>>> {
        Store::load_latest(self, task)
    }
    fn load(&self, task: &str, seq: u64) -> Result<Option<Checkpoint<S>>> {
        Store::load(self, task, seq)
    }
    fn load_latest_matching(
        &self,
        task: &str,
        accept: &dyn Fn(&S) -> bool,
    ) -> Result<Option<Checkpoint<S>>> {
        Store::load_latest_matching(self, task, accept)
    }
    fn list_checkpoints(&self, task: &str) -> Result<Vec<CheckpointInfo>> {
        Store::list_checkpoints(self, task)
    }
    fn latest_info(&self, task: &str) -> Result<Option<CheckpointInfo>> {
        Store::latest_info(self, task)
    }
    fn tasks(&self) -> Result<Vec<String>> {
        Store::tasks(self)
    }
    fn tasks_with_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        Store::tasks_with_prefix(self, prefix)
    }
    fn fork(&self, task: &str, seq: u64, new_task: &str) -> Result<u64> {
        Store::fork(self, task, seq, new_task)
    }
    fn delete_task(&self, task: &str) -> Result<()> {
        Store::delete_task(self, task)
    }
    fn begin_call(&self, task: &str, call_id: &str, tool: &str, args: &[u8]) -> Result<()> {
        Store::begin_call(self, task, call_id, tool, args)
    }
    fn finish_call(&self, task: &str, call_id: &str, result: &[u8]) -> Result<()> {
        Store::finish_call(self, task, call_id, result)
    }
    fn call_result(&self, task: &str, call_id: &str) -> Result<Option<Vec<u8>>> {
        Store::call_result(self, task, call_id)
    }
    fn pending_calls(&self, task: &str) -> Result<Vec<PendingCall>> {
        Store::pending_calls(self, task)
    }
}
