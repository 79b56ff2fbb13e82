//! [`AsyncPgStore`] (features `postgres` and `tokio`): the PostgreSQL backend from async
//! code, with the same method names as [`AsyncStore`](crate::AsyncStore) and
//! [`PgStore`].
//!
//! Each call is native async: it runs as a task of the handle's own runtime (the small
//! one every [`PgStore`] owns to drive its connections) and the caller's future awaits
//! that task. So a call in flight holds no thread, neither a worker of the caller's
//! runtime nor one of its blocking pool (like the local store's deferred commits:
//! docs/store.md §12), and it works from a runtime of either flavour, or from the handle's
//! own. Each returns within [`PgOptions::deadline`] as the blocking one does. Only
//! [`AsyncPgStore::open`] uses the caller's blocking pool, once, since opening builds that
//! runtime. A call's CPU work (encoding a delta, folding a state) runs on the handle
//! runtime's one worker thread, between the server's answers.
//!
//! Cancellation, as for `AsyncStore`: a write whose future is dropped goes on to its end
//! within the deadline (its task runs on without its caller), so its outcome is unknown
//! to the caller, as after a crash. Read the task (`load_latest`, `call_result`) or write
//! with `commit_if` to find out; an `Error::Indeterminate` names a write id for
//! [`AsyncPgStore::resolve`]. A read whose future is dropped also runs to its end,
//! unseen.
//!
//! A panic in a call resumes in the caller, as in a blocking call.

use std::time::Duration;

use super::{Lease, PgOptions, PgStore, Resolution};
use crate::async_store::{join_outcome, run_blocking};
use crate::error::Result;
use crate::state::{AgentState, State};
use crate::store::{Checkpoint, CheckpointInfo, PendingCall};

/// A [`PgStore`] for async code. Cheap to clone.
pub struct AsyncPgStore<S: State = AgentState> {
    store: PgStore<S>,
}

impl<S: State> Clone for AsyncPgStore<S> {
    fn clone(&self) -> Self {
        AsyncPgStore {
            store: self.store.clone(),
        }
    }
}

impl<S: State> std::fmt::Debug for AsyncPgStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AsyncPgStore").field(&self.store).finish()
    }
}

impl<S: State> From<PgStore<S>> for AsyncPgStore<S> {
    fn from(store: PgStore<S>) -> Self {
        AsyncPgStore { store }
    }
}

impl<S: State> AsyncPgStore<S> {
    /// [`PgStore::open`], on the caller's blocking pool: opening builds the handle's
    /// runtime, so there is none to run on yet. Every other call runs on that runtime.
    pub async fn open(url: &str, options: PgOptions) -> Result<Self> {
        let url = url.to_string();
        run_blocking(move || PgStore::open(&url, options))
            .await
            .map(Self::from)
    }

    /// The blocking handle to the same database.
    pub fn blocking(&self) -> &PgStore<S> {
        &self.store
    }

    /// [`PgStore::with_lease`]: a handle that writes under `lease`.
    pub fn with_lease(&self, lease: &Lease) -> Self {
        AsyncPgStore {
            store: self.store.with_lease(lease),
        }
    }

    /// [`PgStore::commit`]. Dropped early: outcome unknown.
    pub async fn commit(&self, task: &str, delta: &S::Delta) -> Result<u64> {
        let (task, delta) = (task.to_string(), delta.clone());
        self.spawn(move |s| async move { s.commit_async(&task, None, &delta).await })
            .await
    }

    /// [`PgStore::commit_if`]. Dropped early: outcome unknown.
    pub async fn commit_if(&self, task: &str, expected_seq: u64, delta: &S::Delta) -> Result<u64> {
        let (task, delta) = (task.to_string(), delta.clone());
        self.spawn(move |s| async move { s.commit_async(&task, Some(expected_seq), &delta).await })
            .await
    }

    /// [`PgStore::load_latest`].
    pub async fn load_latest(&self, task: &str) -> Result<Option<Checkpoint<S>>> {
        let task = task.to_string();
        self.spawn(move |s| async move { s.load_latest_async(&task).await })
            .await
    }

    /// [`PgStore::load`].
    pub async fn load(&self, task: &str, seq: u64) -> Result<Option<Checkpoint<S>>> {
        let task = task.to_string();
        self.spawn(move |s| async move { s.load_async(&task, seq).await })
            .await
    }

    /// [`PgStore::load_latest_matching`].
    pub async fn load_latest_matching(
        &self,
        task: &str,
        accept: impl Fn(&S) -> bool + Send + 'static,
    ) -> Result<Option<Checkpoint<S>>> {
        let task = task.to_string();
        self.spawn(move |s| async move { s.load_latest_matching_async(&task, accept).await })
            .await
    }

    /// [`PgStore::list_checkpoints`].
    pub async fn list_checkpoints(&self, task: &str) -> Result<Vec<CheckpointInfo>> {
        let task = task.to_string();
        self.spawn(move |s| async move { s.list_checkpoints_async(&task).await })
            .await
    }

    /// [`PgStore::catch_up`].
    pub async fn catch_up(&self, base: &Checkpoint<S>) -> Result<Option<Checkpoint<S>>> {
        let base = base.clone();
        self.spawn(move |s| async move { s.catch_up_async(&base).await })
            .await
    }

    /// [`PgStore::latest_info`].
    pub async fn latest_info(&self, task: &str) -> Result<Option<CheckpointInfo>> {
        let task = task.to_string();
        self.spawn(move |s| async move { s.latest_info_async(&task).await })
            .await
    }

    /// [`PgStore::tasks`].
    pub async fn tasks(&self) -> Result<Vec<String>> {
        self.spawn(move |s| async move { s.tasks_async().await })
            .await
    }

    /// [`PgStore::tasks_with_prefix`].
    pub async fn tasks_with_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        let prefix = prefix.to_string();
        self.spawn(move |s| async move { s.tasks_with_prefix_async(&prefix).await })
            .await
    }

    /// [`PgStore::fork`]. Dropped early: outcome unknown.
    pub async fn fork(&self, task: &str, seq: u64, new_task: &str) -> Result<u64> {
        let (task, new_task) = (task.to_string(), new_task.to_string());
        self.spawn(move |s| async move { s.fork_async(&task, seq, &new_task).await })
            .await
    }

    /// [`PgStore::delete_task`]. Dropped early: outcome unknown.
    pub async fn delete_task(&self, task: &str) -> Result<()> {
        let task = task.to_string();
        self.spawn(move |s| async move { s.delete_task_async(&task).await })
            .await
    }

    /// [`PgStore::begin_call`]. Dropped early: outcome unknown; see `pending_calls`.
    pub async fn begin_call(
        &self,
        task: &str,
        call_id: &str,
        tool: &str,
        args: &[u8],
    ) -> Result<()> {
        let owned = (
            task.to_string(),
            call_id.to_string(),
            tool.to_string(),
            args.to_vec(),
        );
        self.spawn(move |s| async move {
            s.begin_call_async(&owned.0, &owned.1, &owned.2, &owned.3)
                .await
        })
        .await
    }

    /// [`PgStore::finish_call`]. Dropped early: outcome unknown; see `call_result`.
    pub async fn finish_call(&self, task: &str, call_id: &str, result: &[u8]) -> Result<()> {
        let owned = (task.to_string(), call_id.to_string(), result.to_vec());
        self.spawn(move |s| async move { s.finish_call_async(&owned.0, &owned.1, &owned.2).await })
            .await
    }

    /// [`PgStore::call_result`].
    pub async fn call_result(&self, task: &str, call_id: &str) -> Result<Option<Vec<u8>>> {
        let (task, call_id) = (task.to_string(), call_id.to_string());
        self.spawn(move |s| async move { s.call_result_async(&task, &call_id).await })
            .await
    }

    /// [`PgStore::pending_calls`].
    pub async fn pending_calls(&self, task: &str) -> Result<Vec<PendingCall>> {
        let task = task.to_string();
        self.spawn(move |s| async move { s.pending_calls_async(&task).await })
            .await
    }

    /// [`PgStore::acquire`].
    pub async fn acquire(&self, task: &str, holder: &str, ttl: Duration) -> Result<Lease> {
        let (task, holder) = (task.to_string(), holder.to_string());
        self.spawn(move |s| async move { s.acquire_async(&task, &holder, ttl).await })
            .await
    }

    /// [`PgStore::renew`].
    pub async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        let lease = lease.clone();
        self.spawn(move |s| async move { s.renew_async(&lease, ttl).await })
            .await
    }

    /// [`PgStore::release`].
    pub async fn release(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.spawn(move |s| async move { s.release_async(&lease).await })
            .await
    }

    /// [`PgStore::resolve`]: settles the write an `Error::Indeterminate` names.
    pub async fn resolve(&self, write_id: &str) -> Result<Resolution> {
        let write_id = write_id.to_string();
        self.spawn(move |s| async move { s.resolve_async(&write_id).await })
            .await
    }

    /// Runs `call` on a clone of the handle as a task of the handle's runtime, and awaits
    /// it: the caller's runtime (of either flavour, or the handle's own) holds no thread
    /// while the server answers. The task owns what it uses, so that a call whose future
    /// is dropped goes on to its end within the deadline, as a blocking one would.
    async fn spawn<T, F>(&self, call: impl FnOnce(PgStore<S>) -> F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let task = self.store.shared.spawn(call(self.store.clone()));
        join_outcome(
            task.await,
            "the PostgreSQL handle's runtime shut down during a call",
        )
    }
}
