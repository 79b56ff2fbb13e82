//! The typed store: agent state as checkpoints on the log.

mod cache;
mod calls;
pub(crate) mod codec;
mod commit;
mod compaction;
mod compress;
#[cfg(feature = "tokio")]
mod deferred;
mod delete;
#[cfg(feature = "postgres")]
mod export;
mod fork;
mod gate;
mod index;
mod inspect;
mod load;
mod low_priority;
mod open;
pub(crate) mod policy;
mod replay;
mod salvage;
mod stats;
mod types;

use std::borrow::Cow;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub use crate::log::COMPACTION_DEAD_BYTES_MIN;
#[cfg(feature = "tokio")]
pub(crate) use deferred::{Deferred, Reply};
#[cfg(feature = "postgres")]
pub(crate) use export::RawCheckpoint;
pub use inspect::{
    BodyCheck, BodySummary, CallInfo, RecordSummary, TaskInfo, UndecodedBodies, VerifyReport,
    describe_record,
};
pub use types::*;

use self::cache::Cached;
use self::codec::{CheckpointRec, DeleteRec, Origin};
use self::compress::StoredBody;
use self::index::{CpEntry, Index, TaskData, TaskSlot};
use crate::background::Periodic;
use crate::error::{CorruptionReason, Error, Result};
use crate::log::{Log, RecordPos, RecordRef, RecoveryMode};
use crate::state::{AgentState, State};
use crate::storage::{RealStorage, Storage};

/// A store of agent tasks and their checkpoints. Cheap to clone; share it across threads.
///
/// ```
/// use agentwal::{AgentDelta, Message, Store};
/// # let dir = tempfile::tempdir().unwrap();
/// let store: Store = Store::open(dir.path())?;
/// let seq = store.commit("task-1", &AgentDelta::default().message(Message::user("hi")))?;
/// assert_eq!(seq, 1);
/// let latest = store.load_latest("task-1")?.expect("committed");
/// assert_eq!(latest.state.messages[0].content, "hi");
/// # Ok::<(), agentwal::Error>(())
/// ```
pub struct Store<S: State = AgentState> {
    // Declared first so it drops first: the last handle stops and joins the background
    // compactor before the log (and its directory lock) goes.
    _compactor: Arc<Option<Periodic>>,
    inner: Arc<Inner>,
    cache: Arc<cache::StateCache<S>>,
    _state: PhantomData<fn() -> S>,
}

impl<S: State> Clone for Store<S> {
    fn clone(&self) -> Self {
        Store {
            _compactor: self._compactor.clone(),
            inner: self.inner.clone(),
            cache: self.cache.clone(),
            _state: PhantomData,
        }
    }
}

/// What every clone of a store shares.
///
/// Locks, in the order they are taken (a thread holding one takes only later ones):
/// 1. `compactor` (one compaction pass at a time);
/// 2. a task's gate (`gates`: one writer per task: check, append, index);
/// 3. `relocation`, shared by committers from append to index update and by readers
///    while they resolve and read positions; exclusive only inside a compaction pass, for
///    its barrier, its check before deleting whole segments, and the switch to the moved
///    positions (`CompactionHooks::positions_lock`). A committer holds it shared across
///    its fsync wait, so a compaction's barrier waits for in-flight commits;
/// 4. the index's task map (`Index::tasks`), briefly, to find or create a slot;
/// 5. a task's `TaskSlot::data`, briefly, never across I/O;
/// 6. the latest-state cache's own lock, briefly.
///
/// The log's locks (its writer's batch lock) come after all of these.
struct Inner {
    log: Log,
    index: Index,
    options: Options,
    report: RecoveryReport,
    commits: AtomicU64,
    compactions: AtomicU64,
    /// See the lock order above. Shared (`Arc`) so that an async write's hold is owned by
    /// the write and released by the thread that completes it.
    relocation: Arc<parking_lot::RwLock<()>>,
    /// Where writers wait for a task's gate (lock order: see above).
    gates: Arc<gate::Gates>,
    /// Serializes compaction passes.
    compactor: parking_lot::Mutex<()>,
}

impl<S: State> Store<S> {
    /// Makes everything committed so far durable (needed only with `SyncMode::Periodic`
    /// or `Never`).
    pub fn flush(&self) -> Result<()> {
        self.writable()?;
        self.inner.log.flush()
    }

    /// What `open` found: records replayed, torn bytes discarded, corruption skipped.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.inner.report.clone()
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        self.inner.log.dir()
    }

    fn writable(&self) -> Result<()> {
        if self.inner.log.is_read_only() {
            Err(Error::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Runs `f` holding the task's gate, so the check-then-append of one task's writes
    /// cannot interleave.
    fn with_task_lock<T>(
        &self,
        task: &str,
        f: impl FnOnce(&Arc<TaskSlot>) -> Result<T>,
    ) -> Result<T> {
        let gate = self.lock_task(task);
        let result = f(gate.slot());
        self.release_task(task, gate);
        result
    }

    /// Takes the task's gate (creating its slot if needed); retries if the slot was
    /// deleted while waiting.
    fn lock_task(&self, task: &str) -> gate::GateGuard {
        loop {
            let slot = self.inner.index.get_or_create(task);
            let gate = self.inner.gates.lock(&slot);
            if !slot.data.read().deleted {
                return gate;
            }
        }
    }

    /// Releases a task's gate. A slot still empty afterwards (the write on a new task
    /// failed) is removed again unless someone else holds it (see `remove_if_unused`).
    fn release_task(&self, task: &str, gate: gate::GateGuard) {
        let empty = !gate.slot().data.read().exists();
        // Released before the check: it requires that no one holds the slot.
        drop(gate);
        if empty {
            self.inner.index.remove_if_unused(task);
        }
    }

    /// How many task slots the in-memory index holds, tasks or not. Equal to
    /// `stats().tasks` unless writes on other threads are under way; exposed for tests of
    /// the index's memory, not a stable API.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn index_slots(&self) -> usize {
        self.inner.index.slot_count()
    }

    /// How many tool-call entries the in-memory index holds over all tasks, those
    /// retention pruned but compaction has not yet dropped included; exposed for tests of
    /// the index's memory, not a stable API.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn index_call_entries(&self) -> usize {
        let mut n = 0;
        self.inner.index.for_each(|_, d| n += d.calls.all().count());
        n
    }
}

pub(crate) use crate::rules::{now_ms, validate_id};
