//! [`AsyncPgStore`] (features `postgres` and `tokio`): the PostgreSQL backend from async
//! code, with the same method names as [`AsyncStore`](crate::AsyncStore) and
//! [`PgStore`].
//!
//! Each call runs the blocking [`PgStore`] method on tokio's blocking pool, so no runtime
//! worker waits for the network, and each returns within [`PgOptions::deadline`] as the
//! blocking one does. A call in flight holds a blocking-pool thread until it ends (unlike
//! the local store's deferred commits, which hold none: docs/store.md §12); a native async
//! path through the handle's own runtime would remove that.
//!
//! Cancellation, as for `AsyncStore`: a write whose future is dropped goes on to its end
//! within the deadline, so its outcome is unknown to the caller, as after a crash. Read
//! the task (`load_latest`, `call_result`) or write with `commit_if` to find out; an
//! `Error::Indeterminate` names a write id for [`AsyncPgStore::resolve`].

use std::time::Duration;

use super::{Lease, PgOptions, PgStore, Resolution};
use crate::async_store::run_blocking;
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
    /// [`PgStore::open`], on the blocking pool.
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
        self.run(move |s| s.commit(&task, &delta)).await
    }

    /// [`PgStore::commit_if`]. Dropped early: outcome unknown.
    pub async fn commit_if(&self, task: &str, expected_seq: u64, delta: &S::Delta) -> Result<u64> {
        let (task, delta) = (task.to_string(), delta.clone());
        self.run(move |s| s.commit_if(&task, expected_seq, &delta))
            .await
    }

    /// [`PgStore::load_latest`].
    pub async fn load_latest(&self, task: &str) -> Result<Option<Checkpoint<S>>> {
        let task = task.to_string();
        self.run(move |s| s.load_latest(&task)).await
    }

    /// [`PgStore::load`].
    pub async fn load(&self, task: &str, seq: u64) -> Result<Option<Checkpoint<S>>> {
        let task = task.to_string();
        self.run(move |s| s.load(&task, seq)).await
    }

    /// [`PgStore::load_latest_matching`].
    pub async fn load_latest_matching(
        &self,
        task: &str,
        accept: impl Fn(&S) -> bool + Send + 'static,
    ) -> Result<Option<Checkpoint<S>>> {
        let task = task.to_string();
        self.run(move |s| s.load_latest_matching(&task, accept))
            .await
    }

    /// [`PgStore::list_checkpoints`].
    pub async fn list_checkpoints(&self, task: &str) -> Result<Vec<CheckpointInfo>> {
        let task = task.to_string();
        self.run(move |s| s.list_checkpoints(&task)).await
    }

    /// [`PgStore::latest_info`].
    pub async fn latest_info(&self, task: &str) -> Result<Option<CheckpointInfo>> {
        let task = task.to_string();
        self.run(move |s| s.latest_info(&task)).await
    }

    /// [`PgStore::tasks`].
    pub async fn tasks(&self) -> Result<Vec<String>> {
        self.run(|s| s.tasks()).await
    }

    /// [`PgStore::fork`]. Dropped early: outcome unknown.
    pub async fn fork(&self, task: &str, seq: u64, new_task: &str) -> Result<u64> {
        let (task, new_task) = (task.to_string(), new_task.to_string());
        self.run(move |s| s.fork(&task, seq, &new_task)).await
    }

    /// [`PgStore::delete_task`]. Dropped early: outcome unknown.
    pub async fn delete_task(&self, task: &str) -> Result<()> {
        let task = task.to_string();
        self.run(move |s| s.delete_task(&task)).await
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
        self.run(move |s| s.begin_call(&owned.0, &owned.1, &owned.2, &owned.3))
            .await
    }

    /// [`PgStore::finish_call`]. Dropped early: outcome unknown; see `call_result`.
    pub async fn finish_call(&self, task: &str, call_id: &str, result: &[u8]) -> Result<()> {
        let owned = (task.to_string(), call_id.to_string(), result.to_vec());
        self.run(move |s| s.finish_call(&owned.0, &owned.1, &owned.2))
            .await
    }

    /// [`PgStore::call_result`].
    pub async fn call_result(&self, task: &str, call_id: &str) -> Result<Option<Vec<u8>>> {
        let (task, call_id) = (task.to_string(), call_id.to_string());
        self.run(move |s| s.call_result(&task, &call_id)).await
    }

    /// [`PgStore::pending_calls`].
    pub async fn pending_calls(&self, task: &str) -> Result<Vec<PendingCall>> {
        let task = task.to_string();
        self.run(move |s| s.pending_calls(&task)).await
    }

    /// [`PgStore::acquire`].
    pub async fn acquire(&self, task: &str, holder: &str, ttl: Duration) -> Result<Lease> {
        let (task, holder) = (task.to_string(), holder.to_string());
        self.run(move |s| s.acquire(&task, &holder, ttl)).await
    }

    /// [`PgStore::renew`].
    pub async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        let lease = lease.clone();
        self.run(move |s| s.renew(&lease, ttl)).await
    }

    /// [`PgStore::release`].
    pub async fn release(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.run(move |s| s.release(&lease)).await
    }

    /// [`PgStore::resolve`]: settles the write an `Error::Indeterminate` names.
    pub async fn resolve(&self, write_id: &str) -> Result<Resolution> {
        let write_id = write_id.to_string();
        self.run(move |s| s.resolve(&write_id)).await
    }

    async fn run<T: Send + 'static>(
        &self,
        op: impl FnOnce(&PgStore<S>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = self.store.clone();
        run_blocking(move || op(&store)).await
    }
}
