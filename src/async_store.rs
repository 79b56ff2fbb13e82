//! The async API (cargo feature `tokio`): every [`Store`] operation as an `async fn` that
//! never blocks a runtime worker.
//!
//! Writes that need no read of the disk (a commit whose next state is cached or that
//! writes a delta, a new tool call, the result of a pending one) are queued with the group
//! commit and complete when their batch is durable: the waiting future holds no thread and
//! no lock, and a syncer thread of the store leads the batches no blocking appender leads.
//! 1,000 concurrent commits need no more threads than 10. Loads the latest-state cache
//! answers return at once. Everything else (a load that folds from disk, fork, delete,
//! compaction, verify, a journal entry that repeats one) runs on tokio's blocking pool.
//!
//! # Cancellation
//! Dropping a future of this API never leaves the store half-written; what it means per
//! method:
//! - a write (`commit`, `commit_if`, `begin_call`, `finish_call`, `fork`, `delete_task`)
//!   dropped before it completes has an **unknown outcome, as after a crash**: once queued
//!   it goes on and lands (or fails) without its caller. Find out what happened by
//!   reading: `load_latest(task)` shows whether the commit's seq is there (or use
//!   `commit_if`, whose retry after a landed commit fails with [`Error::Conflict`]);
//!   `pending_calls` / `call_result` show a journal entry;
//! - a read, `compact`, `flush`, `verify` or `stats` dropped early has no effect beyond
//!   the work a blocking thread may still finish.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agentwal::Result<()> {
//! use agentwal::{AgentDelta, AsyncStore, Message};
//! # let dir = tempfile::tempdir().unwrap();
//! let store: AsyncStore = AsyncStore::open(dir.path()).await?;
//! let seq = store.commit("task-1", &AgentDelta::default().message(Message::user("hi"))).await?;
//! let latest = store.load_latest("task-1").await?.expect("committed");
//! assert_eq!((seq, latest.state.messages.len()), (1, 1));
//! # Ok(())
//! # }
//! ```

use std::path::Path;

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::state::{AgentState, State};
use crate::store::{Deferred, Reply};
use crate::{
    Checkpoint, CheckpointInfo, CompactionReport, Options, PendingCall, RecoveryReport, Stats,
    Store, VerifyReport,
};

/// A [`Store`] for async code. Cheap to clone; share it across tasks.
pub struct AsyncStore<S: State = AgentState> {
    store: Store<S>,
}

impl<S: State> Clone for AsyncStore<S> {
    fn clone(&self) -> Self {
        AsyncStore {
            store: self.store.clone(),
        }
    }
}

impl<S: State> From<Store<S>> for AsyncStore<S> {
    fn from(store: Store<S>) -> Self {
        AsyncStore { store }
    }
}

impl<S: State> AsyncStore<S> {
    /// [`Store::open`], on the blocking pool.
    pub async fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, Options::default()).await
    }

    /// [`Store::open_with`], on the blocking pool.
    pub async fn open_with(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        run_blocking(move || Store::open_with(dir, options))
            .await
            .map(Self::from)
    }

    /// [`Store::open_read_only`], on the blocking pool.
    pub async fn open_read_only(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        run_blocking(move || Store::open_read_only(dir))
            .await
            .map(Self::from)
    }

    /// The blocking handle to the same store (for code on its own threads).
    pub fn blocking(&self) -> &Store<S> {
        &self.store
    }

    /// [`Store::commit`]: durable (under `SyncMode::Always`) when the future completes.
    /// Dropped before that: outcome unknown (see the module's docs).
    pub async fn commit(&self, task: &str, delta: &S::Delta) -> Result<u64> {
        self.commit_inner(task, None, delta).await
    }

    /// [`Store::commit_if`]. Dropped before it completes: outcome unknown (see the
    /// module's docs).
    pub async fn commit_if(&self, task: &str, expected_seq: u64, delta: &S::Delta) -> Result<u64> {
        self.commit_inner(task, Some(expected_seq), delta).await
    }

    async fn commit_inner(
        &self,
        task: &str,
        expected: Option<u64>,
        delta: &S::Delta,
    ) -> Result<u64> {
        self.store.check_commit(task)?;
        let gate = self.store.lock_task_async(task).await;
        let (reply, outcome) = reply_channel();
        match self
            .store
            .commit_deferred(gate, task, expected, delta, reply)
        {
            Deferred::Handled => outcome.await,
            Deferred::Blocking(_) => {
                let (task, delta) = (task.to_string(), delta.clone());
                self.blocking_op(move |s| s.commit_owned(&task, expected, delta))
                    .await
            }
        }
    }

    /// [`Store::begin_call`]. Dropped before it completes: outcome unknown; see
    /// `pending_calls`.
    pub async fn begin_call(
        &self,
        task: &str,
        call_id: &str,
        tool: &str,
        args: &[u8],
    ) -> Result<()> {
        self.store.check_begin_call(task, call_id, tool)?;
        let gate = self.store.lock_task_async(task).await;
        let (reply, outcome) = reply_channel();
        let call = (task, call_id, tool, args);
        match self.store.begin_call_deferred(gate, call, reply) {
            Deferred::Handled => outcome.await,
            Deferred::Blocking(_) => {
                let owned = (
                    task.to_string(),
                    call_id.to_string(),
                    tool.to_string(),
                    args.to_vec(),
                );
                self.blocking_op(move |s| s.begin_call(&owned.0, &owned.1, &owned.2, &owned.3))
                    .await
            }
        }
    }

    /// [`Store::finish_call`]. Dropped before it completes: outcome unknown; see
    /// `call_result`.
    pub async fn finish_call(&self, task: &str, call_id: &str, result: &[u8]) -> Result<()> {
        self.store.check_finish_call(task, call_id)?;
        let gate = self.store.lock_task_async(task).await;
        let (reply, outcome) = reply_channel();
        match self
            .store
            .finish_call_deferred(gate, (task, call_id, result), reply)
        {
            Deferred::Handled => outcome.await,
            Deferred::Blocking(_) => {
                let owned = (task.to_string(), call_id.to_string(), result.to_vec());
                self.blocking_op(move |s| s.finish_call(&owned.0, &owned.1, &owned.2))
                    .await
            }
        }
    }

    /// [`Store::load_latest`]: at once when the state is cached, else on the blocking
    /// pool.
    pub async fn load_latest(&self, task: &str) -> Result<Option<Checkpoint<S>>> {
        if let Some(answer) = self.store.load_latest_cached(task) {
            return answer;
        }
        let task = task.to_string();
        self.blocking_op(move |s| s.load_latest(&task)).await
    }

    /// [`Store::load`]: at once when `seq` is the latest and cached, else on the
    /// blocking pool.
    pub async fn load(&self, task: &str, seq: u64) -> Result<Option<Checkpoint<S>>> {
        if let Some(Ok(Some(latest))) = self.store.load_latest_cached(task)
            && latest.seq == seq
        {
            return Ok(Some(latest));
        }
        let task = task.to_string();
        self.blocking_op(move |s| s.load(&task, seq)).await
    }

    /// [`Store::load_latest_matching`], on the blocking pool.
    pub async fn load_latest_matching(
        &self,
        task: &str,
        accept: impl Fn(&S) -> bool + Send + 'static,
    ) -> Result<Option<Checkpoint<S>>> {
        let task = task.to_string();
        self.blocking_op(move |s| s.load_latest_matching(&task, accept))
            .await
    }

    /// [`Store::list_checkpoints`] (from memory: no blocking).
    pub async fn list_checkpoints(&self, task: &str) -> Result<Vec<CheckpointInfo>> {
        self.store.list_checkpoints(task)
    }

    /// [`Store::latest_info`] (from memory: no blocking).
    pub async fn latest_info(&self, task: &str) -> Result<Option<CheckpointInfo>> {
        self.store.latest_info(task)
    }

    /// [`Store::tasks`] (from memory: no blocking).
    pub async fn tasks(&self) -> Result<Vec<String>> {
        self.store.tasks()
    }

    /// [`Store::tasks_with_prefix`] (from memory: no blocking).
    pub async fn tasks_with_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        self.store.tasks_with_prefix(prefix)
    }

    /// [`Store::fork`], on the blocking pool. Dropped early: outcome unknown.
    pub async fn fork(&self, task: &str, seq: u64, new_task: &str) -> Result<u64> {
        let (task, new_task) = (task.to_string(), new_task.to_string());
        self.blocking_op(move |s| s.fork(&task, seq, &new_task))
            .await
    }

    /// [`Store::delete_task`], on the blocking pool. Dropped early: outcome unknown.
    pub async fn delete_task(&self, task: &str) -> Result<()> {
        let task = task.to_string();
        self.blocking_op(move |s| s.delete_task(&task)).await
    }

    /// [`Store::call_result`], on the blocking pool (it reads the result from disk).
    pub async fn call_result(&self, task: &str, call_id: &str) -> Result<Option<Vec<u8>>> {
        let (task, call_id) = (task.to_string(), call_id.to_string());
        self.blocking_op(move |s| s.call_result(&task, &call_id))
            .await
    }

    /// [`Store::pending_calls`], on the blocking pool (it reads the arguments from disk).
    pub async fn pending_calls(&self, task: &str) -> Result<Vec<PendingCall>> {
        let task = task.to_string();
        self.blocking_op(move |s| s.pending_calls(&task)).await
    }

    /// [`Store::compact`], on the blocking pool.
    pub async fn compact(&self) -> Result<CompactionReport> {
        self.blocking_op(|s| s.compact()).await
    }

    /// [`Store::flush`], on the blocking pool.
    pub async fn flush(&self) -> Result<()> {
        self.blocking_op(|s| s.flush()).await
    }

    /// [`Store::verify`], on the blocking pool.
    pub async fn verify(&self) -> Result<VerifyReport> {
        self.blocking_op(|s| s.verify()).await
    }

    /// [`Store::stats`], on the blocking pool (it looks at the files).
    pub async fn stats(&self) -> Result<Stats> {
        self.blocking_op(|s| Ok(s.stats())).await
    }

    /// [`Store::recovery_report`] (from memory).
    pub fn recovery_report(&self) -> RecoveryReport {
        self.store.recovery_report()
    }

    /// [`Store::options`].
    pub fn options(&self) -> &Options {
        self.store.options()
    }

    /// [`Store::dir`].
    pub fn dir(&self) -> &Path {
        self.store.dir()
    }

    async fn blocking_op<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Store<S>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = self.store.clone();
        run_blocking(move || op(&store)).await
    }
}

/// A reply for a deferred write, and the future of its outcome.
fn reply_channel<T: Send + 'static>() -> (Reply<T>, impl Future<Output = Result<T>>) {
    let (tx, rx) = oneshot::channel();
    let reply: Reply<T> = Box::new(move |outcome| {
        // The receiver is gone when the caller dropped its future: nothing to tell.
        let _ = tx.send(outcome);
    });
    let outcome = async move {
        // Every queued write is told its outcome (a failed batch poisons the handle and
        // tells every waiting write), so the sender is never dropped unused.
        rx.await.unwrap_or_else(|_| {
            Err(Error::Poisoned {
                cause: "a queued write was dropped without an outcome".into(),
            })
        })
    };
    (reply, outcome)
}

/// Runs `op` on tokio's blocking pool; a panic in it resumes here, as in a blocking call.
pub(crate) async fn run_blocking<T: Send + 'static>(
    op: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let joined = tokio::task::spawn_blocking(op).await;
    join_outcome(
        joined,
        "the runtime shut down before a blocking store call ran",
    )
}

/// The outcome of a store call run as a tokio task: a panic in it resumes here, as in a
/// blocking call; a task the runtime cancelled (it shut down first) is `Error::Io` with
/// `cancelled` as its context.
pub(crate) fn join_outcome<T>(
    joined: std::result::Result<Result<T>, tokio::task::JoinError>,
    cancelled: &str,
) -> Result<T> {
    match joined {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(Error::Io {
            context: cancelled.into(),
            source: std::io::Error::new(std::io::ErrorKind::Interrupted, e),
        }),
    }
}
