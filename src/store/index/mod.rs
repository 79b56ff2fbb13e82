//! The in-memory index: per task, only positions and small metadata (states stay on disk).
//!
//! Memory per task (x86-64; sizes checked at compile time, docs/store.md §1): its id, its
//! entry in the task map (24 B + a control byte, plus hash-table slack), and a `TaskSlot`
//! of 152 B (168 B with the `Arc` counts) that holds up to [`INLINE_CHECKPOINTS`]
//! checkpoints in place. More checkpoints move to a `Vec` of 20 B entries ([`PackedCp`]).
//! Tool calls and the fork origin are boxed, so a task without them pays a pointer for
//! each; a tool call costs its id plus about 70 B (a 48 B [`CallEntry`] and its map slot).

mod calls;
mod checkpoints;
mod task;

use std::collections::HashMap;
use std::sync::Arc;

use std::sync::atomic::AtomicBool;

use parking_lot::RwLock;

pub(crate) use calls::CallEntry;
pub(crate) use checkpoints::CpEntry;
pub(crate) use task::TaskData;

/// One task's slot: the gate that serializes its writes (held through
/// [`Gates`](super::gate::Gates)), and its data.
#[derive(Debug, Default)]
pub(crate) struct TaskSlot {
    /// Set while a writer holds the task's gate.
    pub gate: AtomicBool,
    pub data: RwLock<TaskData>,
}

/// All tasks.
#[derive(Debug)]
pub(crate) struct Index {
    tasks: RwLock<HashMap<Box<str>, Arc<TaskSlot>>>,
    /// `State::VERSION` of the program: checkpoints of other versions mark their task
    /// (`TaskData::foreign_schema`).
    schema_version: u32,
}

impl Index {
    /// An empty index for a program whose `State::VERSION` is `schema_version`.
    pub fn new(schema_version: u32) -> Self {
        Index {
            tasks: RwLock::default(),
            schema_version,
        }
    }

    /// `State::VERSION` of the program this index serves.
    pub fn schema_version(&self) -> u32 {
        self.schema_version
    }

    /// The task's slot, if the task exists: it has a checkpoint or a tool call. A slot a
    /// write on a new task created stays empty until the write succeeds, and is no task
    /// meanwhile, as `task_ids` and a reopened store agree.
    pub fn get(&self, task: &str) -> Option<Arc<TaskSlot>> {
        let tasks = self.tasks.read();
        let slot = tasks.get(task)?;
        slot.data.read().exists().then(|| slot.clone())
    }

    /// The task's slot, created empty if missing.
    pub fn get_or_create(&self, task: &str) -> Arc<TaskSlot> {
        if let Some(slot) = self.get(task) {
            return slot;
        }
        self.tasks.write().entry(task.into()).or_default().clone()
    }

    /// Forgets the task's slot if it is empty and no one holds it: a write that failed on
    /// a new task (a conflict, a record too large, ...) leaves nothing behind, or callers
    /// naming tasks that never come to exist could fill the map.
    ///
    /// Why this cannot lose a concurrent write: a writer reaches a slot only through
    /// `get_or_create`, which clones the slot's `Arc` while it holds the map's lock, and
    /// keeps that clone until its write is applied. Here the map's write lock is held, so
    /// no clone can be made meanwhile, and a strong count of 1 (the map's own) means no
    /// writer holds the slot or waits on its gate; `exists()` false then means no
    /// write has landed in it. A writer arriving later finds no slot and makes a fresh one.
    /// The caller must have dropped its own clone first: with two writers failing at once,
    /// whichever checks last then sees the count at 1 (each checks after its own drop).
    pub fn remove_if_unused(&self, task: &str) {
        let mut tasks = self.tasks.write();
        let unused = tasks.get(task).is_some_and(|slot| {
            Arc::strong_count(slot) == 1 && Arc::weak_count(slot) == 0 && !slot.data.read().exists()
        });
        if unused {
            tasks.remove(task);
        }
    }

    /// How many slots the map holds, tasks or not (tests check that failed writes leave
    /// none behind).
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn slot_count(&self) -> usize {
        self.tasks.read().len()
    }

    /// Forgets a task (after its deletion record is durable).
    pub fn remove(&self, task: &str) {
        if let Some(slot) = self.tasks.write().remove(task) {
            slot.data.write().deleted = true;
        }
    }

    /// Ids of tasks with at least one checkpoint or tool call, sorted.
    pub fn task_ids(&self) -> Vec<String> {
        self.task_ids_with_prefix("")
    }

    /// [`task_ids`](Self::task_ids) of the ids starting with `prefix`, only those copied.
    pub fn task_ids_with_prefix(&self, prefix: &str) -> Vec<String> {
        let tasks = self.tasks.read();
        let mut ids: Vec<String> = tasks
            .iter()
            .filter(|(k, s)| k.starts_with(prefix) && s.data.read().exists())
            .map(|(k, _)| k.to_string())
            .collect();
        ids.sort_unstable();
        ids
    }

    /// How many tasks `task_ids` would list, without copying their ids (recovery counts
    /// them; a copy would leave that much memory free but held by the allocator).
    pub fn task_count(&self) -> usize {
        let tasks = self.tasks.read();
        tasks.values().filter(|s| s.data.read().exists()).count()
    }

    /// Calls `f` on every task's data, mutably (used by compaction).
    pub fn for_each_mut(&self, mut f: impl FnMut(&str, &mut TaskData)) {
        for (k, s) in self.tasks.read().iter() {
            f(k, &mut s.data.write());
        }
    }

    /// Calls `f` on every task.
    pub fn for_each(&self, mut f: impl FnMut(&str, &TaskData)) {
        for (k, s) in self.tasks.read().iter() {
            f(k, &s.data.read());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::index::checkpoints::tests::entry;

    #[test]
    fn only_an_empty_slot_no_one_holds_is_removed() {
        let index = Index::new(1);
        let held = index.get_or_create("held");
        index.remove_if_unused("held");
        assert_eq!(index.slot_count(), 1, "a writer holds it");
        drop(held);
        let used = index.get_or_create("used");
        used.data
            .write()
            .push_checkpoint(1, entry(1, 40, 0, 10, true), 10, false)
            .unwrap();
        drop(used);
        index.remove_if_unused("used");
        index.remove_if_unused("missing");
        assert_eq!(index.slot_count(), 2, "it holds a checkpoint");
        index.remove_if_unused("held");
        assert_eq!(index.slot_count(), 1);
        assert_eq!(index.task_ids(), vec!["used".to_string()]);
    }
}
